"""Models built from kctx layers."""

from kctx.convert import CheckpointMismatchError  # noqa: F401  (documented in kctx.convert)
from kctx.models.decoder import MIXERS, CausalLanguageModel, DecoderBlock
from kctx.models.fid_inception import (FID_INCEPTION_CLASSES, FID_INCEPTION_FEATURES,
                                       InceptionLogits, fid_inception_v3, fold_batch_norms)
from kctx.models.insertion import (RESNET50_STAGE_POSITIONS, insert_context_block,
                                   resnet50_positions)
from kctx.models.kanet import (KANET_FAMILY, KANET_VARIANTS, kanet, kanet_family_model,
                               mobilenet_v2, mobilenet_v2_kao)
from kctx.models.resnet import (IMAGENET_MEAN, IMAGENET_STD, RESNET_BLOCKS, PaddedMaxPooling2D,
                                dilated_resnet, torchvision_normalization)
from kctx.models.segnext import MSCAN_VARIANTS, mscan, mscan_classifier, segnext
from kctx.models.sequence import psf_sequence_model, transformer_sequence_model

# The models' checkpoints are converted by kctx.convert (load_segnext_weights,
# load_torchvision_resnet_weights); CheckpointMismatchError stays importable from here.
__all__ = ["CausalLanguageModel", "DecoderBlock", "MIXERS", "FID_INCEPTION_CLASSES", "FID_INCEPTION_FEATURES", "InceptionLogits",
           "fid_inception_v3", "fold_batch_norms", "IMAGENET_MEAN", "IMAGENET_STD", "KANET_FAMILY",
           "KANET_VARIANTS", "MSCAN_VARIANTS", "mscan", "mscan_classifier", "segnext",
           "RESNET50_STAGE_POSITIONS", "RESNET_BLOCKS", "PaddedMaxPooling2D", "dilated_resnet",
           "insert_context_block", "kanet", "kanet_family_model",
           "mobilenet_v2", "mobilenet_v2_kao", "psf_sequence_model", "resnet50_positions",
           "torchvision_normalization", "transformer_sequence_model"]
