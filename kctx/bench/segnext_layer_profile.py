"""Where SegNeXt's time goes in Keras-TF: the milliseconds of each layer kind.

:data:`LAYER_KINDS` (depthwise convs by kernel, 1×1 convs, norms, GELU, the
Hamburger...) are the names ``tools/segnext_official_latency.py`` gives the official
model's modules (both take them from :mod:`kctx.bench.standalone`), so the two profiles
line up. :func:`keras_layer_profile` reads TensorFlow's profiler trace of
``predict_on_batch`` and gives each op to the innermost layer whose name scope holds it.
"""

import glob
import os
import re
import tempfile
import time

import keras

from kctx.bench.segnext_measure import build_model, limit_tensorflow_threads, random_image
from kctx.bench.standalone import (
    CONV_1X1,
    CONV_3X3,
    ELEMENTWISE,
    HAMBURGER,
    HEAD_CONV,
    HEAD_NORM,
    HEAD_RESIZE,
    LAYOUT,
    OVERHEAD,
    UPSAMPLE,
    depthwise_kind,
)
from kctx.convert.porting import module_path
from kctx.layers.hamburger import Hamburger
from kctx.layers.layer_scale import LayerScale
from kctx.layers.resize import ResizeToMatch
from kctx.models.segnext import PadToMultiple, UpsampleLogits

LAYER_KINDS = (
    *(depthwise_kind(*k) for k in ((5, 5), (1, 7), (7, 1), (1, 11), (11, 1), (1, 21), (21, 1),
                                   (3, 3))),
    CONV_1X1, CONV_3X3, "BatchNorm", "LayerNorm", "GELU", ELEMENTWISE, LAYOUT, HEAD_RESIZE,
    HEAD_CONV, HEAD_NORM, HAMBURGER, UPSAMPLE, "other", OVERHEAD)


def keras_layer_kind(layer):
    """The :data:`LAYER_KINDS` entry of a layer of :func:`kctx.models.segnext`."""
    head = module_path(layer.name).startswith("decode_head.")
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        return depthwise_kind(*layer.kernel_size)
    if isinstance(layer, keras.layers.Conv2D):
        return HEAD_CONV if head else CONV_1X1 if tuple(layer.kernel_size) == (1, 1) \
            else CONV_3X3
    if isinstance(layer, keras.layers.ZeroPadding2D):
        return CONV_3X3
    if isinstance(layer, Hamburger):
        return HAMBURGER
    if isinstance(layer, (keras.layers.GroupNormalization, keras.layers.ReLU)) and head:
        return HEAD_NORM
    if isinstance(layer, keras.layers.BatchNormalization):
        return "BatchNorm"
    if isinstance(layer, keras.layers.LayerNormalization):
        return "LayerNorm"
    if isinstance(layer, keras.layers.Activation):
        return "GELU"
    if isinstance(layer, (LayerScale, keras.layers.Add, keras.layers.Multiply,
                          keras.layers.Dropout)):
        return ELEMENTWISE
    if isinstance(layer, (ResizeToMatch, keras.layers.Concatenate)):
        return HEAD_RESIZE
    if isinstance(layer, (UpsampleLogits, PadToMultiple, keras.layers.Rescaling)):
        return UPSAMPLE
    return "other"


def _op_events(logdir):
    """(node name, op type, duration ms) of every TensorFlow op in a profiler trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    events = []
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            metadata = plane.event_metadata
            for line in plane.lines:
                if not line.name.startswith("tf_Compute"):
                    continue
                for event in line.events:
                    name = metadata[event.metadata_id].name
                    if "/" in name and ":" in name and "::" not in name:
                        node, _, op_type = name.rpartition(":")
                        events.append((node, op_type, event.duration_ps / 1e9))
    return events


def keras_layer_profile(variant, size=512, num_classes=150, threads=2, calls=3, warmup=2):
    """Milliseconds per call of each :data:`LAYER_KINDS` entry in ``predict_on_batch``,
    from TensorFlow's profiler (every op event of ``calls`` calls, each op attributed to
    the innermost layer whose name scope holds it), and per op type."""
    import tensorflow as tf

    limit_tensorflow_threads(threads)
    model = build_model(variant, size, num_classes)
    model.compile()
    x = random_image(size)
    for _ in range(warmup + 1):
        model.predict_on_batch(x)
    kinds, models = {}, [model]
    while models:  # the layers of the model and of its nested models, not their sublayers
        for layer in models.pop().layers:
            if isinstance(layer, keras.Model):
                models.append(layer)
            else:
                kinds.setdefault(layer.name, keras_layer_kind(layer))
    with tempfile.TemporaryDirectory(prefix="kctx-segnext-trace-") as logdir:
        tf.profiler.experimental.start(
            logdir, options=tf.profiler.experimental.ProfilerOptions(host_tracer_level=2))
        start = time.perf_counter()
        for _ in range(calls):
            model.predict_on_batch(x)
        call_ms = (time.perf_counter() - start) * 1e3 / calls
        tf.profiler.experimental.stop()
        events = _op_events(logdir)
    by_kind, by_op = {}, {}
    for node, op_type, ms in events:
        kind = "other"
        for scope in reversed(node.split("/")[:-1]):
            name = re.sub(r"_\d+$", "", scope)  # Keras appends _<call count> to a scope
            if name in kinds:
                kind = kinds[name]
                break
        by_kind[kind] = by_kind.get(kind, 0.0) + ms / calls
        by_op[op_type] = by_op.get(op_type, 0.0) + ms / calls
    ops_ms = sum(by_kind.values())
    by_kind[OVERHEAD] = max(0.0, call_ms - ops_ms)
    return {"call_ms": round(call_ms, 2), "ops_ms": round(ops_ms, 2),
            "layer_ms": {k: round(v, 3) for k, v in by_kind.items()},
            "op_type_ms": {k: round(v, 3) for k, v in sorted(by_op.items(),
                                                             key=lambda kv: -kv[1])},
            "threads": threads, "calls": calls}
