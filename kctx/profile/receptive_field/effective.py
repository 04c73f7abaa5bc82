"""The effective receptive field (ERF), measured from input gradients.

:func:`effective_receptive_field` measures the effective receptive field of Luo et al.
(NeurIPS 2016): the gradient of the channel-summed feature at the centre position of a
layer's output with respect to the input images, in inference mode (``training=False``),
its absolute value summed over the input channels and averaged over the images, and the
radii (discs) and sides (centred squares) holding 50 / 90 / 95 % of that mass around the
centre position's input location (from :func:`~kctx.profile.theoretical_receptive_field`).
"""

import dataclasses
import itertools

import keras
import numpy as np

from kctx.profile.receptive_field.graph import call_node, graph_of, locate, target_tensor
from kctx.profile.receptive_field.theoretical import (ReceptiveField, clean_number,
                                                      theoretical_receptive_field)

__all__ = ["ERF_FRACTIONS", "EffectiveReceptiveField", "effective_receptive_field",
           "feature_function"]

ERF_FRACTIONS = (0.5, 0.9, 0.95)


def feature_function(model, layer_name=None):
    """``f(images) -> features`` of a layer's output (inside nested models too), in
    inference mode: the chain of sub-models from the input to the layer."""
    models, layer = locate(model, layer_name)
    pieces = []
    for outer, inner in itertools.pairwise(models):
        graph = graph_of(outer)
        node = call_node(graph, inner)
        pieces.append(keras.Model(graph.inputs, list(node.input_tensors)))
    graph = graph_of(models[-1])
    pieces.append(keras.Model(graph.inputs, target_tensor(models, layer)))

    def features(images):
        values = images
        for piece in pieces:
            values = piece(values, training=False)
        return values

    return features


def _input_gradients(features, images, position):
    """d Σ_channels features[:, i, j, :] / d images, per image (numpy)."""
    i, j = position
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(images)
        with tf.GradientTape() as tape:
            tape.watch(x)
            centre = keras.ops.cast(features(x)[:, i, j, :], "float32")
            total = keras.ops.sum(centre)
        gradient = tape.gradient(total, x)
    elif backend == "jax":
        import jax

        def total(x):
            return keras.ops.sum(keras.ops.cast(features(x)[:, i, j, :], "float32"))

        gradient = jax.grad(total)(keras.ops.convert_to_tensor(images))
    elif backend == "torch":
        import torch

        x = keras.ops.convert_to_tensor(images).detach().requires_grad_(True)
        with torch.enable_grad():
            total = keras.ops.sum(keras.ops.cast(features(x)[:, i, j, :], "float32"))
            (gradient,) = torch.autograd.grad(total, x)
    else:
        raise ValueError(f"The effective receptive field needs gradients: backend {backend!r} "
                         "is not supported (tensorflow, jax, torch).")
    return np.asarray(keras.ops.convert_to_numpy(gradient), np.float64)


def _mass_extent(gradient_map, centre, fractions):
    """Disc radii and centred-square sides holding each fraction of the map's mass."""
    height, width = gradient_map.shape
    rows, cols = np.meshgrid(np.arange(height) - centre[0], np.arange(width) - centre[1],
                             indexing="ij")
    mass = gradient_map.ravel()
    total = mass.sum()
    result = {}
    for name, distance in (("radii", np.hypot(rows, cols)),
                           ("half_sides", np.maximum(np.abs(rows), np.abs(cols)))):
        distance = distance.ravel()
        order = np.argsort(distance, kind="stable")
        cumulative = np.cumsum(mass[order])
        values = {}
        for fraction in fractions:
            if total <= 0:
                values[fraction] = None
                continue
            index = int(np.searchsorted(cumulative, fraction * total * (1 - 1e-9)))
            values[fraction] = float(distance[order][min(index, len(order) - 1)])
        result[name] = values
    return result


@dataclasses.dataclass(frozen=True)
class EffectiveReceptiveField:
    """The effective receptive field (Luo et al., 2016) at a layer's centre position.

    Attributes:
        layer: the layer.
        map: (H, W) float64: |∂ Σ_k f_k(centre) / ∂x| summed over the input channels,
            averaged over the images.
        position: the output position (i, j) measured: (h // 2, w // 2) of the output.
        centre: its input location (row, column): the theoretical centre
            (:meth:`ReceptiveField.location`), or the map's centroid where the walk could
            not place it (``centre_source``).
        centre_source: ``"theoretical"`` or ``"centroid"``.
        radii: {fraction: radius of the disc around ``centre`` holding that fraction of
            the mass}, in input pixels (pixel-centre distances).
        sides: {fraction: side of the centred square holding it} (2·r + 1, r the
            largest |Δrow| or |Δcolumn| inside; a square side in pixels).
        support: (height, width) of the bounding box of the pixels whose gradient exceeds
            ``support_threshold`` × the map's maximum.
        reaches_border: {fraction: whether that square reaches the image's border (the
            image, not the network, then bounds it)}.
        images: images averaged.
        theoretical: the :class:`ReceptiveField` at the images' size.
    """

    layer: str
    map: np.ndarray
    position: tuple
    centre: tuple
    centre_source: str
    radii: dict
    sides: dict
    support: tuple
    reaches_border: dict
    images: int
    theoretical: ReceptiveField

    def to_dict(self, include_map=False):
        result = {"layer": self.layer, "position": list(self.position),
                  "centre": [clean_number(v) for v in self.centre],
                  "centre_source": self.centre_source,
                  "radii": {f"{f:g}": clean_number(v) for f, v in self.radii.items()},
                  "sides": {f"{f:g}": clean_number(v) for f, v in self.sides.items()},
                  "support": list(self.support),
                  "reaches_border": {f"{f:g}": v for f, v in self.reaches_border.items()},
                  "images": self.images, "input_size": list(self.map.shape)}
        if include_map:
            result["map"] = self.map.tolist()
        return result


def effective_receptive_field(model, images, layer_name=None, position=None,
                              fractions=ERF_FRACTIONS, batch_size=8, support_threshold=0.0):
    """The effective receptive field of a layer's centre position over ``images``.

    For each image x, the gradient g = ∂ (Σ_k f_k[i, j]) / ∂x of the channel-summed
    feature at output position (i, j) (the centre, (h // 2, w // 2), by default) with
    respect to the image, in inference mode (``training=False``: batch norm uses its
    moving statistics, dropout is off), on the Keras backend in use (TensorFlow's
    GradientTape or jax.grad); the map is Σ_c |g_c| averaged over the
    images. The ERF is then the disc radius and centred-square side around the centre
    position's input location that hold each fraction of the map's mass (gradient
    mass outside the image does not exist: with ``reaches_border`` the image bounds it).

    Args:
        model: a functional Keras model.
        images: (N, H, W, C) array.
        layer_name: as :func:`theoretical_receptive_field` (None: the model's output).
        position: the output position (i, j); default the centre.
        fractions: the mass fractions reported.
        batch_size: images per gradient call.
        support_threshold: the support is where the map exceeds this × its maximum.

    Returns:
        An :class:`EffectiveReceptiveField`.

    Examples:
        >>> inputs = keras.Input((None, None, 1))
        >>> conv = keras.layers.Conv2D(1, 3, padding="same", use_bias=False,
        ...                            kernel_initializer="ones")
        >>> erf = effective_receptive_field(keras.Model(inputs, conv(inputs)), np.ones((1, 9, 9, 1)))
        >>> erf.sides[0.95], erf.support
        (3, (3, 3))

    Reference:
        Luo, Li, Urtasun, Zemel, "Understanding the Effective Receptive Field in Deep
        Convolutional Neural Networks", NeurIPS 2016, Sec. 2 and 4.
    """
    images = np.asarray(images, np.float32)
    if images.ndim != 4:
        raise ValueError(f"`images` must be (N, H, W, C). Received shape {images.shape}")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be positive. Received: {batch_size}")
    height, width = images.shape[1:3]
    theory = theoretical_receptive_field(model, layer_name, input_size=(height, width))
    features = feature_function(model, layer_name)
    size = theory.size
    if size is None or any(v is None for v in size):
        output = features(images[:1])
        if len(output.shape) != 4:
            raise ValueError(f"{theory.layer!r} gives {tuple(output.shape)} features: the ERF "
                             "needs a (B, H, W, C) output.")
        size = tuple(int(v) for v in output.shape[1:3])
    if position is None:
        position = (size[0] // 2, size[1] // 2)
    position = tuple(int(v) for v in position)
    if not (0 <= position[0] < size[0] and 0 <= position[1] < size[1]):
        raise ValueError(f"`position` {position} is outside the {size} output.")
    total = np.zeros((height, width), np.float64)
    for start in range(0, len(images), batch_size):
        gradient = _input_gradients(features, images[start:start + batch_size], position)
        total += np.abs(gradient).sum(axis=-1).sum(axis=0)
    gradient_map = total / len(images)
    centre = theory.location(position)
    source = "theoretical"
    if centre is None:
        mass = gradient_map.sum()
        rows, cols = np.indices(gradient_map.shape)
        centre = ((rows * gradient_map).sum() / mass, (cols * gradient_map).sum() / mass) \
            if mass > 0 else ((height - 1) / 2, (width - 1) / 2)
        source = "centroid"
    extent = _mass_extent(gradient_map, centre, fractions)
    sides = {f: None if r is None else clean_number(2 * r + 1)
             for f, r in extent["half_sides"].items()}
    reaches = {}
    for fraction, half in extent["half_sides"].items():
        reaches[fraction] = half is not None and (
            centre[0] - half <= 0 or centre[1] - half <= 0 or
            centre[0] + half >= height - 1 or centre[1] + half >= width - 1)
    peak = gradient_map.max()
    inside = np.argwhere(gradient_map > support_threshold * peak) if peak > 0 else \
        np.zeros((0, 2), int)
    support = tuple(int(v) for v in (inside.max(0) - inside.min(0) + 1)) if len(inside) \
        else (0, 0)
    return EffectiveReceptiveField(
        layer=theory.layer, map=gradient_map, position=position,
        centre=tuple(float(v) for v in centre), centre_source=source,
        radii=extent["radii"], sides=sides, support=support, reaches_border=reaches,
        images=len(images), theoretical=theory)
