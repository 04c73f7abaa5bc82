"""The causal Hamburger: the causal NMF and VQ against their per-position NumPy definitions,
exact causality, the parallel and recurrent forms alike, chunks, the blocked form, and the
layer standards."""

import keras
import numpy as np
import pytest
from keras import ops

import numpy_reference as reference
from kctx.layers import CausalHamburger
from kctx.ops import (
    causal_nmf,
    causal_nmf_step,
    causal_vq,
    causal_vq_step,
    initial_bases,
    initial_causal_state,
)
from kctx.testing import run_layer_test

RNG = np.random.default_rng(0)


def _data(batch=2, length=9, channels=6, rank=3):
    x = RNG.uniform(size=(batch, length, channels)).astype("float32")
    bases = keras.ops.convert_to_numpy(initial_bases("nmf", (channels, rank), seed=0))
    return x, bases


def _stepped(layer, inputs):
    """The layer's recurrent form over ``inputs`` (B, T, C), one position at a time."""
    state, outputs = layer.initial_state(inputs.shape[0]), []
    for t in range(inputs.shape[1]):
        y_t, state = layer.step(inputs[:, t], state)
        outputs.append(ops.convert_to_numpy(y_t))
    return np.stack(outputs, axis=1)


# 9 positions: cumsum's prefix sums; 24: the blocked ones (3 blocks of 8).
@pytest.mark.parametrize("steps,length", [(1, 9), (3, 9), (3, 24)])
def test_causal_nmf_is_its_per_position_definition(steps, length):
    x, bases = _data(length=length)
    got = ops.convert_to_numpy(causal_nmf(x, bases, steps=steps, temperature=0.5))
    for b in range(x.shape[0]):
        expected = reference.causal_nmf(x[b].T.astype(np.float64), bases.astype(np.float64),
                                        steps, temperature=0.5).T
        np.testing.assert_allclose(got[b], expected, rtol=2e-5, atol=1e-6)


# Blocks of 4 dividing 12 and not 11 (padded), 5 for 9, 1 (each position the dictionary of
# the positions before it), 16 for 9 (one block: D₀ throughout).
@pytest.mark.parametrize("block_size,length", [(4, 12), (4, 11), (5, 9), (1, 5), (16, 9)])
def test_blocked_causal_nmf_is_its_definition_and_steps_alike(block_size, length):
    """The blocked form (a dictionary per block of L positions, fitted to the blocks before)
    against its NumPy definition, and its recurrent form against its parallel form."""
    x, bases = _data(length=length)
    got = ops.convert_to_numpy(causal_nmf(x, bases, steps=3, temperature=0.5,
                                          block_size=block_size))
    for b in range(x.shape[0]):
        expected = reference.causal_nmf(x[b].T.astype(np.float64), bases.astype(np.float64),
                                        3, temperature=0.5, block_size=block_size).T
        np.testing.assert_allclose(got[b], expected, rtol=2e-5, atol=1e-6)
    state = initial_causal_state(2, 6, 3, steps=3, block_size=block_size)
    assert len(state) == 10 and tuple(state[-1].shape) == (2,)
    outputs = []
    for t in range(length):
        y_t, state = causal_nmf_step(x[:, t], bases, state, steps=3, temperature=0.5,
                                     block_size=block_size)
        outputs.append(ops.convert_to_numpy(y_t))
    np.testing.assert_allclose(np.stack(outputs, axis=1), got, rtol=1e-5, atol=1e-6)
    if block_size < length:  # another operator than the per-position form
        assert np.abs(got - ops.convert_to_numpy(causal_nmf(x, bases, steps=3,
                                                            temperature=0.5))).max() > 1e-3
    with pytest.raises(ValueError, match=r"3·steps \+ 1 = 7 tensors"):
        causal_nmf_step(x[:, 0], bases, state, steps=2, block_size=block_size)


# Per position (9 positions: cumsum's prefix sums; 16: the blocked ones), and in blocks of
# 4 for 11 positions (padded) and of 1.
@pytest.mark.parametrize("block_size,length", [(None, 9), (None, 16), (4, 11), (1, 5)])
def test_causal_vq_is_its_definition_causal_and_steps_alike(block_size, length):
    """The causal VQ against its NumPy definition, on data of both signs; its recurrent form
    against its parallel form; changing the future leaves the past as it was."""
    x = RNG.standard_normal((2, length, 6)).astype("float32")
    bases = keras.ops.convert_to_numpy(initial_bases("vq", (6, 3), seed=0))
    got = ops.convert_to_numpy(causal_vq(x, bases, steps=3, temperature=0.5,
                                         block_size=block_size))
    for b in range(x.shape[0]):
        expected = reference.causal_vq(x[b].T.astype(np.float64), bases.astype(np.float64),
                                       3, temperature=0.5, block_size=block_size).T
        np.testing.assert_allclose(got[b], expected, rtol=2e-5, atol=1e-6)
    state = initial_causal_state(2, 6, 3, steps=3, block_size=block_size, method="vq")
    outputs = []
    for t in range(length):
        y_t, state = causal_vq_step(x[:, t], bases, state, steps=3, temperature=0.5,
                                    block_size=block_size)
        outputs.append(ops.convert_to_numpy(y_t))
    np.testing.assert_allclose(np.stack(outputs, axis=1), got, rtol=1e-5, atol=1e-6)
    for t in (0, 3, length - 2):
        changed = x.copy()
        changed[:, t + 1:] = RNG.standard_normal(changed[:, t + 1:].shape) * 3.0
        z = ops.convert_to_numpy(causal_vq(changed, bases, steps=3, temperature=0.5,
                                           block_size=block_size))
        np.testing.assert_array_equal(z[:, :t + 1], got[:, :t + 1])
    if block_size is None:
        np.testing.assert_allclose(ops.convert_to_numpy(causal_vq(
            x, bases, steps=3, temperature=0.5, chunk_size=length // 2 if length % 2 == 0
            else 3 if length % 3 == 0 else 1)), got, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"A⁽ᵏ⁾, n⁽ᵏ⁾"):
        causal_vq_step(x[:, 0], bases, state, steps=2, block_size=block_size)


def test_blocked_form_is_causal_and_its_layer_generates_what_it_scores():
    x, bases = _data(length=12)
    y = ops.convert_to_numpy(causal_nmf(x, bases, steps=4, block_size=4))
    for t in (0, 3, 4, 9):
        changed = x.copy()
        changed[:, t + 1:] = RNG.uniform(size=changed[:, t + 1:].shape) * 3.0
        z = ops.convert_to_numpy(causal_nmf(changed, bases, steps=4, block_size=4))
        np.testing.assert_array_equal(z[:, :t + 1], y[:, :t + 1])
    layer = CausalHamburger(rank=4, steps=3, latent_dim=12, block_size=3, seed=3)
    inputs = RNG.standard_normal((2, 8, 8)).astype("float32")
    whole = ops.convert_to_numpy(layer(inputs))  # (builds the layer)
    np.testing.assert_allclose(_stepped(layer, inputs), whole, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="give one of them"):
        causal_nmf(x, bases, chunk_size=4, block_size=4)
    with pytest.raises(ValueError, match="give one of them"):
        CausalHamburger(chunk_size=4, block_size=4)


@pytest.mark.parametrize("length", [12, 16])  # cumsum's prefix sums, blocked ones
def test_future_inputs_leave_past_outputs_unchanged(length):
    x, bases = _data(length=length)
    y = ops.convert_to_numpy(causal_nmf(x, bases, steps=4))
    for t in (0, 5, 7, 8, length - 1):
        changed = x.copy()
        changed[:, t + 1:] = RNG.uniform(size=changed[:, t + 1:].shape) * 3.0
        z = ops.convert_to_numpy(causal_nmf(changed, bases, steps=4))
        np.testing.assert_array_equal(z[:, :t + 1], y[:, :t + 1])
        if t < length - 1:
            assert np.abs(z[:, t + 1:] - y[:, t + 1:]).max() > 1e-3
    # The layer too, on its raw inputs (breads, norm, branch scale, final ReLU around it).
    layer = CausalHamburger(rank=3, steps=2, norm="layer", residual_scale_init=0.5,
                            final_relu=True)
    inputs = RNG.standard_normal((2, 10, 8)).astype("float32")
    outputs = ops.convert_to_numpy(layer(inputs))
    changed = inputs.copy()
    changed[:, 6:] += 5.0
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(changed))[:, :6], outputs[:, :6])


def test_recurrent_form_equals_the_parallel_form():
    x, bases = _data(length=11)
    parallel = ops.convert_to_numpy(causal_nmf(x, bases, steps=3))
    state = initial_causal_state(2, 6, 3, steps=3)
    assert [tuple(s.shape) for s in state] == [(2, 6, 3), (2, 3, 3)] * 3
    outputs = []
    for t in range(x.shape[1]):
        y_t, state = causal_nmf_step(x[:, t], bases, state, steps=3)
        outputs.append(ops.convert_to_numpy(y_t))
    np.testing.assert_allclose(np.stack(outputs, axis=1), parallel, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must hold 2·steps = 4 prefix sums"):
        causal_nmf_step(x[:, 0], bases, state, steps=2)


@pytest.mark.parametrize("length", [7, 16, 24, 128, 130])
def test_blocked_prefix_sums_are_cumulative_sums(length):
    """The parallel form's prefix sums (blocks of 64, 32, 16 or 8 positions where one
    divides the length, else cumsum) with and without a carried prefix."""
    from kctx.ops.causal_decomposition import _prefix_sums

    values = RNG.uniform(size=(2, length, 3, 4)).astype("float32")
    carry = RNG.uniform(size=(2, 3, 4)).astype("float32")
    expected = np.cumsum(values.astype(np.float64), axis=1)
    np.testing.assert_allclose(ops.convert_to_numpy(_prefix_sums(values, None)), expected,
                               rtol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(_prefix_sums(values, carry)),
                               expected + carry[:, None], rtol=1e-5)


def test_chunks_give_the_same_numbers():
    x, bases = _data(length=12)
    whole = ops.convert_to_numpy(causal_nmf(x, bases, steps=3))
    for chunk in (1, 4, 6):
        np.testing.assert_allclose(ops.convert_to_numpy(causal_nmf(x, bases, steps=3,
                                                                   chunk_size=chunk)),
                                   whole, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must divide the sequence length"):
        causal_nmf(x, bases, chunk_size=5)


def test_layer_generates_what_it_scores():
    """The layer's step() over a sequence gives its call() on the whole sequence."""
    layer = CausalHamburger(rank=4, steps=3, latent_dim=12, norm="layer",
                            residual_scale_init=0.0, seed=3)
    inputs = RNG.standard_normal((3, 7, 8)).astype("float32")
    # A zero branch scale: the identity; then a trained-like scale.
    np.testing.assert_allclose(ops.convert_to_numpy(layer(inputs)), inputs, atol=1e-6)
    layer.residual_scale.assign(0.7)
    whole = ops.convert_to_numpy(layer(inputs))  # (builds the layer)
    np.testing.assert_allclose(_stepped(layer, inputs), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [
    dict(rank=4, steps=2),
    dict(rank=4, steps=2, init="learned", one_step_gradient=False, final_relu=True,
         norm="layer", residual_scale_init=0.0, latent_dim=16, chunk_size=3),
    dict(rank=4, steps=2, block_size=4, final_relu=True, init="learned",
         one_step_gradient=False),
    dict(rank=4, steps=2, method="vq", block_size=4, norm="layer"),
], ids=["default", "learned-bptt-norm-zero-branch-chunks", "blocks-learned-bptt", "vq-blocks"])
def test_layer_standards(kwargs):
    run_layer_test(CausalHamburger, kwargs, (2, 6, 8), variable_spatial_dims=False)


@pytest.mark.parametrize("block_size", [None, 3])
def test_vq_layer_generates_what_it_scores_on_raw_features(block_size):
    """The VQ ham sees the lower bread's features of both signs (no ReLU: its cosines and
    means need none) and its step() gives its call(); the VQ temperature by default."""
    layer = CausalHamburger(rank=4, steps=3, latent_dim=12, method="vq",
                            block_size=block_size, seed=3)
    inputs = RNG.standard_normal((2, 8, 8)).astype("float32")
    whole = ops.convert_to_numpy(layer(inputs))
    assert layer.lower_bread.activation is keras.activations.linear
    assert layer.temperature == 0.1 and layer.get_config()["method"] == "vq"
    np.testing.assert_allclose(_stepped(layer, inputs), whole, rtol=1e-5, atol=1e-5)
    latent = ops.convert_to_numpy(layer.lower_bread(inputs))
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer.upper_bread(causal_vq(latent, layer.bases, steps=3,
                                                         block_size=block_size))) + inputs,
        whole, rtol=1e-5, atol=1e-5)


def test_learned_dictionary_gets_gradient_only_through_the_rounds():
    layer = CausalHamburger(rank=3, steps=2, init="learned", one_step_gradient=False)
    inputs = RNG.standard_normal((2, 5, 6)).astype("float32")
    layer(inputs)
    assert layer.bases.trainable and len(layer.trainable_weights) == 5
    with pytest.raises(ValueError, match="needs `one_step_gradient=False`"):
        CausalHamburger(init="learned")


@pytest.mark.parametrize("kwargs,message", [
    (dict(rank=0), "Received: rank=0"),
    (dict(steps=0), "Received: steps=0"),
    (dict(init="random"), "Received: init='random'"),
    (dict(norm="batch"), "Received: norm='batch'"),
    (dict(block_size=0), "Received: block_size=0"),
    (dict(method="cd"), "Received: method='cd'"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CausalHamburger(**kwargs)
