"""Run by tests/test_jax_backend.py in a subprocess with KERAS_BACKEND=jax.

kctx.ops is pure keras.ops and kctx.layers wraps it with weights: both must
run under JAX, numerically equal to the NumPy reference of the paper.
"""

import keras
import numpy as np

import numpy_reference as ref
from kctx.layers import CausalHamburger, Hamburger, context_block
from kctx.ops import causal_nmf, causal_nmf_step, initial_causal_state, matrix_decomposition, \
    poly_nl

assert keras.backend.backend() == "jax", keras.backend.backend()

rng = np.random.default_rng(0)
x = rng.uniform(size=(2, 12, 6))
x /= x.max(axis=(1, 2), keepdims=True)
bases = rng.uniform(size=(2, 6, 3))
bases /= np.linalg.norm(bases, axis=1, keepdims=True)
for method, temperature in (("nmf", 1.0), ("vq", 0.5), ("cd", 0.5)):
    got = np.asarray(matrix_decomposition(x, bases, method=method, steps=4,
                                          temperature=temperature))
    for b in range(2):
        X, D = x[b].T, bases[b]
        expected = {"nmf": lambda: ref.nmf(X, D, 4)[0],
                    "vq": lambda: ref.vq(X, D, 4, temperature)[0],
                    "cd": lambda: ref.cd(X, D, 4, temperature, 0.1)[0]}[method]()
        np.testing.assert_allclose(got[b], expected.T, rtol=1e-5, atol=1e-6)

z = rng.standard_normal((2, 6, 6, 16)).astype("float32")
for name, kwargs in (("ham_nmf", dict(rank=4, seed=0)), ("ham_cd", dict(rank=4, init="online")),
                     ("self_attention", {}), ("poly_nl", dict(beta_initializer="ones")),
                     ("non_local", {}), ("efficient_non_local", dict(num_heads=2)),
                     ("latent_gnn", dict(latent_dim=4))):
    inputs = keras.Input((None, None, 16))
    model = keras.Model(inputs, context_block(name, **kwargs)(inputs))
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    loss = model.fit(z, z[::-1], epochs=1, verbose=0).history["loss"][0]
    assert np.isfinite(loss), (name, loss)
    assert np.all(np.isfinite(model.predict(z, verbose=0))), name

w1, w2, w3 = (rng.standard_normal((16, 16)).astype("float32") for _ in range(3))
got = np.asarray(poly_nl(z, w1, w2, w3))
for b in range(2):
    expected = ref.poly_nl_elementwise(z[b].reshape(-1, 16).astype("float64"), w1, w2, w3)
    np.testing.assert_allclose(got[b].reshape(-1, 16), expected, rtol=1e-4, atol=1e-4)

layer = Hamburger(rank=3, init="online", seed=0)
layer.build(z.shape)
before = np.asarray(layer.bases.value).copy()
layer(z, training=True)
assert not np.allclose(before, np.asarray(layer.bases.value)), "online bases did not move"
# The causal ham: its per-position definition, exact causality, the recurrent form, and the
# layer's fit step under jit.
sequence = rng.uniform(size=(2, 8, 6)).astype("float32")
causal = np.asarray(causal_nmf(sequence, bases[0], steps=3))
for b in range(2):
    expected = ref.causal_nmf(sequence[b].T.astype("float64"), bases[0], 3).T
    np.testing.assert_allclose(causal[b], expected, rtol=2e-5, atol=1e-6)
changed = sequence.copy()
changed[:, 5:] *= 3.0
np.testing.assert_array_equal(np.asarray(causal_nmf(changed, bases[0], steps=3))[:, :5],
                              causal[:, :5])
state, steps = initial_causal_state(2, 6, 3, steps=3), []
for t in range(8):
    y_t, state = causal_nmf_step(sequence[:, t], bases[0], state, steps=3)
    steps.append(np.asarray(y_t))
np.testing.assert_allclose(np.stack(steps, axis=1), causal, rtol=1e-5, atol=1e-6)
inputs = keras.Input((None, 16))
model = keras.Model(inputs, CausalHamburger(rank=4, steps=3, norm="layer")(inputs))
model.compile(optimizer="sgd", loss="mse", jit_compile=True)
tokens = rng.standard_normal((2, 10, 16)).astype("float32")
assert np.isfinite(model.fit(tokens, tokens[::-1], epochs=1, verbose=0).history["loss"][0])
# The decoder language model with each token mixer: scoring (the parallel forms) equals
# stepping (the recurrent forms), and a fit step under jit.
from kctx.models import MIXERS, CausalLanguageModel  # noqa: E402

text = rng.integers(0, 11, (2, 6)).astype("int32")
for mixer in MIXERS:
    language_model = CausalLanguageModel(vocabulary_size=11, embed_dim=8, num_blocks=1,
                                         mixer=mixer)
    logits = np.asarray(language_model(text))
    states, stepped = language_model.initial_state(2), []
    for t in range(6):
        step_logits, states = language_model.step(text[:, t], states)
        stepped.append(np.asarray(step_logits))
    np.testing.assert_allclose(np.stack(stepped, axis=1), logits, rtol=1e-4, atol=1e-4)
    language_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                           jit_compile=True)
    assert np.isfinite(language_model.fit(text[:, :-1], text[:, 1:], verbose=0)
                       .history["loss"][0]), mixer
    assert np.asarray(language_model.generate(text[:, :2], 3, seed=0)).shape == (2, 5)
print("JAX_BACKEND_OK")
