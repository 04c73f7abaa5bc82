"""Models built from kctx layers."""

from kctx.models.insertion import (RESNET50_STAGE_POSITIONS, insert_context_block,
                                   resnet50_positions)
from kctx.models.kanet import (KANET_FAMILY, KANET_VARIANTS, kanet, kanet_family_model,
                               mobilenet_v2, mobilenet_v2_kao)
from kctx.models.sequence import psf_sequence_model, transformer_sequence_model

__all__ = ["KANET_FAMILY", "KANET_VARIANTS", "RESNET50_STAGE_POSITIONS", "insert_context_block",
           "kanet", "kanet_family_model", "mobilenet_v2", "mobilenet_v2_kao",
           "psf_sequence_model", "resnet50_positions", "transformer_sequence_model"]
