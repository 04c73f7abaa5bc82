"""The export matrix: every context block and every workflow model, exported to TF
SavedModel, ONNX and LiteRT and run in that runtime, against Keras."""

import os

import keras
import numpy as np
import pytest
from keras import ops

from block_models import block_atol, block_model
from kctx.export import (
    FORMATS,
    SUFFIXES,
    ExportError,
    artifact_size,
    export_model,
    float32_model,
    inference_function,
    load_artifact,
)
from kctx.layers import context_block, context_block_names
from workflow_runs import ROOT, run_pytest_on

pytest.importorskip("onnxruntime")
pytest.importorskip("ai_edge_litert")

RTOL, ATOL = 1e-4, 1e-5


def _artifact_path(tmp_path, format, stem="model"):
    return str(tmp_path / f"{stem}{SUFFIXES[format]}")


def _exported_matches(model, inputs, format, tmp_path, batches=(), atol=ATOL):
    """Export ``model``, run the artifact on ``inputs`` (and each of ``batches``) and
    compare with Keras."""
    path = export_model(model, _artifact_path(tmp_path, format), format=format)
    artifact = load_artifact(path, format)
    for x in (inputs, *batches):
        # Keras eagerly: predict() would trace a function for each new input shape.
        expected = keras.ops.convert_to_numpy(model(x, training=False))
        got = artifact(x)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=atol)
    return path


# Every block through the two converters (tf2onnx and LiteRT's, which each have their own op
# coverage); a SavedModel is TensorFlow's trace of the model, which the layer battery's
# tf.function and XLA steps make of every block, and the workflow models' and SegNeXt's
# SavedModels below are loaded and run.
@pytest.mark.parametrize("format", [format for format in FORMATS if format != "tf_saved_model"])
@pytest.mark.parametrize("name", context_block_names(None))
def test_every_block_exports_and_runs_in_every_runtime(name, format, tmp_path):
    model = block_model(name)
    x = np.random.default_rng(0).standard_normal((2, *model.input_shape[1:])).astype("float32")
    expected = np.asarray(model(x, training=False))
    _exported_matches(model, x, format, tmp_path, batches=[x[:1]],
                      atol=block_atol(name, expected, ATOL))


def _two_input_model():
    """Inputs whose names sort opposite to their order (as the GAN generator's ``z``,
    ``labels``), of different shapes so that a swap cannot pass."""
    keras.utils.set_random_seed(0)
    z = keras.Input((5,), name="z")
    labels = keras.Input((3,), name="labels")
    x = keras.layers.Concatenate()([keras.layers.Dense(4)(z), keras.layers.Dense(6)(labels)])
    model = keras.Model([z, labels], keras.layers.Dense(2)(keras.layers.Activation("tanh")(x)))
    rng = np.random.default_rng(0)
    return model, [rng.standard_normal((3, 5)).astype("float32"),
                   rng.standard_normal((3, 3)).astype("float32")]


@pytest.mark.parametrize("format", FORMATS)
def test_several_inputs_go_in_the_model_order_without_input_names(format, tmp_path):
    model, (z, labels) = _two_input_model()
    path = export_model(model, _artifact_path(tmp_path, format), format=format)
    artifact = load_artifact(path, format)
    assert artifact.names == ["z", "labels"]
    expected = model.predict([z, labels], verbose=0)
    np.testing.assert_allclose(artifact([z, labels]), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(artifact((z, labels)), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(artifact({"labels": labels, "z": z}), expected,
                               rtol=1e-5, atol=1e-6)
    # `input_names` overrides the order.
    swapped = load_artifact(path, format, input_names=["labels", "z"])
    np.testing.assert_allclose(swapped([labels, z]), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must name the artifact's inputs"):
        load_artifact(path, format, input_names=["z", "y"])
    with pytest.raises(ValueError, match=r"takes 2 inputs \['z', 'labels'\]"):
        artifact([z])
    with pytest.raises(ValueError, match="takes 2 inputs"):
        artifact({"z": z, "y": labels})


def test_litert_input_order_is_in_the_flatbuffer(tmp_path):
    """The order travels in the .tflite file itself; an artifact without it (Keras's own
    export) takes its signature's order, sorted by name."""
    from ai_edge_litert.interpreter import Interpreter

    from kctx.export import LITERT_INPUT_NAMES, _litert_metadata

    model, (z, labels) = _two_input_model()
    path = export_model(model, tmp_path / "model.tflite", format="litert")
    with open(path, "rb") as handle:
        assert _litert_metadata(handle.read(), LITERT_INPUT_NAMES) == b'["z", "labels"]'
    assert Interpreter(model_path=path).get_signature_list()["serving_default"]["inputs"] == \
        ["labels", "z"]
    moved = tmp_path / "elsewhere" / "generator.tflite"
    moved.parent.mkdir()
    os.rename(path, moved)
    np.testing.assert_allclose(load_artifact(moved, "litert")([z, labels]),
                               model.predict([z, labels], verbose=0), rtol=1e-5, atol=1e-6)
    plain = tmp_path / "plain.tflite"
    model.export(str(plain), format="litert", verbose=False)
    artifact = load_artifact(plain, "litert")
    assert artifact.names == ["labels", "z"]
    np.testing.assert_allclose(artifact([labels, z]), model.predict([z, labels], verbose=0),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("quantize", ["dynamic", "int8"])
def test_quantized_litert_keeps_the_model_input_order(quantize, tmp_path):
    """int8 calibration feeds the representative inputs by name, not in the signature's
    sorted order (where the export failed: the inputs' shapes differ)."""
    model, (z, labels) = _two_input_model()
    rng = np.random.default_rng(1)
    calibration = [[rng.standard_normal((1, 5)).astype("float32"),
                    rng.standard_normal((1, 3)).astype("float32")] for _ in range(16)]
    path = export_model(model, tmp_path / f"{quantize}.tflite", format="litert",
                        quantize=quantize, representative_data=calibration)
    expected = model.predict([z, labels], verbose=0)
    got = load_artifact(path, "litert")([z, labels])
    assert got.shape == expected.shape
    # int8 steps of small random layers: within a quarter of the scale, and correlated.
    tolerance = {"dynamic": 0.05, "int8": 0.25}[quantize]
    assert np.abs(got - expected).max() <= tolerance * np.abs(expected).max()
    assert np.corrcoef(got.ravel(), expected.ravel())[0, 1] > 0.95


def _gan_generator():
    from gan.configs import get_config
    from gan.models import build_generator

    config = get_config("digits")
    model = build_generator(config, "ham_nmf")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((3, config.latent_dim)).astype("float32"),
              np.array([0, 4, 9], dtype="int32")]
    return model, inputs, [[inputs[0][:1], inputs[1][:1]]]


def _segmenter(context):
    from segmentation.configs import get_config
    from segmentation.workflow import build_model

    model = build_model(get_config("digits_seg", context=context))
    rng = np.random.default_rng(0)
    # Dynamic H×W: the artifact runs at every size (multi-scale inference).
    sizes = [(2, 64, 64, 1), (1, 48, 80, 1)]
    channels = model.input_shape[-1]
    batches = [rng.random((*size[:3], channels)).astype("float32") for size in sizes]
    return model, batches[0], batches[1:]


def _classifier(name):
    from classification.configs import get_config
    from classification.workflow import build_model

    model = build_model(get_config("digits", model=name))
    x = np.random.default_rng(0).random((2, *model.input_shape[1:])).astype("float32")
    return model, x, [x[:1]]


def _sequence_model():
    from sequence.configs import get_config
    from sequence.workflow import build_model

    model = build_model(get_config("adding", length=64))
    rng = np.random.default_rng(0)
    x = np.stack([rng.random((2, 64)), np.zeros((2, 64))], axis=-1).astype("float32")
    x[:, [3, 40], 1] = 1.0
    return model, x, [x[:1]]


WORKFLOW_MODELS = {
    "gan_generator_ham_nmf": _gan_generator,
    "segmenter_ham_nmf": lambda: _segmenter("ham_nmf"),
    "segmenter_aspp": lambda: _segmenter("aspp"),
    # (MobileNetV2's inverted residuals are KANet_KV's, which adds KAO: one model for both.)
    "kanet_kv": lambda: _classifier("kanet_kv"),
    "psf_sequence": _sequence_model,
}


# The KANet is the slowest model to trace (17 modules, about 10 CPU s an export): its
# SavedModel is test_export_cli_on_a_run_of_each_workflow's classification case.
WORKFLOW_EXPORTS = [(name, format) for name in sorted(WORKFLOW_MODELS) for format in FORMATS
                    if (name, format) != ("kanet_kv", "tf_saved_model")]


@pytest.mark.parametrize("model_name,format", WORKFLOW_EXPORTS)
def test_every_workflow_model_exports_and_runs_in_every_runtime(model_name, format, tmp_path):
    model, inputs, batches = WORKFLOW_MODELS[model_name]()
    _exported_matches(model, inputs, format, tmp_path, batches=batches)


@pytest.mark.parametrize("format", FORMATS)
def test_segnext_exports_and_runs_in_every_runtime(format, tmp_path):
    """SegNeXt with (random) official-format weights, RGB 0–255 at any size: the padding to
    multiples of 32, the NMF with K = 7 and the crop run in every runtime. The tiny
    fixture has SegNeXt-T's layers, head and K in 5 blocks instead of 13: the same graph
    for every runtime to convert, 2.6 times shorter (SegNeXt-T took 81 CPU s over the
    three formats, most of it in tf2onnx's and the LiteRT converter's graph passes).
    Seven NMF steps amplify float32 rounding: the runtimes agree with Keras to 1e-5 of
    the logits' scale."""
    from test_segnext import FIXTURES, tiny_segnext

    model = tiny_segnext(FIXTURES / "tiny_mmseg.pth")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (1, 70, 90, 3)).astype("float32")
    scale = float(np.abs(np.asarray(model(x, training=False))).max())
    _exported_matches(model, x, format, tmp_path, atol=1e-5 * scale,
                      batches=[rng.uniform(0, 255, (2, 64, 64, 3)).astype("float32")])


def test_gan_upsampling_is_keras_nearest_upsampling():
    from gan.layers import UpSampling2D

    x = np.random.default_rng(0).standard_normal((2, 3, 5, 4)).astype("float32")
    for size in (2, (3, 2)):
        np.testing.assert_array_equal(
            ops.convert_to_numpy(UpSampling2D(size)(x)),
            ops.convert_to_numpy(keras.layers.UpSampling2D(size)(x)))


def test_psf_gelu_is_keras_exact_gelu():
    from kctx.ops import gelu

    x = np.linspace(-6, 6, 101, dtype="float32")
    np.testing.assert_allclose(ops.convert_to_numpy(gelu(x)),
                               ops.convert_to_numpy(keras.activations.gelu(x, approximate=False)),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("format", ["onnx", "litert"])
def test_mixed_bfloat16_model_exports_as_float32(format, tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((4, 4, 16))
        x = keras.layers.Conv2D(16, 1)(inputs)
        model = keras.Model(inputs, context_block("ham_nmf", rank=4)(x))
    finally:
        keras.config.set_dtype_policy("float32")
    copy = float32_model(model)
    assert {layer.dtype_policy.name for layer in copy._flatten_layers()} == {"float32"}
    assert float32_model(copy) is copy
    for mine, theirs in zip(model.weights, copy.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(mine), ops.convert_to_numpy(theirs))
    x = np.random.default_rng(0).random((2, 4, 4, 16)).astype("float32")
    _exported_matches(copy, x, format, tmp_path)
    path = export_model(model, _artifact_path(tmp_path, format, "bf16"), format=format)
    got = load_artifact(path, format)(x)
    np.testing.assert_allclose(got, copy.predict(x, verbose=0), rtol=RTOL, atol=ATOL)
    # bfloat16 keeps 8 bits of mantissa: the artifact is the float32 evaluation.
    np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=0.1, atol=0.1)


@keras.saving.register_keras_serializable(package="kctx_tests")
class _InverseLayer(keras.layers.Layer):
    """A layer with an operation that neither ONNX Runtime nor LiteRT has."""

    def call(self, x):
        gram = ops.einsum("bnd,bne->bde", x, x) + ops.eye(x.shape[-1])
        return ops.matmul(x, ops.inv(gram))


@pytest.mark.parametrize("format", ["onnx", "litert"])
def test_an_op_the_runtime_lacks_fails_the_export_naming_layer_and_op(format, tmp_path):
    inputs = keras.Input((6, 3))
    model = keras.Model(inputs, _InverseLayer(name="solver")(keras.layers.Dense(3)(inputs)))
    path = _artifact_path(tmp_path, format)
    with pytest.raises(ExportError, match=r"layer 'solver' \(_InverseLayer\).*MatrixInverse"):
        export_model(model, path, format=format)
    assert not os.path.exists(path)  # no artifact that breaks at load time
    # TensorFlow runs it.
    path = export_model(model, str(tmp_path / "saved"), format="tf_saved_model")
    x = np.random.default_rng(0).standard_normal((2, 6, 3)).astype("float32")
    np.testing.assert_allclose(load_artifact(path, "tf_saved_model")(x),
                               model.predict(x, verbose=0), rtol=RTOL, atol=ATOL)


def test_litert_quantization_shrinks_the_artifact_and_stays_close(tmp_path):
    # Seeded weights: int8's error depends on them (seeds 0-5 gave 1.6-19% of the output's
    # scale on one CPU), and an unseeded model took whatever the test order left.
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Conv2D(4, 1)(x))
    rng = np.random.default_rng(0)
    x = rng.random((4, 8, 8, 3)).astype("float32")
    expected = model.predict(x, verbose=0)
    sizes = {}
    for quantize in ("none", "dynamic", "int8"):
        path = export_model(model, _artifact_path(tmp_path, "litert", quantize), format="litert",
                            quantize=quantize,
                            representative_data=[rng.random((1, 8, 8, 3)).astype("float32")
                                                 for _ in range(16)])
        sizes[quantize] = artifact_size(path)
        got = load_artifact(path, "litert")(x)
        assert got.dtype == np.float32 and got.shape == expected.shape
        scale = np.abs(expected).max()
        tolerance = {"none": 1e-5, "dynamic": 0.05, "int8": 0.1}[quantize]
        assert np.abs(got - expected).max() <= tolerance * scale, quantize
    assert sizes["dynamic"] < sizes["none"] / 2 and sizes["int8"] < sizes["none"] / 2


def test_export_arguments_are_checked(tmp_path):
    model = block_model("none")
    with pytest.raises(ValueError, match="Received: format='pb'"):
        export_model(model, tmp_path / "m", format="pb")
    with pytest.raises(ValueError, match="quantize='int8' with format='onnx'"):
        export_model(model, tmp_path / "m.onnx", format="onnx", quantize="int8")
    with pytest.raises(ValueError, match="representative_data=None"):
        export_model(model, tmp_path / "m.tflite", format="litert", quantize="int8")
    with pytest.raises(ValueError, match=r"\.tflite file.*Received: path="):
        export_model(model, tmp_path / "m.onnx", format="litert")


# (workflow, format, quantize): each workflow's CLI on a tiny run of its default data, each
# format once, int8 calibrated on a workflow's own examples. The KANet is the slowest model
# to trace (17 modules, about 10 CPU s an export): it takes the format that traces it least.
CLI_CASES = [("segmentation", "litert", "int8"), ("classification", "tf_saved_model", "none"),
             ("gan", "litert", "none"), ("sequence", "onnx", "none")]


@pytest.mark.parametrize("name,format,quantize", CLI_CASES)
def test_export_cli_on_a_run_of_each_workflow(name, format, quantize, tmp_path, capsys):
    """``python -m W.train`` then ``python -m W.export``, their ``main`` in this process
    (a fresh process per command would import TensorFlow and Keras twice more; the
    workflows' CLIs run as processes in tests/test_runner.py)."""
    import importlib
    import json

    from workflow_runs import TINY

    run = tmp_path / "run"
    train = importlib.import_module(f"{name}.train")
    # (The GAN's run without its FCD, which the export does not read.)
    flags = TINY[name][:-2] + ["--eval-samples", "0"] if name == "gan" else TINY[name]
    assert train.main([*flags, "--verbose", "0", "--model-dir", str(run)]) == 0
    flags = ["--model-dir", str(run), "--format", format, "--quantize", quantize,
             "--calibration-examples", "8"]
    capsys.readouterr()
    assert importlib.import_module(f"{name}.export").main(flags) == 0
    output = capsys.readouterr().out
    stem = "generator" if name == "gan" else "model"
    path = run / (f"{stem}_saved_model" if format == "tf_saved_model" else
                  f"{stem}{'' if quantize == 'none' else '_' + quantize}{SUFFIXES[format]}")
    assert path.exists() and f"wrote {path}" in output
    report = json.loads(pathlib_text(f"{path}.json"))
    assert report["format"] == format and report["quantize"] == quantize
    assert report["bytes"] == artifact_size(path)
    # (A mixed-precision run's report adds its float32 evaluation's difference:
    # tests/test_runner.py's JAX GAN.)
    assert "float32_max_relative_difference" not in report
    # Float artifacts equal Keras to float32 rounding; int8 to its quantization step.
    limit = 0.1 if quantize == "int8" else 1e-5
    assert report["max_relative_difference"] <= limit
    results = json.loads((run / "results.json").read_text())
    if name in ("segmentation", "classification"):
        metric = "miou" if name == "segmentation" else "top1"
        assert report["keras_scores"][metric] == pytest.approx(results[metric], abs=1e-6)
        assert f"{metric}: " in output and metric in report["scores"]
        if quantize == "none":
            assert report["scores"][metric] == pytest.approx(results[metric], abs=1e-6)
    else:
        assert "scores" not in report


def pathlib_text(path):
    with open(path) as handle:
        return handle.read()


def test_export_cli_refuses_quantizing_onnx(tmp_path, capsys):
    from segmentation.export import main

    with pytest.raises(SystemExit) as stopped:
        main(["--model-dir", str(tmp_path), "--format", "onnx", "--quantize", "int8"])
    assert stopped.value.code == 2
    assert "--quantize int8 applies to --format litert" in capsys.readouterr().err


def test_int8_keeps_the_ham_in_float_and_runs(tmp_path):
    """NMF's updates divide by C·DᵀD + eps, which int8 rounds to zero: quantized, LiteRT
    stops at that DIV, which export_model reports at export time, naming the ham; by
    default the ham stays float32 and the rest is int8."""
    inputs = keras.Input((8, 8, 16))
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = context_block("ham_nmf", rank=4, name="ham")(x)
    model = keras.Model(inputs, keras.layers.Conv2D(4, 1)(x))
    rng = np.random.default_rng(0)
    calibration = [rng.random((1, 8, 8, 16)).astype("float32") for _ in range(16)]
    path = export_model(model, tmp_path / "model.tflite", format="litert", quantize="int8",
                        representative_data=calibration)
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    ops_used = {op["op_name"] for op in interpreter._get_ops_details()}
    assert {"QUANTIZE", "DEQUANTIZE", "DIV"} <= ops_used
    x = rng.random((4, 8, 8, 16)).astype("float32")
    expected = model.predict(x, verbose=0)
    got = load_artifact(path, "litert")(x)
    # int8 steps of the convs' activations (random weights): within a quarter of the scale,
    # and correlated with the float output.
    assert np.abs(got - expected).max() <= 0.25 * np.abs(expected).max()
    assert np.corrcoef(got.ravel(), expected.ravel())[0, 1] > 0.95
    with pytest.raises(ExportError, match=r"layer 'ham' \(Hamburger\).*DIV"):
        export_model(model, tmp_path / "all.tflite", format="litert", quantize="int8",
                     representative_data=calibration, float_layers=[])
    assert not os.path.exists(tmp_path / "all.tflite")


def test_inference_function_on_tensorflow_with_and_without_xla():
    """kctx.export.inference_function on TensorFlow: a ``tf.function`` of the inference
    call per input signature, with XLA or as TensorFlow's graph, several inputs in the
    model's structure; its arguments checked (JAX and PyTorch: tests/backend_checks.py)."""
    from kctx.profile import runtime_latency

    first, second = keras.Input((4, 4, 8), name="first"), keras.Input((4, 4, 8), name="second")
    block = context_block("ham_nmf", rank=4, steps=2, seed=0)
    model = keras.Model([first, second], block(keras.layers.Add()([first, second])))
    rng = np.random.default_rng(0)
    x = [rng.standard_normal((2, 4, 4, 8)).astype("float32") for _ in range(2)]
    expected = keras.ops.convert_to_numpy(model(x, training=False))
    for compile in (True, False):
        infer = inference_function(model, compile=compile)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(infer(x)), expected,
                                   rtol=RTOL, atol=ATOL)
        infer([array[:1] for array in x])
        program = infer.programs[(((2, 4, 4, 8), "float32"),) * 2]
        assert len(infer.programs) == 2 and program._jit_compile is compile
    with pytest.raises(ValueError, match="Received: mode='default' on KERAS_BACKEND="):
        inference_function(model, mode="default")
    with pytest.raises(ValueError, match="Received: compile='yes'"):
        inference_function(model, compile="yes")
    with pytest.raises(ValueError, match="must be built"):
        inference_function(keras.layers.Dense(2))
    spec = {"block": "ham_nmf", "kwargs": {"rank": 4, "steps": 2}, "input_shape": [4, 4, 8]}
    with pytest.raises(ValueError, match="runs on KERAS_BACKEND='torch'"):
        runtime_latency(spec, "torch_compile", batch=1, isolate=False)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_export_on_jax_and_pytorch_goes_through_a_tensorflow_process(backend):
    """tests/export_check.py in a subprocess on each backend, TensorFlow installed: a LiteRT
    int8 artifact of two inputs calibrated on JAX, a SavedModel from PyTorch against its
    model, the runtime's ExportError from the exporting process, a layer of ``__main__``
    refused (ONNX on PyTorch, in process, is tests/backend_checks.py's)."""
    output = run_pytest_on(backend, [ROOT / "tests" / "export_check.py"], tensorflow=True)
    assert " passed" in output and " failed" not in output and " skipped" not in output
