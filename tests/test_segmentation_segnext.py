"""SegNeXt in the segmentation workflow: the AdamW recipe and its schedule, the official
evaluation pipelines (keep-ratio resize, sliding windows), the augmentation options,
``segmentation.convert`` → ``evaluate`` → ``export`` → ``predict`` on the tiny official
fixture checkpoint, and a few training steps of the segnext_digits recipe."""

import hashlib
import json
import pathlib

import keras
import numpy as np
import pytest

import optimizer_check
from numpy_reference import mmseg_slide_inference

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SEGNEXT = FIXTURES / "segnext"
PIPELINE = FIXTURES / "ade20k_pipeline"
# The tiny reduced-width SegNeXt of tests/fixtures/segnext (see test_segnext.py).
TINY_BACKBONE = {"embed_dims": [16, 32, 64, 96], "depths": [1, 1, 2, 1],
                 "mlp_ratios": [4, 4, 2, 2]}
TINY_FLAGS = ["--num-classes", "7", "--head-channels", "64", "--backbone-options",
              json.dumps(TINY_BACKBONE), "--context-options", '{"rank": 8}']


# ---------------------------------------------------------------------------
# Optimizer and schedule.
# ---------------------------------------------------------------------------

# mmengine 0.10.7's LinearLR(start_factor=1e-6, begin=0, end=1500) + PolyLR(power=1.0,
# eta_min=0, begin=1500, end=160000) on lr 6e-5, stepped once per iteration (torch 2.14.1):
# the learning rate of each step's update.
MMENGINE_SEGNEXT_LR = {0: 6e-11, 1: 4.008664442961975e-08, 2: 8.01132888592395e-08,
                       750: 3.002004332221492e-05, 1498: 5.995997335557046e-05,
                       1499: 6.000000000000008e-05, 1500: 6.000000000000008e-05,
                       1501: 5.999962144871585e-05, 1502: 5.999924289743161e-05,
                       80000: 3.0283724187536725e-05, 159998: 3.7855128423511476e-10,
                       159999: 0.0}


def test_warmup_poly_decay_equals_mmengine_linear_then_poly():
    from kctx.training import WarmupPolyDecay

    schedule = WarmupPolyDecay(6e-5, steps=160_000, warmup_steps=1500, warmup_ratio=1e-6,
                               power=1.0)
    for step, expected in MMENGINE_SEGNEXT_LR.items():
        assert float(schedule(step)) == pytest.approx(expected, rel=2e-6, abs=1e-16), step
    again = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert isinstance(again, WarmupPolyDecay) and again.get_config() == schedule.get_config()
    # No warm-up: poly from the first step to 0 at the last, power applied.
    plain = WarmupPolyDecay(1.0, steps=11, power=2.0)
    np.testing.assert_allclose([float(plain(t)) for t in range(11)],
                               [(1 - t / 10) ** 2 for t in range(11)], rtol=1e-6, atol=1e-7)
    # A run shorter than its warm-up stops on the ramp.
    short = WarmupPolyDecay(1.0, steps=2, warmup_steps=5, warmup_ratio=0.2)
    np.testing.assert_allclose([float(short(t)) for t in range(2)], [0.2, 0.4], rtol=1e-6)
    for kwargs, match in [(dict(steps=0), "steps=0"), (dict(steps=5, warmup_steps=-1),
                                                       "warmup_steps=-1")]:
        with pytest.raises(ValueError, match=match):
            WarmupPolyDecay(1e-3, **kwargs)


def test_paramwise_adamw_equals_pytorch_adamw_with_mmengine_groups():
    optimizer_check.check_paramwise_adamw_equals_torch_adamw()  # on JAX and PyTorch too


def test_paramwise_adamw_fits_checkpoints_resumes_and_reloads(tmp_path):
    """Two steps, a StepCheckpoint, a fresh model restored, two more steps: the same
    weights as four straight steps; model.keras reloads the optimizer with its options."""
    from kctx.training import ParamwiseAdamW, StepCheckpoint, WarmupPolyDecay

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 5)).astype("float32"), rng.integers(0, 3, 16)

    def compiled():
        model = optimizer_check.tiny_head_model(3)
        model.compile(ParamwiseAdamW(WarmupPolyDecay(1e-2, 4, 2), weight_decay=0.1,
                                     paramwise={"head": {"lr_mult": 10.0},
                                                "norm": {"decay_mult": 0.0}}),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.optimizer.build(model.trainable_variables)
        return model

    straight = compiled()
    straight.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    first = compiled()
    first.fit(x[:8], y[:8], batch_size=4, epochs=1, verbose=0, shuffle=False)
    saver = StepCheckpoint(tmp_path / "checkpoints", {"model": first,
                                                      "optimizer": first.optimizer})
    saver.save(2)
    resumed = compiled()
    loader = StepCheckpoint(tmp_path / "checkpoints", {"model": resumed,
                                                       "optimizer": resumed.optimizer})
    assert loader.restore(log=None) == (2, False)
    resumed.fit(x[8:], y[8:], batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert int(resumed.optimizer.iterations.numpy()) == 4
    for a, b in zip(straight.weights, resumed.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    straight.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(loaded.optimizer, ParamwiseAdamW)
    assert loaded.optimizer.paramwise == straight.optimizer.paramwise
    assert isinstance(loaded.optimizer._learning_rate, WarmupPolyDecay)


def test_segnext_parameter_groups_follow_the_official_names():
    """mmengine matches its custom keys against the official parameter names: kctx's
    Keras paths give every SegNeXt weight the group its official name gets (decode head
    ×10, MSCAN's norm1 / norm2 / patch_embed*.norm / norm1..4 undecayed, the stem's
    BatchNorms patch_embed1.proj.1 / .4, whose names hold no "norm", decayed)."""
    from kctx.convert.segnext import segnext_targets
    from kctx.training import paramwise_multipliers
    from segmentation.configs import SEGNEXT_PARAMWISE
    from segmentation.models import segmenter

    model = segmenter("mscan_t", 8, "ham_nmf_light", 7, head_channels=64,
                      context_kwargs={"rank": 8}, backbone_options=TINY_BACKBONE)
    official = {id(variable): key for key, (variable, _) in segnext_targets(model).items()}
    groups = {}
    for variable in model.trainable_variables:
        name = official[id(variable)]
        group = paramwise_multipliers(variable.path, SEGNEXT_PARAMWISE)
        assert group == paramwise_multipliers(name, SEGNEXT_PARAMWISE), (variable.path, name)
        groups.setdefault(group, []).append(name)
    assert set(groups) == {(1.0, 1.0), (10.0, 1.0), (1.0, 0.0)}
    assert all(name.startswith("decode_head.") for name in groups[(10.0, 1.0)])
    assert "decode_head.hamburger.ham_out.gn.weight" in groups[(10.0, 1.0)]
    assert {"backbone.block1.0.norm1.weight", "backbone.patch_embed2.norm.bias",
            "backbone.norm4.weight"} <= set(groups[(1.0, 0.0)])
    assert {"backbone.patch_embed1.proj.1.weight",
            "backbone.block1.0.layer_scale_1"} <= set(groups[(1.0, 1.0)])


# ---------------------------------------------------------------------------
# Evaluation pipelines.
# ---------------------------------------------------------------------------


def test_keep_ratio_resize_matches_the_mmseg_ade20k_test_pipeline():
    """tools/ade20k_pipeline_fixtures.py ran mmseg's LoadImageFromFile + Resize((2048, 512),
    keep_ratio=True) on these PNGs. Same shapes; OpenCV's fixed-point bilinear vs
    TensorFlow's float one: measured at most 1 level, 0.016 levels on average (1.6% of
    the values off by one)."""
    import tensorflow as tf
    from PIL import Image

    from segmentation.data import keep_ratio_size, rescale_keep_ratio

    manifest = json.loads((PIPELINE / "manifest.json").read_text())
    differences = []
    for name, entry in manifest["images"].items():
        pixels = tf.io.decode_png(tf.io.read_file(str(PIPELINE / f"{name}.png")), channels=3)
        assert list(pixels.shape[:2]) == entry["size"]
        assert list(keep_ratio_size(*entry["size"], (2048, 512))) == entry["img_shape"][:2]
        image = tf.cast(pixels, tf.float32) / 127.5 - 1.0
        got = np.round((rescale_keep_ratio(image, (2048, 512)).numpy() + 1) * 127.5)
        with Image.open(PIPELINE / entry["mmseg_output"]) as png:
            expected = np.asarray(png.convert("RGB"), np.float64)
        assert got.shape == expected.shape, name
        differences.append(np.abs(got - expected).reshape(-1))
    differences = np.concatenate(differences)
    assert differences.max() <= 1.0
    assert differences.mean() < 0.03, differences.mean()


@pytest.mark.parametrize("size,crop,stride", [((37, 53), 16, 12), ((16, 50), 16, 12),
                                              ((10, 12), 16, 12), ((33, 33), 16, 16)])
def test_slide_inference_equals_mmseg_slide_inference(size, crop, stride):
    """A position-dependent tiny model (zero-padded 3×3 convs see each window's border), so
    overlapping windows disagree and the averaging matters."""
    from segmentation.workflow import slide_logits, window_origins

    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Conv2D(5, 3, padding="same")(x))
    images = np.random.default_rng(1).standard_normal((2, *size, 3)).astype("float32")
    got = keras.ops.convert_to_numpy(slide_logits(model, images, crop, stride))

    def encode_decode(window):  # NCHW in and out, as mmseg's
        return np.transpose(model.predict(np.transpose(window, (0, 2, 3, 1)), verbose=0),
                            (0, 3, 1, 2))

    expected = mmseg_slide_inference(encode_decode, np.transpose(images, (0, 3, 1, 2)), crop,
                                     stride, 5)
    np.testing.assert_allclose(got, np.transpose(expected, (0, 2, 3, 1)), rtol=1e-5,
                               atol=1e-5)
    assert window_origins(1024, 1024, 768) == [0]
    assert window_origins(2048, 1024, 768) == [0, 768, 1024]  # Cityscapes: 1 × 3 windows


def test_predictor_resizes_logits_back_and_scores_whole_or_sliding():
    from segmentation.configs import get_config
    from segmentation.workflow import Predictor, confusion_matrix

    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, None, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(3, 1)(inputs))
    images = np.random.default_rng(0).standard_normal((1, 8, 12, 3)).astype("float32")
    predictor = Predictor(model)
    logits = keras.ops.image.resize(model(images), (16, 24))
    np.testing.assert_allclose(predictor(images, output_size=(16, 24)),
                               keras.ops.softmax(logits), atol=1e-6)
    labels = np.asarray(keras.ops.argmax(logits, -1))
    confusion = confusion_matrix(predictor, [(images, labels)], 3)
    assert np.trace(confusion) == confusion.sum() == 16 * 24  # predictions at label size
    config = get_config("segnext_cityscapes")
    slide = Predictor.from_config(model, config)
    assert (slide.mode, slide.crop, slide.stride, slide.scales) == ("slide", 1024, 768, (1.0,))


# ---------------------------------------------------------------------------
# Training augmentation.
# ---------------------------------------------------------------------------


def test_train_scale_cat_max_ratio_and_photometric_distortion():
    import tensorflow as tf

    from segmentation.data import IGNORE_LABEL, augment

    # train_scale: a 40×60 image with (64, 16) and factor 1 becomes 16×24 (min(64/60,
    # 16/40) = 0.4), then is padded to the 32² crop.
    label = np.zeros((40, 60), np.int32)
    image = np.zeros((40, 60, 3), np.float32)
    _, out = augment(tf.constant(image), tf.constant(label), tf.constant([0, 0], tf.int64), 32,
                     (1.0, 1.0), train_scale=(64, 16))
    assert int((out.numpy() != IGNORE_LABEL).sum()) == 16 * 24
    # cat_max_ratio: class 0 fills the left half, classes 1 and 2 stripe the right half;
    # a 16² crop is accepted when no class covers 75% of its labelled pixels (about 60% of
    # the offsets: all 16 crops find one in their 10 tries).
    label = np.zeros((64, 64), np.int32)
    label[:, 32:] = 1
    label[::2, 32:] = 2
    label[:4] = IGNORE_LABEL
    image = np.repeat((label / 10.0).astype(np.float32)[..., None], 3, axis=-1)
    plain_shares, ruled_shares = [], []
    for index in range(16):
        seed = tf.constant([7, index], tf.int64)
        for ratio, shares in ((1.0, plain_shares), (0.75, ruled_shares)):
            _, crop = augment(tf.constant(image), tf.constant(label), seed, 16, (1.0, 1.0),
                              cat_max_ratio=ratio)
            counted = crop.numpy()[crop.numpy() != IGNORE_LABEL]
            shares.append(np.bincount(counted).max() / counted.size)
    assert max(ruled_shares) < 0.75 and max(plain_shares) == 1.0
    # photometric: the same geometry as without it (labels equal), new colours inside the
    # image, the padding still 0.
    label = np.kron(np.arange(16).reshape(4, 4), np.ones((6, 6), np.int32))  # 24×24
    image = np.repeat((label / 16.0 - 0.5).astype(np.float32)[..., None], 3, axis=-1)
    image[..., 1] *= -1
    changed = 0
    for index in range(8):
        seed = tf.constant([1, index], tf.int64)
        plain = augment(tf.constant(image), tf.constant(label), seed, 32, (1.0, 1.0))
        distorted = augment(tf.constant(image), tf.constant(label), seed, 32, (1.0, 1.0),
                            photometric=True)
        np.testing.assert_array_equal(plain[1].numpy(), distorted[1].numpy())
        padding = plain[1].numpy() == IGNORE_LABEL
        assert (distorted[0].numpy()[padding] == 0).all() and padding.sum() == 32 * 32 - 24 * 24
        assert -1 <= distorted[0].numpy().min() and distorted[0].numpy().max() <= 1
        changed += not np.allclose(plain[0].numpy(), distorted[0].numpy())
    assert changed >= 6  # each of 4 distortions has probability 1/2


# ---------------------------------------------------------------------------
# Configs and models.
# ---------------------------------------------------------------------------


def test_segnext_configs_build_the_official_models():
    from kctx.training import ParamwiseAdamW, WarmupPolyDecay
    from segmentation.configs import get_config
    from segmentation.workflow import build_model, build_optimizer

    manifest = json.loads((SEGNEXT / "manifest.json").read_text())
    config = get_config("segnext_ade20k")
    model = build_model(config)
    assert model.get_layer("decode_head-hamburger").rank == 16
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == manifest["variants"]["t"]["param_count"]
    optimizer = build_optimizer(config)
    assert isinstance(optimizer, ParamwiseAdamW) and optimizer.weight_decay == 0.01
    assert isinstance(optimizer._learning_rate, WarmupPolyDecay)
    assert float(optimizer._learning_rate(0)) == pytest.approx(6e-11)
    # The digits config keeps SGD and the plain poly schedule.
    sgd = build_optimizer(get_config("digits_seg"))
    assert isinstance(sgd, keras.optimizers.SGD)
    assert float(sgd.learning_rate) == pytest.approx(0.02)
    ablation = build_model(get_config("segnext_digits", context="none"))
    assert "decode_head-context" in [layer.name for layer in ablation.layers]


@pytest.mark.parametrize("overrides,match", [
    (dict(output_stride=16), "output stride 8"),
    (dict(context="aspp"), "context='aspp'"),
    (dict(optimizer="adam"), "optimizer='adam'"),
    (dict(optimizer="sgd"), "`paramwise` applies to optimizer='adamw'"),
    (dict(paramwise={"head": {"lr": 10}}), "paramwise="),
    (dict(warmup_steps=-1), "warmup_steps=-1"),
    (dict(eval_mode="slide"), "needs `eval_crop` and `eval_stride`"),
    (dict(eval_mode="tiles"), "eval_mode='tiles'"),
    (dict(eval_resize=(512,)), "eval_resize=(512,)"),
    (dict(eval_size=512), "exclude each other"),
    (dict(train_scale=(2048, 0)), "train_scale=(2048, 0)"),
    (dict(cat_max_ratio=0.0), "cat_max_ratio=0.0"),
])
def test_bad_segnext_settings_are_named(overrides, match):
    from segmentation.configs import get_config

    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        get_config("segnext_ade20k", **overrides)


# ---------------------------------------------------------------------------
# convert → evaluate → export → predict, and training.
# ---------------------------------------------------------------------------


def _write_ade20k(root, sizes):
    """ADEChallengeData2016 with JPEG images and annotations 0 (ignored) .. 7."""
    from PIL import Image

    ade = root / "ADEChallengeData2016"
    for folder, shapes in sizes.items():
        (ade / "images" / folder).mkdir(parents=True)
        (ade / "annotations" / folder).mkdir(parents=True)
        for index, shape in enumerate(shapes):
            rng = np.random.default_rng((index, len(folder)))
            pixels = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
            Image.fromarray(pixels).save(ade / "images" / folder / f"ADE_{index:04d}.jpg")
            annotation = np.kron(rng.integers(0, 8, (4, 4)),
                                 np.ones((-(-shape[0] // 4), -(-shape[1] // 4)), np.int64))
            Image.fromarray(annotation[:shape[0], :shape[1]].astype(np.uint8), mode="L").save(
                ade / "annotations" / folder / f"ADE_{index:04d}.png")
    return root


def test_convert_evaluate_export_predict_an_official_checkpoint(tmp_path, capsys):
    """The tiny official-format checkpoint (mmseg layout, 7 classes) through every CLI of a
    run folder, against a fake ADEChallengeData2016 (validation 37×53 and 45×30 images,
    resized to the (2048, 512) scale for evaluation)."""
    from segmentation import convert, evaluate, export, predict

    data = _write_ade20k(tmp_path / "data", {"training": [(40, 56), (64, 48)],
                                             "validation": [(37, 53), (45, 30)]})
    run = tmp_path / "converted"
    assert convert.main([str(SEGNEXT / "tiny_mmseg.pth"), "--variant", "t", "--output",
                         str(run), "--data-dir", str(data), *TINY_FLAGS, "--batch-size", "2",
                         "--crop-size", "64"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {run / 'model.keras'}" in printed and f"wrote {run / 'run.json'}" in printed
    record = json.loads((run / "run.json").read_text())
    digest = hashlib.sha256((SEGNEXT / "tiny_mmseg.pth").read_bytes()).hexdigest()
    assert record["source_checkpoint"]["sha256"] == digest
    assert record["source_checkpoint"]["layout"] == "mmseg"
    assert record["workflow"] == "segmentation" and record["config_name"] == "segnext_ade20k"
    assert record["config"]["backbone"] == "mscan_t" and record["config"]["num_classes"] == 7
    assert record["config"]["eval_resize"] == [2048, 512] and record["versions"]
    # The saved model is the official one on the workflow's [-1, 1] images.
    outputs = np.load(SEGNEXT / "tiny_outputs.npz")
    model = keras.saving.load_model(run / "model.keras")
    logits = model.predict(outputs["images"] / 127.5 - 1.0, verbose=0)
    error = np.abs(logits - outputs["logits"]).max()
    assert error <= 1e-4 * np.abs(outputs["logits"]).max(), error

    assert evaluate.main(["--model-dir", str(run), "--prediction-images", "2"]) == 0
    scores = json.loads((run / "evaluation.json").read_text())
    labelled = sum(int((np.asarray(_annotation(data, name)) > 0).sum())
                   for name in ("ADE_0000", "ADE_0001"))
    assert scores["pixels"] == labelled and 0.0 <= scores["miou"] <= 1.0
    assert scores["resize"] == [2048, 512] and scores["variant"] == "ham_nmf_light"
    capsys.readouterr()

    assert export.main(["--model-dir", str(run), "--format", "tf_saved_model", "--examples",
                        "2"]) == 0
    report = json.loads((run / "model_saved_model.json").read_text())
    assert report["max_relative_difference"] <= 1e-5
    assert report["scores"]["miou"] == pytest.approx(scores["miou"], abs=1e-6)
    capsys.readouterr()

    images = sorted((data / "ADEChallengeData2016" / "images" / "validation").glob("*.jpg"))
    assert predict.main(["--model-dir", str(run), *map(str, images), "--output-dir",
                         str(tmp_path / "masks")]) == 0
    printed = capsys.readouterr().out
    from PIL import Image

    from segmentation.palettes import ADE20K_CLASS_NAMES, palette

    for image, shape in zip(images, [(37, 53), (45, 30)]):
        with Image.open(tmp_path / "masks" / f"{image.stem}_mask.png") as mask_png:
            assert mask_png.mode == "P" and mask_png.size == shape[::-1]
            assert mask_png.getpalette()[:12] == palette("ade20k")[:4].reshape(-1).tolist()
            mask = np.asarray(mask_png)
        with Image.open(tmp_path / "masks" / f"{image.stem}_overlay.png") as overlay:
            assert overlay.size == shape[::-1] and overlay.mode == "RGB"
        assert mask.max() < 7
        shares = [float(line.split("%")[0]) for line in printed.splitlines()
                  if line.startswith("  ") and "%" in line]
        assert f"{image} ({shape[0]}×{shape[1]})" in printed
        top = np.bincount(mask.reshape(-1)).argmax()
        assert f"  {ADE20K_CLASS_NAMES[top]} ({top})" in printed
    assert sum(shares) == pytest.approx(200.0, abs=0.1)  # two images, 100% each
    # The masks are the evaluation protocol's: evaluation_batches' images, the Predictor.
    from kctx.training import config_from_dict
    from segmentation.configs import SegmentationConfig
    from segmentation.data import evaluation_batches
    from segmentation.workflow import Predictor

    config = config_from_dict(SegmentationConfig, record["config"])
    [(resized, label)] = list(evaluation_batches(config, data_dir=str(data), num_images=1))
    assert resized.shape[1:3] == (512, 733)
    expected = np.argmax(Predictor.from_config(model, config)(resized, output_size=(37, 53)),
                         -1)[0]
    with Image.open(tmp_path / "masks" / f"{images[0].stem}_mask.png") as mask_png:
        np.testing.assert_array_equal(np.asarray(mask_png), expected)


def _annotation(data, name):
    from PIL import Image

    with Image.open(data / "ADEChallengeData2016" / "annotations" / "validation"
                    / f"{name}.png") as png:
        return np.asarray(png)


def test_convert_and_predict_refuse_what_does_not_fit(tmp_path, capsys):
    from segmentation import convert, predict

    for argv, message in [
        ([str(tmp_path / "missing.pth"), "--variant", "t", "--output", str(tmp_path / "a")],
         "No checkpoint file"),
        ([str(SEGNEXT / "tiny_mmseg.pth"), "--variant", "t", "--output", str(tmp_path / "b"),
          "--num-classes", "7"], "The checkpoint does not fit"),
        ([str(SEGNEXT / "tiny_imagenet.pth"), "--variant", "t", "--output",
          str(tmp_path / "c"), *TINY_FLAGS], "holds only a backbone"),
        ([str(SEGNEXT / "tiny_mmseg.pth"), "--variant", "t", "--output", str(tmp_path / "d"),
          *TINY_FLAGS, "--context", "none"], "context must be 'ham_nmf_light'"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            convert.main(argv)
        assert stopped.value.code == 2
        assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written
    for argv in (["--variant", "x", "a.pth", "--output", "o"], ["a.pth", "--output", "o"]):
        with pytest.raises(SystemExit) as stopped:
            convert.main(argv)
        assert stopped.value.code == 2
    with pytest.raises(SystemExit) as stopped:
        convert.main(["--help"])
    assert stopped.value.code == 0
    text = capsys.readouterr().out
    assert all(flag in text for flag in ("--variant", "--dataset", "--num-classes",
                                         "--backbone-options", "--eval-mode"))
    with pytest.raises(SystemExit) as stopped:
        predict.main(["--help"])
    assert stopped.value.code == 0 and "--output-dir" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        predict.main(["--model-dir", str(tmp_path), "image.png"])
    assert stopped.value.code == 2 and "run.json not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        predict.main(["--model-dir", str(tmp_path)])  # no image
    assert stopped.value.code == 2


def test_segnext_digits_trains_a_few_steps_through_the_cli(tmp_path, capsys):
    from kctx.training import ParamwiseAdamW
    from segmentation import train

    run = tmp_path / "run"
    # The config's recipe on the tiny fixture's backbone (SegNeXt-T's stages and blocks,
    # fewer of them): the run's plumbing, at a third of SegNeXt-T's 46 CPU s of tracing.
    assert train.main(["--config", "segnext_digits", "--steps", "2", "--batch-size", "4",
                       "--crop-size", "32", "--eval-images", "8", "--prediction-images", "2",
                       "--backbone-options", json.dumps(TINY_BACKBONE),
                       "--verbose", "0", "--model-dir", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] == 2 and results["variant"] == "ham_nmf_light"
    assert 0.0 <= results["miou"] <= 1.0 and results["pixels"] > 0.9 * 8 * 64 * 64
    model = keras.saving.load_model(run / "model.keras")
    assert isinstance(model.optimizer, ParamwiseAdamW)
    assert int(model.optimizer.iterations.numpy()) == 2
    assert (run / results["predictions"]).exists()
    assert "mIoU" in capsys.readouterr().out
