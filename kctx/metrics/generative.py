"""FID, Inception Score and KID together, from one pass over the images.

:class:`GenerativeMetrics` streams the FID's float64 statistics like
:class:`~kctx.metrics.FrechetInceptionDistance` and keeps, on the host, what the other
two need from the same forward pass: the generated images' unbiased logits (the
Inception Score: :func:`~kctx.metrics.inception_score`) and both sides' features (KID:
:func:`~kctx.metrics.kernel_distance`). Its result names the numbers as torch-fidelity
does, with the extractor, resize and weights file that make them comparable.
"""

import keras
import numpy as np
from keras import ops

from kctx.metrics.classifier_score import classifier_score
from kctx.metrics.extractors import prepare_images
from kctx.metrics.frechet import FrechetInceptionDistance
from kctx.metrics.kernel_distance import kernel_distance


@keras.saving.register_keras_serializable(package="kctx")
class GenerativeMetrics(FrechetInceptionDistance):
    """FID / FCD, Inception Score and KID of generated images, from one pass.

    ``update_state(real_images, generated_images)`` (either may be ``None``) runs the
    extractor once per batch; ``result()`` returns a dict. ``update_state`` runs
    eagerly (the features and logits are kept as NumPy arrays for IS and KID: 50,000
    images hold 400 MB of features per side and 200 MB of logits).

    Args:
        extractor: as for :class:`~kctx.metrics.FrechetInceptionDistance`
            (``"fid_inception_v3"`` with pytorch-fid's or torch-fidelity's weights gives
            the published metrics).
        value_range: (low, high) of the incoming images.
        weights: the extractor's weights file.
        resize: the FID Inception's resize (``"tensorflow"``, ``"pytorch-fid"``,
            ``"clean"``).
        reference: reference statistics (a ``.npz`` path or
            :class:`~kctx.metrics.ReferenceStatistics`) for the real side.
        splits: the Inception Score's splits (10).
        shuffle_seed: ``None`` scores the splits in the order fed (the original code);
            2020 reproduces torch-fidelity's default shuffle.
        kid_subsets: KID's subsets (100).
        kid_subset_size: KID's subset size (1000); with fewer images on a side, the
            smaller count is used and reported as ``kid_subset_size``.
        kid_seed: the subsets' seed (torch-fidelity's 2020).
        name: the metric's name.

    Returns (``result()``):
        A dict: ``frechet_inception_distance`` (the FID, or the FCD with the digits
        classifier), ``inception_score_mean`` / ``_std`` (when the extractor has a
        classifier), ``kernel_inception_distance_mean`` / ``_std`` (when real features
        are at hand: fed images, or a reference file holding ``features``), the counts,
        ``kid_subset_size`` and the extractor's signature (``extractor``, ``resize``,
        ``weights_sha256``). Where the FID is undefined (no more samples than feature
        dimensions, NaN pixels), ``frechet_inception_distance_error`` says why instead.

    Example:
        >>> features = keras.Sequential([keras.Input((8, 8, 3)),
        ...                              keras.layers.GlobalAveragePooling2D()])
        >>> metrics = GenerativeMetrics(features, value_range=(0, 1), kid_subset_size=50)
        >>> rng = np.random.default_rng(0)
        >>> metrics.update_state(rng.uniform(size=(64, 8, 8, 3)),
        ...                      rng.uniform(size=(64, 8, 8, 3)) ** 2)
        >>> result = metrics.result()
        >>> result["frechet_inception_distance"] > 0, result["kid_subset_size"]
        (True, 50)

    References:
        Heusel et al., NeurIPS 2017 (FID); Salimans et al., "Improved Techniques for
        Training GANs", NeurIPS 2016 (IS); Bińkowski et al., "Demystifying MMD GANs",
        ICLR 2018 (KID).
    """

    def __init__(self, extractor="fid_inception_v3", value_range=(-1.0, 1.0), weights=None,
                 resize=None, reference=None, splits=10, shuffle_seed=None, kid_subsets=100,
                 kid_subset_size=1000, kid_seed=2020, name="generative_metrics", **kwargs):
        super().__init__(extractor, value_range, weights, resize=resize, reference=reference,
                         name=name, **kwargs)
        self.splits = int(splits)
        self.shuffle_seed = shuffle_seed
        self.kid_subsets = int(kid_subsets)
        self.kid_subset_size = int(kid_subset_size)
        self.kid_seed = kid_seed
        self._kept = {"real": [], "generated": [], "logits": []}

    def _side_features(self, side, images):
        prepared = prepare_images(images, self.value_range, self.extractor)
        features, logits = self.extractor.features_and_logits(prepared)
        self._kept[side].append(np.asarray(ops.convert_to_numpy(features), np.float32))
        if side == "generated" and logits is not None:
            self._kept["logits"].append(np.asarray(ops.convert_to_numpy(logits), np.float32))
        return self._sums.cast(features)

    def kept(self, side):
        """The float32 features (``"real"`` / ``"generated"``) or generated ``"logits"``
        fed so far, (N, D)."""
        parts = self._kept[side]
        if parts:
            return np.concatenate(parts)
        dim = (self.extractor.logits_model.output_shape[-1] if side == "logits"
               and self.extractor.logits_model is not None else self.extractor.feature_dim)
        return np.zeros((0, dim or 0), np.float32)

    def result(self):
        real_count, generated_count = self.counts()
        results = {"real_count": real_count, "generated_count": generated_count,
                   **self.extractor.signature()}
        try:
            results["frechet_inception_distance"] = float(super().result())
        except ValueError as error:  # too few samples or NaN pixels: IS and KID may still be
            results["frechet_inception_distance_error"] = str(error)
        logits = self.kept("logits")
        if len(logits):
            mean, std = classifier_score(logits, min(self.splits, len(logits)),
                                         self.shuffle_seed)
            results.update(inception_score_mean=mean, inception_score_std=std)
        real = self.reference.features if self.reference is not None else self.kept("real")
        generated = self.kept("generated")
        if real is not None and min(len(real), len(generated)) >= 2:
            size = min(self.kid_subset_size, len(real), len(generated))
            mean, std = kernel_distance(real, generated, self.kid_subsets, size, self.kid_seed)
            results.update(kernel_inception_distance_mean=mean,
                           kernel_inception_distance_std=std, kid_subset_size=size)
        return results

    def reference_statistics(self, side="real", features=None):
        """As :meth:`FrechetInceptionDistance.reference_statistics`, with the side's
        kept features (so that KID can use the file) unless ``features=False``."""
        kept = None if features is False else (features if features is not None
                                                else self.kept(side))
        return super().reference_statistics(side, kept)

    def reset_state(self):
        super().reset_state()
        self._kept = {"real": [], "generated": [], "logits": []}

    def get_config(self):
        config = super().get_config()
        config.update(splits=self.splits, shuffle_seed=self.shuffle_seed,
                      kid_subsets=self.kid_subsets, kid_subset_size=self.kid_subset_size,
                      kid_seed=self.kid_seed)
        return config
