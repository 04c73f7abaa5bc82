"""The language workflow: the pinned standard-library corpus split by file, step-indexed
windows, a tiny run that trains, resumes, re-scores in bits per character and generates."""

import json

import keras
import numpy as np
import pytest

from language.configs import get_config
from language.data import CORPUS_FILES, HELD_OUT_EVERY, VOCABULARY_SIZE, held_out_windows, \
    read_corpus, split_corpus, training_stream

TINY = dict(steps=4, batch_size=2, context_length=32, embed_dim=16, num_blocks=1,
            checkpoint_every=2, eval_characters=256, verbose=0)


def test_corpus_is_pinned_hashed_and_split_by_file(tmp_path):
    texts, digest = read_corpus()
    assert sorted(texts) == sorted(CORPUS_FILES) and len(digest) == 64
    assert read_corpus()[1] == digest
    train, held_out = split_corpus(texts)
    names = sorted(texts)
    held = [name for index, name in enumerate(names) if index % HELD_OUT_EVERY
            == HELD_OUT_EVERY - 1]
    assert held_out.tobytes() == b"".join(texts[name] + b"\n" for name in held)
    assert len(train) + len(held_out) == sum(len(t) + 1 for t in texts.values())
    # Another set of files is another corpus: another hash; a missing file is named.
    (tmp_path / "a.py").write_text("x = 1\n")
    assert read_corpus(tmp_path, files=("a.py",))[1] != digest
    with pytest.raises(FileNotFoundError, match=r"\['b.py'\] \(1 missing\)"):
        read_corpus(tmp_path, files=("a.py", "b.py"))


def test_windows_are_a_function_of_seed_and_step():
    text = np.arange(1000, dtype=np.uint8)
    first = [tuple(np.asarray(t) for t in batch)
             for batch in training_stream(text, 16, 3, seed=5).take(4)]
    resumed = [tuple(np.asarray(t) for t in batch)
               for batch in training_stream(text, 16, 3, seed=5, start_step=2).take(2)]
    for a, b in zip(first[2:], resumed):
        np.testing.assert_array_equal(a[0], b[0])
    inputs, targets = first[0]
    assert inputs.shape == targets.shape == (3, 16) and inputs.dtype == np.int32
    np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])
    inputs, targets = held_out_windows(text, 100, max_characters=250)
    assert inputs.shape == (3, 100)
    np.testing.assert_array_equal(targets.ravel(), text[1:301])


def test_tiny_run_trains_resumes_rescores_and_generates(tmp_path):
    from language.evaluate import evaluate
    from language.generate import generate, main
    from language.train import train

    stopped = train("stdlib", "attention", model_dir=tmp_path, stop_after_step=2, **TINY)
    assert stopped["stopped_at"] == 2
    results = train("stdlib", "attention", model_dir=tmp_path, **TINY)
    assert results["steps"] == 4 and 0 < results["bits_per_character"] < 12
    assert results["bits_per_character"] == pytest.approx(results["loss"] / np.log(2), rel=1e-5)
    assert results["eval_characters"] == 256 and len(results["corpus_sha256"]) == 64
    assert json.loads((tmp_path / "run.json").read_text())["config"]["mixer"] == "attention"
    rescored = evaluate(tmp_path, output=False, log=lambda *_: None)
    assert rescored["bits_per_character"] == pytest.approx(results["bits_per_character"],
                                                           rel=1e-6)
    text = generate(tmp_path, "import ", length=12, seed=3)
    assert text.startswith("import ") and text == generate(tmp_path, "import ", length=12,
                                                           seed=3)
    with pytest.raises(SystemExit):
        main(["--model-dir", str(tmp_path), "--prompt", ""])


def test_every_mixer_has_its_options_and_bad_settings_are_named():
    assert get_config("stdlib", mixer="causal_hamburger").mixer_options() == {
        "rank": 16, "steps": 6, "method": "nmf", "latent_dim": 256, "chunk_size": None,
        "block_size": None}
    assert get_config("stdlib", block_size=64).mixer_options()["block_size"] == 64
    assert get_config("stdlib", ham_method="vq").mixer_options()["method"] == "vq"
    # The short convolution before every block's mixer: k·C + C weights a block.
    from language.workflow import build_model

    tiny = dict(embed_dim=8, num_blocks=2, context_length=16, mixer="linear_attention")
    plain, local = (build_model(get_config("stdlib", **tiny, short_conv=k)) for k in (None, 3))
    assert local.count_params() - plain.count_params() == 2 * (3 * 8 + 8)
    assert local.blocks[0].short_convolution.depthwise and plain.blocks[0].short_convolution is None
    assert get_config("stdlib", mixer="linear_attention").mixer_options()["chunk_size"] == 64
    assert get_config("stdlib_2048").context_length == 2048
    with pytest.raises(ValueError, match="Received: mixer='lstm'"):
        get_config("stdlib", mixer="lstm")
    with pytest.raises(ValueError, match="Received: context_length=0"):
        get_config("stdlib", context_length=0)
    with pytest.raises(ValueError, match="Received: block_size=0"):
        get_config("stdlib", block_size=0)
    with pytest.raises(ValueError, match="Received: short_conv=0"):
        get_config("stdlib", short_conv=0)
    with pytest.raises(ValueError, match="Received: ham_method='cd'"):
        get_config("stdlib", ham_method="cd")


def test_a_causal_hamburger_run_exports_to_onnx_and_litert(tmp_path):
    """The exported artifacts take token ids and give Keras' logits: the causal ham's
    cumulative sums and batched products convert (no einsum with '...', which the
    converters refuse), in both forms. With K = 2 rounds of updates: every round is the same
    ops, and tf2onnx copies the whole graph before each of its optimizers (K = 6 took 67 CPU
    s here, K = 2 37)."""
    from language.export import export
    from language.train import train

    train("stdlib", "causal_hamburger", model_dir=tmp_path, **dict(TINY, steps=2, ham_steps=2))
    for format in ("onnx", "litert"):
        report = export(tmp_path, format, log=lambda *_: None)
        assert report["max_relative_difference"] < 1e-4, (format, report)
    # The blocked form's padding, block reshapes and exclusive sums convert too: its model
    # as a run builds it (the run's own export is the one above).
    from kctx.export import export_model, load_artifact
    from language.workflow import build_model

    options = {key: value for key, value in TINY.items() if key != "verbose"}
    model = build_model(get_config("stdlib", mixer="causal_hamburger", block_size=5,
                                   ham_steps=2, **options))
    tokens = np.random.default_rng(0).integers(0, VOCABULARY_SIZE, (2, 32)).astype("int32")
    expected = keras.ops.convert_to_numpy(model(tokens))
    path = export_model(model, tmp_path / "blocked.onnx", format="onnx")
    got = load_artifact(path, "onnx")(tokens)
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()


def test_witten_bell_ngrams_are_distributions_and_score_the_held_out_windows(capsys):
    from language.ngram import WittenBell, bits_per_character, main

    text = b"abracadabra, abracadabra!"
    model = WittenBell(text, order=3)
    for context in (b"", b"a", b"ab", b"zz", b"xa", b"!"):  # seen, unseen and backed-off
        assert sum(model.probability(context, bytes([c])) for c in range(256)) == \
            pytest.approx(1.0, abs=1e-12)
    # By hand on "abab", order 2: the unigram P(b) = (2 + 2/256) / (4 + 2); after "a"
    # (seen twice, always followed by "b") P(b | a) = (2 + 1·P(b)) / (2 + 1).
    bigram = WittenBell(b"abab", order=2)
    unigram_b = (2 + 2 / 256) / 6
    assert bigram.probability(b"", b"b") == pytest.approx(unigram_b, rel=1e-12)
    assert bigram.probability(b"a", b"b") == pytest.approx((2 + unigram_b) / 3, rel=1e-12)
    assert bigram.probability(b"b", b"b") == pytest.approx(unigram_b / 2, rel=1e-12)
    # Scored on the decoder's windows: target g of the held-out text (position g + 1) in
    # window g // T sees at most n − 1 bytes before it, none before its window's start.
    held_out = np.frombuffer(b"cadabra abracad, bracadabra; dab", np.uint8)
    length, flat = 5, held_out.tobytes()
    targets = (len(flat) - 1) // length * length
    expected = -np.mean([np.log2(model.probability(
        flat[max(g // length * length, g + 1 - 2):g + 1], flat[g + 1:g + 2]))
        for g in range(targets)])
    assert bits_per_character(model, held_out, length) == pytest.approx(expected, rel=1e-12)
    assert bits_per_character(model, held_out, length, max_characters=10) == pytest.approx(
        -np.mean([np.log2(model.probability(flat[max(g // length * length, g - 1):g + 1],
                                            flat[g + 1:g + 2])) for g in range(10)]),
        rel=1e-12)

    assert main(["--orders", "1", "--eval-characters", "600"]) == 0
    output = capsys.readouterr().out
    assert "on 1,024 held-out characters of stdlib (T = 512)" in output
    assert float(output.strip().splitlines()[-1].split()[-1]) > 4.0  # a unigram's bits
    for orders in ("0-2", "2-100", "a"):
        with pytest.raises(SystemExit) as refused:
            main(["--orders", orders])
        assert refused.value.code == 2
        assert f"`--orders` must be n from 1 to 12 as a range or a list, e.g. 1-6 or 1,2,4. " \
               f"Received: '{orders}'" in capsys.readouterr().err
