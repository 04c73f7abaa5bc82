"""Argument and input checks shared by kctx ops, layers and the workflows' models.

Every message names the argument and the value received
(``Received: rank=0``). Context-block names are checked with
:func:`kctx.layers.check_context_block`.
"""

import keras


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"`{name}` must be a positive integer{' or None' if allow_none else ''}. "
            f"Received: {name}={value!r}"
        )


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"Unknown `{name}`: expected one of {tuple(choices)}. Received: {name}={value!r}"
        )


def check_positive_float(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(
            f"`{name}` must be a positive number{' or None' if allow_none else ''}. "
            f"Received: {name}={value!r}"
        )


def check_nonnegative_float(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"`{name}` must be a number >= 0. Received: {name}={value!r}")


def standardize_data_format(data_format):
    """kctx layers are channels-last; anything else is an explicit error."""
    resolved = data_format or keras.config.image_data_format()
    if resolved != "channels_last":
        raise ValueError(
            "kctx layers expect channels-last inputs (batch, height, width, channels). "
            f"Received: data_format={data_format!r} (resolved to {resolved!r}); "
            "transpose channels-first tensors with keras.layers.Permute((2, 3, 1))."
        )
    return resolved


def check_image_input(layer, input_shape):
    """Rank-4 channels-last input with a known channel dimension; returns the channels.

    Called from ``layer.build``: it also sets ``layer.input_spec`` to rank 4 with
    that many channels, so a later call on another channel count is refused by
    Keras with a ValueError naming both shapes (not a raw kernel error).
    """
    layer_name = type(layer).__name__
    if len(input_shape) != 4:
        raise ValueError(
            f"{layer_name} expects a rank-4 input (batch, height, width, channels). "
            f"Received: input_shape={tuple(input_shape)}"
        )
    if input_shape[-1] is None:
        raise ValueError(
            f"{layer_name} needs a known channel dimension. "
            f"Received: input_shape={tuple(input_shape)}"
        )
    channels = int(input_shape[-1])
    layer.input_spec = keras.InputSpec(ndim=4, axes={-1: channels})
    return channels


def check_sequence_input(layer, input_shape, length_known=True):
    """(batch, n, channels) with the channels, and n where ``length_known``, known.

    Called from ``layer.build``; returns (n, channels) and sets ``layer.input_spec``
    so that a later call on another channel count (or length) is a Keras ValueError.
    """
    known = "n and channels" if length_known else "channels"
    if (len(input_shape) != 3 or input_shape[2] is None
            or (length_known and input_shape[1] is None)):
        raise ValueError(f"{type(layer).__name__} expects (batch, n, channels) with {known} "
                         f"known. Received: input_shape={tuple(input_shape)}")
    length, channels = input_shape[1], int(input_shape[2])
    axes = {1: int(length), 2: channels} if length_known else {2: channels}
    layer.input_spec = keras.InputSpec(ndim=3, axes=axes)
    return length, channels


def check_optional_number(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"`{name}` must be a number or None. Received: {name}={value!r}")


def standardize_pool_size(pool_size):
    """None, or an int / pair of positive ints as an (int, int) tuple."""
    if pool_size is None:
        return None
    pool = (pool_size, pool_size) if isinstance(pool_size, int) else tuple(pool_size)
    if len(pool) != 2:
        raise ValueError(
            f"`pool_size` must be an int or a pair of ints. Received: pool_size={pool_size!r}"
        )
    for p in pool:
        check_positive_int("pool_size", p)
    return pool
