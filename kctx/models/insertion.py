"""Insert context blocks into an existing functional model (e.g. a ResNet-50 backbone)."""

import difflib

import keras

from kctx.layers.context_block import context_block

# Where Babiloni et al. (Sec. 5) and Wang et al. put one block per stage of a ResNet-50:
# right before the stage's last residual block, i.e. on the output of the one before it
# (keras.applications.ResNet50 layer names; res3 has 4 blocks, res4 6, res5 3).
RESNET50_STAGE_POSITIONS = {
    "res2": "conv2_block2_out",
    "res3": "conv3_block3_out",
    "res4": "conv4_block5_out",
    "res5": "conv5_block2_out",
}


def resnet50_positions(stages):
    """Layer names of ``keras.applications.ResNet50`` for stage names such as ``"res4"``,
    ``"res3+4+5"`` / ``"res345"`` or a list of them (Poly-NL's Table 2 placements)."""
    if isinstance(stages, str):
        text = stages.lower().replace("res", "").replace("+", "").replace(",", "")
        stages = [f"res{digit}" for digit in text] if text.isdigit() else [stages]
    unknown = [s for s in stages if s not in RESNET50_STAGE_POSITIONS]
    if unknown or not stages:
        raise ValueError(f"Unknown ResNet-50 stage: expected names among "
                         f"{sorted(RESNET50_STAGE_POSITIONS)} (e.g. 'res4' or 'res3+4+5'). "
                         f"Received: {stages!r}")
    return [RESNET50_STAGE_POSITIONS[s] for s in stages]


def _new_block(block, position, block_kwargs):
    if isinstance(block, str):
        return context_block(block, name=f"{block}_after_{position}", **block_kwargs)
    if isinstance(block, keras.layers.Layer):
        return block
    if callable(block):
        return block()
    raise ValueError("`block` must be a context-block name, a keras Layer or a callable "
                     f"returning one. Received: block={block!r}")


def insert_context_block(model, after, block="poly_nl", name=None, **block_kwargs):
    """A new functional model with ``block`` applied to the output of each layer in ``after``.

    The layers of ``model`` are reused, not copied: the new model starts
    with the same weights (and shares them with ``model``). Everything that
    consumed the output of a layer named in ``after`` now consumes the
    block's output instead.

    Args:
        model: a functional ``keras.Model`` (e.g. ``keras.applications.ResNet50
            (weights=None)`` or a keras-hub backbone built from constructor
            arguments) or a ``Sequential``.
        after: a layer name or a list of names (several positions, e.g.
            :func:`resnet50_positions` ``("res3+4+5")``). Each layer must have
            one rank-4 channels-last output.
        block: a :func:`kctx.layers.context_block` name (a new block per
            position, named ``<block>_after_<layer>``, built with
            ``block_kwargs``); a ``keras.layers.Layer`` (one position only);
            a callable returning a new layer; or a list of these, one per position.
        name: the new model's name (default: ``model.name``).

    Returns:
        The new ``keras.Model``; it trains with ``fit`` and round-trips through
        ``.keras`` files when its blocks are serializable (all kctx layers are).

    Examples:
        >>> base = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
        >>> net = insert_context_block(base, resnet50_positions("res4"), "poly_nl")
        >>> net.get_layer("poly_nl_after_conv4_block5_out").output.shape
        (None, 4, 4, 1024)
    """
    positions = [after] if isinstance(after, str) else list(after)
    if not positions or len(set(positions)) != len(positions):
        raise ValueError(f"`after` must be a layer name or a list of distinct names. "
                         f"Received: after={after!r}")
    names = [layer.name for layer in model.layers]
    for position in positions:
        if position not in names:
            close = difflib.get_close_matches(str(position), names, n=3)
            raise ValueError(f"`after`: {model.name!r} has no layer named {position!r}"
                             + (f" (close: {close})" if close else "") + ".")
    blocks = block if isinstance(block, (list, tuple)) else [block] * len(positions)
    if len(blocks) != len(positions):
        raise ValueError(f"`block` lists {len(blocks)} blocks for {len(positions)} positions. "
                         f"Received: block={block!r}, after={after!r}")
    if isinstance(block, keras.layers.Layer) and len(positions) > 1:
        raise ValueError("One layer instance cannot be inserted at several positions; pass a "
                         f"context-block name or a factory. Received: block={block!r}, "
                         f"after={after!r}")
    inserted = {p: _new_block(b, p, block_kwargs) for p, b in zip(positions, blocks)}

    def call_function(layer, *args, **kwargs):
        output = layer(*args, **kwargs)
        if layer.name not in inserted:
            return output
        if not (hasattr(output, "shape") and len(output.shape) == 4):
            raise ValueError(f"`after`: the output of {layer.name!r} must be one rank-4 "
                             f"(batch, height, width, channels) tensor. Received: {output!r}")
        return inserted[layer.name](output)

    new = keras.models.clone_model(model, clone_function=lambda layer: layer,
                                   call_function=call_function)
    if name is not None or new.name != model.name:
        new = keras.Model(new.input, new.output, name=name or model.name)
    return new
