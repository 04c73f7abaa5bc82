"""The classification workflow: configs, schedule, pipelines (digits and mocked TFDS), training."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from classification.configs import CONFIGS, MODELS, get_config, model_label
from classification.data import eval_preprocess, evaluation_batches, train_preprocess, \
    training_batches
from classification.workflow import build_model, build_optimizer, compile_model, \
    learning_rate_schedule
from kctx.data import DatasetNotFoundError, digits
from kctx.testing import mirrored_strategy

tfds = pytest.importorskip("tensorflow_datasets")

_QUIET = dict(verbose=0, log=lambda *_: None)


def test_imagenet_config_is_the_papers_recipe():
    config = get_config("imagenet")
    assert (config.dataset, config.num_classes, config.image_size, config.resize) == \
        ("imagenet2012", 1000, 224, 256)
    assert (config.epochs, config.learning_rate, config.decay_epochs, config.decay_factor) == \
        (150, 0.1, (80, 105, 120), 0.1)
    assert (config.momentum, config.dropout_rate, config.flip) == (0.9, 0.2, True)
    assert (config.train_split, config.eval_split) == ("train", "validation")
    with pytest.raises(ValueError, match="Unknown classification config 'mnist'"):
        get_config("mnist")
    with pytest.raises(ValueError, match=r"`decay_epochs` must increase.*decay_epochs=\(5, 3\)"):
        get_config("digits", decay_epochs=(5, 3))


def test_shorter_runs_keep_the_decays_at_the_same_fractions():
    assert get_config("imagenet", epochs=15).decay_epochs == (8, 10, 12)
    assert get_config("digits", epochs=2).decay_epochs == (1,)
    assert get_config("digits").decay_epochs == (11, 14, 16)
    assert get_config("digits", epochs=1).decay_epochs == ()


def test_learning_rate_decays_at_the_first_step_of_each_decay_epoch():
    config = get_config("imagenet")
    steps_per_epoch = 10
    schedule = learning_rate_schedule(config, steps_per_epoch)
    expected = {0: 0.1, 799: 0.1, 800: 0.01, 1049: 0.01, 1050: 1e-3, 1199: 1e-3, 1200: 1e-4,
                1499: 1e-4}
    for step, rate in expected.items():
        assert float(schedule(step)) == pytest.approx(rate, rel=1e-6), step


def _batches(dataset, count):
    return [tuple(t.numpy() for t in batch) for batch in dataset.take(count)]


def test_digits_stream_shapes_values_and_exact_resume():
    config = get_config("digits", batch_size=100)
    stream, steps_per_epoch = training_batches(config, seed=3)
    assert steps_per_epoch == 1438 // 100
    assert stream.element_spec[0].shape == (100, 32, 32, 3)  # static, as TPUs need
    assert stream.element_spec[1].shape == (100,) and stream.element_spec[1].dtype == tf.int32
    first = _batches(stream, 16)  # crosses the epoch boundary at step 14
    images, labels = first[0]
    assert images.min() >= -1.0 and images.max() <= 1.0 and images.std() > 0.3
    np.testing.assert_array_equal(images[..., 0], images[..., 2])  # grey copied to RGB
    assert set(labels.tolist()) <= set(range(10)) and len(set(labels.tolist())) > 5
    for step in (5, 14, 15):
        resumed = _batches(training_batches(config, seed=3, start_step=step)[0], 1)[0]
        np.testing.assert_array_equal(resumed[0], first[step][0])
        np.testing.assert_array_equal(resumed[1], first[step][1])
    # One epoch holds every training label once: the stream permutes the split.
    epoch_labels = np.concatenate([b[1] for b in first[:14]])
    _, train_labels = digits("train")
    assert np.bincount(epoch_labels, minlength=10).sum() == 1400
    assert (np.bincount(epoch_labels, minlength=10) <= np.bincount(train_labels)).all()
    other = _batches(training_batches(config, seed=4)[0], 1)[0]
    assert not np.array_equal(other[1], first[0][1])


def test_training_crops_are_shifts_of_the_padded_image_and_eval_is_central():
    # A 32×32 image with distinct pixel values: each random crop of the image
    # padded by 2 (value −1) must equal one of the 25 shifted windows.
    config = get_config("digits", flip=False)
    image = np.linspace(-0.9, 0.9, 32 * 32 * 3, dtype=np.float32).reshape(32, 32, 3)
    padded = np.pad(image, ((2, 2), (2, 2), (0, 0)), constant_values=-1.0)
    windows = {(dy, dx): padded[dy:dy + 32, dx:dx + 32] for dy in range(5) for dx in range(5)}
    preprocess = train_preprocess(config, seed=0)
    seen = set()
    for index in range(40):
        out, label = preprocess(tf.constant(index, tf.int64),
                                {"image": tf.constant(image), "label": tf.constant(7)})
        match = [key for key, window in windows.items() if np.array_equal(out.numpy(), window)]
        assert len(match) == 1 and int(label) == 7
        seen.add(match[0])
        again, _ = preprocess(tf.constant(index, tf.int64),
                              {"image": tf.constant(image), "label": tf.constant(7)})
        np.testing.assert_array_equal(again, out)  # a function of (seed, index)
    assert len(seen) > 10  # the offsets vary with the index
    # With flips (CIFAR): some crops are mirrored, and a mirrored crop is a mirrored window.
    flipping = train_preprocess(get_config("cifar10", pad=2), seed=0)
    mirrored = 0
    for index in range(20):
        out, _ = flipping(tf.constant(index, tf.int64),
                          {"image": tf.constant(image), "label": tf.constant(0)})
        out = out.numpy()
        direct = any(np.array_equal(out, w) for w in windows.values())
        flipped = any(np.array_equal(out[:, ::-1], w) for w in windows.values())
        assert direct or flipped
        mirrored += flipped
    assert 0 < mirrored < 20
    central, _ = eval_preprocess(config)({"image": tf.constant(image), "label": tf.constant(1)})
    np.testing.assert_array_equal(central, image)


def test_digits_evaluation_is_the_held_out_split_once():
    config = get_config("digits")
    batches = _batches(evaluation_batches(config, batch_size=100), 10)
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    assert all((b[2] == 1.0).all() for b in batches)  # one replica: nothing padded
    test_images, test_labels = digits("test")
    assert images.shape == (359, 32, 32, 3)
    np.testing.assert_array_equal(labels, test_labels)
    np.testing.assert_allclose(images[..., 1:2], test_images)


@pytest.mark.parametrize("name,size", [("cifar10", 32), ("imagenette", 224), ("imagenet", 224)])
def test_tfds_pipelines_on_mock_data(name, size):
    config = get_config(name, batch_size=3)
    with tfds.testing.mock_data(num_examples=7):
        stream, steps_per_epoch = training_batches(config, seed=1, download=True)
        images, labels = _batches(stream, 1)[0]
        held_out = _batches(evaluation_batches(config, batch_size=4, download=True), 2)
    assert steps_per_epoch == 7 // 3
    assert stream.element_spec[0].shape == (3, size, size, 3)
    assert images.dtype == np.float32 and images.min() >= -1.0 and images.max() <= 1.0
    assert images.std() > 0.1  # decoded pixels, not a constant
    assert labels.min() >= 0 and labels.max() < config.num_classes
    assert [b[0].shape for b in held_out] == [(4, size, size, 3), (3, size, size, 3)]


def test_missing_dataset_stops_training_before_building(tmp_path):
    from classification.train import train

    with pytest.raises(DatasetNotFoundError, match="'cifar10' is not prepared in .*tfds build"):
        train("cifar10", "kanet_kv", epochs=1, model_dir=tmp_path / "run",
              data_dir=str(tmp_path), **_QUIET)
    with pytest.raises(DatasetNotFoundError, match=r"ILSVRC2012_img_train\.tar"):
        train("imagenet", "mobilenet_v2", epochs=1, model_dir=tmp_path / "run",
              data_dir=str(tmp_path), **_QUIET)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("name", ["kanet_kv", "kanet_qkv", "mobilenet_v2", "attnnet_pool"])
def test_models_for_the_digits_config(name):
    model = build_model(get_config("digits", model=name))
    assert model.output_shape == (None, 10)
    # Output stride 8: the attention modules of 32×32 inputs work at 16², 8², 4².
    sizes = {layer.output.shape[1] for layer in model.layers if "AttnSkipModule" in layer.name}
    assert sizes == ({16, 8, 4} if name != "mobilenet_v2" else set())
    assert model.get_layer("stem_norm").momentum == 0.9


_TINY = dict(config="digits", batch_size=478, width_multiplier=0.25, image_size=8)  # 3 steps/epoch


def test_train_on_two_replicas_writes_the_run_and_its_scores_reload(tmp_path):
    """One run of the workflow's training (on two replicas; single-device runs are the
    export CLI's and the notebook's): its files, and its scores re-read from the saved
    model."""
    strategy = mirrored_strategy(2)
    if strategy is None:
        pytest.skip("needs 2 logical CPUs")
    from classification.evaluate import evaluate
    from classification.train import train

    results = train(model="kanet_qkv", epochs=1, model_dir=tmp_path, strategy=strategy,
                    **_TINY, **_QUIET)
    for name in ("model.keras", "history.png", "history.csv", "results.json", "run.json",
                 "timing.json"):
        assert (tmp_path / name).exists(), name
    assert json.loads((tmp_path / "run.json").read_text())["replicas"] == 2
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["params"] == results["model"].count_params() and stored["steps"] == 3
    assert int(results["model"].optimizer.iterations.numpy()) == 3
    assert np.isfinite(results["loss"]) and 0.0 <= stored["top1"] <= stored["top5"] <= 1.0
    assert (tmp_path / "history.csv").read_text().splitlines()[0].startswith("step,seconds,")
    assert results["train_seconds"] > 0 and results["variant"] == "kanet_qkv"
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    config = get_config("digits", image_size=_TINY["image_size"])
    images = _batches(evaluation_batches(config, 8), 1)[0][0]
    np.testing.assert_allclose(reloaded(images, training=False),
                               results["model"](images, training=False), atol=1e-5)
    # The 359 held-out digits were split over 2 replicas with one weight-0 pad: the
    # reported top-1 equals a single-device evaluation of the saved model.
    scores = evaluate(tmp_path, output=False, log=lambda *_: None)
    assert scores["top1"] == pytest.approx(stored["top1"], abs=1e-6)
    with pytest.raises(ValueError, match="multiple of the 2 replicas. Received: batch_size=479"):
        train(model="kanet_qkv", epochs=1, model_dir=tmp_path / "odd", strategy=strategy,
              **dict(_TINY, batch_size=479), **_QUIET)


def test_cli_help_lists_every_model_and_config(capsys):
    from classification.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in MODELS + tuple(CONFIGS) + ("--backbone", "--context", "--at", "--model"):
        assert name in text


def test_resnet50_with_poly_nl_at_res4_trains_a_step():
    config = get_config("digits", backbone="resnet50", context="poly_nl")
    assert model_label(get_config("digits", backbone="resnet50", context="poly_nl",
                                  at="res3+4+5")) == "resnet50-poly_nl-res345"
    model = compile_model(build_model(config), keras.optimizers.SGD(0.01))
    assert [layer.name for layer in model.layers if "poly_nl" in layer.name] == [
        "poly_nl_after_conv4_block5_out"]
    assert model.output_shape == (None, 10)
    images, labels = digits("train")
    model.fit(np.repeat(images[:8], 3, axis=-1), labels[:8], batch_size=8, epochs=1, verbose=0)
    assert float(model.get_layer("poly_nl_after_conv4_block5_out").beta.numpy()) != 0.0
    with pytest.raises(ValueError, match="--context.* into a `backbone`"):
        get_config("digits", context="poly_nl")
    with pytest.raises(ValueError, match="Unknown `context`.*Received: context='poly'"):
        get_config("digits", backbone="resnet50", context="poly")
    with pytest.raises(ValueError, match="Unknown ResNet-50 stage"):
        get_config("digits", backbone="resnet50", context="poly_nl", at="res7")


def test_mscan_pretrains_as_a_classifier_for_the_segmenter(tmp_path):
    """--backbone mscan_t: SegNeXt's backbone as a classifier on [-1, 1] images, trained with
    AdamW (decay on every weight); the segmentation workflow takes its backbone from the
    run's model.keras."""
    from kctx.models import segnext

    config = get_config("digits_mscan", image_size=32)
    assert (config.backbone, config.optimizer, model_label(config)) == \
        ("mscan_t", "adamw", "mscan_t")
    model = compile_model(build_model(config), build_optimizer(config, steps_per_epoch=22))
    assert model.output_shape == (None, 10) and model.get_layer("backbone").name == "backbone"
    assert type(model.optimizer).__name__ == "ParamwiseAdamW"
    model.run_eagerly = True  # (a step of MSCAN-T traced: 100 CPU s; the segmenter's is
    # tests/test_segmentation_segnext.py's)
    images, labels = digits("train", image_size=32)
    before = [np.asarray(w) for w in model.get_layer("backbone").weights]
    model.fit(np.repeat(images[:8], 3, axis=-1), labels[:8], batch_size=8, epochs=1, verbose=0)
    assert not np.array_equal(before[0], model.get_layer("backbone").weights[0])
    model.save(tmp_path / "model.keras")
    segmenter = segnext("t", num_classes=11, value_range=(-1.0, 1.0),
                        weights=tmp_path / "model.keras")
    for a, b in zip(segmenter.get_layer("backbone").weights, model.get_layer("backbone").weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="MSCAN has its own attention"):
        get_config("digits_mscan", context="poly_nl")
    assert get_config("digits", optimizer="adamw").optimizer == "adamw"
    with pytest.raises(ValueError, match="optimizer"):
        get_config("digits", optimizer="adam")
