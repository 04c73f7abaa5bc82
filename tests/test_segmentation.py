"""Segmentation models and the embedded digits_seg data."""

import keras
import numpy as np
import pytest

from kctx.layers import context_block_names
from kctx.testing import mirrored_strategy
from kctx.models import dilated_resnet
from segmentation.configs import get_config
from segmentation.data import DIGITS_SEG_CLASSES, IGNORE_LABEL, digits_seg, load_split
from segmentation.models import ResizeToMatch, segmenter


def test_digits_seg_labels_match_the_pixels():
    images, labels = digits_seg("train", num_images=50)
    assert images.shape == (50, 64, 64, 3) and labels.shape == (50, 64, 64)
    assert images.dtype == np.float32 and labels.dtype == np.uint8
    assert set(np.unique(labels)) <= set(range(DIGITS_SEG_CLASSES)) | {IGNORE_LABEL}
    np.testing.assert_array_equal(images[..., 0], images[..., 2])
    grey = images[..., 0]
    digit = (labels > 0) & (labels != IGNORE_LABEL)
    # Digit pixels are bright strokes, background is dark, the band between is ignored.
    assert grey[digit].min() >= 0.35 * 2 - 1 - 1e-6
    assert grey[labels == 0].max() < 0.2 * 2 - 1
    assert 0.03 < digit.mean() < 0.3 and (labels == IGNORE_LABEL).mean() < digit.mean()
    # Every canvas has at least one digit; every class appears in 50 canvases.
    assert digit.reshape(50, -1).any(axis=1).all()
    assert set(np.unique(labels[digit])) == set(range(1, 11))
    again_images, again_labels = digits_seg("train", num_images=50)
    np.testing.assert_array_equal(again_labels, labels)
    np.testing.assert_array_equal(again_images, images)
    test_images, _ = digits_seg("test", num_images=5)
    assert not np.array_equal(test_images, images[:5])
    with pytest.raises(ValueError, match="`split` must be 'train' or 'test'. Received: split='a"):
        digits_seg("all")


def test_digits_seg_large_has_large_digits_and_its_boxes():
    """digits_seg_large (the config's layout): 1-3 digits of 48-96 px on 128² canvases; the
    boxes returned are those drawn, and each digit's pixels lie in its box."""
    from segmentation.data import DIGIT_LAYOUTS

    config = get_config("digits_seg_large")
    images, labels, boxes = digits_seg("test", num_images=20, image_size=config.image_size,
                                       return_boxes=True, **DIGIT_LAYOUTS[config.dataset])
    assert images.shape == (20, 128, 128, 3) and len(boxes) == 20
    assert all(1 <= len(canvas) <= 3 for canvas in boxes)
    for canvas_labels, canvas in zip(labels, boxes):
        inside = np.zeros(canvas_labels.shape, bool)
        for top, left, bottom, right, digit in canvas:
            assert 48 <= bottom - top == right - left <= 96
            inside[top:bottom, left:right] = True
            window = canvas_labels[top:bottom, left:right]
            assert (window == digit + 1).any()
        assert not ((canvas_labels > 0) & (canvas_labels != IGNORE_LABEL) & ~inside).any()
    split = load_split(config, "test", num_images=3)
    image, label = split.decode(0)
    np.testing.assert_array_equal(label.numpy(), labels[0])
    with pytest.raises(ValueError, match="digit_sizes=\\(0, 10\\)"):
        digits_seg("test", num_images=1, digit_sizes=(0, 10))


def test_backbones_are_kctx_dilated_resnets():
    # The layout itself (and its equality with torchvision's) is tested in test_resnet.py.
    model = segmenter("resnet_tiny", 8, "none", 3, input_shape=(64, 64, 3), head_channels=16)
    backbone = model.get_layer("backbone")
    assert backbone.output_shape == (None, 8, 8, 512)
    assert backbone.count_params() == dilated_resnet(14, 8, width=16).count_params()
    assert [layer.name for layer in model.layers[:3]] == ["images", "input_normalization",
                                                          "backbone"]


def test_resize_to_match_takes_the_reference_size_at_run_time():
    x = keras.Input((None, None, 4))
    reference = keras.Input((None, None, 3))
    model = keras.Model([x, reference], ResizeToMatch()([x, reference]))
    out = model([np.ones((2, 3, 5, 4), "float32"), np.zeros((2, 12, 20, 3), "float32")])
    assert out.shape == (2, 12, 20, 4)
    np.testing.assert_allclose(out, 1.0)


@pytest.mark.parametrize("context", ("aspp",) + context_block_names())
def test_segmenter_with_every_context_trains_saves_and_reloads(context, tmp_path):
    keras.utils.set_random_seed(0)
    model = segmenter("resnet_tiny", 8, context, DIGITS_SEG_CLASSES, head_channels=32)
    images, labels = digits_seg("train", num_images=4, image_size=32)
    outputs = model(images)
    assert outputs.shape == (4, 32, 32, DIGITS_SEG_CLASSES) and outputs.dtype == "float32"
    # A step run eagerly: each block's traced and XLA fit steps are its layer test's
    # (kctx.testing.run_layer_test), the traced segmenter's the workflow tests'.
    model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                             ignore_class=IGNORE_LABEL),
                  run_eagerly=True)
    history = model.fit(images, labels.astype("int32"), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    path = tmp_path / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(reloaded(images, training=False), model(images, training=False),
                               atol=1e-4)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="output_stride"):
        segmenter("resnet_tiny", 32, "ham_nmf", 11)
    with pytest.raises(ValueError, match="context"):
        segmenter("resnet_tiny", 8, "deeplab", 11)
    with pytest.raises(ValueError, match="backbone"):
        segmenter("resnet18", 8, "ham_nmf", 11)


def test_synchronized_batch_norm_step_on_two_replicas():
    strategy = mirrored_strategy(2)
    if strategy is None:
        pytest.skip("needs 2 logical CPUs")
    images, labels = digits_seg("train", num_images=4, image_size=32)
    with strategy.scope():
        model = segmenter("resnet_tiny", 16, "ham_nmf", DIGITS_SEG_CLASSES, head_channels=32,
                          synchronized_batch_norm=True, context_kwargs={"init": "fixed",
                                                                        "seed": 0})
        model.compile(keras.optimizers.SGD(0.01),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 ignore_class=IGNORE_LABEL))
    assert all(layer.synchronized for layer in model.get_layer("backbone").layers
               if isinstance(layer, keras.layers.BatchNormalization))
    history = model.fit(images, labels.astype("int32"), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_poly_learning_rate():
    from segmentation.workflow import poly_schedule

    config = get_config("digits_seg", steps=100, learning_rate=0.009)
    schedule = poly_schedule(config)
    for step in (0, 1, 50, 99, 100):
        expected = 0.009 * (1 - step / 100) ** 0.9
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-12), step


def test_augmentation_keeps_image_and_labels_aligned():
    import tensorflow as tf

    from segmentation.data import augment

    # Labels in 8×8 blocks; the image encodes each pixel's label as label / 20,
    # the ignore label as −1. After rescale, crop and flip, every pixel whose
    # label is not 255 and whose 3×3 neighbourhood has one label must still
    # read label / 20 (bilinear and nearest agree away from block edges).
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 11, size=(8, 8))
    blocks[0, 0] = IGNORE_LABEL
    label = np.kron(blocks, np.ones((8, 8), int)).astype(np.int32)
    image = np.where(label == IGNORE_LABEL, -1.0, label / 20.0).astype(np.float32)[..., None]
    image = np.repeat(image, 3, axis=-1)
    for index in range(12):
        out_image, out_label = augment(tf.constant(image), tf.constant(label),
                                       tf.constant([3, index], tf.int64), 48, (0.5, 2.0))
        out_image, out_label = out_image.numpy()[..., 0], out_label.numpy()
        assert out_image.shape == (48, 48) and out_label.shape == (48, 48)
        padded = np.pad(out_label, 1, mode="edge")
        uniform = np.all([padded[1 + dy:49 + dy, 1 + dx:49 + dx] == out_label
                          for dy in (-1, 0, 1) for dx in (-1, 0, 1)], axis=0)
        check = uniform & (out_label != IGNORE_LABEL)
        assert check.sum() > 100
        np.testing.assert_allclose(out_image[check], out_label[check] / 20.0, atol=1e-5)
        again = augment(tf.constant(image), tf.constant(label), tf.constant([3, index], tf.int64),
                        48, (0.5, 2.0))
        np.testing.assert_array_equal(again[1].numpy(), out_label)  # a function of the seed
    # Without rescaling and with a full-size crop, the output is the input or its mirror,
    # and both occur.
    mirrored = []
    for index in range(12):
        out_image, out_label = augment(tf.constant(image), tf.constant(label),
                                       tf.constant([5, index], tf.int64), 64, (1.0, 1.0))
        flipped = np.array_equal(out_label.numpy(), label[:, ::-1])
        assert flipped or np.array_equal(out_label.numpy(), label)
        np.testing.assert_array_equal(out_image.numpy(), image[:, ::-1] if flipped else image)
        mirrored.append(flipped)
    assert 0 < sum(mirrored) < 12
    # A crop larger than the rescaled image is padded with image 0 and the ignore label.
    out_image, out_label = augment(tf.constant(image), tf.constant(label),
                                   tf.constant([0, 0], tf.int64), 80, (0.5, 0.5))
    ignored = out_label.numpy() == IGNORE_LABEL
    values = out_image.numpy()[..., 0][ignored]
    # 80² − 32² padding pixels read 0; the 4×4 rescaled ignore block reads −1.
    assert (values == 0.0).sum() == 80 * 80 - 32 * 32 and (values == -1.0).sum() == 16


def test_scores_match_a_hand_computed_confusion_matrix():
    from segmentation.workflow import segmentation_scores

    labels = np.array([[[0, 0, 1, 1], [2, 2, 255, 255]]], np.int32)
    predicted = np.array([[[0, 1, 1, 1], [2, 0, 2, 1]]])
    logits = np.eye(3, dtype=np.float32)[predicted]
    dataset = [(np.zeros((1, 2, 4, 3), np.float32), labels)]
    scores = segmentation_scores(lambda images, training: logits, dataset, 3)
    # Six counted pixels (two ignored). Rows are labels, columns predictions:
    # [[1, 1, 0], [0, 2, 0], [1, 0, 1]]; IoU = 1/3, 2/3, 1/2.
    assert scores["pixels"] == 6
    assert scores["pixel_accuracy"] == pytest.approx(4 / 6)
    assert scores["miou"] == pytest.approx((1 / 3 + 2 / 3 + 1 / 2) / 3, rel=1e-6)


def test_train_resumes_saves_and_reports_miou_and_evaluate_rescores(tmp_path):
    from segmentation.train import train

    messages = []
    common = dict(config="digits_seg", steps=4, batch_size=4, crop_size=32, verbose=0,
                  model_dir=tmp_path, checkpoint_every=2, eval_images=16)
    first = train(**common, stop_after_step=2, log=messages.append)
    assert int(first["model"].optimizer.iterations.numpy()) == 2
    results = train(**common, log=messages.append)
    assert any("at step 2" in m for m in messages)  # resumed from the first call's checkpoint
    assert int(results["model"].optimizer.iterations.numpy()) == 4
    assert 0.0 <= results["miou"] <= 1.0 and 0.0 <= results["pixel_accuracy"] <= 1.0
    assert results["pixels"] > 0.9 * 16 * 64 * 64  # full 64×64 test canvases, 255s excluded
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    images, _ = digits_seg("test", num_images=2)
    np.testing.assert_allclose(reloaded(images, training=False),
                               results["model"](images, training=False), atol=1e-4)
    assert any(m.startswith("mIoU") for m in messages)
    # segmentation.evaluate reloads the run: single-scale reproduces the score train printed.
    from segmentation.evaluate import evaluate

    quiet = dict(log=lambda *_: None)
    single = evaluate(tmp_path, prediction_images=3, **quiet)
    assert single["miou"] == pytest.approx(results["miou"], abs=1e-6)
    assert single["pixels"] == results["pixels"]
    multi = evaluate(tmp_path, eval_multi_scale=True, eval_flip=True, prediction_images=3,
                     eval_images=8, **quiet)
    assert 0.9 * 8 * 64 * 64 < multi["pixels"] <= 8 * 64 * 64
    assert multi["scales"] == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75] and multi["flip"]
    assert 0.0 <= multi["miou"] <= 1.0
    png = keras.utils.load_img(tmp_path / multi["predictions"])
    assert png.size == (3 * 64 * 3, 3 * 64 * 3)  # 3 columns × 3 rows of 64², enlarged ×3
    with pytest.raises(ValueError, match="can only change the evaluation fields"):
        evaluate(tmp_path, steps=8, **quiet)


def test_multi_scale_flip_scores_are_mirror_symmetric_and_reduce_to_softmax():
    from segmentation.workflow import predict_scores

    keras.utils.set_random_seed(1)
    model = segmenter("resnet_tiny", 16, "none", 5, head_channels=16)
    images, _ = digits_seg("test", num_images=2, image_size=32)
    plain = predict_scores(model, images)
    np.testing.assert_allclose(plain, keras.ops.softmax(model(images), axis=-1), atol=1e-6)
    scores = predict_scores(model, images, scales=(0.5, 1.0, 1.5), flip=True)
    mirrored = predict_scores(model, images[:, :, ::-1], scales=(0.5, 1.0, 1.5), flip=True)
    np.testing.assert_allclose(scores, np.asarray(mirrored)[:, :, ::-1], atol=1e-5)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 6.0, atol=1e-4)  # 3 scales × 2


def test_voc_palette_colours():
    from segmentation.workflow import voc_palette

    palette = voc_palette()
    assert palette[0].tolist() == [0, 0, 0] and palette[1].tolist() == [128, 0, 0]
    assert palette[2].tolist() == [0, 128, 0] and palette[15].tolist() == [192, 128, 128]
    assert palette[IGNORE_LABEL].tolist() == [255, 255, 255]


def test_backbone_weights_are_loaded_from_a_file(tmp_path):
    backbone = dilated_resnet(14, 16, width=16)
    path = tmp_path / "backbone.weights.h5"
    backbone.save_weights(path)
    model = segmenter("resnet_tiny", 16, "none", 3, head_channels=16, backbone_weights=path)
    for a, b in zip(backbone.weights, model.get_layer("backbone").weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_torchvision_backbone_weights_see_torchvision_normalised_images():
    import pathlib

    checkpoint = pathlib.Path(__file__).parent / "fixtures" / "resnet" / "resnet50_torchvision.pth"
    model = segmenter("resnet50", 16, "none", 3, head_channels=16,
                      backbone_weights=str(checkpoint))
    reference = dilated_resnet(50, 16, weights=checkpoint)
    for a, b in zip(reference.weights, model.get_layer("backbone").weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # The segmenter's [-1, 1] images reach the backbone as torchvision's ImageNet input.
    images = np.random.default_rng(0).uniform(-1, 1, (2, 21, 19, 3)).astype("float32")
    normalized = ((images + 1) / 2 - np.array([0.485, 0.456, 0.406])) / np.array(
        [0.229, 0.224, 0.225])
    expected = reference.predict(normalized.astype("float32"), verbose=0)
    got = model.get_layer("backbone")(model.get_layer("input_normalization")(images))
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


@pytest.mark.parametrize("size,rate", [(8, 12), (8, 8), (8, 3), (5, 2)])
def test_atrous_conv_equals_keras_dilated_conv(size, rate):
    from segmentation.models import AtrousConv2D

    x = np.random.default_rng(size + rate).standard_normal((2, size, size, 5)).astype("float32")
    atrous = AtrousConv2D(4, rate)
    atrous(x)
    reference = keras.layers.Conv2D(4, 3, padding="same", dilation_rate=rate, use_bias=False)
    reference(x)
    reference.kernel.assign(atrous.kernel)
    np.testing.assert_allclose(atrous(x), reference(x), atol=1e-5)
    # NumPy reference of y[i, j] = Σ_{di, dj ∈ {−1, 0, 1}} x[i + r·di, j + r·dj] w[di, dj]
    # with zero padding (DeepLabV3, Sec. 3.1).
    kernel = keras.ops.convert_to_numpy(atrous.kernel)
    padded = np.pad(x, ((0, 0), (rate, rate), (rate, rate), (0, 0)))
    expected = sum(padded[:, rate + rate * di:rate + rate * di + size,
                          rate + rate * dj:rate + rate * dj + size] @ kernel[di + 1, dj + 1]
                   for di in (-1, 0, 1) for dj in (-1, 0, 1))
    np.testing.assert_allclose(atrous(x), expected, atol=1e-5)
    # Unknown spatial sizes take the general path and agree too.
    inputs = keras.Input((None, None, 5))
    model = keras.Model(inputs, atrous(inputs))
    np.testing.assert_allclose(model(x), reference(x), atol=1e-5)


def test_evaluate_names_a_directory_without_a_run(tmp_path):
    from segmentation.evaluate import evaluate

    with pytest.raises(FileNotFoundError, match="a run folder written by segmentation.train"):
        evaluate(tmp_path)


def test_bench_times_the_training_step_compiled_on_request(tmp_path, capsys):
    """``python -m segmentation.bench --train-step``: the workflow's model, optimizer and loss
    as ``fit`` steps them, at the batch and crop asked for, with ``jit_compile=True`` when
    asked (XLA here, on TensorFlow)."""
    import json

    from segmentation import bench

    path = tmp_path / "step.json"
    assert bench.main(["--train-step", "--config", "digits_seg", "--batch-size", "2",
                       "--crop-size", "32", "--repeats", "2", "--warmup", "1", "--jit-compile",
                       "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    assert (result["config"], result["batch_size"], result["crop_size"]) == ("digits_seg", 2, 32)
    assert result["jit_compile"] is True and result["backend"] == keras.backend.backend()
    assert len(result["times_ms"]) == 2 and result["step_ms"] > 0
    assert (f"{keras.backend.backend()}, jit_compile=True: digits_seg training step, batch 2 "
            f"of 32²") in capsys.readouterr().out
