"""torchvision's ResNet state dicts → :func:`kctx.models.dilated_resnet`.

torchvision's ImageNet checkpoints (``resnet50-11ad3fa6.pth``, ``resnet101-cd907fc2.pth``,
...; the standard initialisation of DeepLab's and HamNet's backbones) name the modules
``conv1`` / ``bn1`` (the stem), ``layer<s>.<b>.conv<i>`` / ``bn<i>`` (bottleneck b of stage
s) and ``layer<s>.<b>.downsample.0`` / ``.1`` (its shortcut conv and norm); the Keras
layers are ``stem_conv`` / ``stem_norm``, ``res<s + 1>_block<b>_<i>_conv`` / ``_norm`` and
``res<s + 1>_block<b>_shortcut_conv`` / ``_norm``. The ImageNet classifier (``fc.weight``,
``fc.bias``), which the backbone does not have, and BatchNorm's ``num_batches_tracked``
are skipped.
"""

import re

from kctx.checkpoints import torch_state_dict
from kctx.convert.porting import CheckpointMismatchError, port_weights, torch_layer_targets

_STEM = {"stem_conv": "conv1", "stem_norm": "bn1"}
_BLOCK_LAYER = re.compile(r"^res(\d)_block(\d+)_(\d|shortcut)_(conv|norm)$")
_TORCH_BLOCK = re.compile(r"^layer(\d)\.(\d+)\.")
_CLASSIFIER = ("fc.weight", "fc.bias")


def torchvision_module(layer_name):
    """torchvision's module path of one of :func:`kctx.models.dilated_resnet`'s layers
    (``"res4_block5_2_conv"`` → ``"layer3.5.conv2"``), or None for a layer without one."""
    if layer_name in _STEM:
        return _STEM[layer_name]
    match = _BLOCK_LAYER.match(layer_name)
    if match is None:
        return None
    stage, block, index, kind = match.groups()
    module = f"layer{int(stage) - 1}.{block}"
    if index == "shortcut":
        return f"{module}.downsample.{0 if kind == 'conv' else 1}"
    return f"{module}.{'conv' if kind == 'conv' else 'bn'}{index}"


def torchvision_resnet_targets(model):
    """``{checkpoint key: (variable, layout change)}`` for the layers of a
    :func:`kctx.models.dilated_resnet` that torchvision's ResNet has (``"conv1.weight"``,
    ``"layer3.5.bn2.running_var"``, ...; any other layer's weights stay unfilled)."""
    targets = {}
    for layer in model.layers:
        module = torchvision_module(layer.name)
        if module is not None and layer.weights:
            targets.update(torch_layer_targets(layer, module))
    return targets


def _blocks_per_stage(keys):
    counts = {}
    for key in keys:
        match = _TORCH_BLOCK.match(key)
        if match:
            stage, block = int(match.group(1)), int(match.group(2))
            counts[stage] = max(counts.get(stage, 0), block + 1)
    return tuple(counts.get(stage, 0) for stage in range(1, 5))


def _depth_name(blocks):
    return f"ResNet-{3 * sum(blocks) + 2}"


def _depth_hint(model_name, state, targets):
    found, expected = _blocks_per_stage(state), _blocks_per_stage(targets)
    if not any(found) or found == expected:
        return ""
    return (f"The checkpoint is a {_depth_name(found)} (blocks per stage {found}) but the "
            f"model {model_name!r} is a {_depth_name(expected)} (blocks per stage "
            f"{expected}): build the model with the checkpoint's depth.")


def load_torchvision_resnet_weights(model, weights, assign=True):
    """Fill a :func:`kctx.models.dilated_resnet` from a torchvision ResNet state dict, strictly.

    Conv kernels go from OIHW to HWIO; BatchNorm's ``weight``, ``bias``, ``running_mean``
    and ``running_var`` become γ, β, the moving mean and the moving variance. Nothing is
    assigned unless every tensor (the skipped ones apart) finds its weight and every weight
    its tensor, with the same shape. Dilation changes no weight: any output stride loads.

    Args:
        model: a model built by :func:`kctx.models.dilated_resnet`.
        weights: a torchvision ``.pth`` path (read by
            :func:`kctx.checkpoints.torch_state_dict`: no PyTorch, no pickled code run) or
            a state dict already read ({name: array}).
        assign: ``False`` only checks.

    Returns:
        ``{"loaded": n, "skipped": [...]}``: the number of tensors assigned and the sorted
        checkpoint keys deliberately left unused.

    Raises:
        CheckpointMismatchError: a tensor without a Keras weight, a weight without a
            tensor, or a shape that differs, each named (and the depths, when the
            checkpoint's blocks per stage are not the model's, e.g. ResNet-50 weights for
            a ResNet-101).

    Examples:
        >>> from kctx.models import dilated_resnet
        >>> model = dilated_resnet(14, 8, width=16, input_shape=(32, 32, 3))
        >>> list(torchvision_resnet_targets(model))[:3]
        ['conv1.weight', 'bn1.weight', 'bn1.bias']
        >>> state = {"conv1.weight": np.zeros((16, 3, 7, 7), "float32")}
        >>> load_torchvision_resnet_weights(model, state, assign=False)
        Traceback (most recent call last):
        ...
        kctx.convert.porting.CheckpointMismatchError: The checkpoint does not fit ...: 84 Keras
        weights have no checkpoint tensor: bn1.bias, ...
        >>> # with torchvision's file: dilated_resnet(50, 8) and "resnet50-11ad3fa6.pth"
    """
    state = weights if isinstance(weights, dict) else torch_state_dict(weights)
    targets = torchvision_resnet_targets(model)
    skipped = [key for key in state
               if key in _CLASSIFIER or key.endswith(".num_batches_tracked")]
    return port_weights(model, state, targets, skipped=skipped, assign=assign,
                        description="torchvision ResNet keys",
                        hint=_depth_hint(model.name, state, targets))


__all__ = ["CheckpointMismatchError", "load_torchvision_resnet_weights", "torchvision_module",
           "torchvision_resnet_targets"]
