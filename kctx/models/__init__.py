"""Models built from kctx layers."""

from kctx.models.kanet import (KANET_FAMILY, KANET_VARIANTS, kanet, kanet_family_model,
                               mobilenet_v2, mobilenet_v2_kao)

__all__ = ["KANET_FAMILY", "KANET_VARIANTS", "kanet", "kanet_family_model", "mobilenet_v2",
           "mobilenet_v2_kao"]
