"""Feature extractors for Fréchet distances and classifier scores."""

import contextlib
import os
import pathlib

import keras
import numpy as np
from keras import ops

from kctx.convert.fid_inception import load_fid_inception_weights, where_to_get_weights
from kctx.models.fid_inception import (FID_INCEPTION_FEATURES, FID_INCEPTION_SIZE,
                                       fid_inception_v3, fold_batch_norms)
from kctx.ops.fid_resize import FID_RESIZES, fid_inception_input

INCEPTION_WEIGHTS_FILE = "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5"
DIGITS_CLASSIFIER_FILE = "digits_classifier_v2.keras"


def cache_dir():
    """kctx's cache directory: ``$KCTX_CACHE_DIR`` or, where it is unset or empty,
    ``~/.cache/kctx`` (an empty value is not the current directory)."""
    path = pathlib.Path(os.environ.get("KCTX_CACHE_DIR") or
                        pathlib.Path.home() / ".cache" / "kctx")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _exclusive(path):
    """Hold an exclusive lock on the file ``path`` (created if absent) where the platform
    has ``fcntl`` (POSIX); elsewhere, no lock."""
    try:
        import fcntl
    except ImportError:  # Windows: processes may each do the work; the rename stays atomic
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Extractor:
    """A feature model with its input contract.

    Args:
        name: reported with every score ("inception_v3", "digits_classifier", ...).
        model: maps prepared images (:meth:`scale`) to features (B, D) or
            feature maps (flattened).
        image_size: (height, width) the model expects.
        channels: channels the model expects (1 or 3).
        logits_model: optional model giving class logits, for classifier scores.

    Attributes:
        resize: how images are brought to ``image_size`` (``"antialiased-bilinear"``
            here; the FID Inception's choice for :class:`FIDInceptionExtractor`).
        weights_sha256: the SHA-256 of the weights file, when one was read.
    """

    resize = "antialiased-bilinear"
    weights_sha256 = None

    def __init__(self, name, model, image_size, channels, logits_model=None):
        self.name = name
        self.model = model
        self.image_size = tuple(int(s) for s in image_size)
        self.channels = int(channels)
        self.logits_model = logits_model
        out = getattr(model, "output_shape", None)
        self.feature_dim = int(np.prod(out[1:])) if isinstance(out, tuple) else None

    @property
    def has_logits(self):
        return self.logits_model is not None

    def scale(self, levels):
        """(B, H, W, channels) float levels in [0, 255] → the model's input: an
        antialiased bilinear resize to ``image_size``, then [-1, 1]."""
        if tuple(levels.shape[1:3]) != self.image_size:
            levels = ops.image.resize(levels, self.image_size, interpolation="bilinear",
                                      antialias=True)
        return levels / 127.5 - 1.0

    def __call__(self, images):
        features = self.model(images, training=False)
        # The feature size spelt out: -1 is undefined for an empty batch on JAX.
        size = int(np.prod(features.shape[1:]))
        return ops.reshape(features, (ops.shape(features)[0], size))

    def logits(self, images):
        if self.logits_model is None:
            raise ValueError(f"Extractor {self.name!r} has no classifier head for logits.")
        return self.logits_model(images, training=False)

    def features_and_logits(self, images):
        """``(features, logits or None)`` of prepared images."""
        return self(images), (self.logits(images) if self.has_logits else None)

    def signature(self):
        """What makes two feature sets comparable: extractor, resize, weights file."""
        return {"extractor": self.name, "resize": self.resize,
                "weights_sha256": self.weights_sha256}


class FIDInceptionExtractor(Extractor):
    """The FID Inception (:func:`kctx.models.fid_inception_v3`) as an extractor: pool3
    features (2048) and the unbiased 1008-way logits of the Inception Score, from one
    pass; images prepared by ``resize`` (:func:`kctx.ops.fid_inception_input`).

    Args:
        model: a filled :func:`kctx.models.fid_inception_v3` model.
        resize: ``"tensorflow"`` (the papers' FID), ``"pytorch-fid"`` or ``"clean"``.
        weights_sha256: the SHA-256 of the weights file, recorded with every score.
    """

    def __init__(self, model, resize="tensorflow", weights_sha256=None):
        if resize not in FID_RESIZES:
            raise ValueError(f"`resize` must be one of {FID_RESIZES}. Received: "
                             f"resize={resize!r}")
        super().__init__("fid_inception_v3", model, FID_INCEPTION_SIZE, 3)
        self.feature_dim = FID_INCEPTION_FEATURES
        self.resize = resize
        self.weights_sha256 = weights_sha256
        # Batch norms folded into the convolutions: one fused pass per layer.
        self._forward = compiled_inference(fold_batch_norms(model))

    @property
    def has_logits(self):
        return True

    def scale(self, levels):
        return fid_inception_input(levels, self.image_size, self.resize)

    def features_and_logits(self, images):
        outputs = self._forward(images)
        return outputs["pool3"], outputs["logits_unbiased"]

    def __call__(self, images):
        return self.features_and_logits(images)[0]

    def logits(self, images):
        return self.features_and_logits(images)[1]


def compiled_inference(model):
    """``model(x, training=False)`` compiled once per input shape: a ``tf.function`` on
    TensorFlow, ``jax.jit`` of the stateless call on JAX; on PyTorch the model itself,
    under ``torch.no_grad()`` (as Keras's ``predict``), elsewhere the model itself."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    if backend == "jax":
        import jax

        @jax.jit
        def forward(trainable, non_trainable, x):
            return model.stateless_call(trainable, non_trainable, x, training=False)[0]

        return lambda x: forward([v.value for v in model.trainable_variables],
                                 [v.value for v in model.non_trainable_variables], x)
    if backend == "torch":
        import torch

        def forward_without_gradients(x):
            with torch.no_grad():
                return model(x, training=False)

        return forward_without_gradients
    return lambda x: model(x, training=False)


def prepare_images(images, value_range, extractor):
    """Quantise to uint8 levels, match channels, then the extractor's resize and scale
    (:meth:`Extractor.scale`)."""
    low, high = value_range
    x = ops.cast(images, "float32")
    x = ops.round(ops.clip((x - low) * (255.0 / (high - low)), 0.0, 255.0))
    channels = x.shape[-1]
    if channels != extractor.channels:
        if channels == 1 and extractor.channels == 3:
            x = ops.concatenate([x, x, x], axis=-1)
        elif channels == 3 and extractor.channels == 1:
            x = ops.sum(x * ops.convert_to_tensor([0.299, 0.587, 0.114]), axis=-1, keepdims=True)
        else:
            raise ValueError(
                f"Images have {channels} channels; extractor {extractor.name!r} expects "
                f"{extractor.channels}."
            )
    return extractor.scale(x)


def fid_inception(weights, resize="tensorflow"):
    """The FID Inception extractor, filled from pytorch-fid's or torch-fidelity's file.

    Args:
        weights: the ``.pth`` path (``pt_inception-2015-12-05-6726825d.pth`` or
            ``weights-inception-2015-12-05-6726825d.pth``), a state dict, or
            ``"random"`` (random weights: smoke tests only, not a valid FID).
        resize: ``"tensorflow"``, ``"pytorch-fid"`` or ``"clean"``
            (:func:`kctx.ops.fid_inception_input`).

    Raises:
        RuntimeError: ``weights`` is None: it says where to get the file.
        FileNotFoundError: no file at ``weights``.
        kctx.convert.CheckpointMismatchError: the file is not the FID Inception's.
    """
    if weights is None:
        raise RuntimeError("The FID Inception needs its weights file (weights=PATH), which "
                           "kctx does not download. " + where_to_get_weights())
    model = fid_inception_v3()
    sha256 = None
    if not (isinstance(weights, str) and weights == "random"):
        sha256 = load_fid_inception_weights(model, weights)["sha256"]
    return FIDInceptionExtractor(model, resize=resize, weights_sha256=sha256)


def inception_v3(weights=None):
    """InceptionV3 pool features (2048-d), the paper's FID extractor.

    Args:
        weights: ``None`` for the Keras ImageNet weights from the Keras cache
            (``~/.keras/models/``, downloaded when online), a path to an .h5
            weights file, or ``"random"`` (random init; for smoke tests only,
            not a valid FID).

    Note: these are the Keras application weights, not the 2015-12-05 graph of the
    original FID code, so absolute values are not comparable with papers: use
    :func:`fid_inception` (``extractor="fid_inception_v3"``) for those.
    """
    source = "imagenet" if weights is None else (None if weights == "random" else weights)
    try:
        model = keras.applications.InceptionV3(
            include_top=False, weights=source, pooling="avg", input_shape=(299, 299, 3)
        )
    except Exception as error:  # noqa: BLE001 - download / file errors vary by backend
        cached = pathlib.Path.home() / ".keras" / "models" / INCEPTION_WEIGHTS_FILE
        raise RuntimeError(
            "InceptionV3 ImageNet weights are not available: they are neither in the Keras "
            f"cache ({cached}) nor downloadable here ({type(error).__name__}: {error}). "
            f"Copy {INCEPTION_WEIGHTS_FILE} to that path, or pass weights=PATH."
        ) from None
    return Extractor("inception_v3", model, (299, 299), 3)


def build_digits_classifier():
    """A small CNN for 32×32×1 digits in [-1, 1]; the "features" layer is 128-d."""
    inputs = keras.Input((32, 32, 1))
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    features = keras.layers.Dense(128, activation="relu", name="features")(x)
    logits = keras.layers.Dense(10, name="logits")(features)
    return keras.Model(inputs, logits, name="digits_classifier")


def train_digits_classifier(epochs=15, seed=0, verbose=0):
    """Train the digits classifier on the digits training split (deterministic).

    Returns ``(model, test_accuracy)``.
    """
    from kctx.data import digits

    keras.utils.set_random_seed(seed)
    x_train, y_train = digits("train")
    x_test, y_test = digits("test")
    model = build_digits_classifier()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, batch_size=64, epochs=epochs, verbose=verbose, shuffle=True)
    accuracy = float(model.evaluate(x_test, y_test, verbose=0)[1])
    return model, accuracy


def digits_classifier(weights=None, log=print):
    """The digits classifier as an extractor (FCD): loaded from ``weights`` or
    the kctx cache, trained on the digits training split and cached if absent."""
    path = pathlib.Path(weights) if weights else cache_dir() / DIGITS_CLASSIFIER_FILE
    if weights and not path.exists():
        raise FileNotFoundError(f"Digits classifier weights not found: {path}")
    model = None
    if not path.exists():
        # One process trains it; others started meanwhile (two runs of a study, a run and
        # its evaluation) wait for it and load it.
        with _exclusive(path.with_name(f"{path.name}.lock")):
            if not path.exists():
                model, accuracy = train_digits_classifier()
                # Write then rename, so a process reading the cache never sees half a file.
                partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.keras")
                model.save(partial)
                os.replace(partial, path)
                if log:
                    log(f"trained the digits classifier for FCD (test accuracy "
                        f"{accuracy:.3f}); cached at {path}")
    if model is None:
        # Without its optimizer: an extractor is not trained further, and the optimizer's
        # class is the training backend's (a file trained on PyTorch names
        # keras.src.backend.torch's Adam, whose import loads PyTorch, 6 s, on any backend).
        model = keras.saving.load_model(path, compile=False)
    features = keras.Model(model.inputs, model.get_layer("features").output)
    return Extractor("digits_classifier", features, (32, 32), 1, logits_model=model)


EXTRACTORS = ("fid_inception_v3", "inception_v3", "digits_classifier")
"""The extractors :func:`get_extractor` builds by name."""


def get_extractor(spec, weights=None, resize=None):
    """An :class:`Extractor` from a name, a ``keras.Model`` or an Extractor.

    ``resize`` applies to ``"fid_inception_v3"`` only (default ``"tensorflow"``).
    """
    if isinstance(spec, Extractor):
        if resize is not None and resize != spec.resize:
            raise ValueError(f"The extractor {spec.name!r} resizes with {spec.resize!r}. "
                             f"Received: resize={resize!r}")
        return spec
    if resize is not None and spec != "fid_inception_v3":
        raise ValueError("`resize` chooses the FID Inception's resize; the extractor "
                         f"{spec if isinstance(spec, str) else type(spec).__name__!r} has its "
                         f"own. Received: resize={resize!r}")
    if spec == "fid_inception_v3":
        return fid_inception(weights, resize or "tensorflow")
    if spec == "inception_v3":
        return inception_v3(weights)
    if spec == "digits_classifier":
        return digits_classifier(weights)
    if isinstance(spec, keras.Model):
        shape = spec.input_shape
        return Extractor(spec.name, spec, shape[1:3], shape[-1])
    raise ValueError(
        "`extractor` must be 'fid_inception_v3', 'inception_v3', 'digits_classifier', a "
        f"keras.Model or an Extractor. Received: extractor={spec!r}"
    )
