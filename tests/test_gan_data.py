"""GAN input pipelines on TFDS datasets, offline with ``tfds.testing.mock_data``."""

import numpy as np
import pytest
import tensorflow as tf

from gan.configs import get_config
from gan.data import center_crop_resize, gan_images, streaming_batches, tfds_examples, \
    training_batches
from kctx.data import DatasetNotFoundError, tfds_dataset

tfds = pytest.importorskip("tensorflow_datasets")

# mock_data replaces preparation by a no-op and reading by random examples of the
# dataset's real feature spec (CelebA 218×178, ImageNet of random sizes);
# `download=True` lets the loader call that no-op instead of stopping at
# "not prepared".


def _first_batches(dataset, count):
    """The first ``count`` batches as NumPy (dicts or tuples of arrays)."""
    return [tf.nest.map_structure(lambda t: t.numpy(), batch) for batch in dataset.take(count)]


@pytest.mark.parametrize("name,size,classes", [("cifar10", 32, 10), ("celeba64", 64, 1),
                                               ("imagenet128_hamgan_baby", 128, 1000)])
def test_tfds_training_batches_have_static_shapes_and_valid_values(name, size, classes):
    config = get_config(name, batch_size=3)
    with tfds.testing.mock_data(num_examples=7):
        dataset = training_batches(config, seed=1, download=True)
        batch = _first_batches(dataset, 1)[0]
    spec = dataset.element_spec
    assert spec["images"].shape == (3, size, size, 3)  # static: TPUs need it
    assert spec["labels"].shape == (3,) and spec["labels"].dtype == tf.int32
    assert spec["z_g"].shape == (3, config.latent_dim)
    assert batch["images"].dtype == np.float32
    assert batch["images"].min() >= -1.0 and batch["images"].max() <= 1.0
    assert batch["images"].std() > 0.1  # real pixel data, not a constant
    assert batch["labels"].min() >= 0 and batch["labels"].max() < classes


def test_streaming_batches_are_a_function_of_seed_and_step():
    import keras

    keras.utils.set_random_seed(0)  # gan.train sets the global seed; tf.data seeds must cope
    config = get_config("cifar10", batch_size=4)
    with tfds.testing.mock_data(num_examples=10):
        examples, preprocess, count = tfds_examples("cifar10", "train", 32, download=True)
        assert count == 10

        def stream(seed=0, start_step=0):
            return streaming_batches(examples, preprocess, count, 4, config.latent_dim,
                                     config.num_classes, seed=seed, start_step=start_step,
                                     shuffle_buffer=10)

        full = stream()
        first = _first_batches(full, 6)  # 24 examples: crosses two epoch boundaries
        again = _first_batches(full, 6)  # a second iterator (Keras makes one under a strategy)
        for step in (3, 5):  # resume inside the second and the third epoch
            resumed = _first_batches(stream(start_step=step), 1)[0]
            for key in resumed:
                np.testing.assert_array_equal(resumed[key], first[step][key], err_msg=key)
        # Past the 64-epoch period of distinct orders (64 · 10 / 4 = 160 steps).
        long = _first_batches(full, 171)
        for step in (159, 161, 170):
            resumed = _first_batches(stream(start_step=step), 1)[0]
            np.testing.assert_array_equal(resumed["images"], long[step]["images"])
        other = _first_batches(stream(seed=1), 1)[0]
    for a, b in zip(first, again):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(other["z_d"], first[0]["z_d"])
    # Each epoch is a permutation of the 10 examples: the first 8 images of the
    # stream are distinct, and epoch 2 (examples 10–19) reorders epoch 1.
    images = np.concatenate([b["images"] for b in first]).reshape(24, -1)
    epoch1, epoch2 = images[:10], images[10:20]
    assert len({row.tobytes() for row in epoch1}) == 10
    assert {row.tobytes() for row in epoch1} == {row.tobytes() for row in epoch2}
    assert not np.array_equal(epoch1, epoch2)


def test_center_crop_resize_takes_the_central_square():
    # 4×8 image whose columns are numbered: the central 4×4 square is columns 2..5.
    image = np.tile(np.arange(8, dtype=np.uint8)[None, :, None] * 30, (4, 1, 3))
    out = center_crop_resize(tf.constant(image), 4).numpy()
    expected = image[:, 2:6].astype(np.float32) / 127.5 - 1.0
    np.testing.assert_allclose(out, expected, atol=1e-6)
    # Downscaling is antialiased: a 1-pixel checkerboard averages to grey.
    checker = (np.indices((64, 64)).sum(0) % 2 * 255).astype(np.uint8)[..., None]
    small = center_crop_resize(tf.constant(np.repeat(checker, 3, -1)), 8).numpy()
    np.testing.assert_allclose(small, 0.0, atol=0.02)


def test_gan_images_digits_and_mocked_imagenet_crop():
    digits = next(iter(gan_images("digits", "all", 32).batch(5)))
    assert digits["images"].shape == (5, 32, 32, 1)
    with tfds.testing.mock_data(num_examples=3):
        imagenet = list(gan_images("imagenet2012", "validation", 128, download=True))
    assert len(imagenet) == 3
    assert all(example["images"].shape == (128, 128, 3) for example in imagenet)


def test_missing_dataset_names_it_and_where_to_put_it(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"'cifar10' is not prepared in .*"
                       + str(tmp_path)) as error:
        tfds_dataset("cifar10", "train", data_dir=str(tmp_path))
    assert "tfds build cifar10" in str(error.value) and "--download" in str(error.value)
    manual = tmp_path / "manual"
    with pytest.raises(DatasetNotFoundError,
                       match=r"ILSVRC2012_img_train\.tar.* in " + str(manual)):
        tfds_dataset("imagenet2012", "train", data_dir=str(tmp_path), manual_dir=str(manual))
    # With download=True but no archives, preparing fails and says why.
    with pytest.raises(DatasetNotFoundError, match="Preparing it failed"):
        tfds_dataset("imagenet2012", "train", data_dir=str(tmp_path), manual_dir=str(manual),
                     download=True)
    # The training CLI stops with the same message before any step.
    from gan.train import train

    with pytest.raises(DatasetNotFoundError, match="'cifar10' is not prepared"):
        train("cifar10", "none", steps=1, batch_size=2, model_dir=tmp_path / "run",
              data_dir=str(tmp_path), verbose=0, log=lambda *_: None)


def _context(pipelines, index, replicas):
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                      num_replicas_in_sync=replicas)


@pytest.mark.parametrize("pipelines,replicas", [(1, 2), (2, 2), (2, 4)])
def test_per_pipeline_streams_are_the_replica_slices_of_the_global_batches(pipelines, replicas):
    """Input pipeline i of P with R/P replicas yields, per global batch, its replicas'
    slices in order: together the pipelines make exactly the one-pipeline stream."""
    from gan.data import digits_batches

    from kctx.data import replica_batches, replica_slices, streaming_batches

    size = 8 // replicas
    assert replica_slices(8, _context(pipelines, pipelines - 1, replicas)) == (
        size, tuple((pipelines - 1) * (replicas // pipelines) * size + j * size
                    for j in range(replicas // pipelines)))
    whole = _first_batches(digits_batches(8, 16, seed=2, start_step=5), 3)
    parts = [_first_batches(digits_batches(8, 16, seed=2, start_step=5,
                                           input_context=_context(pipelines, index, replicas)),
                            3 * replicas // pipelines) for index in range(pipelines)]
    local = replicas // pipelines
    for step in range(3):
        for key in whole[0]:
            joined = np.concatenate([part[step * local + j][key] for part in parts
                                     for j in range(local)])
            np.testing.assert_array_equal(joined, whole[step][key], err_msg=key)
    # The streaming pipeline (TFDS-style: shuffle buffer, decode after the shard).
    examples = tf.data.Dataset.range(40).map(lambda i: {"x": i})
    whole = _first_batches(streaming_batches(examples, lambda i, e: e, 40, 8, seed=1,
                                             start_step=2, shuffle_buffer=40), 4)
    parts = [_first_batches(streaming_batches(examples, lambda i, e: e, 40, 8, seed=1,
                                              start_step=2, shuffle_buffer=40,
                                              input_context=_context(pipelines, index,
                                                                     replicas)),
                            4 * local) for index in range(pipelines)]
    for step in range(4):
        joined = np.concatenate([part[step * local + j]["x"] for part in parts
                                 for j in range(local)])
        np.testing.assert_array_equal(joined, whole[step]["x"])
    # Streams made whole (synthetic tasks) are cut the same way.
    batches = tf.data.Dataset.range(5).map(
        lambda k: (tf.range(8, dtype=tf.int64) + 10 * k, -tf.range(8, dtype=tf.int64)))
    cut = [_first_batches(replica_batches(batches, 8, _context(pipelines, index, replicas)),
                          5 * local) for index in range(pipelines)]
    for step, (x, y) in enumerate(_first_batches(batches, 5)):
        joined = np.concatenate([part[step * local + j][0] for part in cut
                                 for j in range(local)])
        np.testing.assert_array_equal(joined, x)


def test_array_examples_stream_as_the_rows_would():
    """Indices shuffled and looked up after the shuffle (what keeps a streaming pipeline
    from holding in-memory arrays once per epoch) give the stream of the rows themselves,
    also across an epoch boundary and from a resumed step."""
    from kctx.data import array_examples, streaming_batches

    rows = {"image": np.random.default_rng(0).normal(size=(40, 3, 3, 2)).astype("float32"),
            "label": np.arange(40) % 7}
    indices, lookup = array_examples(rows)
    assert [int(i) for i in indices] == list(range(40))
    np.testing.assert_array_equal(lookup(tf.constant([3, 1]))["image"], rows["image"][[3, 1]])
    for start_step in (0, 3):
        looked_up = streaming_batches(indices, lambda i, index: lookup(index), 40, 8, seed=4,
                                      start_step=start_step, shuffle_buffer=16)
        direct = streaming_batches(tf.data.Dataset.from_tensor_slices(rows), lambda i, e: e, 40,
                                   8, seed=4, start_step=start_step, shuffle_buffer=16)
        for a, b in zip(_first_batches(looked_up, 7), _first_batches(direct, 7)):
            for key in rows:
                np.testing.assert_array_equal(a[key], b[key])


def test_sharded_evaluation_gives_every_replica_equal_batches_and_every_example_once():
    from kctx.data import sharded_examples

    examples = tf.data.Dataset.range(11).map(lambda i: (tf.cast(i, tf.float32), i))
    blank = (tf.constant(-1.0), tf.constant(-1, tf.int64))
    seen, counts = [], []
    for index in range(2):
        batches = list(sharded_examples(examples, 11, 4, blank, _context(2, index, 4)))
        counts.append([len(b[0]) for b in batches])
        for inputs, target, weight in batches:
            seen += [int(t) for t, w in zip(target.numpy(), weight.numpy()) if w > 0]
            assert all(int(t) == -1 for t, w in zip(target.numpy(), weight.numpy()) if w == 0)
    assert sorted(seen) == list(range(11))
    assert counts[0] == counts[1] and len(set(counts[0])) == 1  # equal batches everywhere
    single = list(sharded_examples(examples, 11, 4, blank))
    assert [len(b[0]) for b in single] == [4, 4, 3]  # one replica: nothing padded
