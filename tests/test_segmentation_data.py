"""Segmentation loaders: PASCAL VOC (+ SBD), ADE20K and Cityscapes from tiny on-disk
fixtures, the TFDS datasets on tfds.testing.mock_data, native-size and fitted evaluation
batches."""

import numpy as np
import pytest

from kctx.data import DatasetNotFoundError
from segmentation.configs import get_config
from segmentation.data import IGNORE_LABEL, evaluation_batches, fit_to_square, load_split, \
    training_batches, voc_files

# VOC ids → (height, width); "c" is in VOC val and in SBD train (train_aug must drop it).
_VOC_TRAIN, _VOC_VAL = {"a": (40, 56), "b": (48, 40)}, {"c": (36, 44), "d": (52, 48)}
_SBD_TRAIN, _SBD_VAL = {"e": (44, 60), "c": (36, 44)}, {"f": (56, 36)}


def _label(name, shape, num_classes=21):
    rng = np.random.default_rng(sum(map(ord, name)))
    label = rng.integers(0, num_classes, size=shape).astype(np.uint8)
    label[rng.random(shape) < 0.1] = IGNORE_LABEL
    return label


def _write_image(path, shape):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(shape).integers(0, 256, size=shape + (3,), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=95)


def _write_palette_png(path, label):
    from PIL import Image

    from segmentation.workflow import voc_palette

    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(label, mode="P")
    image.putpalette(voc_palette().reshape(-1).tolist())
    image.save(path)


def _write_voc(root, sbd=True, aug_pngs=False):
    from scipy.io import savemat

    voc = root / "VOCdevkit" / "VOC2012"
    sets = voc / "ImageSets" / "Segmentation"
    sets.mkdir(parents=True)
    (sets / "train.txt").write_text("a\nb\n")
    (sets / "val.txt").write_text("c\nd\n")
    for name, shape in {**_VOC_TRAIN, **_VOC_VAL, **_SBD_TRAIN, **_SBD_VAL}.items():
        _write_image(voc / "JPEGImages" / f"{name}.jpg", shape)
    for name, shape in {**_VOC_TRAIN, **_VOC_VAL}.items():
        _write_palette_png(voc / "SegmentationClass" / f"{name}.png", _label(name, shape))
    if sbd:
        dataset = root / "benchmark_RELEASE" / "dataset"
        (dataset / "cls").mkdir(parents=True)
        (dataset / "train.txt").write_text("e\nc\n")
        (dataset / "val.txt").write_text("f\n")
        for name, shape in {**_SBD_TRAIN, **_SBD_VAL}.items():
            label = _label(name, shape)
            savemat(dataset / "cls" / f"{name}.mat", {"GTcls": {
                "Segmentation": label, "Boundaries": np.zeros((1, 1)),
                "CategoriesPresent": np.unique(label)}})
    if aug_pngs:
        from PIL import Image

        for name, shape in {**_SBD_TRAIN, **_SBD_VAL}.items():
            (voc / "SegmentationClassAug").mkdir(exist_ok=True)
            Image.fromarray(_label(name, shape), mode="L").save(
                voc / "SegmentationClassAug" / f"{name}.png")
    return root


def _examples(split):
    return [split.decode(example) for example in split.examples]


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    return _write_voc(tmp_path_factory.mktemp("voc"))


def test_voc_splits_read_palette_pngs_and_sbd_mat_files(voc_root):
    config = get_config("voc")
    val = load_split(config, "val", data_dir=voc_root)
    assert val.num_examples == 2 and not val.fixed_size
    for (image, label), (name, shape) in zip(_examples(val), _VOC_VAL.items()):
        assert image.shape == shape + (3,) and image.dtype == "float32"
        assert -1.0 <= float(image.numpy().min()) and float(image.numpy().max()) <= 1.0
        np.testing.assert_array_equal(label.numpy(), _label(name, shape))  # indices, not colours
    # train_aug = VOC train ∪ SBD train ∪ SBD val − VOC val, SBD labels from GTcls .mat files.
    train_aug = voc_files(voc_root, "train_aug")
    assert [pair[0].stem for pair in train_aug] == ["a", "b", "e", "f"]
    assert [pair[1].suffix for pair in train_aug] == [".png", ".png", ".mat", ".mat"]
    decoded = _examples(load_split(config, "train_aug", data_dir=voc_root))
    shapes = {**_VOC_TRAIN, **_SBD_TRAIN, **_SBD_VAL}
    for (_, label), name in zip(decoded, "abef"):
        np.testing.assert_array_equal(label.numpy(), _label(name, shapes[name]))


def test_voc_train_aug_from_segmentation_class_aug_pngs(tmp_path):
    root = _write_voc(tmp_path, sbd=False, aug_pngs=True)
    pairs = voc_files(root, "train_aug")
    assert [(p[0].stem, p[1].parent.name) for p in pairs] == [
        ("a", "SegmentationClass"), ("b", "SegmentationClass"),
        ("e", "SegmentationClassAug"), ("f", "SegmentationClassAug")]
    _, label = _examples(load_split(get_config("voc"), "train_aug", data_dir=root))[2]
    np.testing.assert_array_equal(label.numpy(), _label("e", _SBD_TRAIN["e"]))


def test_missing_voc_files_are_named(tmp_path):
    config = get_config("voc")
    with pytest.raises(DatasetNotFoundError, match=r"PASCAL VOC 2012 was not found in .*"
                                                   r"VOCdevkit/VOC2012/\{JPEGImages"):
        load_split(config, "val", data_dir=tmp_path)
    root = _write_voc(tmp_path / "no_sbd", sbd=False)
    with pytest.raises(DatasetNotFoundError, match="SBD annotations .*/benchmark_RELEASE"):
        load_split(config, "train_aug", data_dir=root)
    (root / "VOCdevkit" / "VOC2012" / "SegmentationClass" / "d.png").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"lists 1 files that do not exist.*d\.png"):
        load_split(config, "val", data_dir=root)
    with pytest.raises(ValueError, match="`split` of voc must be .* Received: split='test'"):
        load_split(config, "test", data_dir=root)


def test_voc_training_stream_and_native_size_evaluation(voc_root):
    config = get_config("voc", crop_size=32, batch_size=2, train_split="train")
    stream = training_batches(config, seed=3, data_dir=voc_root)
    batches = [(i.numpy(), l.numpy()) for i, l in stream.take(3)]
    assert stream.element_spec[0].shape == (2, 32, 32, 3)
    labels = np.concatenate([label for _, label in batches])
    assert set(np.unique(labels)) <= set(range(21)) | {IGNORE_LABEL}
    again = [(i.numpy(), l.numpy()) for i, l in
             training_batches(config, seed=3, start_step=1, data_dir=voc_root).take(2)]
    np.testing.assert_array_equal(again[0][1], batches[1][1])  # resumes exactly at step 1
    # Evaluation: one image per batch at its own size, labels untouched.
    native = [(i.numpy(), l.numpy()) for i, l in evaluation_batches(config, data_dir=voc_root)]
    assert [label.shape for _, label in native] == [(1,) + s for s in _VOC_VAL.values()]
    np.testing.assert_array_equal(native[1][1][0], _label("d", _VOC_VAL["d"]))
    # eval_size: fitted into a square, batched, padding ignored.
    fitted = [(i.numpy(), l.numpy()) for i, l in
              evaluation_batches(config, batch_size=2, eval_size=64, data_dir=voc_root)]
    assert len(fitted) == 1 and fitted[0][0].shape == (2, 64, 64, 3)
    np.testing.assert_array_equal(fitted[0][1][1, :52, :48], _label("d", (52, 48)))
    assert (fitted[0][1][1, 52:] == IGNORE_LABEL).all()
    assert (fitted[0][1][1, :, 48:] == IGNORE_LABEL).all()


def test_fit_to_square_shrinks_larger_images_keeping_the_aspect_ratio():
    label = np.repeat(np.arange(4, dtype=np.int32)[:, None], 8, axis=1).repeat(10, axis=0)  # 40×8
    image = np.zeros((40, 8, 3), np.float32)
    fitted_image, fitted = fit_to_square(image, label, 20)
    assert fitted_image.shape == (20, 20, 3)
    expected = np.full((20, 20), IGNORE_LABEL)
    expected[:, :4] = np.repeat(np.arange(4), 5)[:, None]
    np.testing.assert_array_equal(fitted.numpy(), expected)


def test_ade20k_labels_shift_zero_to_ignore(tmp_path):
    from PIL import Image

    ade = tmp_path / "ADEChallengeData2016"
    annotation = np.array([[0, 1, 150], [2, 0, 75]], np.uint8)
    for folder in ("training", "validation"):
        _write_image(ade / "images" / folder / "ADE_x_0001.jpg", annotation.shape)
        (ade / "annotations" / folder).mkdir(parents=True)
        Image.fromarray(annotation, mode="L").save(ade / "annotations" / folder / "ADE_x_0001.png")
    for split in ("train", "val"):
        [(image, label)] = _examples(load_split(get_config("ade20k"), split, data_dir=tmp_path))
        assert image.shape == (2, 3, 3)
        np.testing.assert_array_equal(label.numpy(), [[255, 0, 149], [1, 255, 74]])
    with pytest.raises(DatasetNotFoundError, match="ADE20K was not found in .*ADEChallenge"):
        load_split(get_config("ade20k"), "val", data_dir=tmp_path / "elsewhere")


def _write_cityscapes(root):
    """Two cities in train, one in val: frankfurt's val image has only labelIds (mapped to
    train ids when read), the others labelTrainIds."""
    from PIL import Image

    city = root / "cityscapes"
    label_ids = np.array([[7, 8, 0, 26], [33, 24, 1, 255], [11, 23, 21, 6]], np.uint8)
    train_ids = np.array([[0, 1, 255, 13], [18, 11, 255, 255], [2, 10, 8, 255]], np.uint8)
    for split, cities in (("train", ("aachen", "bochum")), ("val", ("frankfurt",))):
        for name in cities:
            stem = f"{name}_000000_000019"
            _write_image(city / "leftImg8bit" / split / name / f"{stem}_leftImg8bit.png", (3, 4))
            labels = city / "gtFine" / split / name
            labels.mkdir(parents=True)
            Image.fromarray(label_ids, mode="L").save(labels / f"{stem}_gtFine_labelIds.png")
            if split == "train":
                Image.fromarray(train_ids, mode="L").save(
                    labels / f"{stem}_gtFine_labelTrainIds.png")
    return root, train_ids


def test_cityscapes_reads_train_ids_or_maps_label_ids(tmp_path):
    from segmentation.data import cityscapes_files

    root, train_ids = _write_cityscapes(tmp_path)
    config = get_config("segnext_cityscapes")
    pairs = cityscapes_files(root, "train")
    assert [(p[0].parent.name, p[1].name) for p in pairs] == [
        ("aachen", "aachen_000000_000019_gtFine_labelTrainIds.png"),
        ("bochum", "bochum_000000_000019_gtFine_labelTrainIds.png")]
    for split in ("train", "val"):
        examples = _examples(load_split(config, split, data_dir=root))
        assert len(examples) == (2 if split == "train" else 1)
        for image, label in examples:
            assert image.shape == (3, 4, 3)
            np.testing.assert_array_equal(label.numpy(), train_ids)  # the official table
    assert cityscapes_files(root / "cityscapes", "val")[0][1].name.endswith("_labelIds.png")
    with pytest.raises(DatasetNotFoundError, match=r"Cityscapes was not found in .*"
                                                   r"cityscapes/\{leftImg8bit, gtFine\}"):
        load_split(config, "val", data_dir=tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="Received: split='test'"):
        load_split(config, "test", data_dir=root)
    next(root.glob("cityscapes/gtFine/val/*/*_labelIds.png")).unlink()
    with pytest.raises(DatasetNotFoundError, match="lists 1 files that do not exist"):
        load_split(config, "val", data_dir=root)


def _encoded(array, format):
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=format)
    return buffer.getvalue()


def _mock_pets(trimaps):
    """An ``as_dataset`` for tfds.testing.mock_data yielding oxford_iiit_pet examples with the
    given trimaps (1 pet, 2 background, 3 border) as still-encoded PNGs (TFDS's random
    mock of this dataset draws invalid head boxes)."""
    import tensorflow as tf

    def as_dataset(self, split, decoders=None, **kwargs):
        images = [_encoded(np.random.default_rng(i).integers(0, 256, t.shape + (3,), np.uint8),
                           "JPEG") for i, t in enumerate(trimaps)]
        masks = [_encoded(t, "PNG") for t in trimaps]
        return tf.data.Dataset.from_tensor_slices({"image": images, "segmentation_mask": masks})

    return as_dataset


def test_pets_trimaps_become_background_pet_and_ignored_border():
    import tensorflow_datasets as tfds

    trimaps = [np.array([[1, 2, 3], [2, 2, 1]], np.uint8), np.full((50, 60), 1, np.uint8)]
    config = get_config("pets", crop_size=48, batch_size=2)
    with tfds.testing.mock_data(as_dataset_fn=_mock_pets(trimaps)):
        [(image, label), _] = _examples(load_split(config, "test", download=True))
        images, labels = (t.numpy() for t in next(iter(training_batches(config, download=True))))
    assert image.shape == (2, 3, 3) and images.shape == (2, 48, 48, 3) and images.std() > 0.1
    np.testing.assert_array_equal(label.numpy(), [[1, 0, 255], [0, 0, 1]])
    assert set(np.unique(labels)) <= {0, 1, IGNORE_LABEL}


def test_scene_parse150_on_mock_data():
    import tensorflow_datasets as tfds

    config = get_config("scene_parse150", crop_size=48, batch_size=2)
    with tfds.testing.mock_data(num_examples=5):
        stream = training_batches(config, seed=0, download=True)
        images, labels = (t.numpy() for t in next(iter(stream)))
        held_out = list(evaluation_batches(config, download=True))
        [(_, label)] = _examples(load_split(config, "test", download=True, num_images=1))
        [annotation] = list(tfds.load("scene_parse150", split="test").take(1))
    assert images.shape == (2, 48, 48, 3) and labels.shape == (2, 48, 48)
    assert images.std() > 0.1 and -1.0 <= images.min() and images.max() <= 1.0
    assert set(np.unique(labels)) <= set(range(100)) | {IGNORE_LABEL}
    # One image per batch at its own size (TFDS's mock draws image and annotation sizes apart).
    assert len(held_out) == 5 and all(i.shape[0] == l.shape[0] == 1 for i, l in held_out)
    assert len({i.shape for i, _ in held_out}) > 1
    red = annotation["annotation"].numpy()[..., 0].astype(int)  # the category channel
    np.testing.assert_array_equal(label.numpy(),
                                  np.where((red == 0) | (red > 100), IGNORE_LABEL, red - 1))


def test_missing_tfds_dataset_is_named(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="'oxford_iiit_pet' is not prepared in"):
        load_split(get_config("pets"), "train", data_dir=str(tmp_path))


def test_train_and_evaluate_on_voc_files(voc_root, tmp_path):
    from segmentation.evaluate import evaluate
    from segmentation.train import train

    results = train("voc", "ham_nmf", steps=2, batch_size=2, crop_size=32, backbone="resnet_tiny",
                    output_stride=16, model_dir=tmp_path / "run", data_dir=str(voc_root),
                    verbose=0, log=lambda message: None)
    pixels = sum(int((_label(n, s) != IGNORE_LABEL).sum()) for n, s in _VOC_VAL.items())
    assert results["pixels"] == pixels and 0.0 <= results["miou"] <= 1.0
    scored = evaluate(tmp_path / "run", prediction_images=2,  # finds the data through run.json
                      log=lambda message: None)
    assert scored["pixels"] == pixels and scored["miou"] == pytest.approx(results["miou"])
    from PIL import Image

    # Rows of different sizes, padded.
    with Image.open(tmp_path / "run" / scored["predictions"]) as png:
        assert png.size[0] == 3 * 48 * 6 and png.size[1] == (36 + 52) * 6
    with pytest.raises(DatasetNotFoundError, match="PASCAL VOC 2012"):
        train("voc", steps=1, model_dir=tmp_path / "none", data_dir=str(tmp_path / "none"),
              log=lambda message: None)
    assert not (tmp_path / "none").exists()
