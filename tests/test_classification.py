"""The classification workflow: configs, schedule, pipelines (digits and mocked TFDS), training."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from classification.configs import CONFIGS, get_config
from classification.data import eval_preprocess, evaluation_batches, train_preprocess, \
    training_batches
from classification.train import build_model, compile_model, learning_rate_schedule
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
    config = get_config("digits")
    model = build_model(name, config)
    assert model.output_shape == (None, 10)
    # Output stride 8: the attention modules of 32×32 inputs work at 16², 8², 4².
    sizes = {layer.output.shape[1] for layer in model.layers if "AttnSkipModule" in layer.name}
    assert sizes == ({16, 8, 4} if name != "mobilenet_v2" else set())
    assert model.get_layer("stem_norm").momentum == 0.9


_TINY = dict(config="digits", batch_size=478, width_multiplier=0.25)  # 3 steps per epoch


_RESUME_SCRIPT = """
import sys
from classification.train import train

tiny = dict(config="digits", model="kanet_kv", epochs=2, batch_size=478, width_multiplier=0.25,
            verbose=0, log=lambda *_: None)
run_dir, interrupted = sys.argv[1], sys.argv[2] == "resume"
if interrupted:
    train(model_dir=run_dir, stop_after_epoch=1, **tiny)
train(model_dir=run_dir, **tiny)
"""


def test_kill_and_resume_reproduces_the_uninterrupted_run(tmp_path):
    # Multi-threaded CPU kernels are not bitwise reproducible from run to run,
    # and SGD at lr 0.1 amplifies their round-off; single-threaded runs are
    # exact, so the straight and the interrupted run go to two single-threaded
    # processes, side by side.
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    runs = {kind: subprocess.Popen([sys.executable, "-c", _RESUME_SCRIPT,
                                    str(tmp_path / kind), kind], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for kind in ("straight", "resume")}
    for process in runs.values():
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr[-3000:]
    straight, resumed = (keras.saving.load_model(tmp_path / kind / "model.keras")
                         for kind in ("straight", "resume"))
    for a, b in zip(straight.weights, resumed.weights):  # (dropout seed states are not saved)
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    results = [json.loads((tmp_path / kind / "results.json").read_text())
               for kind in ("straight", "resume")]
    assert results[0]["epochs_done"] == results[1]["epochs_done"] == 2
    assert results[0]["top1"] == results[1]["top1"]
    history = (tmp_path / "resume" / "history.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in history] == ["epoch", "0", "1"]


def test_train_writes_model_history_and_results_that_reload(tmp_path):
    from classification.train import train

    results = train(model="kanet_qkv", epochs=1, model_dir=tmp_path, **_TINY, **_QUIET)
    for name in ("model.keras", "history.png", "history.csv", "results.json", "run.json"):
        assert (tmp_path / name).exists(), name
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["params"] == results["model"].count_params()
    assert 0.0 <= stored["top1"] <= stored["top5"] <= 1.0
    assert "seconds" in (tmp_path / "history.csv").read_text().splitlines()[0]
    assert stored["train_seconds"] > 0
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    images = np.stack([b[0] for b in _batches(evaluation_batches(get_config("digits"), 8), 1)])[0]
    np.testing.assert_allclose(reloaded.predict(images, verbose=0),
                               results["model"].predict(images, verbose=0), atol=1e-5)
    # The reported top-1 is the reloaded model's on the 359 held-out digits.
    compile_model(reloaded)
    scores = reloaded.evaluate(evaluation_batches(get_config("digits")), verbose=0,
                               return_dict=True)
    assert scores["top1"] == pytest.approx(stored["top1"], abs=1e-6)


def test_training_on_two_replicas(tmp_path):
    strategy = mirrored_strategy(2)
    if strategy is None:
        pytest.skip("needs 2 logical CPUs")
    from classification.train import train

    results = train(model="kanet_kv", epochs=1, model_dir=tmp_path, strategy=strategy,
                    **_TINY, **_QUIET)
    assert results["replicas"] == 2
    assert np.isfinite(results["loss"])
    assert int(results["model"].optimizer.iterations.numpy()) == 3
    # The 359 held-out digits were split over 2 replicas with one weight-0 pad:
    # top-1 equals a single-device evaluation of the saved model.
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    compile_model(reloaded)
    scores = reloaded.evaluate(evaluation_batches(get_config("digits")), verbose=0,
                               return_dict=True)
    assert scores["top1"] == pytest.approx(results["top1"], abs=1e-6)
    with pytest.raises(ValueError, match="multiple of the 2 replicas. Received: batch_size=479"):
        train(model="kanet_kv", epochs=1, model_dir=tmp_path / "odd", strategy=strategy,
              **dict(_TINY, batch_size=479), **_QUIET)


def test_cli_help_lists_every_model_and_config(capsys):
    from classification.train import MODELS, main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in MODELS + tuple(CONFIGS) + ("--backbone", "--context", "--at", "poly_nl"):
        assert name in text


def test_resnet50_with_poly_nl_at_res4_trains_a_step():
    from classification.train import model_label

    config = get_config("digits")
    assert model_label("kanet_kv", "resnet50", "poly_nl", "res3+4+5") == "resnet50-poly_nl-res345"
    model = compile_model(build_model(None, config, "resnet50", "poly_nl", "res4"),
                          keras.optimizers.SGD(0.01))
    assert [layer.name for layer in model.layers if "poly_nl" in layer.name] == [
        "poly_nl_after_conv4_block5_out"]
    assert model.output_shape == (None, 10)
    images, labels = digits("train")
    model.fit(np.repeat(images[:8], 3, axis=-1), labels[:8], batch_size=8, epochs=1, verbose=0)
    assert float(model.get_layer("poly_nl_after_conv4_block5_out").beta.numpy()) != 0.0
    with pytest.raises(ValueError, match="--context.* into a `backbone`"):
        model_label("kanet_kv", None, "poly_nl")
    with pytest.raises(ValueError, match="Unknown `context`.*Received: context='poly'"):
        model_label("kanet_kv", "resnet50", "poly")
    with pytest.raises(ValueError, match="Unknown ResNet-50 stage"):
        model_label("kanet_kv", "resnet50", "poly_nl", "res7")
