"""Keras layers of kctx; importing this module registers every context block."""

from kctx.layers.context_block import (
    context_block,
    context_block_names,
    register_context_block,
)
from kctx.layers.hamburger import Hamburger
from kctx.layers.self_attention import SelfAttention2D

__all__ = [
    "Hamburger",
    "SelfAttention2D",
    "context_block",
    "context_block_names",
    "register_context_block",
]
