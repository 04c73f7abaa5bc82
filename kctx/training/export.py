"""``python -m <workflow>.export``: ship a run's model as TF SavedModel, ONNX or LiteRT.

:func:`export_run` loads a run folder's inference model, exports it
(:func:`kctx.export.export_model`; LiteRT int8 calibrated on the workflow's own
training stream), reloads the artifact in its runtime, compares it with Keras on
real inputs from the workflow's data and, for workflows with a held-out metric
(segmentation, classification), scores the artifact and the Keras model with the
workflow's evaluation. It writes the artifact and ``<artifact>.json``. Export runs
on the TensorFlow backend: started on another (``KERAS_BACKEND=jax`` or ``torch``),
the command restarts itself on TensorFlow, which loads the run's saved model and a JAX
or PyTorch run's NumPy checkpoints as they are.
"""

import os
import pathlib
import sys
import time

import keras
import numpy as np

from kctx.export import (
    FORMATS,
    QUANTIZATIONS,
    SUFFIXES,
    ExportError,
    artifact_size,
    export_model,
    float32_model,
    float_layer_names,
    load_artifact,
)
from kctx.training.cli import (
    add_data_arguments,
    command_parser,
    positive_int,
    user_errors_exit,
)
from kctx.training.records import write_json
from kctx.training.runner import load_run


def _rows(inputs, start, stop):
    if isinstance(inputs, (list, tuple)):
        return [x[start:stop] for x in inputs]
    return inputs[start:stop]


class ArtifactModel(keras.Model):
    """An exported artifact behind the ``keras.Model`` interface, so a workflow's own
    evaluation (``model(x)``, ``model.evaluate``) scores it; TensorFlow backend.

    Args:
        artifact: ``fn(inputs) -> outputs`` (:func:`kctx.export.load_artifact`).
        model: the Keras model it was exported from (for the output shape).
    """

    def __init__(self, artifact, model, **kwargs):
        super().__init__(name=f"{model.name}_artifact", **kwargs)
        self._artifact = artifact
        self._output_shape = model.compute_output_shape

    def call(self, inputs, training=False):
        import tensorflow as tf

        several = isinstance(inputs, (list, tuple))
        flat = list(inputs) if several else [inputs]

        def run(*arrays):
            return np.asarray(self._artifact(list(arrays) if several else arrays[0]),
                              dtype="float32")

        outputs = tf.numpy_function(run, flat, tf.float32, stateful=False)
        shapes = [tuple(x.shape) for x in flat]
        outputs.set_shape(self._output_shape(shapes if several else shapes[0]))
        return outputs


def default_artifact_path(workflow, model_dir, format, quantize="none"):
    """``MODEL_DIR/<model file stem>[_dynamic|_int8].onnx`` / ``.tflite``, or
    ``MODEL_DIR/<stem>_saved_model/``."""
    stem = pathlib.Path(workflow.model_file).stem + ("" if quantize == "none" else f"_{quantize}")
    name = f"{stem}_saved_model" if format == "tf_saved_model" else stem + SUFFIXES[format]
    return pathlib.Path(model_dir) / name


def export_run(workflow, model_dir, format, quantize="none", output=None, examples=8,
               calibration_examples=100, evaluate=True, checkpoint=None, data_dir=None,
               manual_dir=None, download=False, log=print):
    """Export a run folder's inference model and check the artifact.

    Args:
        workflow: the :class:`~kctx.training.Workflow` that wrote the run.
        model_dir: the run folder.
        format: one of :data:`kctx.export.FORMATS`.
        quantize: one of :data:`kctx.export.QUANTIZATIONS` (LiteRT only).
        output: the artifact's path (default :func:`default_artifact_path`).
        examples: inputs from the workflow's data on which the artifact is compared
            with Keras.
        calibration_examples: inputs (batch size 1) that calibrate ``int8``.
        evaluate: also score the artifact and the Keras model with the workflow's
            evaluation, when it has one for exports (``workflow.export_evaluation``).
        checkpoint: ``"latest"`` or a checkpoint path (default: the saved model), as for
            :func:`kctx.training.evaluate_run`.
        data_dir: where the data is (default: the run's).
        manual_dir: TFDS's manual download directory.
        download: prepare a missing TFDS dataset.
        log: called with each line of the report.

    Returns:
        The report written to ``<artifact>.json``: path, format, quantize, size in
        bytes, ``max_abs_difference`` and ``max_relative_difference`` (over the
        largest |Keras output|) on ``examples`` inputs, export seconds, and
        ``scores`` / ``keras_scores`` when evaluated. A run under a mixed dtype policy
        exports its float32 evaluation (:func:`kctx.export.float32_model`): the report
        adds ``float32_max_relative_difference``, the artifact against that evaluation
        (``max_relative_difference`` is against the run's own, in bfloat16 or float16).
    """
    overrides = dict(workflow.export_evaluation or {})
    run, model, source = load_run(workflow, model_dir, checkpoint, data_dir, manual_dir,
                                  download, log, **overrides)
    count = examples + (calibration_examples if quantize == "int8" else 0)
    inputs = workflow.example_inputs(run, count)
    compared = _rows(inputs, 0, examples)
    calibration = [_rows(inputs, index, index + 1) for index in range(examples, count)]
    path = pathlib.Path(output or default_artifact_path(workflow, model_dir, format, quantize))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Keras' outputs first: a loaded subclassed model (the language workflow's) has then
    # been called, which Keras' export requires.
    expected = model.predict(compared, verbose=0)
    # What is exported: the model itself, or under a mixed policy its float32 copy (made
    # once here; export_model takes a float32 model as it is).
    float32 = float32_model(model)
    float32_expected = None if float32 is model else float32.predict(compared, verbose=0)
    log(f"exporting {source} as {format}" + (f" ({quantize})" if quantize != "none" else ""))
    start = time.perf_counter()
    export_model(float32, path, format=format, quantize=quantize,
                 representative_data=calibration or None)
    seconds = time.perf_counter() - start
    artifact = load_artifact(path, format)  # takes model.predict's inputs
    got = artifact(compared)
    difference = float(np.abs(got - expected).max())
    scale = float(np.abs(expected).max()) or 1.0
    report = dict(workflow=workflow.name, source=source, path=str(path), format=format,
                  quantize=quantize, bytes=artifact_size(path), export_seconds=round(seconds, 2),
                  examples=examples, max_abs_difference=difference,
                  max_relative_difference=difference / scale)
    if quantize == "int8":
        report["float_layers"] = float_layer_names(model)
        if report["float_layers"]:
            log(f"kept in float32 (int8 would divide by zero in their iterations): "
                f"{', '.join(report['float_layers'])}")
    log(f"wrote {path} ({report['bytes'] / 1e6:.2f} MB); max |artifact - Keras| on {examples} "
        f"inputs of the {workflow.name} data: {difference:.3g} ({difference / scale:.3g} of the "
        f"largest output)")
    if float32_expected is not None:
        report["float32_max_relative_difference"] = float(
            np.abs(got - float32_expected).max() / (np.abs(float32_expected).max() or 1.0))
        policies = sorted({layer.dtype_policy.name for layer in model._flatten_layers()}
                          - {"float32"})
        log(f"the artifact computes in float32: {report['float32_max_relative_difference']:.3g} "
            f"of the largest output from the float32 evaluation of the run's "
            f"{' / '.join(policies)} model")
    if evaluate and workflow.export_evaluation is not None:
        report["keras_scores"] = workflow.scores(workflow.evaluate(run, model))
        report["scores"] = workflow.scores(workflow.evaluate(run, ArtifactModel(artifact, model)))
        for key, value in report["scores"].items():
            log(f"{key}: {value:.4f} ({format}{'' if quantize == 'none' else ' ' + quantize}), "
                f"{report['keras_scores'].get(key, float('nan')):.4f} (Keras)")
    write_json(pathlib.Path(f"{os.fspath(path).rstrip('/')}.json"), report)
    return report


def export_parser(workflow):
    parser = command_parser(
        f"python -m {workflow.name}.export",
        f"Export a `{workflow.name}.train` run's model, reload it in its runtime (TensorFlow, "
        "ONNX Runtime, the LiteRT interpreter) and compare it with Keras on inputs from the "
        "workflow's data" + (", then score it on the held-out split."
                             if workflow.export_evaluation is not None else "."))
    parser.add_argument("--model-dir", required=True, help=f"a {workflow.name}.train run folder")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--quantize", default="none", choices=QUANTIZATIONS,
                        help="LiteRT post-training quantization: dynamic-range int8 weights, or "
                             "int8 weights and activations calibrated on the training stream "
                             "(default: none)")
    parser.add_argument("--output", help="the artifact's path (default: in the run folder)")
    parser.add_argument("--checkpoint", help="'latest' or a checkpoint path (default: the saved "
                                             "model)")
    parser.add_argument("--examples", type=positive_int, default=8,
                        help="inputs on which the artifact is compared with Keras (default 8)")
    parser.add_argument("--calibration-examples", type=positive_int, default=100,
                        help="int8 calibration inputs (default 100)")
    if workflow.export_evaluation is not None:
        parser.add_argument("--no-evaluate", dest="evaluate", action="store_false",
                            help="skip scoring the artifact on the held-out split")
    add_data_arguments(parser)
    return parser


def export_main(workflow, argv=None):
    """Parse ``argv`` and export a run; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = export_parser(workflow)
    args = parser.parse_args(argv)
    if keras.backend.backend() != "tensorflow":
        # The exporters (SavedModel, tf2onnx, the LiteRT converter) and the artifact's
        # evaluation run on TensorFlow; the run's saved model (and a JAX or PyTorch run's
        # NumPy checkpoints) load on any backend.
        if argv is not None:
            parser.error("export runs on the TensorFlow backend: run it with "
                         f"KERAS_BACKEND=tensorflow. Received: KERAS_BACKEND="
                         f"{keras.backend.backend()}")
        print(f"exporting on the TensorFlow backend (the run folder loads on any backend; "
              f"this process was started with KERAS_BACKEND={keras.backend.backend()})",
              flush=True)
        os.execve(sys.executable, [sys.executable, "-m", f"{workflow.name}.export",
                                   *sys.argv[1:]], {**os.environ, "KERAS_BACKEND": "tensorflow"})
    if args.quantize != "none" and args.format != "litert":
        parser.error(f"--quantize {args.quantize} applies to --format litert")
    with user_errors_exit(parser, (ExportError,)):
        export_run(workflow, args.model_dir, args.format, args.quantize, args.output,
                   args.examples, args.calibration_examples, getattr(args, "evaluate", False),
                   args.checkpoint, args.data_dir, args.manual_dir, args.download)
    return 0
