"""One factory for every global-context block.

Workflows (GAN, segmentation, classification) choose their context block by
name through :func:`context_block` only; each operator module registers its
names here when it is imported (``kctx.layers`` imports them all).
"""

import keras

_REGISTRY = {}
_KINDS = {}
_RECIPES = {}
KINDS = ("image", "sequence")
# Where each recipe comes from: the settings a paper's experiments use for a block.
RECIPES = {
    "gan": "HamGAN / SAGAN's generator and discriminator (Geng et al. 2021, Appendix E.4)",
    "segmentation": "HamNet's segmentation head (Geng et al. 2021, Appendix E.3)",
}


def register_context_block(name, factory, kind="image", recipes=None):
    """Register ``factory(**kwargs) -> keras.layers.Layer`` under ``name``.

    Args:
        name: the block's name.
        factory: builds the layer from keyword arguments.
        kind: ``"image"`` for blocks on (B, H, W, C) feature maps (the
            default; what the image workflows list), ``"sequence"`` for
            blocks on (B, n, C).
        recipes: dict recipe name (a key of :data:`RECIPES`) →
            ``fn(channels) -> dict`` of the block's arguments in that setting,
            so a workflow asks for ``context_block(name, recipe="gan",
            channels=c)`` and the settings live with the block.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    if name in _REGISTRY and _REGISTRY[name] is not factory:
        raise ValueError(f"A context block named {name!r} is already registered.")
    unknown = sorted(set(recipes or ()) - set(RECIPES))
    if unknown:
        raise ValueError(f"Unknown recipe(s) {unknown}: expected names in {tuple(RECIPES)}. "
                         f"Received: recipes={sorted(recipes)}")
    _REGISTRY[name] = factory
    _KINDS[name] = kind
    _RECIPES[name] = dict(recipes or {})
    return factory


def check_context_block(name, kind="image", also=(), argument="context"):
    """Raise a ValueError naming ``argument`` unless ``name`` is a registered block of
    ``kind`` (or one of ``also``, e.g. a workflow's own heads); returns ``name``."""
    valid = tuple(also) + context_block_names(kind)
    if name not in valid:
        raise ValueError(f"Unknown `{argument}`: expected one of {valid}. "
                         f"Received: {argument}={name!r}")
    return name


def context_block_recipe(name, recipe, channels):
    """The arguments ``context_block(name, recipe=recipe, channels=channels)`` passes
    (empty when the block has no such recipe: its own defaults then apply)."""
    if recipe not in RECIPES:
        raise ValueError(f"Unknown `recipe`: expected one of {tuple(RECIPES)}. "
                         f"Received: recipe={recipe!r}")
    settings = _RECIPES.get(name, {}).get(recipe)
    if settings is None:
        return {}
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"The {recipe!r} recipe of {name!r} depends on the input's channels: "
                         f"pass `channels` (a positive integer). Received: channels={channels!r}")
    return settings(channels)


def context_block_names(kind="image"):
    """Sorted names accepted by :func:`context_block` for inputs of ``kind``
    (``"image"``: (B, H, W, C); ``"sequence"``: (B, n, C); ``None``: all)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS} or None. Received: kind={kind!r}")
    return tuple(sorted(n for n in _REGISTRY if kind is None or _KINDS[n] == kind))


def context_block(name, /, recipe=None, channels=None, **kwargs):
    """Return a new context-block layer by name.

    Args:
        name: a registered name, e.g. ``"ham_nmf"``, ``"ham_vq"``, ``"ham_cd"``,
            ``"self_attention"`` or ``"none"`` (identity); see
            :func:`context_block_names`. Positional-only, so that the
            layer's own ``name=`` can be passed in ``kwargs``.
        recipe: ``None`` for the layer's own defaults, or a key of
            :data:`RECIPES` (``"gan"``, ``"segmentation"``) for the settings
            of that paper's experiments, e.g. for ``ham_nmf`` with ``"gan"``:
            r = d/8, K = 6, cross-replica BN, a residual scale σ = 0 and a
            seeded dictionary; blocks without that recipe keep their defaults.
        channels: the input's channels d, which recipes may depend on.
        **kwargs: constructor arguments of that layer (override the recipe).

    Returns:
        A ``keras.layers.Layer``: image blocks map (B, H, W, C) to (B, H, W, C),
        sequence blocks (``psf``) map (B, n, C) to (B, n, C').

    Examples:
        >>> block = context_block("ham_nmf", rank=8)
        >>> tuple(block(keras.random.normal((2, 8, 8, 64))).shape)
        (2, 8, 8, 64)
        >>> context_block("ham_nmf", recipe="gan", channels=64).rank
        8
    """
    try:
        factory = _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown context block: name={name!r}. "
            f"Valid names: {', '.join(context_block_names(None))}"
        ) from None
    if recipe is not None:
        kwargs = {**context_block_recipe(name, recipe, channels), **kwargs}
    return factory(**kwargs)


register_context_block("none", lambda **kwargs: keras.layers.Identity(**kwargs))
