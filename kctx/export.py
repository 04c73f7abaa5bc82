"""Ship a Keras model: export it to TF SavedModel, ONNX or LiteRT and run the artifact,
or run it in process as one compiled program (:func:`inference_function`).

:func:`export_model` writes the artifact with ``model.export`` (a float32 copy of a
mixed-precision model; LiteRT post-training quantization on request), then loads it
in its own runtime: TensorFlow, ONNX Runtime or the LiteRT interpreter. Where that
runtime cannot run the model it raises :class:`ExportError` naming the layer and the
operation, and removes the artifact, so nothing is left that breaks at load time.
:func:`load_artifact` gives a callable with ``model.predict``'s inputs and output: several
inputs go in the order of ``model.inputs`` in every format (a LiteRT artifact records that
order in its flatbuffer metadata, since its signature lists them sorted by name), or as a
dict by name.

The ONNX and LiteRT runtimes are the ``export`` extra: ``pip install "kctx[export]"``
(tf2onnx, onnxruntime, ai-edge-litert). On JAX and PyTorch the artifacts are TensorFlow's,
written by a TensorFlow process from the model's ``.keras`` file (``python -m kctx.export``),
but ONNX on PyTorch, which Keras writes with ``torch.onnx`` in process, without TensorFlow
(``pip install "kctx[torch,onnx]"``).
"""

import contextlib
import json
import os
import re
import shutil
import tempfile
import warnings

import keras
import numpy as np

from kctx.validation import check_choice

__all__ = ["artifact_size", "export_model", "ExportError", "float32_model", "float_layer_names",
           "FORMATS", "inference_function", "LITERT_INPUT_NAMES", "load_artifact",
           "QUANTIZATIONS", "SUFFIXES", "TORCH_COMPILE_MODES"]

FORMATS = ("tf_saved_model", "onnx", "litert")
QUANTIZATIONS = ("none", "dynamic", "int8")
SUFFIXES = {"tf_saved_model": "", "onnx": ".onnx", "litert": ".tflite"}
# The LiteRT flatbuffer metadata entry (JSON list) that records the names of the inputs in
# the order of ``model.inputs``: the signature lists them sorted by name.
LITERT_INPUT_NAMES = "kctx_input_names"


class ExportError(RuntimeError):
    """The runtime of an export format cannot run (a layer of) the model."""


# ---------------------------------------------------------------------------
# A float32 copy of a mixed-precision model.
# ---------------------------------------------------------------------------


def _float32_config(config):
    """``config`` with every mixed dtype policy replaced by float32 (recursively)."""
    if isinstance(config, dict):
        if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and \
                str(config.get("config", {}).get("name", "")).startswith("mixed_"):
            return "float32"
        return {key: _float32_config(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_float32_config(value) for value in config]
    if isinstance(config, str) and config.startswith("mixed_"):
        return "float32"
    return config


def float32_model(model):
    """``model`` itself when every layer computes in float32, else a float32 copy.

    A model trained under ``mixed_bfloat16`` / ``mixed_float16`` keeps float32
    variables; its copy is rebuilt from the config with float32 policies and given
    the same weights, so the artifact computes in float32 (ONNX export needs it, and
    mobile runtimes run float32 or int8, not bfloat16).

    Args:
        model: a functional or Sequential ``keras.Model``.

    Returns:
        A ``keras.Model`` whose layers all compute in float32.
    """
    policies = {layer.dtype_policy.name for layer in model._flatten_layers(include_self=True)}
    if policies <= {"float32"}:
        return model
    copy = model.__class__.from_config(_float32_config(model.get_config()))
    copy.set_weights(model.get_weights())
    return copy


# ---------------------------------------------------------------------------
# Export.
# ---------------------------------------------------------------------------


def _litert_options(quantize, representative_data, input_names=None):
    import tensorflow as tf

    if quantize == "none":
        return {}
    options = {"optimizations": [tf.lite.Optimize.DEFAULT]}
    if quantize == "int8":
        if representative_data is None:
            raise ValueError("`quantize='int8'` calibrates on `representative_data` (an iterable "
                             "of model inputs, batch size 1). Received: representative_data=None")

        def dataset():
            for inputs in representative_data:
                if isinstance(inputs, dict):
                    yield {name: np.asarray(x) for name, x in inputs.items()}
                    continue
                arrays = [np.asarray(x) for x in _as_list(inputs)]
                # The calibrator feeds a list in the artifact's (sorted) input order: by name.
                yield dict(zip(input_names, arrays)) if input_names and len(arrays) > 1 \
                    else arrays

        options["representative_dataset"] = dataset
        # int8 kernels wherever LiteRT has them; float kernels for the rest.
        options["target_spec"] = {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                                    tf.lite.OpsSet.TFLITE_BUILTINS]}
    return options


def float_layer_names(model):
    """Names of the layers that full-int8 export keeps in float32 (every op in their
    scope, their sublayers' included): those whose class sets ``quantize_int8 = False``
    (the hams)."""
    return sorted(layer.name for layer in model._flatten_layers(include_self=False)
                  if not getattr(layer, "quantize_int8", True))


def _litert_int8(model, path, input_signature, options, float_layers):
    """Full-int8 LiteRT with the ops of ``float_layers`` left in float32 (TFLite's
    quantization debugger's deny-list), via a SavedModel as Keras's own LiteRT export;
    ``options`` are :func:`_litert_options`'s for int8."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    with tempfile.TemporaryDirectory() as folder:
        model.export(folder, format="tf_saved_model", input_signature=input_signature,
                     verbose=False)

        def converter():
            result = tf.lite.TFLiteConverter.from_saved_model(folder)
            result.experimental_enable_resource_variables = True
            return result

        quantizing = converter()
        quantizing.optimizations = options["optimizations"]
        quantizing.representative_dataset = options["representative_dataset"]
        quantizing.target_spec.supported_ops = options["target_spec"]["supported_ops"]
        if not float_layers:
            content = quantizing.convert()
        else:
            interpreter = Interpreter(model_content=converter().convert())
            names = [interpreter._get_tensor_details(index, 0)["name"]
                     for op in interpreter._get_ops_details() for index in op["outputs"]]
            kept = set(float_layers)
            denied = [name for name in names if not kept.isdisjoint(_scopes(name))]
            debugger = tf.lite.experimental.QuantizationDebugger(
                converter=quantizing, debug_dataset=options["representative_dataset"],
                debug_options=tf.lite.experimental.QuantizationDebugOptions(
                    denylisted_nodes=denied))
            content = debugger.get_nondebug_quantized_model()
    with open(path, "wb") as handle:
        handle.write(content)


def export_model(model, path, format="tf_saved_model", quantize="none",
                 representative_data=None, input_signature=None, float_layers=None):
    """Export ``model`` for inference and check that its runtime loads the artifact.

    Args:
        model: a ``keras.Model`` (mixed precision is exported as float32, see
            :func:`float32_model`). Dimensions that are ``None`` in its inputs
            (batch, or the height and width of a fully convolutional segmenter)
            stay dynamic in the artifact.
        path: where to write: a directory for ``tf_saved_model``, a ``.onnx`` file
            for ``onnx``, a ``.tflite`` file for ``litert``.
        format: one of :data:`FORMATS`.
        quantize: ``"none"``; for ``litert`` also ``"dynamic"`` (dynamic-range
            int8 weights) or ``"int8"`` (int8 weights and activations calibrated
            on ``representative_data``, float kernels where LiteRT has no int8 one;
            the inputs and outputs stay float32).
        representative_data: for ``quantize="int8"``: an iterable of model inputs
            (arrays of batch size 1, or lists of them for several inputs).
        input_signature: optional, passed to ``model.export``.
        float_layers: for ``quantize="int8"``, names of layers kept in float32
            (default :func:`float_layer_names`: the hams; ``[]`` quantizes all).

    Returns:
        ``path`` as a string.

    Raises:
        ExportError: the format's runtime cannot run a layer of the model; the
            message names the layer, its class and the operation.

    On the JAX and PyTorch backends the artifact is TensorFlow's, as on TensorFlow: the
    model is saved as a ``.keras`` file and exported by a TensorFlow process (which
    imports the modules of the model's layer classes and of the registered Keras objects,
    so a layer class defined in ``__main__`` cannot travel; TensorFlow must be installed).
    ONNX on PyTorch is exported in this process by Keras' ``torch.onnx`` route and needs no
    TensorFlow. ``input_signature`` applies on TensorFlow and to ONNX on PyTorch.

    Examples:
        >>> from kctx.layers import context_block
        >>> inputs = keras.Input((8, 8, 16))
        >>> model = keras.Model(inputs, context_block("ham_nmf", rank=4, seed=0)(inputs))
        >>> export_model(model, "ham.onnx", format="onnx")
        'ham.onnx'
        >>> x = np.random.default_rng(0).standard_normal((2, 8, 8, 16)).astype("float32")
        >>> onnx_outputs = load_artifact("ham.onnx", "onnx")(x)
        >>> np.allclose(onnx_outputs, model.predict(x, verbose=0), rtol=1e-4, atol=1e-4)
        True
    """
    check_choice("format", format, FORMATS)
    check_choice("quantize", quantize, QUANTIZATIONS)
    if quantize != "none" and format != "litert":
        raise ValueError(f"`quantize` applies to format='litert'. Received: quantize={quantize!r} "
                         f"with format={format!r}")
    path = os.fspath(path)
    if SUFFIXES[format] and not path.endswith(SUFFIXES[format]):
        raise ValueError(f"A {format} artifact is a {SUFFIXES[format]} file. Received: path={path!r}")
    if representative_data is not None:
        representative_data = list(representative_data)  # iterated more than once
    if not _exports_in_process(format):
        return _export_in_tensorflow(model, path, format, quantize, representative_data,
                                     input_signature, float_layers)
    model = float32_model(model)
    if input_signature is None:
        # The functional inputs, also for a model never called (Keras's ONNX export
        # otherwise refuses it); their names and None dimensions carry over.
        try:
            structure = model.input
        except (AttributeError, ValueError):  # a subclassed model: Keras infers it
            structure = None
        if structure is not None and not isinstance(structure, dict):
            input_signature = [structure]
    names = _signature_names(input_signature)
    options = {}
    if format == "litert":
        options = _litert_options(quantize, representative_data, names)
    elif format == "onnx":
        options = {"opset_version": 18}
    _remove(path)
    if format == "onnx" and keras.backend.backend() == "torch":
        _register_torch_onnx_symbolics()
    if quantize == "int8":
        _litert_int8(model, path, input_signature, options,
                     float_layer_names(model) if float_layers is None else float_layers)
    else:
        model.export(path, format=format, input_signature=input_signature, verbose=False,
                     **options)
    if format == "litert" and names is not None and len(names) > 1:
        _record_litert_input_names(path, names)
    try:
        _check_runtime(model, path, format,
                       representative_data[0] if representative_data else None)
    except ExportError:
        _remove(path)
        raise
    return path


# ---------------------------------------------------------------------------
# Export from JAX and PyTorch: in a TensorFlow process.
# ---------------------------------------------------------------------------

_TENSORFLOW_EXPORT = "--tensorflow-export"


def _exports_in_process(format):
    """Whether this backend writes ``format`` itself: TensorFlow every format (its
    converters), PyTorch ONNX (``torch.onnx``)."""
    backend = keras.backend.backend()
    return backend == "tensorflow" or (backend == "torch" and format == "onnx")


def _register_torch_onnx_symbolics():
    """What PyTorch's TorchScript ONNX exporter (Keras' route for inputs of dynamic
    sizes) lacks for Keras' PyTorch ops: ``aten::ravel``, which ``keras.ops.take`` applies
    to its indices (PSF-Attn's chord gathers), as a Reshape to (-1)."""
    import torch
    from torch.onnx import register_custom_op_symbolic

    def ravel(graph, x):
        return graph.op("Reshape", x, graph.op("Constant",
                                               value_t=torch.tensor([-1], dtype=torch.int64)))

    register_custom_op_symbolic("aten::ravel", ravel, 9)


def _modules_to_import(model):
    """The modules a TensorFlow process imports before loading ``model``'s ``.keras``
    file: those of its layer classes and of every registered Keras object (kctx's, a
    workflow's, the user's)."""
    classes = [type(layer) for layer in model._flatten_layers(include_self=True)]
    local = sorted({cls.__qualname__ for cls in classes if cls.__module__ == "__main__"})
    if local:
        raise ValueError(f"On the {keras.backend.backend()} backend, export_model exports from "
                         f"a TensorFlow process, which cannot import layer classes defined in "
                         f"__main__: define {local} in a module. Received: a model of them")
    objects = [*classes, *keras.saving.get_custom_objects().values()]
    modules = {getattr(obj, "__module__", None) for obj in objects}
    return sorted(name for name in modules if name and name != "__main__"
                  and name.split(".")[0] != "keras")


def _export_in_tensorflow(model, path, format, quantize, representative_data,
                          input_signature, float_layers):
    """:func:`export_model` on JAX and PyTorch: the model saved as a ``.keras`` file and
    exported, then checked in its runtime, by ``python -m kctx.export`` on TensorFlow."""
    import importlib.util
    import subprocess
    import sys

    backend = keras.backend.backend()
    if input_signature is not None:
        raise ValueError(f"`input_signature` applies on the TensorFlow backend (and to ONNX on "
                         f"PyTorch): on {backend} the model's own inputs are exported. "
                         f"Received: input_signature={input_signature!r}")
    if importlib.util.find_spec("tensorflow") is None:
        raise ModuleNotFoundError(
            f"export_model(format={format!r}) on the {backend} backend runs TensorFlow's "
            f"converters in a TensorFlow process, and TensorFlow is not installed: "
            f"pip install \"kctx[export]\""
            + (" (ONNX exports on PyTorch without it)" if backend == "torch" else ""))
    path = os.path.abspath(path)
    with tempfile.TemporaryDirectory(prefix="kctx-export-") as folder:
        request = {"model": os.path.join(folder, "model.keras"), "path": path,
                   "format": format, "quantize": quantize, "float_layers": float_layers,
                   "modules": _modules_to_import(model), "representative": None,
                   "result": os.path.join(folder, "result.json")}
        model.save(request["model"])
        if representative_data is not None:
            request["representative"] = os.path.join(folder, "representative.npz")
            lists = [isinstance(item, (list, tuple)) for item in representative_data]
            arrays = {f"{index}_{part}": np.asarray(x)
                      for index, item in enumerate(representative_data)
                      for part, x in enumerate(item if isinstance(item, (list, tuple))
                                               else [item])}
            np.savez(request["representative"], __lists__=np.asarray(lists, bool), **arrays)
        with open(os.path.join(folder, "request.json"), "w") as handle:
            json.dump(request, handle)
        # The exporting process sees this one's modules (a workflow's, the user's) and no
        # GPU: converting needs none, and this process may hold it.
        environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": "",
                       "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                       "PYTHONPATH": os.pathsep.join(
                           [entry or os.getcwd() for entry in sys.path]
                           + [os.environ.get("PYTHONPATH", "")])}
        completed = subprocess.run(
            [sys.executable, "-m", "kctx.export", _TENSORFLOW_EXPORT,
             os.path.join(folder, "request.json")],
            env=environment, capture_output=True, text=True)
        result = None
        if os.path.exists(request["result"]):
            with open(request["result"]) as handle:
                result = json.load(handle)
    if result is None or completed.returncode:
        raise RuntimeError(f"The TensorFlow process exporting the model failed (exit status "
                           f"{completed.returncode}):\n{completed.stderr[-5000:]}")
    if "error" in result:
        raise (ExportError if result["error"] == "ExportError" else RuntimeError)(
            result["message"])
    return result["path"]


def _tensorflow_export_process(request_file):
    """The exporting process of :func:`_export_in_tensorflow` (TensorFlow backend)."""
    import importlib

    with open(request_file) as handle:
        request = json.load(handle)
    for module in request["modules"]:
        importlib.import_module(module)
    # The file is the one the exporting call has just written from its own model, in its
    # private temporary folder: a Lambda layer's function loads as it was saved.
    model = keras.saving.load_model(request["model"], compile=False, safe_mode=False)
    representative = None
    if request["representative"] is not None:
        with np.load(request["representative"]) as stored:
            lists = stored["__lists__"]
            representative = [
                [stored[f"{index}_{part}"] for part in range(sum(
                    key.startswith(f"{index}_") for key in stored.files))]
                if is_list else stored[f"{index}_0"] for index, is_list in enumerate(lists)]
    try:
        result = {"path": export_model(model, request["path"], format=request["format"],
                                       quantize=request["quantize"],
                                       representative_data=representative,
                                       float_layers=request["float_layers"])}
    except ExportError as error:
        result = {"error": "ExportError", "message": str(error)}
    with open(request["result"], "w") as handle:
        json.dump(result, handle)


def _signature_names(input_signature):
    """The names of ``input_signature``'s inputs in its order (``model.inputs``'), or
    ``None`` where it is not a (nested) list of named tensors."""
    if not isinstance(input_signature, (list, tuple)):
        return None

    def flat(structure):
        if isinstance(structure, (list, tuple)):
            return [leaf for item in structure for leaf in flat(item)]
        return [structure]

    names = [getattr(spec, "name", None) for spec in flat(input_signature)]
    if not all(isinstance(name, str) and name for name in names) or \
            len(set(names)) != len(names):
        return None
    return names


def _litert_metadata(content, name):
    """The bytes of metadata entry ``name`` of the LiteRT flatbuffer ``content``, or
    ``None``."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(content, 0)
    for index in range(model.MetadataLength()):
        entry = model.Metadata(index)
        if entry.Name() is not None and entry.Name().decode() == name:
            buffer = model.Buffers(entry.Buffer())
            if buffer.Offset() > 1:  # a model past 2 GB keeps its buffers after the flatbuffer
                return bytes(content[buffer.Offset():buffer.Offset() + buffer.Size()])
            return b"" if buffer.DataIsNone() else buffer.DataAsNumpy().tobytes()
    return None


def _record_litert_input_names(path, names):
    """Write ``names`` (the inputs in the order of ``model.inputs``) into the LiteRT
    artifact's metadata as :data:`LITERT_INPUT_NAMES`, where they name its signature's
    inputs (else warn: it then takes them sorted by name)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(path)
    signature = [entry.name.decode() for entry in model.signatureDefs[0].inputs] \
        if model.signatureDefs else []
    if sorted(signature) != sorted(names):
        warnings.warn(f"The LiteRT artifact's inputs are {signature}, not the model's {names}: "
                      f"load_artifact takes them in the signature's (sorted) order unless "
                      f"given `input_names`.", stacklevel=3)
        return
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(json.dumps(names).encode(), dtype=np.uint8)
    entry = schema.MetadataT()
    entry.name = LITERT_INPUT_NAMES
    entry.buffer = len(model.buffers)
    model.buffers.append(buffer)
    model.metadata = [item for item in model.metadata or []
                      if item.name.decode() != LITERT_INPUT_NAMES] + [entry]
    flatbuffer_utils.write_model(model, path)


def _remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def _scopes(op_name):
    """The layer names an op's name may carry, outermost first: each scope of a
    (possibly fused, ``;``-joined) TF node name, after itself without the ``_1`` suffix
    TF adds to repeated scopes."""
    names = []
    for scope in re.split(r"[/;:]", op_name):
        names += [re.sub(r"_\d+$", "", scope), scope]
    return names


def _layer_of(model, op_name):
    """The innermost layer of ``model`` whose name is a scope of ``op_name``."""
    layers = {layer.name: layer for layer in model._flatten_layers(include_self=False)}
    found = [layers[name] for name in _scopes(op_name) if name in layers]
    return found[-1] if found else None


def _unsupported(model, format, op_name, op_type, detail=""):
    layer = _layer_of(model, op_name)
    where = (f"layer {layer.name!r} ({type(layer).__name__})" if layer is not None
             else f"the model {model.name!r}")
    runtime = {"onnx": "ONNX Runtime", "litert": "the LiteRT interpreter"}[format]
    return ExportError(
        f"{runtime} cannot run {where}: its operation {op_type} (node {op_name!r}) has no "
        f"{format} kernel, so no {format} artifact was written.{detail}")


def _check_runtime(model, path, format, sample=None):
    """Load the artifact in its runtime (and run it on ``sample``, when given)."""
    if format == "litert":
        from tensorflow.lite.tools import flatbuffer_utils

        tflite = flatbuffer_utils.read_model(path)
        graph = tflite.subgraphs[0]
        for operator in graph.operators:
            code = tflite.operatorCodes[operator.opcodeIndex].customCode
            if code and code.decode().startswith("Flex"):
                tensor = graph.tensors[operator.outputs[0]].name.decode()
                raise _unsupported(model, format, tensor, code.decode()[len("Flex"):],
                                   " (It would need the select-TF-ops delegate.)")
    artifact = None
    try:
        artifact = load_artifact(path, format)
        if sample is not None:
            artifact(sample)
    except ExportError:
        raise
    except Exception as error:  # the runtime's own load or run error
        message = str(error)
        node = re.search(r'Node,? \("([^"]*)", (\w+)', message)
        if node:
            raise _unsupported(model, format, node.group(1), node.group(2)) from error
        node = re.search(r"Node number (\d+) \((\w+)\) failed to (\w+)", message)
        if node and artifact is not None:
            interpreter = artifact.interpreter
            op = interpreter._get_ops_details()[int(node.group(1))]
            name = interpreter._get_tensor_details(op["outputs"][0], 0)["name"]
            layer = _layer_of(model, name)
            where = (f"layer {layer.name!r} ({type(layer).__name__})" if layer is not None
                     else f"the model {model.name!r}")
            raise ExportError(
                f"The {format} artifact fails to {node.group(3)} {where}: its operation "
                f"{node.group(2)} (node {name!r}): {message.splitlines()[0]}") from error
        raise ExportError(f"The {format} runtime cannot load {path!r}: {message}") from error


# ---------------------------------------------------------------------------
# Running an artifact.
# ---------------------------------------------------------------------------


def _as_list(inputs):
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


def _single(outputs):
    outputs = [np.asarray(out) for out in outputs]
    return outputs[0] if len(outputs) == 1 else outputs


def _check_input_names(input_names, names):
    if input_names is not None and (names is None or sorted(input_names) != sorted(names)):
        raise ValueError(f"`input_names` must name the artifact's inputs {names}. "
                         f"Received: input_names={input_names!r}")
    return list(input_names) if input_names is not None else None


def _by_name(inputs, names, input_names=None):
    """``{name: array}`` of ``inputs``: a dict by name, or an array or list of arrays in
    the order of ``input_names`` (default ``names``: the artifact's, ``model.inputs``')."""
    if isinstance(inputs, dict):
        given, arrays = list(inputs), list(inputs.values())
    else:
        given, arrays = input_names or names, _as_list(inputs)
    if len(arrays) != len(names) or sorted(given) != sorted(names):
        received = sorted(inputs) if isinstance(inputs, dict) else f"{len(arrays)} arrays"
        raise ValueError(f"The artifact takes {len(names)} inputs {names} (a list in that "
                         f"order, or a dict by name). Received: {received}")
    return {name: np.asarray(x) for name, x in zip(given, arrays)}


class _SavedModel:
    def __init__(self, path, input_names):
        import tensorflow as tf

        self.loaded = tf.saved_model.load(path)  # keeps the variables alive
        # ``serve`` takes the inputs as ``model.inputs`` lists them (Keras's export).
        try:
            args = self.loaded.serve.concrete_functions[0].structured_input_signature[0]
        except (AttributeError, IndexError):
            args = ()
        self.structure = args[0] if len(args) == 1 else None
        specs = (self.structure if isinstance(self.structure, (list, tuple)) else
                 [self.structure] if isinstance(self.structure, tf.TensorSpec) else None)
        self.names = _signature_names(specs) if specs is not None and \
            all(isinstance(spec, tf.TensorSpec) for spec in specs) else None
        self.input_names = _check_input_names(input_names, self.names)

    def __call__(self, inputs):
        if self.names is not None:
            feed = _by_name(inputs, self.names, self.input_names)
            arrays = [feed[name] for name in self.names]
            inputs = arrays if isinstance(self.structure, (list, tuple)) else arrays[0]
        outputs = self.loaded.serve(list(inputs) if isinstance(inputs, tuple) else inputs)
        return _single([out.numpy() for out in _as_list(outputs)])


class _OnnxSession:
    def __init__(self, path, num_threads, input_names):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        if num_threads:
            options.intra_op_num_threads = num_threads
        self.session = onnxruntime.InferenceSession(path, options,
                                                    providers=["CPUExecutionProvider"])
        # The graph's inputs in the order of ``model.inputs`` (tf2onnx keeps it).
        self.names = [node.name for node in self.session.get_inputs()]
        self.input_names = _check_input_names(input_names, self.names)

    def __call__(self, inputs):
        return _single(self.session.run(None, _by_name(inputs, self.names, self.input_names)))


class _LiteRTInterpreter:
    def __init__(self, path, num_threads, input_names):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=path, num_threads=num_threads)
        self.interpreter.allocate_tensors()  # fails here when an operation cannot run
        self.runner = self.interpreter.get_signature_runner()
        # The signature lists the inputs sorted by name; export_model records the order
        # of ``model.inputs`` in the metadata.
        names = sorted(self.runner.get_input_details())
        with open(path, "rb") as handle:
            recorded = _litert_metadata(handle.read(), LITERT_INPUT_NAMES)
        if recorded is not None:
            recorded = json.loads(recorded.decode())
            if sorted(recorded) == names:
                names = recorded
        self.names = names
        self.input_names = _check_input_names(input_names, self.names)

    def __call__(self, inputs):
        outputs = self.runner(**_by_name(inputs, self.names, self.input_names))
        return _single([outputs[name] for name in sorted(outputs)])


def load_artifact(path, format, num_threads=None, input_names=None):
    """Load an exported artifact in its runtime.

    Several inputs go in the order of ``model.inputs``, as to ``model.predict``, in every
    format: a SavedModel's ``serve`` and an ONNX graph keep that order; a LiteRT
    signature lists them sorted by name, and :func:`export_model` records the model's
    order in the flatbuffer's metadata (entry :data:`LITERT_INPUT_NAMES`), so the
    ``.tflite`` file travels alone. A LiteRT artifact without it (``model.export``'s own)
    takes them sorted by name.

    Args:
        path: the artifact written by :func:`export_model` (or ``model.export``).
        format: one of :data:`FORMATS`.
        num_threads: CPU threads of ONNX Runtime / LiteRT (``None``: their default).
        input_names: optional, for a model of several inputs: their names in the order
            in which the callable takes them, overriding the model's order (e.g. for a
            LiteRT artifact without the recorded order).

    Returns:
        ``fn(inputs) -> outputs`` with the inputs of ``model.predict`` (an array, a
        list of arrays in the order of ``model.inputs``, or a dict of arrays by input
        name) and a NumPy output. Its ``names`` lists the artifact's input names in
        the order of ``model.inputs`` (``None`` for a SavedModel whose ``serve`` does
        not take a flat list of named tensors: it gets ``inputs`` as they are).
    """
    check_choice("format", format, FORMATS)
    path = os.fspath(path)
    if format == "tf_saved_model":
        return _SavedModel(path, input_names)
    if format == "onnx":
        return _OnnxSession(path, num_threads, input_names)
    return _LiteRTInterpreter(path, num_threads, input_names)


def artifact_size(path):
    """Bytes on disk of an artifact (a SavedModel directory summed over its files)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(root, name))
                   for root, _, names in os.walk(path) for name in names)
    return os.path.getsize(path)



# ---------------------------------------------------------------------------
# In process: a compiled inference function.
# ---------------------------------------------------------------------------

TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune",
                       "max-autotune-no-cudagraphs")


def inference_function(model, compile=True, mode=None):
    """``model(inputs, training=False)`` as one program of the backend, made for each input
    shape on its first call: what a latency-bound caller (batch 1, a server) runs instead of
    Keras' layer-by-layer call or ``predict``.

    - **JAX:** ``jax.jit`` of ``model.stateless_call`` with the weights as **constants** of
      the program: XLA folds what it computes from the weights alone (BatchNorm's
      ``rsqrt(var + ε)``, the filters' layouts) at compile time, and a call dispatches the
      inputs alone (SegNeXt-T's 545 weight arrays as arguments: 223 µs of host time a call
      on 2 AMD EPYC cores, see :func:`kctx.bench.segnext_gpu.dispatch_us`). The weights are
      those of this call; make the function again after they change.
    - **PyTorch:** ``torch.export.export`` of the call (the graph of ATen operations, run
      without Keras' Python code around each layer), with what it computes from the
      weights alone (the filters' channels-last copies, batch norm's ``rsqrt(var + ε)``)
      computed once and kept as its constants, as on JAX: make the function again after
      the weights change. Then ``torch.compile`` (Inductor's fused kernels;
      ``mode="reduce-overhead"`` also replays them as CUDA graphs on a GPU); with
      ``compile=False``, the graph as it is, without the export's checks of each tensor's
      metadata.
    - **TensorFlow:** ``tf.function`` with ``jit_compile=compile``; it reads the model's
      variables.

    Measured for SegNeXt-T at 512×512, batch 1, on 2 AMD EPYC cores (``bash
    results/segnext_torch_cpu/run.sh``, docs/shipping.md): on PyTorch 2.13, Keras' eager
    call 344 ms, the exported program 264 ms, compiled 231 ms (its first call: 20–90 s of
    compiling); the official mmseg model 444 ms in the same run.

    Args:
        model: a built ``keras.Model`` (or layer).
        compile: ``True``: compiled to fused kernels (XLA on JAX and TensorFlow, Inductor
            on PyTorch: it needs a C++ compiler on the CPU, Triton on a GPU). ``False``: the
            captured graph runs operation by operation (TensorFlow's graph, PyTorch's
            exported program); JAX has no such form and refuses it.
        mode: PyTorch only: ``torch.compile``'s mode, one of :data:`TORCH_COMPILE_MODES`
            (``None``: its default).

    Returns:
        A function of the model's inputs (arrays or tensors, in the structure the model
        takes) returning the model's outputs as the backend's tensors. Its ``programs``
        attribute maps each input signature (shapes and dtypes) to the program made for it
        (JAX: the compiled executable, PyTorch: the exported module, compiled by
        ``torch.compile`` with ``compile=True``, TensorFlow: the ``tf.function``).

    Examples:
        >>> from kctx.layers import context_block
        >>> inputs = keras.Input((8, 8, 16))
        >>> model = keras.Model(inputs, context_block("ham_nmf", rank=4, seed=0)(inputs))
        >>> x = np.random.default_rng(0).standard_normal((2, 8, 8, 16)).astype("float32")
        >>> infer = inference_function(model)
        >>> expected = keras.ops.convert_to_numpy(model(x, training=False))
        >>> np.allclose(keras.ops.convert_to_numpy(infer(x)), expected, rtol=1e-4, atol=1e-4)
        True
        >>> len(infer.programs)  # one input shape so far
        1
    """
    backend = keras.backend.backend()
    if not isinstance(compile, bool):
        raise ValueError(f"`compile` must be True or False. Received: compile={compile!r}")
    if backend == "jax" and not compile:
        raise ValueError("On JAX the inference function is an XLA program: compile=False "
                         "applies to TensorFlow and PyTorch. Received: compile=False")
    if mode is not None:
        if backend != "torch":
            raise ValueError(f"`mode` is torch.compile's (PyTorch backend). Received: "
                             f"mode={mode!r} on KERAS_BACKEND={backend!r}")
        if not compile:
            raise ValueError(f"`mode` needs compile=True. Received: mode={mode!r}, "
                             f"compile=False")
        check_choice("mode", mode, TORCH_COMPILE_MODES)
    if not model.built:
        raise ValueError(f"The model must be built (called once, or a functional model). "
                         f"Received: model={model.name!r}, not built")
    make = {"jax": _jax_program, "torch": _torch_program}.get(backend, _tensorflow_program)
    weights = None
    if backend == "jax":  # the values now: the program's constants
        weights = ([v.value for v in model.trainable_variables],
                   [v.value for v in model.non_trainable_variables])
    if backend == "torch":
        import torch

        context = torch.no_grad
    else:
        context = contextlib.nullcontext
    programs = {}

    def infer(inputs):
        inputs = keras.tree.map_structure(keras.ops.convert_to_tensor, inputs)
        signature = tuple((tuple(x.shape), keras.backend.standardize_dtype(x.dtype))
                          for x in keras.tree.flatten(inputs))
        with context():
            program = programs.get(signature)
            if program is None:
                program = programs[signature] = make(model, inputs, compile, mode, weights)
            return program(inputs)

    infer.programs = programs
    return infer


def _jax_program(model, inputs, compile, mode, weights):
    import jax

    def forward(inputs):
        return model.stateless_call(weights[0], weights[1], inputs, training=False)[0]

    return jax.jit(forward).lower(inputs).compile()


def _torch_exported(model, inputs):
    """``model(inputs, training=False)`` as ``torch.export``'s module (the ATen graph)."""
    import torch

    class Inference(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, inputs):
            return self.model(inputs, training=False)

    return torch.export.export(Inference(), (inputs,), strict=False).module()


def _torch_program(model, inputs, compile, mode, weights):
    import torch

    program = _torch_exported(model, inputs)
    if not compile:
        _drop_metadata_checks(program)
    _fold_weights(program)
    return torch.compile(program, mode=mode) if compile else program


def _drop_metadata_checks(program):
    """Remove an exported graph's checks of its tensors' metadata (in place; returns how
    many were removed).

    ``torch.export`` checks the dtype, device and layout of intermediate tensors as it
    traced them (``aten._assert_tensor_metadata``: 1,647 calls in SegNeXt-T's graph), all
    on the host, at every call. ``inference_function`` makes one program per input
    signature, so the checks cannot fail there; without them SegNeXt-T's exported program
    took 26.8 against 34.8 ms a call at 64×64 on 2 CPU cores
    (``tools/exported_rewrites_cpu.py``), host time that a GPU call pays too. Inductor's
    program has none.
    """
    import torch

    check = torch.ops.aten._assert_tensor_metadata.default
    removed = 0
    for node in list(program.graph.nodes):
        if node.op == "call_function" and node.target is check:
            program.graph.erase_node(node)
            removed += 1
    program.graph.lint()
    program.recompile()
    return removed


def _fold_weights(program):
    """Compute once what an exported graph computes from its weights alone, and keep the
    results as the graph's constants (in place; returns how many values were folded).

    On PyTorch, Keras redoes per call what depends on the weights alone: each convolution
    copies its filter into channels-last memory, batch norm takes ``rsqrt(var + ε)·γ``,
    a mixed-precision policy casts every weight. For SegNeXt-T that is 274 of the exported
    graph's 1,067 kernels (:func:`kctx.bench.standalone.torch_census`). The same operations
    run once here, so the outputs stay bit for bit the same; the weights become a snapshot,
    as on JAX. Random draws are not folded. SegNeXt-T at batch 1 on 2 CPU cores
    (``KERAS_BACKEND=torch python tools/exported_rewrites_cpu.py [--size 64 --repeats 20]``):
    the exported program 50.7 → 41.9 ms at 64×64 and 280.9 → 281.3 ms at 512×512; compiled
    by ``torch.compile``, 421 → 394 kernels and 22.9 → 13.2 ms at 64×64, 536.4 → 167.4 ms
    at 512×512 (Inductor's program from the unfolded graph is slow since Keras' convolution
    copies nothing: :mod:`kctx._keras_fixes`).
    """
    import torch
    from torch.fx.node import map_arg

    weights_alone = set()
    for node in program.graph.nodes:
        if node.op == "get_attr":
            weights_alone.add(node)
        elif (node.op == "call_function"
                and all(n in weights_alone for n in node.all_input_nodes)
                and torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())
                and node.users):
            weights_alone.add(node)
    frontier = [node for node in program.graph.nodes  # in the graph's order
                if node in weights_alone and node.op == "call_function"
                and any(user not in weights_alone for user in node.users)]
    interpreter = torch.fx.Interpreter(program)
    values = {}

    def value(node):
        if node not in values:
            if node.op == "get_attr":
                values[node] = interpreter.fetch_attr(node.target)
            else:
                args, kwargs = map_arg((node.args, node.kwargs), value)
                values[node] = node.target(*args, **kwargs)
        return values[node]

    folded = 0
    for node in frontier:
        if not isinstance(value(node), torch.Tensor):  # a size, say: left to the call
            continue
        name = f"_kctx_folded_{folded}"
        program.register_buffer(name, value(node).detach(), persistent=False)
        with program.graph.inserting_before(node):
            constant = program.graph.get_attr(name)
        node.replace_all_uses_with(constant)
        folded += 1
    for node in reversed(program.graph.nodes):  # in-place ones too (``rsqrt_``): run once
        if node in weights_alone and node.op == "call_function" and not node.users:
            program.graph.erase_node(node)
    program.graph.eliminate_dead_code()
    program.graph.lint()
    program.recompile()
    return folded


def _tensorflow_program(model, inputs, compile, mode, weights):
    import tensorflow as tf

    return tf.function(lambda inputs: model(inputs, training=False), jit_compile=compile,
                       reduce_retracing=False)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == _TENSORFLOW_EXPORT:
        _tensorflow_export_process(sys.argv[2])
    else:
        sys.exit(f"usage: python -m kctx.export {_TENSORFLOW_EXPORT} REQUEST.json "
                 f"(export_model's TensorFlow process)")
