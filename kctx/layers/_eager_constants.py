"""Constants a layer makes once per device on PyTorch instead of at every call."""

import keras


def torch_constant(layer, name, device, key, make):
    """``make()``'s tensors, made on ``device`` once and kept on ``layer`` under ``name``
    until ``key`` (with the device) changes.

    PyTorch runs eagerly, so a constant a layer converts from Python or NumPy data at every
    call is a host-to-device copy from pageable memory on a GPU: it waits for the GPU's
    queue and cannot be captured in a CUDA graph. The other backends trace the call once
    and hold such constants in the program, so only PyTorch layers keep them. The cache
    lives outside Keras' attribute tracking and ``torch.nn.Module``'s registries: it is not
    state, and not saved. Tensors made while a tracer runs the call (``torch.export``,
    ``torch.compile``: :func:`kctx.export.inference_function`) are returned, not kept.

    Args:
        layer: the layer that keeps the constants.
        name: the attribute to keep them under.
        device: the torch device (as a string) to make them on.
        key: what the constants depend on besides the device (a dtype, a shape, a seed).
        make: a function of no arguments returning them.

    Returns:
        What ``make`` returned, made now or earlier.
    """
    cached = layer.__dict__.get(name)
    if cached is None or cached[0] != (key, device):
        with keras.device(device):
            made = make()
        if not _plain(made):  # made while a tracer runs the call (torch.export, dynamo)
            return made
        cached = ((key, device), made)
        object.__setattr__(layer, name, cached)
    return cached[1]


def _plain(tensors):
    """Whether ``tensors`` are all plain tensors with data: not the fake or functional
    stand-ins of a tracer (``torch.export``, ``torch.compile``), which are good for that
    trace alone; a layer that kept one would compute with it in every later eager call."""
    import torch

    return all(type(t) in (torch.Tensor, torch.nn.Parameter)
               for t in keras.tree.flatten(tensors))
