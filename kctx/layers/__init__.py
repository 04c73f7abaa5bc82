"""Keras layers of kctx; importing this module registers every context block."""

from kctx.layers.context_block import (
    RECIPES,
    check_context_block,
    context_block,
    context_block_names,
    context_block_recipe,
    register_context_block,
)
from kctx.layers.attention import Attention2D
from kctx.layers.causal_hamburger import CausalHamburger
from kctx.layers.causal_mixers import CausalConv1D, CausalLinearAttention, CausalSelfAttention
from kctx.layers.depthwise import TapDepthwiseConv2D, as_convolutions
from kctx.layers.efficient_non_local import EfficientNonLocal2D
from kctx.layers.hamburger import OFFICIAL_VARIANTS, Hamburger, set_hamburger_eval_steps
from kctx.layers.kanet_modules import AttnModule, AttnSkipModule, BaseModule, BaseSkipModule
from kctx.layers.kronecker_attention import KroneckerAttention2D
from kctx.layers.latent_gnn import LatentGNN2D
from kctx.layers.layer_scale import LayerScale
from kctx.layers.non_local import NonLocal2D
from kctx.layers.poly_nl import PolyNL
from kctx.layers.psf_attention import PSFAttention
from kctx.layers.rescaling import ChannelRescaling
from kctx.layers.resize import ResizeToMatch
from kctx.layers.self_attention import SelfAttention2D
from kctx.layers.sequence_embedding import PositionEmbedding, PrependToken

__all__ = [
    "Attention2D",
    "AttnModule",
    "AttnSkipModule",
    "BaseModule",
    "BaseSkipModule",
    "ChannelRescaling",
    "CausalConv1D",
    "CausalHamburger",
    "CausalLinearAttention",
    "CausalSelfAttention",
    "EfficientNonLocal2D",
    "Hamburger",
    "KroneckerAttention2D",
    "OFFICIAL_VARIANTS",
    "LatentGNN2D",
    "LayerScale",
    "NonLocal2D",
    "PSFAttention",
    "PositionEmbedding",
    "PrependToken",
    "PolyNL",
    "RECIPES",
    "ResizeToMatch",
    "SelfAttention2D",
    "TapDepthwiseConv2D",
    "as_convolutions",
    "check_context_block",
    "context_block",
    "context_block_names",
    "context_block_recipe",
    "register_context_block",
    "set_hamburger_eval_steps",
]
