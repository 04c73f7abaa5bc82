"""kctx.training.ParamwiseAdamW against PyTorch's AdamW with mmengine's parameter groups, on
any backend.

Imported by tests/test_segmentation_segnext.py on TensorFlow and by tests/backend_checks.py
on JAX and PyTorch (where the optimizer updates each group of variables with
``torch._foreach_*`` calls instead of variable by variable).
"""

import keras
import numpy as np

from kctx.training import ParamwiseAdamW, WarmupPolyDecay
from numpy_reference import torch_adamw


def tiny_head_model(seed=0):
    """A model whose weights fall in three of SegNeXt's parameter groups by their names."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,))
    x = keras.layers.Dense(4, name="block1-0-attn-proj_1")(inputs)
    x = keras.layers.LayerNormalization(name="norm1")(x)
    x = keras.layers.Dense(3, name="decode_head-conv_seg")(x)
    return keras.Model(inputs, x)


SCHEDULE = WarmupPolyDecay(1e-2, steps=8, warmup_steps=3, warmup_ratio=0.1)


def _optimizer():
    return ParamwiseAdamW(SCHEDULE, weight_decay=0.05, paramwise={
        "head": {"lr_mult": 10.0}, "norm": {"decay_mult": 0.0}})


def check_paramwise_adamw_equals_torch_adamw(steps=5):
    """Five steps with a warm-up schedule: head weights at 10× the learning rate (and
    decay scaled with it), norms without decay, the rest plain, as torch.optim.AdamW runs
    mmengine's parameter groups (the float64 reference), and ``apply`` equal bit for bit
    to :meth:`ParamwiseAdamW.update_step` called on each variable in turn."""
    model, loop = tiny_head_model(), tiny_head_model()
    optimizer, loop_optimizer = _optimizer(), _optimizer()
    variables, loop_variables = model.trainable_variables, loop.trainable_variables
    optimizer.build(variables)
    loop_optimizer.build(loop_variables)
    assert optimizer.multipliers == [(1.0, 1.0), (1.0, 1.0), (1.0, 0.0), (1.0, 0.0),
                                     (10.0, 1.0), (10.0, 1.0)]
    initial = [keras.ops.convert_to_numpy(v) for v in variables]
    rng = np.random.default_rng(1)
    grads = [[rng.standard_normal(v.shape) for v in variables] for _ in range(steps)]
    for step_grads in grads:
        step_grads = [g.astype("float32") for g in step_grads]
        optimizer.apply(step_grads, variables)
        learning_rate = loop_optimizer.learning_rate
        for gradient, variable in zip(step_grads, loop_variables):
            loop_optimizer.update_step(keras.ops.convert_to_tensor(gradient), variable,
                                       learning_rate)
        loop_optimizer.iterations.assign_add(1)
    expected = torch_adamw(initial, grads, [float(SCHEDULE(t)) for t in range(steps)],
                           optimizer.multipliers, 0.05)
    for variable, want, start in zip(variables, expected, initial):
        moved = np.abs(want - start).max()
        got = keras.ops.convert_to_numpy(variable)
        assert np.abs(got - want).max() <= 1e-4 * moved, variable.path
    for ours, theirs in zip(optimizer.variables + variables,
                            loop_optimizer.variables + loop_variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours),
                                      keras.ops.convert_to_numpy(theirs), err_msg=ours.path)
