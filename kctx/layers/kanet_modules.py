"""The Kronecker attention modules of KANets (Gao, Wang & Ji, Sec. 3.2, Figure 3)."""

import keras

from kctx.validation import check_choice, check_image_input, check_positive_int
from kctx.layers.attention import Attention2D
from kctx.layers.depthwise import TapDepthwiseConv2D
from kctx.layers.kronecker_attention import KroneckerAttention2D

ATTENTIONS = ("kv", "qkv", "attn", "attn_pool")


def attention_operator(attention, num_heads=4, name=None, dtype=None, **kwargs):
    """The attention path of an AttnModule: ``"kv"`` / ``"qkv"`` (KAO), ``"attn"``
    (regular attention, AttnNet) or ``"attn_pool"`` (2×2-pooled K and V, AttnNet+Pool);
    4 heads, a linear transform on V only, batch-normalised scores (Appendix 1, 4).
    ``kwargs`` go to the layer (e.g. ``norm_momentum``)."""
    check_choice("attention", attention, ATTENTIONS)
    if attention in ("kv", "qkv"):
        return KroneckerAttention2D(mode=attention, num_heads=num_heads, name=name, dtype=dtype,
                                    **kwargs)
    return Attention2D(pool_size=2 if attention == "attn_pool" else None, num_heads=num_heads,
                       name=name, dtype=dtype, **kwargs)


class _KANetModule(keras.layers.Layer):
    """Inverted-residual module with the options of Figure 3.

    Subclasses fix ``_concat_input`` (BaseSkipModule), ``_attention_path``
    (AttnModule) and ``_attention_skip`` (AttnSkipModule).
    """

    _concat_input = False
    _attention_path = False
    _attention_skip = False

    def __init__(self, expansion, output_channels, strides=1, attention="kv", num_heads=4,
                 norm_momentum=0.999, norm_epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("expansion", expansion)
        check_positive_int("output_channels", output_channels)
        check_positive_int("strides", strides)
        check_positive_int("num_heads", num_heads)
        if self._attention_path:
            check_choice("attention", attention, ATTENTIONS)
        if self._attention_path and expansion < 2:
            raise ValueError(
                f"{type(self).__name__} gives one c-chunk of its expansion to the attention "
                f"path, so `expansion` must be at least 2. Received: expansion={expansion}"
            )
        self.expansion = expansion
        self.output_channels = output_channels
        self.strides = strides
        self.attention = attention
        self.num_heads = num_heads
        self.norm_momentum = norm_momentum
        self.norm_epsilon = norm_epsilon

    def _norm(self, name):
        return keras.layers.BatchNormalization(momentum=self.norm_momentum,
                                               epsilon=self.norm_epsilon, name=name,
                                               dtype=self.dtype_policy)

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        # r·c inner maps; Skip/Attn modules fill one c-chunk with the input / attention.
        reuses_chunk = self._concat_input or self._attention_path
        self._expanded = (self.expansion - int(reuses_chunk)) * channels
        self.expand = self.expand_norm = None
        if self.expansion > 1:  # r = 1: the depthwise conv reads the input itself
            self.expand = keras.layers.Conv2D(self._expanded, 1, use_bias=False, name="expand",
                                              dtype=self.dtype_policy)
            self.expand_norm = self._norm("expand_norm")
        depthwise_channels = channels if self.expand is None else (
            self._expanded + (channels if self._concat_input else 0))
        self.depthwise = TapDepthwiseConv2D(3, strides=self.strides, padding="same",
                                            use_bias=False, name="depthwise",
                                            dtype=self.dtype_policy)
        self.depthwise_norm = self._norm("depthwise_norm")
        self.attention_layer = self.pool = None
        if self._attention_path:
            self.attention_layer = attention_operator(
                self.attention, self.num_heads, name="attention", dtype=self.dtype_policy,
                norm_momentum=self.norm_momentum, norm_epsilon=self.norm_epsilon)
            if self.strides > 1:
                self.pool = keras.layers.AveragePooling2D(self.strides, padding="same",
                                                          name="attention_pool",
                                                          dtype=self.dtype_policy)
        self.project = keras.layers.Conv2D(self.output_channels, 1, use_bias=False,
                                           name="project", dtype=self.dtype_policy)
        self.project_norm = self._norm("project_norm")
        self._residual = self.strides == 1 and channels == self.output_channels
        # Build the sublayers now, so weights exist for loading.
        shape = tuple(input_shape)
        if self.expand is not None:
            self.expand.build(shape)
            self.expand_norm.build(shape[:-1] + (self._expanded,))
        self.depthwise.build(shape[:-1] + (depthwise_channels,))
        self.depthwise_norm.build(shape[:-1] + (depthwise_channels,))
        if self.attention_layer is not None:
            self.attention_layer.build(shape)
        project_in = depthwise_channels + (channels if self._attention_path else 0)
        self.project.build(shape[:-1] + (project_in,))
        self.project_norm.build(shape[:-1] + (self.output_channels,))

    def call(self, inputs, training=None):
        relu6 = keras.activations.relu6
        x = inputs
        if self.expand is not None:
            x = relu6(self.expand_norm(self.expand(inputs), training=training))
        if self._concat_input and self.expand is not None:
            x = keras.ops.concatenate([inputs, x], axis=-1)
        x = relu6(self.depthwise_norm(self.depthwise(x), training=training))
        if self.attention_layer is not None:
            context = self.attention_layer(inputs, training=training)
            if self._attention_skip and self.strides == 1:
                context = context + inputs
            if self.pool is not None:
                context = self.pool(context)
            x = keras.ops.concatenate([x, keras.ops.cast(context, x.dtype)], axis=-1)
        x = self.project_norm(self.project(x), training=training)
        return inputs + x if self._residual else x

    def compute_output_shape(self, input_shape):
        def reduce(size):
            return None if size is None else -(-size // self.strides)
        return (input_shape[0], reduce(input_shape[1]), reduce(input_shape[2]),
                self.output_channels)

    def get_config(self):
        config = super().get_config()
        config.update({
            "expansion": self.expansion, "output_channels": self.output_channels,
            "strides": self.strides, "attention": self.attention, "num_heads": self.num_heads,
            "norm_momentum": self.norm_momentum, "norm_epsilon": self.norm_epsilon,
        })
        return config


_ARGS = """expansion: r; the module's inner width is r·c for c input channels.
        output_channels: d.
        strides: s of the depthwise convolution.
        attention: (Attn modules) ``"kv"``, ``"qkv"`` (KAO), ``"attn"`` or
            ``"attn_pool"``; ignored by Base modules.
        num_heads: heads of the attention operator (4 in KANets).
        norm_momentum: momentum of the batch normalisations (the attention's
            score normalisation included).
        norm_epsilon: epsilon of the batch normalisations.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, height, width, channels).
        training: batch-norm mode.

    Reference:
        Gao, Wang & Ji, "Kronecker Attention Networks", KDD 2020, Sec. 3.2 and
        Figure 3; Sandler et al., "MobileNetV2", CVPR 2018."""


@keras.saving.register_keras_serializable(package="kctx")
class BaseModule(_KANetModule):
    __doc__ = """MobileNetV2's inverted-residual bottleneck (Figure 3a).

    1×1 conv to r·c (BN, ReLU6; skipped when r = 1) → 3×3 depthwise conv with
    stride s (BN, ReLU6) → 1×1 conv to d (BN, linear); the input is added
    when s = 1 and c = d.

    Args:
        """ + _ARGS + """

    Examples:
        >>> tuple(BaseModule(6, 24, strides=2)(keras.random.normal((2, 16, 16, 16))).shape)
        (2, 8, 8, 24)
    """


@keras.saving.register_keras_serializable(package="kctx")
class BaseSkipModule(_KANetModule):
    __doc__ = """BaseModule whose inner width reuses the input (Figure 3b).

    The 1×1 conv produces (r−1)·c maps and the input is concatenated to them
    (r·c in total): c² fewer parameters and h·w·c fewer MAdds than the
    BaseModule. The rest is the BaseModule's, including the residual when
    s = 1 and c = d.

    Args:
        """ + _ARGS + """

    Examples:
        >>> tuple(BaseSkipModule(6, 32)(keras.random.normal((2, 8, 8, 32))).shape)
        (2, 8, 8, 32)
    """

    _concat_input = True


@keras.saving.register_keras_serializable(package="kctx")
class AttnModule(_KANetModule):
    __doc__ = """BaseModule with a parallel global attention path (Figure 3c).

    The 1×1 conv produces (r−1)·c maps (depthwise conv with stride s, BN,
    ReLU6); the attention operator on the input (4 heads, V-only transform,
    normalised scores) produces c maps, average-pooled with stride s when
    s > 1; both are concatenated (r·c) and projected to d. The input is added
    when s = 1 and c = d.

    Args:
        """ + _ARGS + """

    Examples:
        >>> tuple(AttnModule(6, 32, attention="kv")(keras.random.normal((2, 8, 8, 32))).shape)
        (2, 8, 8, 32)
    """

    _attention_path = True


@keras.saving.register_keras_serializable(package="kctx")
class AttnSkipModule(_KANetModule):
    __doc__ = """AttnModule with a skip connection around the attention operator (Figure 3d).

    The attention path outputs X + attn(X) (when s = 1; "this skip connection
    can always be added unless s > 1"), with the AttnModule's parameters and
    cost.

    Args:
        """ + _ARGS + """

    Examples:
        >>> tuple(AttnSkipModule(6, 64, attention="qkv")(keras.random.normal((2, 7, 7, 64))).shape)
        (2, 7, 7, 64)
    """

    _attention_path = True
    _attention_skip = True
