"""Synthetic long-sequence tasks, the PSF / Transformer sequence models, sequence.train."""

import json

import keras
import numpy as np
import pytest

from kctx.models import psf_sequence_model, transformer_sequence_model
from sequence.data import held_out, task_batch, training_stream


def _numpy(batch):
    return tuple(np.asarray(t) for t in batch)


def test_adding_batches_follow_the_definition():
    inputs, targets = _numpy(task_batch("adding", 50, 64, [3, 0]))
    assert inputs.shape == (64, 50, 2) and targets.shape == (64, 1)
    values, marks = inputs[..., 0], inputs[..., 1]
    assert set(np.unique(marks)) == {0.0, 1.0} and (marks.sum(1) == 2).all()
    assert values.min() >= -1 and values.max() <= 1 and values.std() > 0.5
    np.testing.assert_allclose(targets[:, 0], 0.5 + (values * marks).sum(1) / 4, atol=1e-6)
    # Positions anywhere: both halves and neighbours occur.
    first = marks.argmax(1)
    assert first.min() < 10
    assert (marks[:, :25].sum(1) == 2).any() and (marks[:, 25:].sum(1) == 2).any()
    again = _numpy(task_batch("adding", 50, 64, [3, 0]))
    np.testing.assert_array_equal(again[0], inputs)


def test_temporal_order_batches_follow_the_definition():
    symbols, labels = _numpy(task_batch("temporal_order", 40, 400, [1, 7]))
    assert symbols.shape == (400, 40) and labels.shape == (400,)
    signal = symbols >= 4
    assert (signal.sum(1) == 2).all() and symbols.min() >= 0 and symbols.max() <= 5
    for row, label in zip(symbols, labels):
        first, second = row[row >= 4]  # in sequence order; X = 4, Y = 5
        assert label == 2 * (first == 5) + (second == 5)
    assert set(np.unique(labels)) == {0, 1, 2, 3}
    assert set(np.unique(symbols[~signal])) == {0, 1, 2, 3}


def test_streams_are_indexed_by_step_and_held_out_is_apart():
    stream = [_numpy(b) for b in training_stream("adding", 16, 4, seed=2).take(4)]
    resumed = [_numpy(b) for b in training_stream("adding", 16, 4, seed=2, start_step=3).take(1)]
    np.testing.assert_array_equal(resumed[0][0], stream[3][0])
    assert not np.array_equal(stream[0][0], stream[1][0])
    test = [_numpy(b) for b in held_out("adding", 16, 200, 100, seed=2)]
    assert len(test) == 2 and test[0][0].shape == (100, 16, 2)
    assert not np.array_equal(test[0][0][:4], stream[0][0])
    np.testing.assert_array_equal(
        [_numpy(b) for b in held_out("adding", 16, 200, 100, seed=2)][1][1], test[1][1])
    with pytest.raises(ValueError, match="Unknown `task`.*Received: task='copy'"):
        task_batch("copy", 16, 4, [0, 0])
    with pytest.raises(ValueError, match="multiple of `batch_size`"):
        held_out("adding", 16, 150, 100)


@pytest.mark.parametrize("pooling", ["flatten", "cls"])
def test_sequence_models_build_train_and_round_trip(pooling, tmp_path):
    x = np.random.default_rng(0).integers(0, 6, (4, 33)).astype("int32")
    y = np.arange(4) % 4
    psf = psf_sequence_model(33, vocab_size=6, outputs=4, pooling=pooling, embed_dim=8,
                             hidden_units=8)
    transformer = transformer_sequence_model(33, vocab_size=6, outputs=4, pooling=pooling,
                                             embed_dim=8)
    for model in (psf, transformer):
        assert model.output_shape == (None, 4)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, epochs=1, verbose=0)
    psf.save(tmp_path / "psf.keras")
    loaded = keras.saving.load_model(tmp_path / "psf.keras")
    np.testing.assert_allclose(loaded(x, training=False), psf(x, training=False), atol=1e-5)
    with pytest.raises(ValueError, match="exactly one of `input_dim`"):
        psf_sequence_model(33, input_dim=2, vocab_size=6)
    with pytest.raises(ValueError, match="Unknown `pooling`.*Received: pooling='mean'"):
        psf_sequence_model(33, input_dim=2, pooling="mean")


def test_adding_accuracy_uses_the_papers_tolerance():
    from sequence.workflow import adding_accuracy

    got = adding_accuracy(np.array([[0.5], [0.5], [0.5]]), np.array([[0.53], [0.45], [0.5]]))
    np.testing.assert_array_equal(np.asarray(got).reshape(-1), [1.0, 0.0, 1.0])


@pytest.mark.parametrize("task,model", [("adding", "psf"), ("temporal_order", "transformer")])
def test_train_writes_the_record_and_the_model(task, model, tmp_path):
    from sequence.train import train

    record = train(task, model, length=32, steps=6, batch_size=8, eval_every=3,
                   eval_examples=200, embed_dim=8, hidden_units=8, target_accuracy=0,
                   model_dir=tmp_path, verbose=0, log=lambda message: None)
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["steps"] == record["steps"] == 6 and stored["variant"] == f"{model}-32"
    assert [row["step"] for row in record["history"]] == [3, 6]
    assert all("val_accuracy" in row for row in record["history"])
    assert 0.0 <= stored["accuracy"] <= 1.0 and stored["params"] > 0
    assert stored["eval_examples"] == 200
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    x, _ = _numpy(task_batch(task, 32, 3, [0, 0]))
    np.testing.assert_allclose(loaded(x, training=False),
                               record["model"](x, training=False), atol=1e-5)


def test_train_main_parses_the_flags(tmp_path):
    from sequence.train import main

    assert main(["--config", "adding", "--length", "32", "--steps", "4", "--eval-every", "2",
                 "--eval-examples", "100", "--residual", "output", "--value-units", "4",
                 "--hidden-units", "8", "--model-dir", str(tmp_path), "--verbose", "0"]) == 0
    stored = json.loads((tmp_path / "run.json").read_text())["config"]
    assert stored["residual"] == "output" and stored["steps"] == 4 and stored["length"] == 32
    layer = keras.saving.load_model(tmp_path / "model.keras").get_layer("block1_psf")
    assert (layer.residual, layer.value_units, layer.hidden_units) == ("output", 4, 8)
    assert main(["--residual", "none", "--length", "16", "--steps", "2", "--eval-every", "2",
                 "--eval-examples", "100", "--model-dir", str(tmp_path / "none"),
                 "--verbose", "0"]) == 0
    layer = keras.saving.load_model(tmp_path / "none" / "model.keras").get_layer("block1_psf")
    assert layer.residual is None


def test_training_stops_at_the_target_and_a_rerun_keeps_it_finished(tmp_path):
    from sequence.train import train

    quiet = dict(verbose=0, log=lambda message: None)
    tiny = dict(length=16, steps=8, batch_size=8, eval_every=2, eval_examples=100, embed_dim=4,
                hidden_units=4, model_dir=tmp_path, target_accuracy=0.01)  # chance is 25%
    first = train("temporal_order", **tiny, **quiet)
    assert first["steps"] == 2 and [row["step"] for row in first["history"]] == [2]
    again = train("temporal_order", **tiny, **quiet)  # finished: re-scored, not trained on
    assert again["steps"] == 2 and again["accuracy"] == first["accuracy"]


def test_psf_network_learns_the_adding_problem(tmp_path):
    """The paper's PSF network with its defaults solves Adding at length 64 within a few
    hundred steps of Adam; a LayerNorm + feed-forward layout around the same block did not
    (41% after 2,000 steps at length 128). Stops at 95% held-out accuracy."""
    from sequence.train import train

    record = train("adding", "psf", length=64, steps=800, eval_every=100, eval_examples=500,
                   target_accuracy=0.95, model_dir=tmp_path, verbose=0, log=lambda m: None)
    assert record["accuracy"] >= 0.95, [row["val_accuracy"] for row in record["history"]]


def test_listops_reads_the_tsv_and_pads(tmp_path):
    from sequence.data import LISTOPS_TOKENS, lra_dataset

    folder = tmp_path / "lra_release" / "listops-1000"
    folder.mkdir(parents=True)
    (folder / "basic_test.tsv").write_text(
        "Source\tTarget\n( [MAX 2 9 ( [MIN 4 7 ] ) 0 ] )\t9\n[SM 1 2 ]\t3\n")
    examples = [(t.numpy(), int(l)) for t, l in lra_dataset("listops", "test", tmp_path)]
    assert [label for _, label in examples] == [9, 3]
    tokens = examples[1][0]
    assert tokens.shape == (2000,) and (tokens[4:] == 0).all()
    assert [LISTOPS_TOKENS[i] for i in tokens[:4]] == ["[SM", "1", "2", "]"]
    with pytest.raises(Exception, match="LRA ListOps was not found .*basic_val.tsv"):
        lra_dataset("listops", "val", tmp_path)


def test_pathfinder_reads_metadata_and_pngs(tmp_path):
    from PIL import Image

    from sequence.data import lra_dataset

    base = tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_14"
    (base / "metadata").mkdir(parents=True)
    (base / "imgs" / "0").mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = {}
    for index in range(10):  # one metadata file per image: 8 train, 1 val, 1 test
        name = f"sample_{index}.png"
        pixels[name] = rng.integers(0, 256, (32, 32), dtype=np.uint8)
        Image.fromarray(pixels[name], mode="L").save(base / "imgs" / "0" / name)
        (base / "metadata" / f"{index}.npy").write_text(f"imgs/0 {name} 0 {index % 2} 1.0\n")
    train = [(t.numpy(), int(l)) for t, l in lra_dataset("pathfinder", "train", tmp_path)]
    test = [(t.numpy(), int(l)) for t, l in lra_dataset("pathfinder", "test", tmp_path)]
    assert len(train) == 8 and len(test) == 1
    np.testing.assert_array_equal(train[3][0], pixels["sample_3.png"].reshape(-1))
    assert [label for _, label in train] == [i % 2 for i in range(8)] and test[0][1] == 1


def test_text_and_image_on_tfds_mock_data():
    import tensorflow_datasets as tfds

    from sequence.data import lra_dataset

    with tfds.testing.mock_data(num_examples=3):
        texts = [(t.numpy(), int(l)) for t, l in lra_dataset("text", "train", download=True)]
        images = [(t.numpy(), int(l)) for t, l in lra_dataset("image", "test", download=True)]
    assert len(texts) == 3 and all(t.shape == (4000,) and t.max() <= 256 for t, _ in texts)
    assert all(label in (0, 1) for _, label in texts)
    assert all(t.shape == (1024,) and 0 <= t.min() and t.max() <= 255 for t, _ in images)
    assert len({int(t.std() * 1000) for t, _ in images}) > 1


def test_train_on_an_lra_task(tmp_path):
    from sequence.train import train

    folder = tmp_path / "data" / "lra_release" / "listops-1000"
    folder.mkdir(parents=True)
    rows = "".join(f"[MAX {i % 10} {(i * 3) % 10} ]\t{max(i % 10, (i * 3) % 10)}\n"
                   for i in range(40))
    for split in ("train", "test"):
        (folder / f"basic_{split}.tsv").write_text("Source\tTarget\n" + rows)
    record = train("listops", "psf", steps=2, batch_size=8, eval_every=2, eval_examples=0,
                   embed_dim=8, hidden_units=8, model_dir=tmp_path / "run",
                   data_dir=tmp_path / "data", verbose=0, log=lambda message: None)
    assert record["variant"] == "psf-2000" and record["steps"] == 2
    assert 0.0 <= record["accuracy"] <= 1.0
