"""Models built from kctx layers."""

from kctx.models.fid_inception import (FID_INCEPTION_CLASSES, FID_INCEPTION_FEATURES,
                                       InceptionLogits, fid_inception_v3, fold_batch_norms)
from kctx.models.insertion import (RESNET50_STAGE_POSITIONS, insert_context_block,
                                   resnet50_positions)
from kctx.models.kanet import (KANET_FAMILY, KANET_VARIANTS, kanet, kanet_family_model,
                               mobilenet_v2, mobilenet_v2_kao)
from kctx.models.resnet import (IMAGENET_MEAN, IMAGENET_STD, RESNET_BLOCKS, PaddedMaxPooling2D,
                                dilated_resnet, load_torchvision_weights,
                                torchvision_normalization)
from kctx.models.segnext import CheckpointMismatchError  # noqa: F401  (kctx.convert's)
from kctx.models.segnext import MSCAN_VARIANTS, load_segnext_weights, mscan, segnext
from kctx.models.sequence import psf_sequence_model, transformer_sequence_model

# CheckpointMismatchError stays importable from here; it is documented in kctx.convert.
__all__ = ["FID_INCEPTION_CLASSES", "FID_INCEPTION_FEATURES", "InceptionLogits",
           "fid_inception_v3", "fold_batch_norms", "IMAGENET_MEAN", "IMAGENET_STD", "KANET_FAMILY",
           "KANET_VARIANTS", "MSCAN_VARIANTS", "load_segnext_weights", "mscan", "segnext",
           "RESNET50_STAGE_POSITIONS", "RESNET_BLOCKS", "PaddedMaxPooling2D", "dilated_resnet",
           "insert_context_block", "kanet", "kanet_family_model", "load_torchvision_weights",
           "mobilenet_v2", "mobilenet_v2_kao", "psf_sequence_model", "resnet50_positions",
           "torchvision_normalization", "transformer_sequence_model"]
