import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from kctx.metrics import (
    ClassifierScore,
    FrechetInceptionDistance,
    classifier_score,
    digits_classifier,
    frechet_distance,
    image_batches,
    inception_v3,
    prepare_images,
)
from kctx.testing import mirrored_strategy


def _reference_frechet(mu1, s1, mu2, s2):
    """Independent form: Tr((Σ₁Σ₂)^½) = Σ √λ(Σ₁^½ Σ₂ Σ₁^½) with NumPy eigh."""
    w, v = np.linalg.eigh(s1)
    root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    lam = np.linalg.eigvalsh(root @ s2 @ root)
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2)
                 - 2 * np.sum(np.sqrt(np.clip(lam, 0, None))))


def _random_gaussian(rng, dim):
    a = rng.standard_normal((dim, dim))
    return rng.standard_normal(dim), a @ a.T / dim + 0.1 * np.eye(dim)


def test_frechet_distance_on_known_gaussians():
    # 1-D: (μ₁ − μ₂)² + (σ₁ − σ₂)².
    assert frechet_distance([1.0], [[4.0]], [3.0], [[9.0]]) == pytest.approx(4 + 1)
    # Diagonal: Σᵢ (μ₁ᵢ − μ₂ᵢ)² + (√a₁ᵢ − √a₂ᵢ)².
    a1, a2 = np.array([1.0, 2.0, 3.0]), np.array([4.0, 0.5, 3.0])
    mu1, mu2 = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    expected = np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(a1) - np.sqrt(a2)) ** 2)
    assert frechet_distance(mu1, np.diag(a1), mu2, np.diag(a2)) == pytest.approx(expected)
    rng = np.random.default_rng(0)
    (m1, s1), (m2, s2) = _random_gaussian(rng, 16), _random_gaussian(rng, 16)
    assert frechet_distance(m1, s1, m2, s2) == pytest.approx(_reference_frechet(m1, s1, m2, s2),
                                                             rel=1e-8)
    assert frechet_distance(m1, s1, m1, s1) == pytest.approx(0.0, abs=1e-8)


def test_frechet_distance_retries_singular_covariances():
    sigma = np.zeros((3, 3))
    with pytest.warns(UserWarning, match="singular"):
        value = frechet_distance(np.zeros(3), sigma, np.ones(3), sigma)
    assert np.isfinite(value) and value == pytest.approx(3.0, abs=1e-4)


def _feature_model(shape):
    inputs = keras.Input(shape)
    return keras.Model(inputs, keras.layers.Flatten()(inputs), name="flatten_features")


def _gaussian_images(rng, n, mean, scale, shape=(2, 2, 1)):
    """Integer-valued images in [0, 255], so quantisation leaves them unchanged."""
    x = mean + scale * rng.standard_normal((n,) + shape)
    return np.clip(np.round(x), 0, 255).astype("float32")


def test_streaming_fid_matches_reference_and_batch_splits():
    rng = np.random.default_rng(1)
    real = _gaussian_images(rng, 400, 120, 30)
    fake = _gaussian_images(rng, 300, 140, 20)
    metric = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    metric.update_state(real, fake)
    # The extractor runs in float32; the statistics are accumulated in float64.
    fr = (real.reshape(400, -1) / np.float32(127.5) - np.float32(1)).astype("float64")
    ff = (fake.reshape(300, -1) / np.float32(127.5) - np.float32(1)).astype("float64")
    expected = _reference_frechet(fr.mean(0), np.cov(fr, rowvar=False),
                                  ff.mean(0), np.cov(ff, rowvar=False))
    assert float(metric.result()) == pytest.approx(expected, rel=1e-9)
    assert metric.name == "fid" and metric.extractor_name == "flatten_features"
    # Same samples, other batch splits (and real / generated fed separately).
    split = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    for chunk in np.array_split(real, 7):
        split.update_state(chunk, None)
    for chunk in np.array_split(fake, 3):
        split.update_state(None, chunk)
    assert float(split.result()) == pytest.approx(float(metric.result()), rel=1e-10)
    assert split.counts() == (400, 300)
    split.reset_state()
    assert split.counts() == (0, 0)


def test_fid_needs_more_samples_than_dimensions():
    rng = np.random.default_rng(2)
    metric = FrechetInceptionDistance(_feature_model((4, 4, 1)), value_range=(0, 255))
    metric.update_state(_gaussian_images(rng, 10, 100, 10, (4, 4, 1)),
                        _gaussian_images(rng, 50, 100, 10, (4, 4, 1)))
    with pytest.raises(ValueError, match=r"more real samples than feature dimensions \(16\).*10"):
        metric.result()


def test_fid_of_one_sample_is_an_error_not_a_number():
    metric = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    image = np.full((1, 2, 2, 1), 100.0, "float32")
    metric.update_state(image, image)
    with pytest.raises(ValueError, match=r"more real samples than feature dimensions \(4\).*1"):
        metric.result()


def test_fid_of_images_with_nan_is_an_error_naming_the_side_and_count():
    rng = np.random.default_rng(4)
    real = _gaussian_images(rng, 40, 100, 25)
    fake = _gaussian_images(rng, 40, 100, 25)
    fake[3, 0, 0, 0] = np.nan
    fake[7, 1, 1, 0] = np.inf
    metric = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    for r, f in zip(np.array_split(real, 3), np.array_split(fake, 3)):
        metric.update_state(r, f)
    assert metric.nonfinite_counts() == (0, 2)
    with pytest.raises(ValueError, match="2 of the 40 generated images hold NaN or inf"):
        metric.result()
    metric.reset_state()
    assert metric.nonfinite_counts() == (0, 0) and metric.counts() == (0, 0)
    with pytest.raises(ValueError, match="`sigma2` holds 1 NaN"):
        frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), [[1.0, 0.0], [0.0, np.nan]])


def test_fid_of_identical_sets_is_zero():
    rng = np.random.default_rng(5)
    images = _gaussian_images(rng, 200, 120, 30)
    metric = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    metric.update_state(images, images[::-1])
    value = float(metric.result())
    assert 0.0 <= value < 1e-9
    features = (images.reshape(200, -1) / 127.5 - 1).astype("float64")
    mu, sigma = features.mean(0), np.cov(features, rowvar=False)
    assert 0.0 <= frechet_distance(mu, sigma, mu, sigma) < 1e-9


def test_fid_accumulates_across_replicas():
    strategy = mirrored_strategy(2)
    rng = np.random.default_rng(3)
    real = _gaussian_images(rng, 64, 100, 25)
    fake = _gaussian_images(rng, 64, 90, 25)
    single = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    single.update_state(real, fake)
    with strategy.scope():
        distributed = FrechetInceptionDistance(_feature_model((2, 2, 1)), value_range=(0, 255))
    dataset = tf.data.Dataset.from_tensor_slices((real, fake)).batch(16)
    for r, f in strategy.experimental_distribute_dataset(dataset):
        strategy.run(distributed.update_state, args=(r, f))
    assert distributed.counts() == (64, 64)
    assert float(distributed.result()) == pytest.approx(float(single.result()), rel=1e-9)


def test_prepare_images_quantises_resizes_and_matches_channels():
    extractor = digits_classifier()
    x = np.linspace(-1, 1, 16 * 16).reshape(1, 16, 16, 1).astype("float32")
    out = keras.ops.convert_to_numpy(prepare_images(x, (-1, 1), extractor))
    assert out.shape == (1, 32, 32, 1) and out.min() >= -1 and out.max() <= 1
    levels = keras.ops.convert_to_numpy(prepare_images(x[:, :, :1], (-1, 1), extractor))
    assert levels.shape == (1, 32, 32, 1)
    # Quantisation: values land on the 256 uint8 levels before the resize.
    same = keras.ops.convert_to_numpy(prepare_images(np.full((1, 32, 32, 1), 0.3, "float32"),
                                                     (-1, 1), extractor))
    np.testing.assert_allclose(same, np.round(1.3 * 127.5) / 127.5 - 1, atol=1e-6)


def test_digits_classifier_is_trained_once_by_processes_started_together(tmp_path,
                                                                          monkeypatch):
    """The cache's lock: while one process trains the classifier, another waits on the lock
    (here: a non-blocking attempt from a second open file fails), then loads the file."""
    import fcntl
    import threading

    from kctx.metrics import extractors

    monkeypatch.setenv("KCTX_CACHE_DIR", str(tmp_path))
    attempts, trained = [], []

    def train(epochs=15, seed=0, verbose=0):
        def try_lock():
            with open(tmp_path / f"{extractors.DIGITS_CLASSIFIER_FILE}.lock", "a") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    attempts.append("acquired")
                except BlockingIOError:
                    attempts.append("waits")

        other = threading.Thread(target=try_lock)
        other.start()
        other.join()
        trained.append(seed)
        return extractors.build_digits_classifier(), 0.5

    monkeypatch.setattr(extractors, "train_digits_classifier", train)
    first = extractors.digits_classifier(log=None)
    assert attempts == ["waits"] and trained == [0]
    assert (tmp_path / extractors.DIGITS_CLASSIFIER_FILE).exists()
    assert not list(tmp_path.glob("*.partial.keras"))
    second = extractors.digits_classifier(log=None)  # loaded, not trained again
    assert trained == [0]
    for a, b in zip(first.model.weights, second.model.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_digits_classifier_fcd_separates_real_from_noise():
    from kctx.data import digits

    extractor = digits_classifier()
    x_train, _ = digits("train")
    x_test, y_test = digits("test")
    accuracy = np.mean(np.argmax(keras.ops.convert_to_numpy(extractor.logits(x_test)), -1)
                       == y_test)
    assert accuracy > 0.95, accuracy
    fcd = FrechetInceptionDistance("digits_classifier")
    assert fcd.name == "fcd"
    fcd.update_state(x_train, x_test)
    real_vs_real = float(fcd.result())
    fcd.reset_state()
    noise = np.random.default_rng(0).uniform(-1, 1, x_test.shape).astype("float32")
    fcd.update_state(x_train, noise)
    assert float(fcd.result()) > 20 * real_vs_real


def test_inception_extractor_builds_and_reports_missing_weights(monkeypatch):
    extractor = inception_v3(weights="random")
    assert extractor.feature_dim == 2048 and extractor.image_size == (299, 299)

    def offline(*args, **kwargs):
        raise OSError("URL fetch failure")

    monkeypatch.setattr(keras.applications, "InceptionV3", offline)
    with pytest.raises(RuntimeError, match="inception_v3_weights_tf_dim_ordering_tf_kernels_notop"):
        inception_v3()


def test_image_batches_reads_a_folder_and_names_what_it_cannot_read(tmp_path, monkeypatch):
    from PIL import Image

    for i, size in enumerate([(8, 6), (8, 6), (8, 6), (5, 4)]):
        Image.new("RGB" if i else "L", size, (i * 40, 0, 0) if i else 7).save(tmp_path / f"{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    batches = list(image_batches(tmp_path, batch_size=2))
    assert [b.shape for b in batches] == [(2, 6, 8, 3), (1, 6, 8, 3), (1, 4, 5, 3)]
    assert all(b.dtype == np.uint8 for b in batches)
    assert batches[0][0, 0, 0].tolist() == [7, 7, 7] and batches[0][1, 0, 0].tolist() == [40, 0, 0]
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ValueError, match="broken.png"):
        list(image_batches(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no image"):
        list(image_batches(tmp_path / "empty"))
    with pytest.raises(ValueError, match="No folder of images"):
        list(image_batches(tmp_path / "missing"))
    # kctx's own dependencies leave Pillow out ("kctx[torch]"): say what to install.
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match="pip install pillow"):
        list(image_batches(tmp_path))


def test_classifier_score_references():
    assert classifier_score(np.zeros((50, 10)))[0] == pytest.approx(1.0)
    confident = np.full((100, 4), -30.0)
    confident[np.arange(100), np.arange(100) % 4] = 30.0
    assert classifier_score(confident)[0] == pytest.approx(4.0, rel=1e-6)
    logits = np.random.default_rng(4).standard_normal((300, 10)) * 3
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    expected = np.exp(np.mean(np.sum(p * (np.log(p) - np.log(p.mean(0))), axis=1)))
    assert classifier_score(logits)[0] == pytest.approx(expected, rel=1e-10)
    streaming = ClassifierScore(10)
    for chunk in np.array_split(logits, 7):
        streaming.update_state(chunk)
    assert float(streaming.result()) == pytest.approx(expected, rel=1e-10)
    mean, std = classifier_score(logits, splits=3)
    assert std >= 0 and mean > 1


def test_the_cache_is_kctx_cache_dir_or_the_home_cache(tmp_path, monkeypatch):
    """``KCTX_CACHE_DIR=`` (set but empty, as a shell script's unset variable gives) is the
    home cache, not the current directory."""
    from kctx.metrics.extractors import cache_dir

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KCTX_CACHE_DIR", str(tmp_path / "given"))
    assert cache_dir() == tmp_path / "given" and cache_dir().is_dir()
    for value in ("", None):
        if value is None:
            monkeypatch.delenv("KCTX_CACHE_DIR")
        else:
            monkeypatch.setenv("KCTX_CACHE_DIR", value)
        assert cache_dir() == tmp_path / "home" / ".cache" / "kctx" and cache_dir().is_dir()
