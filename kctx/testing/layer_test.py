"""One shared check of the layer standards, used by every layer test.

:func:`run_layer_test` exercises a layer class the way users will: config
and JSON round trips, symbolic and eager calls (with ``None`` spatial dims),
one ``fit`` step that changes the weights (compiled with XLA, ``jit_compile=True``),
``.keras`` save/load with equal outputs, ``mixed_bfloat16`` and one ``fit`` step on
2 replicas: under a ``tf.distribute.MirroredStrategy`` on TensorFlow, under
``keras.distribution.DataParallel`` on JAX (on CPU, 2 virtual devices:
``XLA_FLAGS=--xla_force_host_platform_device_count=2``).

On PyTorch, Keras' ``jit_compile=True`` is ``torch.compile``, not XLA, and Keras (3.15)
has no distribution API: the XLA and 2-replica checks are TensorFlow's and JAX's.
"""

import json
import os
import tempfile

import keras
import numpy as np


def configure_logical_cpus(count=2):
    """Split the first CPU into ``count`` logical devices (call before any op).

    Lets a 1-CPU machine run ``tf.distribute.MirroredStrategy`` with several
    replicas. Returns the number of logical CPUs now visible.
    """
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError:
        pass  # Runtime already initialised: keep what it has.
    return len(tf.config.list_logical_devices("CPU"))


_STRATEGIES = {}


def mirrored_strategy(replicas=2):
    """A MirroredStrategy over ``replicas`` logical CPUs (None if unavailable).

    One strategy per process and device set: several MirroredStrategy objects
    in one process reuse collective instance keys and abort each other's
    all-reduces ("Shape mismatch in the collective instance").
    """
    import tensorflow as tf

    devices = tuple(d.name for d in tf.config.list_logical_devices("CPU")[:replicas])
    if len(devices) < replicas:
        return None
    if devices not in _STRATEGIES:
        _STRATEGIES[devices] = tf.distribute.MirroredStrategy(list(devices))
    return _STRATEGIES[devices]


def _as_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _config_value(value):
    """Normalise a config value for comparison (tuples vs lists from JSON)."""
    return json.loads(json.dumps(value, default=str))


def _check_config(layer_cls, init_kwargs):
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for name, value in init_kwargs.items():
        if name in ("dtype", "name"):
            continue
        assert name in config, f"get_config() misses constructor argument {name!r}"
        if isinstance(value, (int, float, str, bool, tuple, list)) or value is None:
            stored = _config_value(config[name])
            if isinstance(value, int) and isinstance(stored, list):
                stored = stored[0] if set(stored) == {value} else stored  # 2 -> (2, 2)
            assert stored == _config_value(value), (
                f"get_config()[{name!r}] = {config[name]!r}, constructed with {value!r}"
            )
    revived = layer_cls.from_config(config)
    assert _config_value(revived.get_config()) == _config_value(config)
    serialized = json.dumps(keras.saving.serialize_keras_object(layer))
    from_json = keras.saving.deserialize_keras_object(json.loads(serialized))
    assert type(from_json) is layer_cls
    assert _config_value(from_json.get_config()) == _config_value(config)


# The fit steps' compilation where the check does not ask for XLA: a tf.function graph on
# TensorFlow; XLA on JAX, which is what Keras runs there ("auto"), whereas False would run
# each op eagerly, compiling a small XLA program per op and shape (11 of latent_gnn's 41
# CPU seconds in the JAX battery) for a path users of JAX do not train on.
_JIT_BY_DEFAULT = {"tensorflow": False, "jax": True, "torch": False, "numpy": False}


def _model(layer_cls, init_kwargs, input_shape, dtype=None):
    kwargs = dict(init_kwargs)
    if dtype is not None:
        kwargs["dtype"] = dtype
    inputs = keras.Input(shape=input_shape[1:], batch_size=None)
    outputs = layer_cls(**kwargs)(inputs)
    return keras.Model(inputs, outputs)


def _fit_one_step(model, x, y, jit_compile=None):
    if jit_compile is None:
        jit_compile = _JIT_BY_DEFAULT[keras.backend.backend()]
    before = [_as_numpy(w).copy() for w in model.trainable_weights]
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse", jit_compile=jit_compile
    )
    history = model.fit(x, y, batch_size=x.shape[0], epochs=1, verbose=0, shuffle=False)
    loss = history.history["loss"][-1]
    assert np.isfinite(loss), f"fit() loss is not finite: {loss}"
    after = [_as_numpy(w) for w in model.trainable_weights]
    if before:
        changed = [not np.allclose(b, a) for b, a in zip(before, after)]
        assert any(changed), "one fit() step changed no trainable weight"
    for w in after:
        assert np.all(np.isfinite(w)), "a trainable weight became non-finite after fit()"
    return loss


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_shape,
    expected_output_shape=None,
    input_data=None,
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=None,
    deterministic=True,
    variable_spatial_dims=True,
    run_training=True,
    run_saving=True,
    run_xla=True,
    run_mixed_precision=True,
    run_distributed=True,
    atol=1e-5,
    rtol=1e-5,
):
    """Check that ``layer_cls(**init_kwargs)`` meets the kctx layer standards.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        input_shape: full input shape including the batch size (≥ 2, even).
        expected_output_shape: full output shape; defaults to ``input_shape``.
        input_data: optional NumPy input (defaults to standard normal).
        expected_num_trainable_weights: optional count to assert.
        expected_num_non_trainable_weights: optional count to assert.
        deterministic: inference is deterministic, so save/load and XLA must
            reproduce the outputs exactly (up to ``atol``/``rtol``).
        variable_spatial_dims: also build with ``None`` height and width.
        run_training: the one-step ``fit`` check.
        run_saving: the ``.keras`` save / load check.
        run_xla: on TensorFlow, the fit step and predict compiled with XLA
            (``jit_compile=True``) and predict compared with the eager call; otherwise
            a ``tf.function`` graph (on JAX the fit step is compiled with XLA always, as
            Keras trains there; on PyTorch there is no XLA).
        run_mixed_precision: the ``mixed_bfloat16`` check.
        run_distributed: the 2-replica step check (TensorFlow and JAX: Keras has no
            distribution API on PyTorch).
    """
    keras.utils.set_random_seed(1234)
    input_shape = tuple(input_shape)
    expected_output_shape = tuple(expected_output_shape or input_shape)
    if input_data is None:
        input_data = np.random.default_rng(0).standard_normal(input_shape).astype("float32")
    target = np.random.default_rng(1).standard_normal(expected_output_shape).astype("float32")

    # 1. Config, from_config and JSON round trips.
    _check_config(layer_cls, init_kwargs)

    # 2. Symbolic call (fixed and None spatial dims) and compute_output_shape.
    layer = layer_cls(**init_kwargs)
    symbolic = layer(keras.Input(shape=input_shape[1:]))
    assert tuple(symbolic.shape) == (None,) + expected_output_shape[1:], symbolic.shape
    assert tuple(layer.compute_output_shape((None,) + input_shape[1:])) == (
        (None,) + expected_output_shape[1:]
    )
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights
    if expected_num_non_trainable_weights is not None:
        assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights
    if variable_spatial_dims:
        free_shape = (None, None) + input_shape[3:]
        free = layer_cls(**init_kwargs)(keras.Input(shape=free_shape))
        assert tuple(free.shape[-1:]) == expected_output_shape[-1:], free.shape
        assert len(free.shape) == len(expected_output_shape)

    # 3. Eager call, in both modes.
    for training in (False, True):
        eager = layer(input_data, training=training)
        assert tuple(eager.shape) == expected_output_shape, eager.shape
        assert np.all(np.isfinite(_as_numpy(eager))), f"non-finite output (training={training})"

    # 4. One fit step, and the reference outputs. On TensorFlow the step and predict are
    # compiled with XLA (jit_compile=True, Keras's default on GPUs): XLA compiles the
    # tf.function graph that Keras's default on CPUs runs, so the graph is traced and
    # checked too, and the XLA outputs are compared with the same model's eager call. On
    # JAX the step is compiled with XLA already (as Keras trains there); PyTorch has no XLA.
    backend = keras.backend.backend()
    xla = run_xla and backend == "tensorflow"
    model = _model(layer_cls, init_kwargs, input_shape)
    if run_training:
        _fit_one_step(model, input_data, target, jit_compile=True if xla else None)
    elif xla:
        model.compile(loss="mse", jit_compile=True)
    reference = _as_numpy(model.predict(input_data, batch_size=input_shape[0], verbose=0))
    assert np.all(np.isfinite(reference))
    # Inference the way the save / load check below reads it: an eager call on TensorFlow
    # (no trace), predict on JAX (an eager JAX call compiles each op apart) and PyTorch.
    eager_inference = backend == "tensorflow"

    def infer(m):
        if eager_inference:
            return _as_numpy(m(input_data, training=False))
        return _as_numpy(m.predict(input_data, batch_size=input_shape[0], verbose=0))

    inferred = infer(model) if eager_inference else reference
    if xla and deterministic:
        np.testing.assert_allclose(reference, inferred, atol=max(atol, 1e-4), rtol=1e-3)

    # 5. .keras save / load with equal outputs.
    if run_saving:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            loaded = keras.saving.load_model(path)
        restored = infer(loaded)
        if deterministic:
            np.testing.assert_allclose(restored, inferred, atol=atol, rtol=rtol)
        for a, b in zip(model.weights, loaded.weights):
            np.testing.assert_array_equal(_as_numpy(a), _as_numpy(b))

    # 6. Mixed precision: compute in bfloat16, variables in float32.
    if run_mixed_precision:
        mixed = _model(layer_cls, init_kwargs, input_shape, dtype="mixed_bfloat16")
        out = mixed(input_data, training=False)
        assert keras.backend.standardize_dtype(out.dtype) == "bfloat16", out.dtype
        assert np.all(np.isfinite(_as_numpy(keras.ops.cast(out, "float32"))))
        for w in mixed.weights:
            if "seed_generator" in w.path:
                continue
            assert keras.backend.standardize_dtype(w.dtype) == "float32", (w.path, w.dtype)
        if run_training:
            _fit_one_step(mixed, input_data, target)

    # 7. A 2-replica fit step: MirroredStrategy (TensorFlow), DataParallel (JAX); Keras has
    # no distribution on PyTorch.
    if run_distributed and keras.backend.backend() in ("tensorflow", "jax"):
        if keras.backend.backend() == "tensorflow":
            strategy = mirrored_strategy(2)
            assert strategy is not None, (
                "MirroredStrategy needs 2 logical CPUs: call "
                "kctx.testing.configure_logical_cpus(2) before TensorFlow starts"
            )
            scope = strategy.scope()
        else:
            devices = keras.distribution.list_devices()[:2]
            assert len(devices) == 2, (
                "DataParallel needs 2 devices: on CPU start Python with "
                "XLA_FLAGS=--xla_force_host_platform_device_count=2"
            )
            scope = keras.distribution.DataParallel(devices=devices).scope()
        with scope:
            distributed = _model(layer_cls, init_kwargs, input_shape)
            if run_training:
                # (Its forward on each replica's shard; predict under the strategy is
                # Keras's, the same for every layer.)
                _fit_one_step(distributed, input_data, target)
            else:
                out = _as_numpy(distributed.predict(input_data, batch_size=input_shape[0],
                                                    verbose=0))
                assert np.all(np.isfinite(out))
    return model
