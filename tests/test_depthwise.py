"""``kctx.ops.depthwise_conv_taps`` and ``kctx.layers.TapDepthwiseConv2D``: the depthwise
convolution of ``keras.layers.DepthwiseConv2D`` as a sum of taps, with its written-out
gradients, against the NumPy reference (on TensorFlow here; tests/backend_checks.py runs the
same comparisons on JAX and PyTorch).

Keras' own depthwise convolution on TensorFlow is compared under XLA (``keras_reference``):
TensorFlow's own kernel, which runs where oneDNN is off (by default on CPUs without AVX-512),
refuses unequal strides, and XLA's takes every case on every CPU. These tests also run with
oneDNN switched the other way (the ``tf_kernels`` mark, tests/test_onednn_off_and_on.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from kctx.layers import TapDepthwiseConv2D
from kctx.ops import depthwise_conv_taps
from kctx.testing import run_layer_test

pytestmark = pytest.mark.tf_kernels

# (kernel, strides, padding, input): odd and even kernels, strips, strides that do and do
# not divide the map, a "valid" remainder of rows no window reads, a stride past the kernel.
CASES = [((3, 3), (1, 1), "same", (2, 9, 11, 3)),
         ((3, 3), (2, 2), "same", (2, 9, 8, 3)),
         ((1, 7), (1, 1), "same", (1, 8, 13, 2)),
         ((4, 2), (2, 1), "valid", (2, 9, 7, 2)),
         ((2, 4), (2, 2), "same", (1, 7, 10, 3)),
         ((5, 5), (3, 3), "valid", (2, 12, 11, 2)),
         ((1, 3), (2, 2), "same", (1, 6, 7, 2))]


def keras_reference(function, *args):
    """``function(*args)`` (Keras' convolution) compiled by XLA, as a NumPy array."""
    return tf.function(function, jit_compile=True)(*args).numpy()


def taps_and_gradients(x, w, g, strides, padding):
    x, w = tf.constant(x), tf.constant(w[..., None])
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = depthwise_conv_taps(x, w, strides=strides, padding=padding)
        loss = tf.reduce_sum(y * g)
    d_x, d_w = tape.gradient(loss, [x, w])
    return y.numpy(), d_x.numpy(), d_w.numpy()[..., 0]


@pytest.mark.parametrize("kernel_size,strides,padding,shape", CASES)
def test_taps_and_their_gradients_are_the_depthwise_convolution(kernel_size, strides,
                                                                padding, shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype("float32")
    w = rng.normal(size=kernel_size + shape[-1:]).astype("float32")
    expected, _, _ = ref.depthwise_conv(x, w, strides, padding)
    g = rng.normal(size=expected.shape).astype("float32")
    expected_dx, expected_dw = ref.depthwise_conv_gradients(x, w, g, strides, padding)
    y, d_x, d_w = taps_and_gradients(x, w, g, strides, padding)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_x, expected_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_w, expected_dw, rtol=1e-5, atol=1e-4)
    conv = keras_reference(lambda x: keras.ops.depthwise_conv(x, w[..., None], strides,
                                                              padding), x)
    np.testing.assert_allclose(conv, expected, rtol=1e-5, atol=1e-5)  # the reference is Keras'


def test_tap_layer_meets_the_layer_standards():
    """``run_layer_test`` on ``TapDepthwiseConv2D(taps=True)``: config round trip (``taps``
    included), a fit step through the written-out gradients, XLA, .keras save / load,
    mixed bfloat16 and two replicas."""
    run_layer_test(TapDepthwiseConv2D, dict(kernel_size=(3, 3), strides=2, padding="same",
                                            taps=True), (2, 9, 9, 4),
                   expected_output_shape=(2, 5, 5, 4), expected_num_trainable_weights=2,
                   variable_spatial_dims=False)


def test_tap_layer_with_unequal_strides_meets_the_layer_standards():
    """``run_layer_test`` on the default layer with strides (1, 2), which TensorFlow's own
    depthwise kernel refuses: fit, save / load, a model built with ``None`` height and
    width, mixed bfloat16 and two replicas."""
    run_layer_test(TapDepthwiseConv2D, dict(kernel_size=(3, 3), strides=(1, 2),
                                            padding="same"), (2, 8, 9, 4),
                   expected_output_shape=(2, 8, 5, 4), expected_num_trainable_weights=2)


def test_tap_layer_has_the_weights_and_outputs_of_keras_depthwise_conv2d():
    """Same config, same weights: a ``DepthwiseConv2D``'s weights load into the taps
    layer, and both compute the same outputs (the activation included)."""
    x = np.random.default_rng(1).normal(size=(2, 8, 10, 3)).astype("float32")
    options = dict(kernel_size=(3, 5), strides=(1, 2), padding="same", activation="relu",
                   bias_initializer="random_normal")
    reference = keras.layers.DepthwiseConv2D(**options)
    layer = TapDepthwiseConv2D(taps=True, **options)
    reference.build(x.shape)
    layer.build(x.shape)
    layer.set_weights(reference.get_weights())
    np.testing.assert_allclose(layer(x), keras_reference(reference, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("taps", [None, False])
def test_tap_layer_computes_unequal_strides_on_tensorflow(taps):
    """Strides (1, 2), which TensorFlow's own depthwise kernel refuses: by default the taps
    where the map size is static, else (and with ``taps=False``) the convolution compiled by
    XLA; outputs and both gradients equal the NumPy reference's, with a static and an
    unknown map size, with the bias and activation."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 7, 10, 3)).astype("float32")
    layer = TapDepthwiseConv2D((3, 4), strides=(1, 2), padding="same", activation="relu",
                               bias_initializer="random_normal", taps=taps)
    layer.build(x.shape)
    w = keras.ops.convert_to_numpy(layer.kernel)[..., 0]
    bias = keras.ops.convert_to_numpy(layer.bias)
    conv, _, _ = ref.depthwise_conv(x, w, (1, 2), "same")
    g = rng.normal(size=conv.shape).astype("float32")
    g_masked = g * (conv + bias > 0)
    expected_dx, expected_dw = ref.depthwise_conv_gradients(x, w, g_masked, (1, 2), "same")
    assert layer._uses_taps(x) is (taps is None)

    def call_and_gradients(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * g)
        d_x, d_kernel = tape.gradient(loss, [x, layer.kernel])
        return y, d_x, d_kernel

    for spec in (tf.TensorSpec(x.shape), tf.TensorSpec((None, None, None, 3))):
        y, d_x, d_kernel = tf.function(call_and_gradients, input_signature=[spec])(x)
        np.testing.assert_allclose(y, np.maximum(conv + bias, 0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(d_x, expected_dx, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(d_kernel.numpy()[..., 0], expected_dw, rtol=1e-5, atol=1e-4)


def test_macs_count_the_taps_as_the_convolution():
    """``kctx.profile`` counts a ``TapDepthwiseConv2D`` as the convolution it computes,
    whichever form runs (kh·kw MACs an output element; the training step adds both
    gradients' as many), as for ``keras.layers.DepthwiseConv2D``; a dense strided
    convolution's for comparison (kh·kw·C_in an output element). JAX and PyTorch count the
    same (tests/backend_checks.py)."""
    from kctx.profile import profile_layer

    shape, options = (2, 8, 8, 4), dict(strides=2, padding="same", use_bias=False)
    counted = [profile_layer(layer, shape, repeats=1, warmup=0, isolate=False)
               for layer in (keras.layers.DepthwiseConv2D(3, **options),
                             TapDepthwiseConv2D(3, taps=True, **options),
                             keras.layers.Conv2D(6, 3, **options))]
    assert [(r["macs"], r["train_macs"]) for r in counted] == [
        (1152, 3456), (1152, 3456), (6912, 20736)]
    assert 1152 == 2 * 4 * 4 * 4 * 9 and 6912 == 2 * 4 * 4 * 6 * 9 * 4


def test_tap_layer_keeps_tensorflows_convolution_by_default():
    """On TensorFlow (oneDNN's depthwise kernels) the default is the backend's
    convolution for equal strides; ``taps=True`` forces the taps, ``taps=False`` the
    convolution."""
    x = np.zeros((1, 8, 8, 3), "float32")
    uses = {taps: TapDepthwiseConv2D(3, taps=taps)._uses_taps(x) for taps in (None, True, False)}
    assert uses == {None: False, True: True, False: False}
    assert not TapDepthwiseConv2D(3, strides=2)._uses_taps(x)


@pytest.mark.parametrize("kwargs,match", [
    (dict(taps=1), "`taps` must be None, True or False. Received: taps=1"),
    (dict(taps=True, depth_multiplier=2), "`taps=True` needs depth_multiplier=1"),
    (dict(taps=True, dilation_rate=2), "`taps=True` needs .* Received: .*dilation_rate=\\(2, 2\\)"),
])
def test_tap_layer_refuses_what_the_taps_do_not_compute(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TapDepthwiseConv2D(3, **kwargs)


def test_tap_layer_needs_a_static_map_size_for_the_taps():
    layer = TapDepthwiseConv2D(3, taps=True)
    layer.build((None, None, None, 2))
    graph = tf.function(layer).get_concrete_function
    with pytest.raises(ValueError, match="`taps=True` needs a static map size"):
        graph(tf.TensorSpec((None, None, None, 2)))


def test_taps_refuse_an_unknown_padding():
    with pytest.raises(ValueError, match='`padding` must be "same" or "valid". '
                                         "Received: padding='causal'"):
        depthwise_conv_taps(np.zeros((1, 4, 4, 1), "float32"), np.ones((3, 3, 1, 1), "float32"),
                            padding="causal")
