"""Synthetic long-sequence tasks of Sec. 5.2 (Khalitov et al.), generated with stateless ops.

Batch k of a stream is a function of (seed, k) only, so training streams are
endless, reproducible and resume exactly; held-out sets use another seed.

- **Adding** (regression): element i is (a_i, b_i) with a_i ~ U(−1, 1) and
  b_i = 1 at two distinct positions t₁, t₂ drawn anywhere in the sequence (not
  restricted to halves, as in the paper), 0 elsewhere. Target
  y = 0.5 + (a_t₁ + a_t₂)/4; a prediction is correct if |ŷ − y| < 0.04.
- **Temporal order** (4 classes): symbols from {a, b, c, d, X, Y} (ids 0–5);
  noise symbols a–d everywhere except two distinct positions holding X or Y.
  The class is the ordered pair of signal symbols: (X, X) → 0, (X, Y) → 1,
  (Y, X) → 2, (Y, Y) → 3 (the paper's classes 1–4).
"""
import csv
import os
import pathlib

from kctx.data import DatasetNotFoundError, tfds_dataset

TASKS = ("adding", "temporal_order")
ALPHABET = ("a", "b", "c", "d", "X", "Y")
ADDING_TOLERANCE = 0.04
TEMPORAL_ORDER_CLASSES = 4
_HELD_OUT_SEED_OFFSET = 1_000_003
# The held-out examples are drawn this many at a time, whatever the evaluation's batch size:
# the set is a function of (task, length, count, seed) only.
HELD_OUT_BLOCK = 100


def _check(task, length):
    if task not in TASKS:
        raise ValueError(f"Unknown `task`: expected one of {TASKS}. Received: task={task!r}")
    if not isinstance(length, int) or length < 2:
        raise ValueError(f"`length` must be an integer ≥ 2. Received: length={length!r}")


def _two_positions(keys, batch, length):
    import tensorflow as tf

    first = tf.random.stateless_uniform((batch,), keys[0], 0, length, dtype=tf.int32)
    gap = tf.random.stateless_uniform((batch,), keys[1], 1, length, dtype=tf.int32)
    return first, (first + gap) % length


def task_batch(task, length, batch_size, seed):
    """One batch of ``task`` from a shape-(2,) int seed: ``(inputs, targets)``.

    Adding: inputs float32 (B, n, 2), targets float32 (B, 1). Temporal order:
    inputs int32 (B, n) symbol ids, targets int32 (B,).
    """
    import tensorflow as tf

    _check(task, length)
    keys = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=5)
    t1, t2 = _two_positions(keys[:2], batch_size, length)
    marks = tf.one_hot(t1, length) + tf.one_hot(t2, length)  # (B, n), two ones
    if task == "adding":
        values = tf.random.stateless_uniform((batch_size, length), keys[2], -1.0, 1.0)
        target = 0.5 + tf.reduce_sum(values * marks, axis=1, keepdims=True) / 4.0
        return tf.stack([values, marks], axis=-1), target
    noise = tf.random.stateless_uniform((batch_size, length), keys[2], 0, 4, dtype=tf.int32)
    signals = tf.random.stateless_uniform((batch_size, 2), keys[3], 0, 2, dtype=tf.int32)  # X=0
    early, late = tf.minimum(t1, t2), tf.maximum(t1, t2)
    symbols = (noise * (1 - tf.cast(marks, tf.int32))
               + tf.one_hot(early, length, dtype=tf.int32) * (4 + signals[:, :1])
               + tf.one_hot(late, length, dtype=tf.int32) * (4 + signals[:, 1:]))
    return symbols, 2 * signals[:, 0] + signals[:, 1]


def training_stream(task, length, batch_size, seed=0, start_step=0):
    """Endless batches; batch k = :func:`task_batch` with seed (seed, k)."""
    import tensorflow as tf

    def batch_at(step):
        return task_batch(task, length, batch_size, tf.stack([tf.cast(seed, tf.int64), step]))

    return tf.data.Dataset.range(start_step, 2**62).map(
        batch_at, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)


def held_out(task, length, num_examples=5000, batch_size=HELD_OUT_BLOCK, seed=0):
    """A fixed held-out set of ``num_examples`` (the paper's 5,000), in batches, drawn with a
    seed no training stream of a nearby seed uses."""
    import tensorflow as tf

    if num_examples % batch_size:
        raise ValueError(f"`num_examples` must be a multiple of `batch_size`. Received: "
                         f"num_examples={num_examples}, batch_size={batch_size}")
    held_seed = seed + _HELD_OUT_SEED_OFFSET

    def batch_at(step):
        return task_batch(task, length, batch_size, tf.stack([tf.cast(held_seed, tf.int64),
                                                              step]))

    return tf.data.Dataset.range(num_examples // batch_size).map(batch_at).cache()


# ---------------------------------------------------------------------------------------------
# Long Range Arena (Tay et al. 2020), Sec. 5.3: read from local files / TFDS.
# Every loader returns (tokens int32 (count, n), labels int32 (count,)) as a tf.data.Dataset of
# examples plus the vocabulary size and the number of classes.
# ---------------------------------------------------------------------------------------------

LRA_TASKS = {  # name → (sequence length, vocabulary size, classes)
    "listops": (2000, 18, 10),
    "text": (4000, 257, 2),
    "image": (1024, 256, 10),
    "pathfinder": (1024, 256, 2),
}
PAD = 0
LISTOPS_TOKENS = ("<pad>", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
                  "[MIN", "[MAX", "[MED", "[SM", "]", "(", ")")


def _pad_to(tokens, length):
    import tensorflow as tf

    tokens = tokens[:length]
    return tf.pad(tokens, [[0, length - tf.shape(tokens)[0]]], constant_values=PAD)


def _local_root(data_dir):
    return pathlib.Path(data_dir or os.environ.get("KCTX_DATA_DIR", "~/datasets")).expanduser()


def listops(split, data_dir=None, length=2000):
    """LRA ListOps from ``<data_dir>/lra_release/listops-1000/basic_{train,val,test}.tsv``
    (tab-separated ``Source``/``Target`` with a header). Tokens: the digits, the four
    operators, ``]`` and parentheses (ids in :data:`LISTOPS_TOKENS`, 0 = padding)."""
    import numpy as np
    import tensorflow as tf


    names = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
    if split not in names:
        raise ValueError(f"`split` must be one of {tuple(names)}. Received: split={split!r}")
    root = _local_root(data_dir)
    candidates = [root / "lra_release" / "listops-1000", root / "listops-1000", root]
    folder = next((c for c in candidates if (c / names[split]).is_file()), None)
    if folder is None:
        raise DatasetNotFoundError(
            f"LRA ListOps was not found in {root}: expected {candidates[0] / names[split]} "
            "(lra_release.gz from the Long Range Arena repository); pass --data-dir")
    vocabulary = {token: index for index, token in enumerate(LISTOPS_TOKENS)}
    tokens, labels = [], []
    with open(folder / names[split], newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            ids = [vocabulary[t] for t in row["Source"].split()]
            ids = np.asarray(ids[:length], np.int32)
            tokens.append(np.pad(ids, (0, length - len(ids))))
            labels.append(int(row["Target"]))
    return tf.data.Dataset.from_tensor_slices((np.stack(tokens), np.asarray(labels, np.int32)))


def text(split, data_dir=None, length=4000, download=False):
    """LRA Text: TFDS ``imdb_reviews`` at byte level (ids 1–256, 0 = padding), truncated or
    padded to ``length``; splits ``train`` / ``test``."""
    import tensorflow as tf


    dataset, _ = tfds_dataset("imdb_reviews", split, data_dir=data_dir, download=download)

    def encode(example):
        ids = tf.cast(tf.io.decode_raw(example["text"], tf.uint8), tf.int32) + 1
        return _pad_to(ids, length), tf.cast(example["label"], tf.int32)

    return dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def image(split, data_dir=None, download=False):
    """LRA Image: TFDS ``cifar10`` in grey levels 0–255 (categorical), flattened to 1,024."""
    import tensorflow as tf


    dataset, _ = tfds_dataset("cifar10", split, data_dir=data_dir, download=download)

    def encode(example):
        grey = tf.image.rgb_to_grayscale(example["image"])  # uint8, rounded
        return tf.reshape(tf.cast(grey, tf.int32), (-1,)), tf.cast(example["label"], tf.int32)

    return dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def pathfinder(split, data_dir=None, difficulty="curv_contour_length_14", fractions=(0.8, 0.1)):
    """LRA Pathfinder (32×32) from the released files:
    ``<data_dir>/lra_release/pathfinder32/<difficulty>/metadata/*.npy`` (text files, one
    image per line: directory, file name, …, label in the 4th field) and the PNGs they
    name. Files are split 80/10/10 in sorted order into ``train`` / ``val`` / ``test``
    (LRA's split). Pixels are categorical tokens 0–255."""
    import tensorflow as tf


    splits = ("train", "val", "test")
    if split not in splits:
        raise ValueError(f"`split` must be one of {splits}. Received: split={split!r}")
    root = _local_root(data_dir)
    candidates = [root / "lra_release" / "pathfinder32" / difficulty,
                  root / "pathfinder32" / difficulty, root / difficulty]
    base = next((c for c in candidates if (c / "metadata").is_dir()), None)
    if base is None:
        raise DatasetNotFoundError(
            f"LRA Pathfinder was not found in {root}: expected {candidates[0]}/metadata/*.npy and "
            "imgs/ (lra_release.gz from the Long Range Arena repository); pass --data-dir")
    files = sorted((base / "metadata").glob("*.npy"), key=lambda p: (len(p.stem), p.stem))
    cut1 = int(round(len(files) * fractions[0]))
    cut2 = int(round(len(files) * (fractions[0] + fractions[1])))
    chosen = {"train": files[:cut1], "val": files[cut1:cut2], "test": files[cut2:]}[split]
    paths, labels = [], []
    for metadata in chosen:
        for line in metadata.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 4:
                paths.append(str(base / fields[0] / fields[1]))
                labels.append(int(fields[3]))
    if not paths:
        raise DatasetNotFoundError(f"LRA Pathfinder {split!r} in {base} lists no images")

    def encode(path, label):
        pixels = tf.io.decode_png(tf.io.read_file(path), channels=1)
        return tf.reshape(tf.cast(pixels, tf.int32), (-1,)), label

    dataset = tf.data.Dataset.from_tensor_slices((paths, tf.constant(labels, tf.int32)))
    return dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def lra_dataset(task, split, data_dir=None, download=False):
    """The examples ``(tokens (n,), label)`` of LRA ``task`` (a key of :data:`LRA_TASKS`).

    Splits: ``train`` and ``test`` for all; ``val`` for listops and pathfinder.
    """
    if task not in LRA_TASKS:
        raise ValueError(f"Unknown LRA `task`: expected one of {tuple(LRA_TASKS)}. "
                         f"Received: task={task!r}")
    length = LRA_TASKS[task][0]
    if task == "listops":
        return listops(split, data_dir, length)
    if task == "text":
        return text(split, data_dir, length, download)
    if task == "image":
        return image(split, data_dir, download)
    return pathfinder(split, data_dir)
