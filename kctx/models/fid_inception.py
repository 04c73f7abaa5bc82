"""The FID Inception network: TensorFlow's Inception graph of 2015-12-05, in Keras.

Every published FID, Inception Score and KID comes from one network: the Inception
graph TensorFlow released on 2015-12-05 (``classify_image_graph_def.pb``), whose pool3
features (2048) give FID and KID and whose 1008-way classifier gives the Inception
Score. It is *not* torchvision's or Keras' Inception-v3: pytorch-fid and torch-fidelity,
which ship it as PyTorch state dicts with torchvision's module names, patch four blocks
to compute what the graph computes:

* ``Mixed_5b``–``Mixed_5d``, ``Mixed_6b``–``Mixed_6e``, ``Mixed_7b``: the pooling branch
  averages over a 3×3 window *excluding* the padding (TensorFlow's ``SAME`` average
  pool; torchvision counts the zeros);
* ``Mixed_7c``: the pooling branch is a 3×3 *max* pool (the graph's, an oddity of this
  network), not an average;
* every convolution is a bias-free convolution, batch normalisation with ε = 0.001 and a
  ReLU (``BasicConv2d``); the classifier ``fc`` has 1008 outputs.

:func:`fid_inception_v3` builds it channels-last, on every Keras backend, with the
PyTorch module paths as layer names (``Mixed_5b.branch1x1.conv`` → layer
``Mixed_5b_branch1x1_conv``), so that :mod:`kctx.convert.fid_inception` fills it from
either state dict. Its input is the 299×299 image already resized and scaled to the
graph's range ((x − 128)/128 for 8-bit levels x; :func:`kctx.ops.fid_inception_input`).

Reference:
    Szegedy et al., "Rethinking the Inception Architecture for Computer Vision",
    CVPR 2016; Heusel et al., "GANs Trained by a Two Time-Scale Update Rule Converge to
    a Local Nash Equilibrium", NeurIPS 2017 (FID, with this graph).
"""

import functools

import keras
import numpy as np
from keras import ops

FID_INCEPTION_CLASSES = 1008
FID_INCEPTION_FEATURES = 2048
FID_INCEPTION_SIZE = (299, 299)
BATCH_NORM_EPSILON = 1e-3


@keras.saving.register_keras_serializable(package="kctx")
class InceptionLogits(keras.layers.Layer):
    """The graph's classifier: logits with and without the bias from one kernel.

    The Inception Score of the original code (and torch-fidelity's
    ``logits_unbiased``) uses pool3 · W without the bias b; the graph's softmax uses
    pool3 · W + b. Both come from the same weights (``fc.weight``, ``fc.bias``).

    Args:
        units: the number of classes (1008 for the FID Inception).

    Call arguments:
        features: (B, D) pool3 features.

    Returns:
        ``(logits_unbiased, logits)``, each (B, units).

    Example:
        >>> layer = InceptionLogits(4)
        >>> unbiased, biased = layer(np.ones((2, 3), "float32"))
        >>> tuple(unbiased.shape), tuple(biased.shape)
        ((2, 4), (2, 4))
    """

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units),
                                      initializer="glorot_uniform", name="kernel")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def call(self, features):
        unbiased = ops.matmul(features, ops.cast(self.kernel, features.dtype))
        return unbiased, unbiased + ops.cast(self.bias, features.dtype)

    def compute_output_shape(self, input_shape):
        shape = (*input_shape[:-1], self.units)
        return shape, shape

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _basic_conv(x, name, filters, kernel_size, strides=1, padding="valid", folded=False):
    """PyTorch's ``BasicConv2d``: conv (no bias) → BN (ε = 0.001) → ReLU; ``folded``: the
    same as a conv with bias → ReLU (the BN folded into it, for inference). ``"same"``
    is only used with stride 1 and odd kernels, where it pads symmetrically like
    PyTorch's explicit padding."""
    x = keras.layers.Conv2D(filters, kernel_size, strides=strides, padding=padding,
                            use_bias=folded, name=f"{name}_conv")(x)
    if not folded:
        x = keras.layers.BatchNormalization(epsilon=BATCH_NORM_EPSILON, name=f"{name}_bn")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x)


def _average_pool_excluding_padding(x, name):
    # TensorFlow's SAME average pool, and Keras' on every backend, divides by the
    # number of real pixels in the window (torch's count_include_pad=False).
    return keras.layers.AveragePooling2D(3, strides=1, padding="same", name=name)(x)


def _inception_a(x, name, pool_features, conv):
    b1 = conv(x, f"{name}_branch1x1", 64, 1)
    b5 = conv(x, f"{name}_branch5x5_1", 48, 1)
    b5 = conv(b5, f"{name}_branch5x5_2", 64, 5, padding="same")
    b3 = conv(x, f"{name}_branch3x3dbl_1", 64, 1)
    b3 = conv(b3, f"{name}_branch3x3dbl_2", 96, 3, padding="same")
    b3 = conv(b3, f"{name}_branch3x3dbl_3", 96, 3, padding="same")
    pool = _average_pool_excluding_padding(x, f"{name}_pool")
    pool = conv(pool, f"{name}_branch_pool", pool_features, 1)
    return keras.layers.Concatenate(name=name)([b1, b5, b3, pool])


def _inception_b(x, name, conv):
    b3 = conv(x, f"{name}_branch3x3", 384, 3, strides=2)
    bd = conv(x, f"{name}_branch3x3dbl_1", 64, 1)
    bd = conv(bd, f"{name}_branch3x3dbl_2", 96, 3, padding="same")
    bd = conv(bd, f"{name}_branch3x3dbl_3", 96, 3, strides=2)
    pool = keras.layers.MaxPooling2D(3, strides=2, name=f"{name}_pool")(x)
    return keras.layers.Concatenate(name=name)([b3, bd, pool])


def _inception_c(x, name, c7, conv):
    b1 = conv(x, f"{name}_branch1x1", 192, 1)
    b7 = conv(x, f"{name}_branch7x7_1", c7, 1)
    b7 = conv(b7, f"{name}_branch7x7_2", c7, (1, 7), padding="same")
    b7 = conv(b7, f"{name}_branch7x7_3", 192, (7, 1), padding="same")
    bd = conv(x, f"{name}_branch7x7dbl_1", c7, 1)
    bd = conv(bd, f"{name}_branch7x7dbl_2", c7, (7, 1), padding="same")
    bd = conv(bd, f"{name}_branch7x7dbl_3", c7, (1, 7), padding="same")
    bd = conv(bd, f"{name}_branch7x7dbl_4", c7, (7, 1), padding="same")
    bd = conv(bd, f"{name}_branch7x7dbl_5", 192, (1, 7), padding="same")
    pool = _average_pool_excluding_padding(x, f"{name}_pool")
    pool = conv(pool, f"{name}_branch_pool", 192, 1)
    return keras.layers.Concatenate(name=name)([b1, b7, bd, pool])


def _inception_d(x, name, conv):
    b3 = conv(x, f"{name}_branch3x3_1", 192, 1)
    b3 = conv(b3, f"{name}_branch3x3_2", 320, 3, strides=2)
    b7 = conv(x, f"{name}_branch7x7x3_1", 192, 1)
    b7 = conv(b7, f"{name}_branch7x7x3_2", 192, (1, 7), padding="same")
    b7 = conv(b7, f"{name}_branch7x7x3_3", 192, (7, 1), padding="same")
    b7 = conv(b7, f"{name}_branch7x7x3_4", 192, 3, strides=2)
    pool = keras.layers.MaxPooling2D(3, strides=2, name=f"{name}_pool")(x)
    return keras.layers.Concatenate(name=name)([b3, b7, pool])


def _inception_e(x, name, max_pool, conv):
    b1 = conv(x, f"{name}_branch1x1", 320, 1)
    b3 = conv(x, f"{name}_branch3x3_1", 384, 1)
    b3 = keras.layers.Concatenate(name=f"{name}_branch3x3")([
        conv(b3, f"{name}_branch3x3_2a", 384, (1, 3), padding="same"),
        conv(b3, f"{name}_branch3x3_2b", 384, (3, 1), padding="same")])
    bd = conv(x, f"{name}_branch3x3dbl_1", 448, 1)
    bd = conv(bd, f"{name}_branch3x3dbl_2", 384, 3, padding="same")
    bd = keras.layers.Concatenate(name=f"{name}_branch3x3dbl")([
        conv(bd, f"{name}_branch3x3dbl_3a", 384, (1, 3), padding="same"),
        conv(bd, f"{name}_branch3x3dbl_3b", 384, (3, 1), padding="same")])
    if max_pool:  # Mixed_7c: the graph max-pools here
        pool = keras.layers.MaxPooling2D(3, strides=1, padding="same", name=f"{name}_pool")(x)
    else:
        pool = _average_pool_excluding_padding(x, f"{name}_pool")
    pool = conv(pool, f"{name}_branch_pool", 192, 1)
    return keras.layers.Concatenate(name=name)([b1, b3, bd, pool])


def fid_inception_v3(input_shape=(299, 299, 3), name="fid_inception_v3"):
    """The 2015-12-05 TensorFlow Inception graph (the FID network), channels-last.

    Random weights until filled from pytorch-fid's or torch-fidelity's file with
    :func:`kctx.convert.load_fid_inception_weights`.

    Args:
        input_shape: (H, W, 3) of the prepared input; (299, 299, 3) as in every
            published number (the network is fully convolutional up to pool3, so other
            sizes run, but their features are not the FID's).
        name: the model's name.

    Returns:
        A functional ``keras.Model`` mapping (B, H, W, 3) images scaled to the graph's
        range to a dict: ``"pool3"`` (B, 2048), the features of FID and KID;
        ``"logits_unbiased"`` (B, 1008), pool3 · W, the Inception Score's logits;
        ``"logits"`` (B, 1008), pool3 · W + b.

    Example:
        >>> model = fid_inception_v3(input_shape=(75, 75, 3))
        >>> outputs = model(np.zeros((1, 75, 75, 3), "float32"))
        >>> tuple(outputs["pool3"].shape), tuple(outputs["logits_unbiased"].shape)
        ((1, 2048), (1, 1008))

    Reference:
        Szegedy et al., "Rethinking the Inception Architecture for Computer Vision",
        CVPR 2016; the graph as pytorch-fid's ``FIDInceptionA/C/E_1/E_2`` patch it.
    """
    return _build(input_shape, name, folded=False)


def _build(input_shape, name, folded):
    conv = functools.partial(_basic_conv, folded=folded)
    inputs = keras.Input(input_shape, name="images")
    x = conv(inputs, "Conv2d_1a_3x3", 32, 3, strides=2)
    x = conv(x, "Conv2d_2a_3x3", 32, 3)
    x = conv(x, "Conv2d_2b_3x3", 64, 3, padding="same")
    x = keras.layers.MaxPooling2D(3, strides=2, name="MaxPool_1")(x)
    x = conv(x, "Conv2d_3b_1x1", 80, 1)
    x = conv(x, "Conv2d_4a_3x3", 192, 3)
    x = keras.layers.MaxPooling2D(3, strides=2, name="MaxPool_2")(x)
    x = _inception_a(x, "Mixed_5b", 32, conv)
    x = _inception_a(x, "Mixed_5c", 64, conv)
    x = _inception_a(x, "Mixed_5d", 64, conv)
    x = _inception_b(x, "Mixed_6a", conv)
    x = _inception_c(x, "Mixed_6b", 128, conv)
    x = _inception_c(x, "Mixed_6c", 160, conv)
    x = _inception_c(x, "Mixed_6d", 160, conv)
    x = _inception_c(x, "Mixed_6e", 192, conv)
    x = _inception_d(x, "Mixed_7a", conv)
    x = _inception_e(x, "Mixed_7b", False, conv)
    x = _inception_e(x, "Mixed_7c", True, conv)
    pool3 = keras.layers.GlobalAveragePooling2D(name="pool3")(x)
    unbiased, logits = InceptionLogits(FID_INCEPTION_CLASSES, name="fc")(pool3)
    return keras.Model(inputs, {"pool3": pool3, "logits_unbiased": unbiased,
                                "logits": logits}, name=name)


def fold_batch_norms(model):
    """An inference copy of a :func:`fid_inception_v3` model with every batch
    normalisation folded into the convolution before it.

    y = γ·(W∗x − μ)/√(σ² + ε) + β is the convolution with kernel W·s and bias β − μ·s,
    s = γ/√(σ² + ε) per output channel: one fused convolution + bias + ReLU instead of a
    convolution and a separate normalisation pass over the activations (what the
    extractor runs; equal to the model up to float32 rounding).

    Args:
        model: a (filled) :func:`fid_inception_v3` model.

    Returns:
        A model with the same inputs and outputs, named ``model.name + "_folded"``.

    Example:
        >>> model = fid_inception_v3(input_shape=(75, 75, 3))
        >>> folded = fold_batch_norms(model)
        >>> x = np.random.default_rng(0).normal(size=(1, 75, 75, 3)).astype("float32")
        >>> pool3 = [keras.ops.convert_to_numpy(m(x)["pool3"]) for m in (model, folded)]
        >>> bool(np.allclose(*pool3, atol=1e-4))
        True
    """
    folded = _build(model.input_shape[1:], f"{model.name}_folded", folded=True)
    for layer in folded.layers:
        if isinstance(layer, keras.layers.Conv2D):
            norm = model.get_layer(layer.name.removesuffix("_conv") + "_bn")
            gamma, beta, mean, variance = (ops.convert_to_numpy(v) for v in (
                norm.gamma, norm.beta, norm.moving_mean, norm.moving_variance))
            scale = gamma / np.sqrt(variance + norm.epsilon)
            kernel = ops.convert_to_numpy(model.get_layer(layer.name).kernel)
            layer.kernel.assign(kernel * scale)
            layer.bias.assign(beta - mean * scale)
        elif layer.weights:
            for target, source in zip(layer.weights, model.get_layer(layer.name).weights):
                target.assign(source)
    return folded
