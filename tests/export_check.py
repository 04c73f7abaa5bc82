"""``kctx.export.export_model`` on JAX and PyTorch, where TensorFlow's formats are written
by a TensorFlow process: run by tests/test_export.py with pytest in a subprocess on each
backend (``KERAS_BACKEND=jax python -m pytest export_check.py``), TensorFlow installed."""

import os

import keras
import numpy as np
import pytest
from keras import ops

from kctx.export import ExportError, export_model, load_artifact
from kctx.layers import context_block

BACKEND = keras.backend.backend()


def test_not_on_tensorflow():
    assert BACKEND in ("jax", "torch"), BACKEND


def _two_input_model():
    """Inputs whose names sort opposite to their order, of different shapes."""
    keras.utils.set_random_seed(0)
    z = keras.Input((5,), name="z")
    labels = keras.Input((3,), name="labels")
    x = keras.layers.Concatenate()([keras.layers.Dense(4)(z), keras.layers.Dense(6)(labels)])
    return keras.Model([z, labels], keras.layers.Dense(2)(keras.layers.Activation("tanh")(x)))


def _litert_int8_of_two_inputs_calibrated_on_this_backends_data(tmp_path):
    """The representative data (lists of two arrays) travel to the exporting process, and
    the inputs keep the model's order."""
    model = _two_input_model()
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 5)).astype("float32"),
                    rng.standard_normal((1, 3)).astype("float32")] for _ in range(16)]
    path = export_model(model, str(tmp_path / "model.tflite"), format="litert",
                        quantize="int8", representative_data=calibration)
    artifact = load_artifact(path, "litert")
    assert artifact.names == ["z", "labels"]
    inputs = [rng.standard_normal((1, 5)).astype("float32"),
              rng.standard_normal((1, 3)).astype("float32")]
    expected = model.predict(inputs, verbose=0)
    assert np.abs(artifact(inputs) - expected).max() <= 0.1 * np.abs(expected).max()


@keras.saving.register_keras_serializable(package="kctx_tests")
class InverseLayer(keras.layers.Layer):
    """A layer with an operation that LiteRT lacks (a module the exporting process imports:
    its class is not kctx's)."""

    def call(self, x):
        gram = ops.einsum("bnd,bne->bde", x, x) + ops.eye(x.shape[-1])
        return ops.matmul(x, ops.inv(gram))


def _saved_model_of_a_ham_and_the_runtimes_error_named(tmp_path):
    """A Lambda layer travels too (the exporting process loads the file this one wrote with
    ``safe_mode=False``)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 16))
    features = keras.layers.Conv2D(16, 1)(inputs)
    ham = context_block("ham_nmf", rank=4, seed=0)(features)
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: 2.0 * t + 1.0)(ham))
    path = export_model(model, str(tmp_path / "saved"), format="tf_saved_model")
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 16)).astype("float32")
    np.testing.assert_allclose(load_artifact(path, "tf_saved_model")(x),
                               model.predict(x, verbose=0), rtol=1e-4, atol=1e-5)
    inputs = keras.Input((6, 3))
    model = keras.Model(inputs, InverseLayer(name="solver")(keras.layers.Dense(3)(inputs)))
    path = str(tmp_path / "solver.tflite")
    with pytest.raises(ExportError, match=r"layer 'solver' \(InverseLayer\).*MatrixInverse"):
        export_model(model, path, format="litert")
    assert not os.path.exists(path)


def test_a_layer_class_of_main_cannot_travel(tmp_path):
    local = type("LocalLayer", (keras.layers.Layer,), {"__module__": "__main__",
                                                        "call": lambda self, x: x})
    inputs = keras.Input((3,))
    with pytest.raises(ValueError, match=r"cannot import layer classes defined in __main__: "
                                         r"define \['LocalLayer'\] in a module"):
        export_model(keras.Model(inputs, local()(inputs)), str(tmp_path / "m.tflite"),
                     format="litert")


# Each export starts a TensorFlow process (about 10 CPU s): one backend each.
if BACKEND == "jax":
    test_litert_int8_of_two_inputs_calibrated_on_this_backends_data = \
        _litert_int8_of_two_inputs_calibrated_on_this_backends_data
else:
    test_saved_model_of_a_ham_and_the_runtimes_error_named = \
        _saved_model_of_a_ham_and_the_runtimes_error_named
