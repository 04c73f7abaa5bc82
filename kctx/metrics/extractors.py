"""Feature extractors for Fréchet distances and classifier scores."""

import os
import pathlib

import keras
import numpy as np
from keras import ops

INCEPTION_WEIGHTS_FILE = "inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5"
DIGITS_CLASSIFIER_FILE = "digits_classifier_v2.keras"


def cache_dir():
    """kctx's cache directory: ``$KCTX_CACHE_DIR`` or ``~/.cache/kctx``."""
    path = pathlib.Path(os.environ.get("KCTX_CACHE_DIR", pathlib.Path.home() / ".cache" / "kctx"))
    path.mkdir(parents=True, exist_ok=True)
    return path


class Extractor:
    """A feature model with its input contract.

    Args:
        name: reported with every score ("inception_v3", "digits_classifier", ...).
        model: maps preprocessed images (in [-1, 1]) to features (B, D) or
            feature maps (flattened).
        image_size: (height, width) the model expects.
        channels: channels the model expects (1 or 3).
        logits_model: optional model giving class logits, for classifier scores.
    """

    def __init__(self, name, model, image_size, channels, logits_model=None):
        self.name = name
        self.model = model
        self.image_size = tuple(int(s) for s in image_size)
        self.channels = int(channels)
        self.logits_model = logits_model
        out = model.output_shape if hasattr(model, "output_shape") else None
        self.feature_dim = int(np.prod(out[1:])) if out is not None else None

    def __call__(self, images):
        features = self.model(images, training=False)
        # The feature size spelt out: -1 is undefined for an empty batch on JAX.
        size = int(np.prod(features.shape[1:]))
        return ops.reshape(features, (ops.shape(features)[0], size))

    def logits(self, images):
        if self.logits_model is None:
            raise ValueError(f"Extractor {self.name!r} has no classifier head for logits.")
        return self.logits_model(images, training=False)


def prepare_images(images, value_range, extractor):
    """Quantise to uint8 levels, match channels, antialiased resize, map to [-1, 1]."""
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
    if tuple(x.shape[1:3]) != extractor.image_size:
        x = ops.image.resize(x, extractor.image_size, interpolation="bilinear", antialias=True)
    return x / 127.5 - 1.0


def inception_v3(weights=None):
    """InceptionV3 pool features (2048-d), the paper's FID extractor.

    Args:
        weights: ``None`` for the Keras ImageNet weights from the Keras cache
            (``~/.keras/models/``, downloaded when online), a path to an .h5
            weights file, or ``"random"`` (random init; for smoke tests only,
            not a valid FID).

    Note: these are the Keras application weights, not the TF-slim graph of
    the original FID code, so absolute values are not comparable with papers.
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
    if path.exists():
        model = keras.saving.load_model(path)
    else:
        if weights:
            raise FileNotFoundError(f"Digits classifier weights not found: {path}")
        model, accuracy = train_digits_classifier()
        # Write then rename, so a process reading the cache never sees half a file.
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.keras")
        model.save(partial)
        os.replace(partial, path)
        if log:
            log(f"trained the digits classifier for FCD (test accuracy {accuracy:.3f}); "
                f"cached at {path}")
    features = keras.Model(model.inputs, model.get_layer("features").output)
    return Extractor("digits_classifier", features, (32, 32), 1, logits_model=model)


def get_extractor(spec, weights=None):
    """An :class:`Extractor` from a name, a ``keras.Model`` or an Extractor."""
    if isinstance(spec, Extractor):
        return spec
    if spec == "inception_v3":
        return inception_v3(weights)
    if spec == "digits_classifier":
        return digits_classifier(weights)
    if isinstance(spec, keras.Model):
        shape = spec.input_shape
        return Extractor(spec.name, spec, shape[1:3], shape[-1])
    raise ValueError(
        "`extractor` must be 'inception_v3', 'digits_classifier', a keras.Model or an "
        f"Extractor. Received: extractor={spec!r}"
    )
