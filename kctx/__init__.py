"""kctx: global-context layers for Keras 3 that replace self-attention cheaply."""

__version__ = "0.1.0"

from kctx import _keras_fixes  # noqa: E402

_keras_fixes.apply()  # before any layer is built: a fix of Keras' own not yet released

from kctx import layers, ops  # noqa: E402,F401

__all__ = ["layers", "ops", "__version__"]
