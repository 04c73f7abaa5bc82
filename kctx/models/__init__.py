"""Models built from kctx layers."""

from kctx.models.kanet import KANET_VARIANTS, kanet, mobilenet_v2, mobilenet_v2_kao

__all__ = ["KANET_VARIANTS", "kanet", "mobilenet_v2", "mobilenet_v2_kao"]
