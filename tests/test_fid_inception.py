"""FID / IS / KID with the field's Inception network: the resizes against their reference
implementations, the Keras network against torch-fidelity's and pytorch-fid's outputs
(tests/fid_inception_check.py, on TensorFlow here, on JAX and PyTorch in
tests/test_backends.py), the
strict weight port, reference statistics files, GenerativeMetrics and the GAN workflow."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import fid_inception_check as check
from kctx.convert import CheckpointMismatchError, load_fid_inception_weights
from kctx.metrics import (FrechetInceptionDistance, GenerativeMetrics, ReferenceStatistics,
                          classifier_score, fid_inception, get_extractor, kernel_distance,
                          load_reference_statistics, save_reference_statistics)
from kctx.models import fid_inception_v3
from kctx.ops.fid_resize import (resize_bicubic_pil, resize_bilinear_tf1,
                                 resize_bilinear_torch)

SIZES = [((32, 32), (299, 299)), ((400, 250), (299, 299)), ((7, 13), (5, 29)), ((5, 5), (5, 5))]


@pytest.mark.parametrize("size,out", SIZES)
def test_tf1_bilinear_is_tensorflow_1s_resize_bilinear(size, out):
    x = np.random.default_rng(0).uniform(0, 255, (2, *size, 3)).astype("float32")
    expected = tf.compat.v1.image.resize_bilinear(x, out, align_corners=False,
                                                  half_pixel_centers=False).numpy()
    np.testing.assert_allclose(resize_bilinear_tf1(x, out), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("size,out", SIZES)
def test_torch_bilinear_is_half_pixel_bilinear_without_antialiasing(size, out):
    # PyTorch's align_corners=False bilinear = TensorFlow 2's half-pixel bilinear, no antialias.
    x = np.random.default_rng(1).uniform(0, 255, (2, *size, 3)).astype("float32")
    expected = tf.image.resize(x, out, method="bilinear", antialias=False).numpy()
    np.testing.assert_allclose(resize_bilinear_torch(x, out), expected, rtol=0, atol=2e-4)


@pytest.mark.parametrize("size,out", SIZES)
def test_pil_bicubic_is_pillows_float_resize(size, out):
    x = np.random.default_rng(2).uniform(0, 255, (2, *size, 3)).astype("float32")
    expected = np.stack([np.stack([np.asarray(Image.fromarray(x[i, :, :, c], mode="F").resize(
        out[::-1], resample=Image.BICUBIC)) for c in range(3)], -1) for i in range(2)])
    np.testing.assert_allclose(resize_bicubic_pil(x, out), expected, rtol=0, atol=2e-4)


@pytest.mark.tf_kernels
def test_fid_inception_equals_the_official_code_on_tensorflow():
    errors = check.check_inputs_and_features()
    assert len(errors) == 2 * 3 * 3


def test_fid_is_kid_equal_torch_fidelity_and_pytorch_fid():
    check.check_metrics()
    check.check_fid_inception_input_modes()


def test_the_network_is_the_2015_graph():
    model = fid_inception_v3()
    assert model.count_params() == 23_885_392  # 21.8M + the 1008-way classifier, no aux head
    assert model.get_layer("Mixed_7c_pool").__class__.__name__ == "MaxPooling2D"
    assert model.get_layer("Mixed_7b_pool").__class__.__name__ == "AveragePooling2D"
    assert model.get_layer("Conv2d_1a_3x3_bn").epsilon == 1e-3
    outputs = model.output
    assert tuple(outputs["pool3"].shape) == (None, 2048)
    assert tuple(outputs["logits_unbiased"].shape) == (None, 1008)


def _state():
    from kctx.checkpoints import torch_state_dict

    return torch_state_dict(check.WEIGHTS)


def test_the_weight_port_names_every_problem():
    model, state = fid_inception_v3(), _state()
    before = [np.array(v) for v in model.weights[:3]]
    missing = dict(state)
    del missing["Mixed_6b.branch7x7_2.conv.weight"]
    with pytest.raises(CheckpointMismatchError,
                       match=r"no checkpoint tensor: Mixed_6b_branch7x7_2_conv/kernel"):
        load_fid_inception_weights(model, missing)
    extra = {**state, "aux_logits.fc.weight": np.zeros((1000, 768), "float32")}
    with pytest.raises(CheckpointMismatchError, match=r"aux_logits\.fc\.weight"):
        load_fid_inception_weights(model, extra)
    shaped = {**state, "fc.bias": np.zeros(1000, "float32")}
    with pytest.raises(CheckpointMismatchError, match=r"fc\.bias: checkpoint \(1000,\)"):
        load_fid_inception_weights(model, shaped)
    for old, variable in zip(before, model.weights[:3]):  # nothing assigned on failure
        np.testing.assert_array_equal(old, np.array(variable))
    counters = {**state, "Conv2d_1a_3x3.bn.num_batches_tracked": np.int64(7)}
    result = load_fid_inception_weights(model, counters)
    assert result["skipped"] == ["Conv2d_1a_3x3.bn.num_batches_tracked"]
    assert result["loaded"] == len(state) and result["sha256"] is None


def test_missing_weights_say_where_to_get_them(tmp_path):
    with pytest.raises(RuntimeError, match="pt_inception-2015-12-05-6726825d.pth.*"
                                           "weights-inception-2015-12-05-6726825d.pth"):
        FrechetInceptionDistance("fid_inception_v3")
    with pytest.raises(FileNotFoundError, match="No FID Inception weights.*release"):
        fid_inception(tmp_path / "absent.pth")
    with pytest.raises(ValueError, match="resize.*Received: resize='bicubic'"):
        fid_inception("random", resize="bicubic")
    with pytest.raises(ValueError, match="`resize` chooses the FID Inception's resize"):
        get_extractor("digits_classifier", resize="clean")


def test_extractor_records_the_weights_file_and_resize():
    extractor = fid_inception(check.WEIGHTS, resize="clean")
    signature = extractor.signature()
    assert signature["extractor"] == "fid_inception_v3" and signature["resize"] == "clean"
    import hashlib

    assert signature["weights_sha256"] == hashlib.sha256(check.WEIGHTS.read_bytes()).hexdigest()


def _feature_model():
    inputs = keras.Input((8, 8, 3))
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(inputs), name="gap")


def test_reference_statistics_round_trip_and_refusals(tmp_path):
    rng = np.random.default_rng(0)
    real = rng.integers(0, 256, (40, 8, 8, 3)).astype("float32")
    generated = np.clip(real + rng.normal(20, 10, real.shape), 0, 255).astype("float32")
    direct = FrechetInceptionDistance(_feature_model(), value_range=(0, 255))
    direct.update_state(real, generated)
    path = direct.save_reference(tmp_path / "stats.npz")
    via_file = FrechetInceptionDistance(_feature_model(), value_range=(0, 255), reference=path)
    via_file.update_state(None, generated)
    assert float(via_file.result()) == pytest.approx(float(direct.result()), rel=1e-10)
    assert via_file.counts() == (40, 40)
    with pytest.raises(ValueError, match="feed generated images only"):
        via_file.update_state(real, None)
    with np.load(path) as data:
        assert set(data) >= {"mu", "sigma", "count", "extractor", "resize"}
        assert str(data["extractor"]) == "gap" and str(data["resize"]) == "antialiased-bilinear"
    # Another extractor or resize: refused, naming both.
    other = ReferenceStatistics(np.zeros(2048), np.eye(2048), 10,
                                {"extractor": "fid_inception_v3", "resize": "clean"})
    save_reference_statistics(tmp_path / "clean.npz", other)
    with pytest.raises(ValueError, match="'fid_inception_v3' and resize 'clean'.*"
                                         "'fid_inception_v3' and resize 'tensorflow'"):
        FrechetInceptionDistance("fid_inception_v3", weights="random",
                                 reference=tmp_path / "clean.npz")
    # A TTUR / pytorch-fid file (mu and sigma only): accepted, with a warning.
    np.savez(tmp_path / "ttur.npz", mu=np.zeros(3), sigma=np.eye(3))
    with pytest.warns(UserWarning, match="records no extractor"):
        stats = load_reference_statistics(tmp_path / "ttur.npz",
                                          expected={"extractor": "x", "resize": "y"})
    assert stats.count is None and stats.features is None
    # Malformed files: clear errors, no pickle.
    np.savez(tmp_path / "bad.npz", mu=np.zeros(3), sigma=np.eye(4))
    with pytest.raises(ValueError, match=r"`sigma` must be \(3, 3\)"):
        load_reference_statistics(tmp_path / "bad.npz")
    np.savez(tmp_path / "nan.npz", mu=np.full(3, np.nan), sigma=np.eye(3))
    with pytest.raises(ValueError, match="NaN or inf"):
        load_reference_statistics(tmp_path / "nan.npz")
    np.savez(tmp_path / "objects.npz", mu=np.array([{}], dtype=object), sigma=np.eye(1))
    with pytest.raises(ValueError, match="pickle"):
        load_reference_statistics(tmp_path / "objects.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="not an .npz"):
        load_reference_statistics(tmp_path / "text.npz")


def test_generative_metrics_fid_is_kid_in_one_pass(tmp_path):
    rng = np.random.default_rng(3)
    real = rng.integers(0, 256, (60, 8, 8, 3)).astype("float32")
    generated = np.clip(real * 0.8 + 30, 0, 255).astype("float32")
    metrics = GenerativeMetrics(_feature_model(), value_range=(0, 255), kid_subsets=5,
                                kid_subset_size=30)
    for start in range(0, 60, 16):
        metrics.update_state(real[start:start + 16], generated[start:start + 16])
    result = metrics.result()
    fid = FrechetInceptionDistance(_feature_model(), value_range=(0, 255))
    fid.update_state(real, generated)
    assert result["frechet_inception_distance"] == pytest.approx(float(fid.result()), rel=1e-10)
    features = lambda x: (x / 127.5 - 1).mean(axis=(1, 2))  # noqa: E731  the GAP extractor
    expected = kernel_distance(features(real), features(generated), subsets=5,
                               subset_size=30, seed=2020)
    # float32 kernels (as torch-fidelity): the GAP of Keras and of NumPy round apart.
    assert result["kernel_inception_distance_mean"] == pytest.approx(expected[0], rel=1e-3)
    assert result["kid_subset_size"] == 30 and "inception_score_mean" not in result
    # KID from a reference file that keeps the real features.
    path = metrics.save_reference(tmp_path / "with_features.npz")
    again = GenerativeMetrics(_feature_model(), value_range=(0, 255), kid_subsets=5,
                              kid_subset_size=30, reference=path)
    again.update_state(None, generated)
    second = again.result()
    assert second["kernel_inception_distance_mean"] == pytest.approx(
        result["kernel_inception_distance_mean"], rel=1e-6)
    assert second["frechet_inception_distance"] == pytest.approx(
        result["frechet_inception_distance"], rel=1e-10)
    # Too few samples for FID (not more than the feature dimensions): said, IS / KID stay.
    small = GenerativeMetrics(_feature_model(), value_range=(0, 255), kid_subset_size=30)
    small.update_state(real[:3], generated[:3])
    assert "more real samples than feature dimensions" in \
        small.result()["frechet_inception_distance_error"]


def test_generative_metrics_with_the_fid_inception_give_the_inception_score():
    images = check.fixture_arrays()[0]["small"]
    metrics = GenerativeMetrics("fid_inception_v3", weights=check.WEIGHTS, value_range=(0, 255),
                                splits=5, kid_subset_size=5)
    metrics.update_state(images, images[::-1])
    result = metrics.result()
    logits = check.fixture_arrays()[1]["small_tensorflow_logits_unbiased"][::-1]
    assert result["inception_score_mean"] == pytest.approx(classifier_score(logits, 5)[0],
                                                           rel=1e-4)
    assert result["extractor"] == "fid_inception_v3" and result["resize"] == "tensorflow"
    assert len(result["weights_sha256"]) == 64 and result["kid_subset_size"] == 5
    assert metrics.features(images).shape == (5, 2048)


def test_classifier_score_splits_as_the_original_code():
    logits = np.random.default_rng(5).standard_normal((103, 7)) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    scores = []
    for i in range(10):  # Salimans et al.'s inception_score.py
        part = p[i * 103 // 10:(i + 1) * 103 // 10]
        kl = part * (np.log(part) - np.log(part.mean(0, keepdims=True)))
        scores.append(np.exp(np.mean(np.sum(kl, 1))))
    mean, std = classifier_score(logits, splits=10)
    assert mean == pytest.approx(np.mean(scores), rel=1e-12)
    assert std == pytest.approx(np.std(scores), rel=1e-12)
    with pytest.raises(ValueError, match="splits"):
        classifier_score(logits, splits=0)


def test_kernel_distance_is_the_unbiased_mmd_with_the_cubic_kernel():
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((40, 5)), rng.standard_normal((40, 5)) + 0.5
    k = lambda a, b: (a @ b.T / 5 + 1) ** 3  # noqa: E731
    m = 40
    expected = ((k(x, x).sum() - np.trace(k(x, x))) / (m * (m - 1))
                + (k(y, y).sum() - np.trace(k(y, y))) / (m * (m - 1)) - 2 * k(x, y).mean())
    value, std = kernel_distance(x, y, subsets=3, subset_size=40, dtype="float64")
    assert value == pytest.approx(expected, rel=1e-10) and std == pytest.approx(0, abs=1e-12)
    with pytest.raises(ValueError, match="subset_size"):
        kernel_distance(x, y, subset_size=41)
    same = rng.standard_normal((40, 5))  # the same distribution as x: MMD² near 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert abs(kernel_distance(x, same, subsets=2, subset_size=40)[0]) < 0.2 * value
