"""Fréchet distance between Gaussians fitted to features (FID / FCD).

d² = ‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2 (Σ₁Σ₂)^{1/2})   (Heusel et al., 2017, Eq. 6).

:func:`frechet_distance` is the NumPy/SciPy form used by the reference FID
implementations (``scipy.linalg.sqrtm`` with a small diagonal offset when the
product is singular). :class:`FrechetInceptionDistance` streams float64
sufficient statistics (Σf, Σffᵀ, n) of real and generated features batch by
batch and across replicas, and computes the distance with a symmetric
eigendecomposition in ``keras.ops`` so that ``result()`` also runs inside a
compiled function; on JAX without x64 the sums and the final algebra are
NumPy float64 on the host (:mod:`kctx.metrics.float64`).
"""

import warnings

import keras
import numpy as np
from keras import ops

from kctx.metrics.extractors import get_extractor, prepare_images
from kctx.metrics.float64 import Float64Sums
from kctx.metrics.reference import (ReferenceStatistics, check_signature,
                                    load_reference_statistics, save_reference_statistics)


def frechet_distance(mu1, sigma1, mu2, sigma2, eps=1e-6):
    """Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2).

    Args:
        mu1: mean vector (D,) of the first distribution.
        sigma1: covariance matrix (D, D) of the first distribution.
        mu2: mean vector (D,) of the second distribution.
        sigma2: covariance matrix (D, D) of the second distribution.
        eps: diagonal offset added to both covariances when the matrix square
            root of their product is ill-conditioned (SciPy warns that the
            product is singular) or not finite, e.g. with fewer samples than
            feature dimensions.

    Returns:
        The squared Fréchet distance, a Python float (>= 0: rounding below 0,
        as for two equal Gaussians, gives 0).

    Raises:
        ValueError: statistics with NaN or inf values, or shapes that differ.
    """
    from scipy import linalg

    mu1, mu2 = np.atleast_1d(np.asarray(mu1, np.float64)), np.atleast_1d(np.asarray(mu2, np.float64))
    sigma1 = np.atleast_2d(np.asarray(sigma1, np.float64))
    sigma2 = np.atleast_2d(np.asarray(sigma2, np.float64))
    for name, value in (("mu1", mu1), ("sigma1", sigma1), ("mu2", mu2), ("sigma2", sigma2)):
        if not np.isfinite(value).all():
            raise ValueError(
                f"Fréchet distance of non-finite statistics: `{name}` holds "
                f"{np.size(value) - np.isfinite(value).sum()} NaN or inf values. "
                f"Received: {name}={value!r}"
            )
    if mu1.shape != mu2.shape:
        raise ValueError(f"`mu1` and `mu2` differ in shape: {mu1.shape} vs {mu2.shape}")
    if sigma1.shape != sigma2.shape or sigma1.shape != (mu1.size, mu1.size):
        raise ValueError(
            f"Covariances must be ({mu1.size}, {mu1.size}). Received: sigma1.shape="
            f"{sigma1.shape}, sigma2.shape={sigma2.shape}"
        )
    diff = mu1 - mu2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", linalg.LinAlgWarning)
        covmean = linalg.sqrtm(sigma1 @ sigma2)
    ill_conditioned = any(issubclass(w.category, linalg.LinAlgWarning) for w in caught)
    if ill_conditioned or not np.isfinite(covmean).all():
        warnings.warn(
            f"Fréchet distance: sqrtm(Σ₁Σ₂) is singular; adding {eps} to the diagonals.",
            stacklevel=2,
        )
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = linalg.sqrtm((sigma1 + offset) @ (sigma2 + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise ValueError(
                f"Fréchet distance: imaginary component {np.max(np.abs(covmean.imag))} "
                "in sqrtm(Σ₁Σ₂)"
            )
        covmean = covmean.real
    value = diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * np.trace(covmean)
    return max(float(value), 0.0)  # d² >= 0; rounding can leave -1e-12 for equal Gaussians


def _trace_sqrt_product(sigma1, sigma2, xp=ops, eigh=ops.eigh):
    """Tr((Σ₁Σ₂)^{1/2}) = Σᵢ √λᵢ(Σ₁^{1/2} Σ₂ Σ₁^{1/2}) for PSD Σ₁, Σ₂ (``keras.ops``, or
    NumPy with ``xp=np, eigh=np.linalg.eigh``)."""
    values, vectors = eigh(sigma1)
    root = xp.matmul(vectors * xp.sqrt(xp.maximum(values, 0.0))[None, :], xp.transpose(vectors))
    inner = xp.matmul(xp.matmul(root, sigma2), root)
    inner = 0.5 * (inner + xp.transpose(inner))
    eigenvalues = eigh(inner)[0]
    return xp.sum(xp.sqrt(xp.maximum(eigenvalues, 0.0)))


def gaussian_statistics(feature_sum, outer_sum, count, xp=ops):
    """Mean and unbiased covariance from streamed sums (float64 tensors, or NumPy arrays
    with ``xp=np``)."""
    mean = feature_sum / count
    covariance = (outer_sum - count * xp.outer(mean, mean)) / (count - 1.0)
    return mean, covariance


@keras.saving.register_keras_serializable(package="kctx")
class FrechetInceptionDistance(keras.metrics.Metric):
    """Streaming Fréchet distance between real and generated image features.

    ``update_state(real_images, generated_images)`` accumulates, in float64,
    the feature sum, the sum of feature outer products and the count for each
    side (either argument may be ``None``), so the result does not depend on
    how the samples are split into batches and the statistics add up across
    replicas. Images are quantised to uint8 and resized with antialiasing
    before the extractor (Parmar et al., "On Aliased Resizing and Surprising
    Subtleties in GAN Evaluation", 2022).

    ``result()`` (eager) raises a ValueError, rather than returning a number
    that means nothing, when a side has no more samples than the features have
    dimensions (the covariance would be singular; one sample has none) or when
    images with NaN or inf pixels were fed (they are counted per side; the
    message says how many). Two equal sample sets give 0 up to rounding, and
    never less than 0.

    The sums are float64 on every backend: float64 variables on TensorFlow (and on
    JAX with ``jax_enable_x64``); NumPy float64 arrays on the host on JAX without
    x64, where ``update_state`` runs eagerly (not inside a jitted function) and
    ``result()`` is a NumPy float64 (:class:`kctx.metrics.float64.Float64Sums`).

    Args:
        extractor: ``"fid_inception_v3"`` (the 2015-12-05 Inception graph of every
            published FID, filled from ``weights``: pytorch-fid's or torch-fidelity's
            ``.pth``), ``"inception_v3"`` (Keras' ImageNet InceptionV3: not comparable
            with published numbers), ``"digits_classifier"`` (the kctx digits
            classifier: the result is the Fréchet classifier distance, FCD), or any
            ``keras.Model`` mapping images to features.
        value_range: (low, high) of the incoming images, e.g. (-1, 1) for a
            tanh generator or (0, 255).
        weights: path of the extractor's weights (the FID Inception's ``.pth``, the
            InceptionV3 ``.h5``, the digits classifier); ``None`` uses the Keras /
            kctx cache (the FID Inception has none: it then says where to get it).
        resize: the FID Inception's resize to 299×299: ``"tensorflow"`` (TF1's
            bilinear: TTUR, TF-GAN, torch-fidelity; the default), ``"pytorch-fid"`` or
            ``"clean"`` (clean-fid's); see :func:`kctx.ops.fid_inception_input`.
        reference: reference statistics of the real images (a ``.npz`` path or
            :class:`kctx.metrics.ReferenceStatistics`) used instead of feeding real
            images; refused when another extractor or resize made them.
        name: metric name; defaults to ``"fid"`` or ``"fcd"``.

    Examples:
        >>> features = keras.Sequential([keras.Input((32, 32, 3)),
        ...                              keras.layers.GlobalAveragePooling2D()])
        >>> fid = FrechetInceptionDistance(extractor=features, value_range=(-1, 1))
        >>> rng = np.random.default_rng(0)
        >>> for _ in range(4):  # batches of real and generated images in [-1, 1]
        ...     real = rng.uniform(-1, 1, (16, 32, 32, 3)).astype("float32")
        ...     fid.update_state(real, np.clip(real + 0.5, -1, 1))
        >>> float(fid.result()) > 0
        True

    Reference:
        Heusel et al., "GANs Trained by a Two Time-Scale Update Rule Converge
        to a Local Nash Equilibrium", NeurIPS 2017 (FID).
    """

    def __init__(self, extractor="fid_inception_v3", value_range=(-1.0, 1.0), weights=None,
                 resize=None, reference=None, name=None, **kwargs):
        self.extractor = get_extractor(extractor, weights=weights, resize=resize)
        if name is None:
            name = "fcd" if self.extractor.name == "digits_classifier" else "fid"
        super().__init__(name=name, **kwargs)
        self.value_range = tuple(float(v) for v in value_range)
        self.weights_path = weights
        dim = self.extractor.feature_dim
        shapes = {}
        for side in ("real", "generated"):
            shapes.update({f"{side}_sum": (dim,), f"{side}_outer": (dim, dim),
                           f"{side}_count": (), f"{side}_nonfinite": ()})
        self._sums = Float64Sums(self, shapes)
        self.reference = None
        self.reference_path = reference if isinstance(reference, (str, bytes)) else None
        if reference is not None:
            self.set_reference(reference)

    @property
    def extractor_name(self):
        return self.extractor.name

    def set_reference(self, reference):
        """Use reference statistics (a ``.npz`` path or :class:`ReferenceStatistics`) as
        the real side; they must come from this metric's extractor and resize."""
        signature = self.extractor.signature()
        if isinstance(reference, ReferenceStatistics):
            check_signature(reference.signature, signature, "The reference statistics")
        else:
            reference = load_reference_statistics(reference, expected=signature)
        dim = self.extractor.feature_dim
        if reference.mu.shape != (dim,):
            raise ValueError(f"The reference statistics have {reference.mu.shape[0]} features; "
                             f"the extractor {self.extractor.name!r} gives {dim}.")
        self.reference = reference

    def reference_statistics(self, side="real", features=None):
        """The statistics fed so far on ``side`` as :class:`ReferenceStatistics`
        (with the extractor's signature; ``features``, when given, are stored too)."""
        mu, sigma = (np.asarray(ops.convert_to_numpy(v), np.float64)
                     for v in self.statistics(side))
        count = self.counts()[0 if side == "real" else 1]
        return ReferenceStatistics(mu, sigma, count, self.extractor.signature(), features)

    def save_reference(self, path, side="real"):
        """Write the statistics of the images fed on ``side`` to ``path`` (``.npz``) so
        that later evaluations can pass ``reference=path`` instead of real images."""
        return save_reference_statistics(path, self.reference_statistics(side))

    def features(self, images):
        """Features (float64) of a batch of images in ``value_range``."""
        prepared = prepare_images(images, self.value_range, self.extractor)
        return self._sums.cast(self.extractor(prepared))

    def _side_features(self, side, images):
        """The float64 features of a batch fed on ``side`` (subclasses keep more)."""
        return self.features(images)

    def _accumulate(self, side, images):
        sums, xp = self._sums, self._sums.ops
        features = self._side_features(side, images)
        sums.add(f"{side}_sum", xp.sum(features, axis=0))
        sums.add(f"{side}_outer", xp.matmul(xp.transpose(features), features))
        sums.add(f"{side}_count", sums.cast(ops.shape(features)[0]))
        pixels = ops.reshape(ops.cast(images, "float32"), (ops.shape(images)[0], -1))
        finite = ops.all(ops.isfinite(pixels), axis=1)
        sums.add(f"{side}_nonfinite", xp.sum(sums.cast(ops.logical_not(finite))))

    def update_state(self, real_images=None, generated_images=None, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("FrechetInceptionDistance does not support sample_weight.")
        if real_images is not None and self.reference is not None:
            raise ValueError("This metric compares with reference statistics: feed generated "
                             "images only (real_images=None).")
        if real_images is not None:
            self._accumulate("real", real_images)
        if generated_images is not None:
            self._accumulate("generated", generated_images)

    def counts(self):
        """(real, generated) images fed so far; the real count is the reference's
        when there is one (``None`` if its file does not record it)."""
        counts = tuple(int(ops.convert_to_numpy(self._sums.value(f"{s}_count")))
                       for s in ("real", "generated"))
        return (self.reference.count, counts[1]) if self.reference is not None else counts

    def statistics(self, side):
        """(mean, covariance) of ``"real"`` or ``"generated"`` features so far (the
        reference's for ``"real"`` when there is one)."""
        sums = self._sums
        if side == "real" and self.reference is not None:
            if sums.host:
                return self.reference.mu, self.reference.sigma
            return (ops.convert_to_tensor(self.reference.mu, "float64"),
                    ops.convert_to_tensor(self.reference.sigma, "float64"))
        return gaussian_statistics(sums.value(f"{side}_sum"), sums.value(f"{side}_outer"),
                                   sums.value(f"{side}_count"), xp=sums.ops)

    def nonfinite_counts(self):
        """(real, generated) images fed so far that hold a NaN or inf pixel."""
        return tuple(int(ops.convert_to_numpy(self._sums.value(f"{s}_nonfinite")))
                     for s in ("real", "generated"))

    def result(self):
        if _is_eager():
            dim = self.extractor.feature_dim
            for side, bad, n in zip(("real", "generated"), self.nonfinite_counts(), self.counts()):
                if bad:
                    raise ValueError(
                        f"{bad} of the {n} {side} images hold NaN or inf pixels; their "
                        "Fréchet distance is undefined. Check the generator's outputs "
                        "(or the data) for NaN before scoring."
                    )
                if n is not None and n <= dim:
                    raise ValueError(
                        f"Fréchet distance needs more {side} samples than feature dimensions "
                        f"({dim}) for a full-rank covariance; received {n}. Feed at least "
                        f"{dim + 1} {side} images (FID is usually reported on 10k–50k)."
                    )
        mu1, sigma1 = self.statistics("real")
        mu2, sigma2 = self.statistics("generated")
        xp = self._sums.ops
        diff = mu1 - mu2
        value = (xp.sum(diff * diff) + xp.trace(sigma1) + xp.trace(sigma2)
                 - 2.0 * _trace_sqrt_product(sigma1, sigma2, xp, self._sums.eigh))
        return xp.maximum(value, 0.0)  # d² >= 0: rounding can leave -1e-12 for equal sets

    def reset_state(self):
        self._sums.reset()

    def get_config(self):
        config = super().get_config()
        config.update({"extractor": self.extractor.name, "value_range": self.value_range,
                       "weights": self.weights_path, "reference": self.reference_path,
                       "resize": (self.extractor.resize
                                  if self.extractor.name == "fid_inception_v3" else None)})
        return config


def _is_eager():
    if keras.backend.backend() != "tensorflow":
        return True
    import tensorflow as tf

    return tf.executing_eagerly()
