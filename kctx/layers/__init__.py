"""Keras layers of kctx; importing this module registers every context block."""

from kctx.layers.context_block import (
    context_block,
    context_block_names,
    register_context_block,
)
from kctx.layers.attention import Attention2D
from kctx.layers.hamburger import Hamburger
from kctx.layers.kanet_modules import AttnModule, AttnSkipModule, BaseModule, BaseSkipModule
from kctx.layers.kronecker_attention import KroneckerAttention2D
from kctx.layers.self_attention import SelfAttention2D

__all__ = [
    "Attention2D",
    "AttnModule",
    "AttnSkipModule",
    "BaseModule",
    "BaseSkipModule",
    "Hamburger",
    "KroneckerAttention2D",
    "SelfAttention2D",
    "context_block",
    "context_block_names",
    "register_context_block",
]
