"""Reference statistics of real images as ``.npz``: computed once, or published ones.

The format is TTUR's published ``fid_stats_*.npz`` and pytorch-fid's ``--save-stats``:
``mu`` (D,) and ``sigma`` (D, D), the mean and unbiased covariance of the real images'
features. kctx adds what makes two sets of statistics comparable: ``extractor``,
``resize`` and ``weights_sha256`` (the weights file's SHA-256), ``count`` (the number of
images) and, optionally, ``features`` (float32 rows, for KID, which needs samples, not
moments). A file is read with ``allow_pickle=False``: nothing in it can run code.
"""

import dataclasses
import os
import warnings
import zipfile

import numpy as np

FORMAT_VERSION = 1
_SIGNATURE = ("extractor", "resize", "weights_sha256")
_HEADER_BYTES = 4096  # an .npy header is far smaller


@dataclasses.dataclass
class ReferenceStatistics:
    """The real side of FID / KID, from a file or from images.

    Attributes:
        mu: (D,) float64 mean.
        sigma: (D, D) float64 unbiased covariance.
        count: the number of images (``None`` when the file does not say).
        signature: ``{"extractor", "resize", "weights_sha256"}`` (values ``None`` when
            the file does not record them, as TTUR's and pytorch-fid's do not).
        features: (N, D) float32 features, or ``None``.
    """

    mu: np.ndarray
    sigma: np.ndarray
    count: int | None = None
    signature: dict = dataclasses.field(default_factory=dict)
    features: np.ndarray | None = None


def save_reference_statistics(path, statistics):
    """Write :class:`ReferenceStatistics` to ``path`` (``.npz``, uncompressed).

    Example:
        >>> stats = ReferenceStatistics(np.zeros(3), np.eye(3), count=10,
        ...                             signature={"extractor": "x", "resize": "y"})
        >>> path = save_reference_statistics("stats.npz", stats)
        >>> load_reference_statistics(path, expected={"extractor": "x", "resize": "y"}).count
        10
    """
    arrays = {"mu": np.asarray(statistics.mu, np.float64),
              "sigma": np.asarray(statistics.sigma, np.float64),
              "kctx_format": np.int64(FORMAT_VERSION)}
    if statistics.count is not None:
        arrays["count"] = np.int64(statistics.count)
    for key in _SIGNATURE:
        if statistics.signature.get(key) is not None:
            arrays[key] = np.str_(statistics.signature[key])
    if statistics.features is not None:
        arrays["features"] = np.asarray(statistics.features, np.float32)
    with open(path, "wb") as handle:  # np.savez appends ".npz" to a name without it
        np.savez(handle, **arrays)
    return path


def _member_sizes(path):
    with zipfile.ZipFile(path) as archive:
        return {info.filename.removesuffix(".npy"): info.file_size
                for info in archive.infolist()}


def load_reference_statistics(path, expected=None, max_feature_bytes=2 << 30):
    """Read reference statistics, refusing those another extractor or resize made.

    Args:
        path: the ``.npz`` file (kctx's, TTUR's or pytorch-fid's).
        expected: the signature of the features they will be compared with
            (:meth:`kctx.metrics.Extractor.signature`); ``None`` skips the check.
        max_feature_bytes: the largest ``features`` member read (2 GiB by default).

    Returns:
        :class:`ReferenceStatistics`.

    Raises:
        ValueError: no ``mu`` / ``sigma``, shapes that do not fit, non-finite values,
            or statistics of another extractor or resize (the message names both).

    A file that records no extractor (TTUR's, pytorch-fid's) is accepted with a warning:
    it is comparable only if made with the same network and resize. Another weights
    file (a different SHA-256) is a warning too: pytorch-fid's and torch-fidelity's
    files hold the same network in different bytes.
    """
    if not os.path.isfile(path):
        raise ValueError(f"No reference statistics file at {os.fspath(path)!r}.")
    try:
        sizes = _member_sizes(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{os.fspath(path)!r} is not an .npz file.") from None
    if "mu" not in sizes or "sigma" not in sizes:
        raise ValueError(f"{os.fspath(path)!r} holds no `mu` and `sigma`. Received: "
                         f"members={sorted(sizes)[:10]}")
    with np.load(path, allow_pickle=False) as data:
        mu = np.asarray(data["mu"], np.float64)
        if mu.ndim != 1:
            raise ValueError(f"`mu` must be (D,). Received: mu.shape={mu.shape}")
        dim = mu.shape[0]
        if sizes["sigma"] > 8 * dim * dim + _HEADER_BYTES:
            raise ValueError(f"`sigma` declares {sizes['sigma']} bytes, more than a "
                             f"({dim}, {dim}) float64 matrix.")
        sigma = np.asarray(data["sigma"], np.float64)
        if sigma.shape != (dim, dim):
            raise ValueError(f"`sigma` must be ({dim}, {dim}) for a `mu` of {dim}. Received: "
                             f"sigma.shape={sigma.shape}")
        if not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
            raise ValueError(f"{os.fspath(path)!r} holds NaN or inf statistics.")
        count = int(data["count"]) if "count" in sizes else None
        signature = {key: (str(data[key]) if key in sizes else None) for key in _SIGNATURE}
        features = None
        if "features" in sizes:
            if sizes["features"] > max_feature_bytes:
                raise ValueError(f"`features` declares {sizes['features']} bytes, over "
                                 f"max_feature_bytes={max_feature_bytes}.")
            features = np.asarray(data["features"], np.float32)
            if features.ndim != 2 or features.shape[1] != dim:
                raise ValueError(f"`features` must be (N, {dim}). Received: "
                                 f"features.shape={features.shape}")
    statistics = ReferenceStatistics(mu, sigma, count, signature, features)
    if expected is not None:
        check_signature(statistics.signature, expected, os.fspath(path))
    return statistics


def check_signature(found, expected, where):
    """Refuse statistics of another extractor or resize; warn on other weights bytes or
    on a file that records neither."""
    if found.get("extractor") is None:
        warnings.warn(f"{where} records no extractor or resize (a TTUR / pytorch-fid "
                      f"file?): it is comparable only if made with {expected['extractor']!r} "
                      f"and resize {expected['resize']!r}.", stacklevel=3)
        return
    for key in ("extractor", "resize"):
        if found.get(key) != expected.get(key):
            raise ValueError(
                f"{where} was made with extractor {found.get('extractor')!r} and resize "
                f"{found.get('resize')!r}; these features come from extractor "
                f"{expected.get('extractor')!r} and resize {expected.get('resize')!r}. FIDs "
                "of different extractors or resizes are not comparable: make the reference "
                "with the same settings.")
    if None not in (found.get("weights_sha256"), expected.get("weights_sha256")) \
            and found["weights_sha256"] != expected["weights_sha256"]:
        warnings.warn(f"{where} was made with another weights file (SHA-256 "
                      f"{found['weights_sha256'][:12]}… vs {expected['weights_sha256'][:12]}…).",
                      stacklevel=3)
