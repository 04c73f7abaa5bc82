"""The causal token mixers (softmax attention with a key-value cache, linear attention, a
causal convolution, the causal Hamburger) and the decoder language model built on them:
causality, the recurrent forms equal to the parallel ones, generation, the layer standards."""

import keras
import numpy as np
import pytest
from keras import ops

import numpy_reference as reference
from kctx.layers import CausalConv1D, CausalHamburger, CausalLinearAttention, CausalSelfAttention
from kctx.models import MIXERS, CausalLanguageModel
from kctx.ops import causal_linear_attention, causal_linear_attention_step
from kctx.testing import run_layer_test

RNG = np.random.default_rng(0)
MIXER_LAYERS = {
    "attention": lambda: CausalSelfAttention(num_heads=2),
    "linear_attention": lambda: CausalLinearAttention(num_heads=2, chunk_size=3),
    "causal_conv": lambda: CausalConv1D(kernel_size=3),
    "causal_conv-depthwise": lambda: CausalConv1D(kernel_size=3, depthwise=True),
    "causal_hamburger": lambda: CausalHamburger(rank=3, steps=2, norm="layer"),
}


@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_causal_linear_attention_is_its_definition(chunk_size):
    q, k, v = (RNG.standard_normal((2, 3, 10, 4)).astype("float32") for _ in range(3))
    got = ops.convert_to_numpy(causal_linear_attention(q, k, v, chunk_size=chunk_size))
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(got[b, h], reference.causal_linear_attention(
                q[b, h].astype(np.float64), k[b, h], v[b, h]), rtol=1e-4, atol=1e-5)
    state = (np.zeros((2, 3, 4, 4), "float32"), np.zeros((2, 3, 4), "float32"))
    steps = []
    for t in range(10):
        out, state = causal_linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        steps.append(ops.convert_to_numpy(out))
    np.testing.assert_allclose(np.stack(steps, axis=2), got, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MIXER_LAYERS))
def test_mixer_is_causal_and_its_recurrent_form_is_its_parallel_form(name):
    layer = MIXER_LAYERS[name]()
    x = RNG.standard_normal((2, 9, 8)).astype("float32")
    y = ops.convert_to_numpy(layer(x))
    changed = x.copy()
    changed[:, 5:] = RNG.standard_normal(changed[:, 5:].shape) * 4
    z = ops.convert_to_numpy(layer(changed))
    np.testing.assert_allclose(z[:, :5], y[:, :5], rtol=1e-6, atol=1e-6)
    assert np.abs(z[:, 5:] - y[:, 5:]).max() > 1e-3
    # The growing state, and the one allocated for 11 positions (attention's fixed cache).
    for capacity in (None, 11):
        state, outputs = layer.initial_state(2, capacity), []
        for t in range(9):
            y_t, state = layer.step(x[:, t], state)
            outputs.append(ops.convert_to_numpy(y_t))
        np.testing.assert_allclose(np.stack(outputs, axis=1), y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer_cls,kwargs", [
    (CausalSelfAttention, {"num_heads": 2}),
    (CausalLinearAttention, {"num_heads": 2, "key_dim": 3, "chunk_size": 4}),
    (CausalConv1D, {"kernel_size": 3}),
    (CausalConv1D, {"kernel_size": 3, "depthwise": True}),
], ids=["attention", "linear_attention", "causal_conv", "causal_conv-depthwise"])
def test_mixer_layer_standards(layer_cls, kwargs):
    run_layer_test(layer_cls, kwargs, (2, 6, 8), variable_spatial_dims=False)


@pytest.mark.parametrize("depthwise", [False, True], ids=["full", "depthwise"])
def test_causal_convolution_is_its_definition(depthwise):
    """y_t = Σ_{i<k} W_i x_{t−i} + b (zeros before the first position), with W_i (C, C), or
    per channel w_i ⊙ x_{t−i}; Keras's layout: kernel[k − 1 − i] multiplies x_{t−i}."""
    layer = CausalConv1D(kernel_size=3, depthwise=depthwise)
    x = RNG.standard_normal((2, 7, 5)).astype("float32")
    layer(x)
    layer.set_weights([w + RNG.standard_normal(w.shape).astype("float32")
                       for w in layer.get_weights()])  # a non-zero bias too
    kernel, bias = (np.asarray(w, np.float64) for w in layer.get_weights())
    expected = np.zeros((2, 7, 5)) + bias
    for t in range(7):
        for i in range(3):
            if t - i >= 0:
                tap = kernel[2 - i]
                expected[:, t] += (x[:, t - i] * tap[:, 0] if depthwise
                                   else x[:, t - i] @ tap)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)
    assert kernel.shape == ((3, 5, 1) if depthwise else (3, 5, 5))


def test_attention_cache_grows_and_linear_state_does_not():
    attention, linear = CausalSelfAttention(num_heads=2), CausalLinearAttention(num_heads=2)
    x = RNG.standard_normal((1, 4, 8)).astype("float32")
    for layer in (attention, linear):
        layer(x)
    cache, sums = attention.initial_state(1), linear.initial_state(1)
    for t in range(4):
        _, cache = attention.step(x[:, t], cache)
        _, sums = linear.step(x[:, t], sums)
    assert tuple(cache[0].shape) == (1, 2, 4, 4)
    with pytest.raises(ValueError, match="Received: capacity=0"):
        attention.initial_state(1, capacity=0)
    assert [tuple(s.shape) for s in sums] == [(1, 2, 4, 4), (1, 2, 4)]


LANGUAGE_MIXERS = {"causal_hamburger": {"rank": 3, "steps": 2}, "attention": {"num_heads": 2},
                   "linear_attention": {"num_heads": 2, "chunk_size": 4},
                   "causal_conv": {"kernel_size": 3}}


@pytest.mark.parametrize("mixer,options", [
    *sorted(LANGUAGE_MIXERS.items()),
    ("causal_hamburger", {"rank": 3, "steps": 2, "method": "vq", "block_size": 3}),
    ("causal_hamburger", {"rank": 3, "steps": 2, "short_conv": 3}),
    ("attention", {"num_heads": 2, "short_conv": 2}),
], ids=[*sorted(LANGUAGE_MIXERS), "causal_hamburger-vq-blocks", "causal_hamburger-short_conv",
        "attention-short_conv"])
def test_language_model_generates_what_it_scores(mixer, options, tmp_path):
    assert set(LANGUAGE_MIXERS) == set(MIXERS)  # every mixer is tested
    options = dict(options)
    short_conv = options.pop("short_conv", None)
    model = CausalLanguageModel(vocabulary_size=11, embed_dim=8, num_blocks=2, mixer=mixer,
                                mixer_options=options, short_conv=short_conv)
    tokens = RNG.integers(0, 11, (2, 7)).astype("int32")
    logits = ops.convert_to_numpy(model(tokens))
    assert logits.shape == (2, 7, 11)
    states, steps = model.initial_state(2), []
    for t in range(7):
        step_logits, states = model.step(tokens[:, t], states)
        steps.append(ops.convert_to_numpy(step_logits))
    np.testing.assert_allclose(np.stack(steps, axis=1), logits, rtol=1e-4, atol=1e-4)
    # Greedy generation: each new token is the argmax of the whole-sequence scoring.
    generated = ops.convert_to_numpy(model.generate(tokens[:, :3], 4, temperature=0.0))
    assert generated.shape == (2, 7) and (generated[:, :3] == tokens[:, :3]).all()
    rescored = ops.convert_to_numpy(model(generated))
    np.testing.assert_array_equal(rescored[:, 2:-1].argmax(-1), generated[:, 3:])
    sampled = [ops.convert_to_numpy(model.generate(tokens[:, :3], 5, seed=4)) for _ in "ab"]
    np.testing.assert_array_equal(*sampled)
    # Saved and reloaded: the same logits.
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(ops.convert_to_numpy(loaded(tokens)), logits, rtol=1e-6,
                               atol=1e-6)


def test_language_model_trains_and_refuses_bad_arguments():
    model = CausalLanguageModel(vocabulary_size=7, embed_dim=8, num_blocks=1,
                                mixer_options={"rank": 2, "steps": 2})
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = np.tile(np.arange(7, dtype="int32"), (4, 2))  # a periodic sequence
    history = model.fit(tokens[:, :-1], tokens[:, 1:], epochs=20, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0]
    with pytest.raises(ValueError, match="Received: mixer='lstm'"):
        CausalLanguageModel(mixer="lstm")
    with pytest.raises(ValueError, match=r"prompt.shape=\(2, 0\)"):
        model.generate(np.zeros((2, 0), "int32"), 3)
    with pytest.raises(ValueError, match="needs `residual=True`"):
        CausalHamburger(final_relu=True, residual=False)


def test_generation_bench_writes_state_sizes_and_speeds(tmp_path):
    """``python -m kctx.bench generation``: the key-value cache grows with the length, the
    causal Hamburger's and linear attention's states do not."""
    import json

    from kctx.bench.__main__ import main

    path = tmp_path / "generation.json"
    assert main(["generation", "--lengths", "6", "12", "--window", "3", "--embed-dim", "8",
                 "--num-blocks", "1", "--json", str(path)]) == 0
    rows = {(r["mixer"], r["length"]): r for r in json.loads(path.read_text())}
    assert len(rows) == 8 and all(r["ms_per_token"] > 0 for r in rows.values())
    assert rows["attention", 12]["state_mb"] == 2 * rows["attention", 6]["state_mb"]
    for mixer in ("causal_hamburger", "linear_attention", "causal_conv"):
        assert rows[mixer, 12]["state_mb"] == rows[mixer, 6]["state_mb"] > 0
    with pytest.raises(ValueError, match="`window` must be below the shortest length"):
        main(["generation", "--lengths", "4", "--window", "4"])
    # Compiled: one graph for every length of the growing cache, the same states.
    assert main(["generation", "--lengths", "6", "12", "--window", "3", "--embed-dim", "8",
                 "--num-blocks", "1", "--mixers", "attention", "causal_hamburger",
                 "--compiled", "--json", str(path)]) == 0
    compiled = {(r["mixer"], r["length"]): r for r in json.loads(path.read_text())}
    assert all(r["compiled"] == "tf.function" for r in compiled.values()) and len(compiled) == 4
    for key, row in compiled.items():
        assert row["state_mb"] == rows[key]["state_mb"]
    # The blocked Hamburger: a constant state too, K dictionaries (and a count) larger.
    assert main(["generation", "--lengths", "6", "12", "--window", "3", "--embed-dim", "8",
                 "--num-blocks", "1", "--mixers", "causal_hamburger", "--ham-block-size", "4",
                 "--json", str(path)]) == 0
    blocked = {r["length"]: r for r in json.loads(path.read_text())}
    assert blocked[6]["options"] == {"block_size": 4}
    assert blocked[12]["state_mb"] == blocked[6]["state_mb"] > rows["causal_hamburger",
                                                                    6]["state_mb"]
    # The causal VQ: a constant state of K·(d·r + r), below the NMF's K·(d·r + r²).
    assert main(["generation", "--lengths", "6", "12", "--window", "3", "--embed-dim", "8",
                 "--num-blocks", "1", "--mixers", "causal_hamburger", "--ham-method", "vq",
                 "--json", str(path)]) == 0
    vq = {r["length"]: r for r in json.loads(path.read_text())}
    assert vq[6]["options"] == {"method": "vq"}
    assert vq[12]["state_mb"] == vq[6]["state_mb"] < rows["causal_hamburger", 6]["state_mb"]
