"""LatentGNN (Zhang et al.): non-local relations through a small latent graph."""

import keras
from keras import ops

from kctx.validation import check_image_input, check_positive_int, standardize_data_format
from kctx.layers.context_block import register_context_block
from kctx.ops.attention import unfold
from kctx.ops.latent_graph import latent_graph_propagation
from kctx.ops.magnitude import at_least


def _l2_normalize_channels(x):
    return x / ops.sqrt(at_least(ops.sum(ops.square(x), axis=-1, keepdims=True), 1e-12))


@keras.saving.register_keras_serializable(package="kctx")
class LatentGNN2D(keras.layers.Layer):
    """LatentGNN block: Z = X + γ · BN(X̃ W_up), X̃ the features propagated through d latent nodes.

    The official asymmetric version with one kernel: two reductions
    (1×1 conv to C / ``channel_stride`` + BN, then L2-normalised over the
    channels) give the features of the visible→latent and latent→visible
    steps; from each, 1×1 conv to d + BN + ReLU gives the bipartite
    affinities Ψ₁, Ψ₂ (N×d). :func:`kctx.ops.latent_graph_propagation` then
    maps the visible→latent features to the latent nodes, mixes them on the
    d×d latent graph and brings them back to the positions: O(N·d·C) time and
    O(N·(d + C)) memory. A 1×1 conv + BN back to C channels and a residual
    scale γ initialised to 0 close the block (the block starts as the identity).

    Args:
        latent_dim: d, the number of latent nodes.
        channel_stride: channel reduction factor of the two reductions.
        norm_momentum: momentum of the batch normalisations.
        kernel_initializer: initializer of the kernels of the 1×1 convolutions.
        kernel_regularizer: regularizer of the kernels of the 1×1 convolutions.
        data_format: must resolve to ``"channels_last"``.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (batch, height, width, channels); height and width may be ``None``.
        training: batch-normalisation mode.

    Examples:
        >>> layer = LatentGNN2D(latent_dim=8)
        >>> tuple(layer(keras.random.normal((2, 8, 8, 16))).shape)
        (2, 8, 8, 16)

    Reference:
        Zhang, Yan & He, "LatentGNN: Learning Efficient Non-local Relations
        for Visual Recognition", ICML 2019, Sec. 3.2 (the three propagation
        steps); Babiloni et al., "Poly-NL", ICCV 2021, Sec. 4.2 (L-GNN).
    """

    def __init__(self, latent_dim=100, channel_stride=4, norm_momentum=0.99,
                 kernel_initializer="glorot_uniform", kernel_regularizer=None, data_format=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("latent_dim", latent_dim)
        check_positive_int("channel_stride", channel_stride)
        self.latent_dim = latent_dim
        self.channel_stride = channel_stride
        self.norm_momentum = norm_momentum
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.data_format = standardize_data_format(data_format)

    def build(self, input_shape):
        channels = check_image_input(self, input_shape)
        reduced = max(1, channels // self.channel_stride)
        widths = {"reduce_v2l": (channels, reduced), "reduce_l2v": (channels, reduced),
                  "psi_v2l": (reduced, self.latent_dim), "psi_l2v": (reduced, self.latent_dim),
                  "up": (reduced, channels)}
        self.convs = {}
        for name, (fan_in, fan_out) in widths.items():
            conv = keras.layers.Dense(fan_out, use_bias=False,
                                      kernel_initializer=self.kernel_initializer,
                                      kernel_regularizer=self.kernel_regularizer,
                                      dtype=self.dtype_policy, name=f"{name}_conv")
            norm = keras.layers.BatchNormalization(momentum=self.norm_momentum,
                                                   dtype=self.dtype_policy, name=f"{name}_norm")
            conv.build((None, None, None, fan_in))
            norm.build((None, None, None, fan_out))
            self.convs[name] = (conv, norm)
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="zeros")

    def _conv_norm(self, name, x, training, relu=False):
        conv, norm = self.convs[name]
        y = norm(conv(x), training=training)
        return ops.relu(y) if relu else y

    def call(self, inputs, training=None):
        v2l_features = _l2_normalize_channels(self._conv_norm("reduce_v2l", inputs, training))
        l2v_features = _l2_normalize_channels(self._conv_norm("reduce_l2v", inputs, training))
        v2l = self._conv_norm("psi_v2l", v2l_features, training, relu=True)
        l2v = self._conv_norm("psi_l2v", l2v_features, training, relu=True)
        visible = latent_graph_propagation(unfold(v2l_features), unfold(v2l), unfold(l2v))
        shape = ops.shape(inputs)
        visible = ops.reshape(visible, (shape[0], shape[1], shape[2], visible.shape[-1]))
        out = self._conv_norm("up", visible, training)
        return inputs + ops.cast(self.gamma, out.dtype) * out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({
            "latent_dim": self.latent_dim,
            "channel_stride": self.channel_stride,
            "norm_momentum": self.norm_momentum,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "data_format": self.data_format,
        })
        return config


register_context_block("latent_gnn", lambda **kwargs: LatentGNN2D(**kwargs))
