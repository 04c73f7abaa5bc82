"""One factory for every global-context block.

Workflows (GAN, segmentation, classification) choose their context block by
name through :func:`context_block` only; each operator module registers its
names here when it is imported (``kctx.layers`` imports them all).
"""

import keras

_REGISTRY = {}
_KINDS = {}
KINDS = ("image", "sequence")


def register_context_block(name, factory, kind="image"):
    """Register ``factory(**kwargs) -> keras.layers.Layer`` under ``name``.

    ``kind``: ``"image"`` for blocks on (B, H, W, C) feature maps (the default;
    what the image workflows list), ``"sequence"`` for blocks on (B, n, C).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    if name in _REGISTRY and _REGISTRY[name] is not factory:
        raise ValueError(f"A context block named {name!r} is already registered.")
    _REGISTRY[name] = factory
    _KINDS[name] = kind
    return factory


def context_block_names(kind="image"):
    """Sorted names accepted by :func:`context_block` for inputs of ``kind``
    (``"image"``: (B, H, W, C); ``"sequence"``: (B, n, C); ``None``: all)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS} or None. Received: kind={kind!r}")
    return tuple(sorted(n for n in _REGISTRY if kind is None or _KINDS[n] == kind))


def context_block(name, /, **kwargs):
    """Return a new context-block layer by name.

    Args:
        name: a registered name, e.g. ``"ham_nmf"``, ``"ham_vq"``, ``"ham_cd"``,
            ``"self_attention"`` or ``"none"`` (identity); see
            :func:`context_block_names`. Positional-only, so that the
            layer's own ``name=`` can be passed in ``kwargs``.
        **kwargs: constructor arguments of that layer.

    Returns:
        A ``keras.layers.Layer``: image blocks map (B, H, W, C) to (B, H, W, C),
        sequence blocks (``psf``) map (B, n, C) to (B, n, C').

    Example:

    >>> block = context_block("ham_nmf", rank=8)
    >>> block(keras.random.normal((2, 8, 8, 64))).shape
    (2, 8, 8, 64)
    """
    try:
        factory = _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown context block: name={name!r}. "
            f"Valid names: {', '.join(context_block_names(None))}"
        ) from None
    return factory(**kwargs)


register_context_block("none", lambda **kwargs: keras.layers.Identity(**kwargs))
