"""Run by tests/test_jax_workflows.py in a subprocess: KERAS_BACKEND=jax with two virtual
CPU devices. ``run_layer_test`` (config round trips, symbolic and eager calls, a fit
step, .keras save / load, XLA, mixed bfloat16, a DataParallel fit step over the 2
devices) on every registered context block, constructed as ``context_block(name)``
builds it (each block's recipe defaults), on one share of the names:
``python jax_layer_battery.py INDEX COUNT``.
"""

import sys

import jax
import keras

from kctx.layers import context_block, context_block_names
from kctx.testing import run_layer_test

assert keras.backend.backend() == "jax", keras.backend.backend()
assert len(jax.devices()) == 2, jax.devices()

SHAPE = (2, 4, 4, 32)  # 32 channels: ham_nmf_light's group norm has SegNeXt's 32 groups
index, count = (int(value) for value in sys.argv[1:3])
names = context_block_names()[index::count]
for name in names:
    layer = context_block(name)
    init_kwargs = {key: value for key, value in layer.get_config().items()
                   if key not in ("name", "trainable", "dtype")}
    run_layer_test(type(layer), init_kwargs, SHAPE)
    print("OK", name, flush=True)
print("JAX_LAYER_BATTERY_OK", len(names))
