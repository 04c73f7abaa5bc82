"""Checks of kctx.ops, kctx.layers, kctx.models and kctx.metrics on the JAX and PyTorch
backends, run by tests/test_backends.py with pytest in subprocesses (Keras picks its
backend at import): ``KERAS_BACKEND=torch python without_tensorflow.py -m pytest
backend_checks.py``. TensorFlow's own run of the same checks is the rest of the suite.

kctx.ops is pure keras.ops and kctx.layers wraps it with weights: both must run on every
backend, numerically equal to the NumPy reference of the paper.
"""

import math
import os

import keras
import numpy as np
import pytest

if keras.backend.backend() == "jax":  # DataParallel in run_layer_test needs 2 devices
    import jax

    assert len(jax.devices()) == 2, jax.devices()

import fid_inception_check
import numpy_reference as ref
from block_models import TRAIN_STEP_MACS, block_atol, block_model
from docstring_examples import TENSORFLOW_ONLY, not_installed, run_docstring_examples
import optimizer_check
from kctx.export import SUFFIXES, export_model, load_artifact
from kctx.layers import CausalHamburger, Hamburger, context_block, context_block_names
from kctx.ops import (
    causal_nmf,
    causal_nmf_step,
    causal_vq,
    causal_vq_step,
    initial_causal_state,
    gelu,
    matrix_decomposition,
    poly_nl,
)
from kctx.profile import profile_layer
from kctx.testing import run_layer_test

BACKEND = keras.backend.backend()
# Keras trains with XLA on JAX (jit_compile="auto"); on PyTorch jit_compile=True would be
# torch.compile, which is not what a PyTorch user of Keras gets by default.
JIT = BACKEND == "jax"
rng = np.random.default_rng(0)


# On JAX, the DataParallel step (one XLA program over the global batch: XLA shards it, so a
# block cannot compute anything else there) for the blocks that mix the samples of a batch
# (the breads' batch norm, the per-sample dictionaries) or hold the most state, not for every
# block: each is another compile of the whole step (about 2.5 CPU s a block).
DATA_PARALLEL_BLOCKS = ("ham_nmf", "ham_nmf_light", "self_attention", "poly_nl", "kao_kv")


def test_not_on_tensorflow():
    assert BACKEND in ("jax", "torch"), BACKEND


@pytest.mark.parametrize("name", context_block_names())
def test_layer_battery(name):
    """``run_layer_test`` on every registered context block as ``context_block(name)``
    builds it (config round trips, symbolic and eager calls, a fit step, .keras save / load,
    mixed bfloat16; on JAX, whose process has 2 virtual CPU devices, XLA and (for
    :data:`DATA_PARALLEL_BLOCKS`) a DataParallel
    fit step over them)."""
    layer = context_block(name)
    init_kwargs = {key: value for key, value in layer.get_config().items()
                   if key not in ("name", "trainable", "dtype")}
    # 32 channels: ham_nmf_light's group norm has SegNeXt's 32 groups.
    run_layer_test(type(layer), init_kwargs, (2, 4, 4, 32),
                   run_distributed=BACKEND != "jax" or name in DATA_PARALLEL_BLOCKS)


@pytest.mark.parametrize("method,temperature", [("nmf", 1.0), ("vq", 0.5), ("cd", 0.5)])
def test_matrix_decomposition_equals_the_numpy_reference(method, temperature):
    x = rng.uniform(size=(2, 12, 6)).astype("float32")
    x /= x.max(axis=(1, 2), keepdims=True)
    bases = rng.uniform(size=(2, 6, 3)).astype("float32")
    bases /= np.linalg.norm(bases, axis=1, keepdims=True)
    got = keras.ops.convert_to_numpy(matrix_decomposition(x, bases, method=method, steps=4,
                                                          temperature=temperature))
    for b in range(2):
        X, D = x[b].T, bases[b]
        expected = {"nmf": lambda: ref.nmf(X, D, 4)[0],
                    "vq": lambda: ref.vq(X, D, 4, temperature)[0],
                    "cd": lambda: ref.cd(X, D, 4, temperature, 0.1)[0]}[method]()
        np.testing.assert_allclose(got[b], expected.T, rtol=1e-5, atol=1e-6)


Z = rng.standard_normal((2, 6, 6, 16)).astype("float32")


@pytest.mark.parametrize("name,kwargs", [
    ("ham_nmf", dict(rank=4, seed=0)), ("ham_cd", dict(rank=4, init="online")),
    ("self_attention", {}), ("poly_nl", dict(beta_initializer="ones")), ("non_local", {}),
    ("efficient_non_local", dict(num_heads=2)), ("latent_gnn", dict(latent_dim=4))])
def test_context_block_fits_in_a_functional_model(name, kwargs):
    inputs = keras.Input((None, None, 16))
    model = keras.Model(inputs, context_block(name, **kwargs)(inputs))
    model.compile(optimizer="sgd", loss="mse", jit_compile=JIT)
    loss = model.fit(Z, Z[::-1], epochs=1, verbose=0).history["loss"][0]
    assert np.isfinite(loss), (name, loss)
    assert np.all(np.isfinite(model.predict(Z, verbose=0))), name


def test_poly_nl_equals_the_numpy_reference():
    w1, w2, w3 = (rng.standard_normal((16, 16)).astype("float32") for _ in range(3))
    got = keras.ops.convert_to_numpy(poly_nl(Z, w1, w2, w3))
    for b in range(2):
        expected = ref.poly_nl_elementwise(Z[b].reshape(-1, 16).astype("float64"), w1, w2, w3)
        np.testing.assert_allclose(got[b].reshape(-1, 16), expected, rtol=1e-4, atol=1e-4)


def test_paramwise_adamw_equals_pytorch_adamw_with_mmengine_groups():
    """SegNeXt's optimizer (on PyTorch, one ``torch._foreach_*`` call per parameter group)
    against the float64 AdamW and against its own update of one variable at a time."""
    optimizer_check.check_paramwise_adamw_equals_torch_adamw()


def test_gelu_is_the_exact_gelu():
    # The official models' nn.GELU on PyTorch, the erf formula elsewhere: the same function.
    x = np.linspace(-8, 8, 1001, dtype="float32")
    expected = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype("float64")])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(gelu(x)), expected, rtol=1e-5,
                               atol=1e-6)


def test_online_bases_move_in_training():
    layer = Hamburger(rank=3, init="online", seed=0)
    layer.build(Z.shape)
    before = keras.ops.convert_to_numpy(layer.bases.value).copy()
    layer(Z, training=True)
    assert not np.allclose(before, keras.ops.convert_to_numpy(layer.bases.value))


def test_causal_ham_is_causal_recurrent_and_trains():
    """The causal ham: its per-position definition, exact causality, the recurrent form,
    the blocked form, the causal VQ's blocked and recurrent forms, and the layer's fit
    step."""
    bases = rng.uniform(size=(6, 3))
    bases /= np.linalg.norm(bases, axis=0, keepdims=True)
    sequence = rng.uniform(size=(2, 16, 6)).astype("float32")  # blocked prefix sums (8)
    causal = keras.ops.convert_to_numpy(causal_nmf(sequence, bases, steps=3))
    for b in range(2):
        expected = ref.causal_nmf(sequence[b].T.astype("float64"), bases, 3).T
        np.testing.assert_allclose(causal[b], expected, rtol=2e-5, atol=1e-6)
    changed = sequence.copy()
    changed[:, 5:] *= 3.0
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(causal_nmf(changed, bases, steps=3))[:, :5], causal[:, :5])
    state, steps = initial_causal_state(2, 6, 3, steps=3), []
    for t in range(16):
        y_t, state = causal_nmf_step(sequence[:, t], bases, state, steps=3)
        steps.append(keras.ops.convert_to_numpy(y_t))
    np.testing.assert_allclose(np.stack(steps, axis=1), causal, rtol=1e-5, atol=1e-6)
    # The blocked form (L = 5, padded to 20), parallel against its definition and recurrent.
    blocked = keras.ops.convert_to_numpy(causal_nmf(sequence, bases, steps=3, block_size=5))
    expected = ref.causal_nmf(sequence[0].T.astype("float64"), bases, 3, block_size=5).T
    np.testing.assert_allclose(blocked[0], expected, rtol=2e-5, atol=1e-6)
    state, steps = initial_causal_state(2, 6, 3, steps=3, block_size=5), []
    for t in range(16):
        y_t, state = causal_nmf_step(sequence[:, t], bases, state, steps=3, block_size=5)
        steps.append(keras.ops.convert_to_numpy(y_t))
    np.testing.assert_allclose(np.stack(steps, axis=1), blocked, rtol=1e-5, atol=1e-6)
    # The causal VQ (blocks of 5) on data of both signs: its definition, its recurrent form.
    signed = sequence - 0.5
    vq_bases = rng.standard_normal((6, 3))
    blocked = keras.ops.convert_to_numpy(causal_vq(signed, vq_bases, steps=3, block_size=5))
    expected = ref.causal_vq(signed[1].T.astype("float64"), vq_bases, 3, block_size=5).T
    np.testing.assert_allclose(blocked[1], expected, rtol=2e-5, atol=1e-6)
    state, steps = initial_causal_state(2, 6, 3, steps=3, block_size=5, method="vq"), []
    for t in range(16):
        y_t, state = causal_vq_step(signed[:, t], vq_bases, state, steps=3, block_size=5)
        steps.append(keras.ops.convert_to_numpy(y_t))
    np.testing.assert_allclose(np.stack(steps, axis=1), blocked, rtol=1e-5, atol=1e-6)
    inputs = keras.Input((None, 16))
    model = keras.Model(inputs, CausalHamburger(rank=4, steps=3, norm="layer")(inputs))
    model.compile(optimizer="sgd", loss="mse", jit_compile=JIT)
    tokens = rng.standard_normal((2, 10, 16)).astype("float32")
    assert np.isfinite(model.fit(tokens, tokens[::-1], epochs=1, verbose=0).history["loss"][0])


def test_language_model_scores_as_it_steps_with_every_mixer():
    """The decoder language model with each token mixer: scoring (the parallel forms) equals
    stepping (the recurrent forms), a fit step, and generation; linear attention's with the
    short convolution before it (a block state of two states)."""
    from kctx.models import MIXERS, CausalLanguageModel

    text = rng.integers(0, 11, (2, 6)).astype("int32")
    for mixer in MIXERS:
        language_model = CausalLanguageModel(
            vocabulary_size=11, embed_dim=8, num_blocks=1, mixer=mixer,
            short_conv=3 if mixer == "linear_attention" else None)
        logits = keras.ops.convert_to_numpy(language_model(text))
        # Attention's cache growing a position a step (capacity None), then allocated for 8
        # positions (one shape for every step), as one compiled program on JAX. On JAX only
        # the compiled one (op by op, each new shape of the growing cache is another XLA
        # compile); generate() below steps with the growing cache.
        step = language_model.step
        if BACKEND == "jax":
            import jax

            step = jax.jit(step)
        for capacity in (8,) if BACKEND == "jax" else (None, 8):
            states, stepped = language_model.initial_state(2, capacity=capacity), []
            for t in range(6):
                step_logits, states = step(text[:, t], states)
                stepped.append(keras.ops.convert_to_numpy(step_logits))
            np.testing.assert_allclose(np.stack(stepped, axis=1), logits, rtol=1e-4, atol=1e-4)
        language_model.compile("adam",
                               keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                               jit_compile=JIT)
        assert np.isfinite(language_model.fit(text[:, :-1], text[:, 1:], verbose=0)
                           .history["loss"][0]), mixer
        generated = language_model.generate(text[:, :2], 3, seed=0)
        assert tuple(keras.ops.shape(generated)) == (2, 5)


def test_generation_bench_compiles_one_step_for_every_length():
    """``kctx.bench generation --compiled``: on JAX one ``jax.jit`` program per mixer over
    attention's cache allocated for the longest length (its state the same at every
    length); PyTorch refuses it, naming the backends that have it."""
    from kctx.bench.generation import run_generation

    arguments = dict(mixers=("attention", "causal_hamburger"), lengths=(6, 12), window=3,
                     embed_dim=8, num_blocks=1, log=lambda *_: None)
    if BACKEND != "jax":
        with pytest.raises(ValueError, match="the TensorFlow or the JAX backend"):
            run_generation(compiled=True, **arguments)
        return
    rows = {(r["mixer"], r["length"]): r for r in run_generation(compiled=True, **arguments)}
    assert {r["compiled"] for r in rows.values()} == {"jax.jit"}
    # Keys and values (1, H, 12, d) from the start, C = H·d = 8, and the position.
    assert rows["attention", 6]["state_mb"] == rows["attention", 12]["state_mb"] == \
        (2 * 12 * 8 + 1) * 4 / 2**20
    assert rows["causal_hamburger", 6]["state_mb"] == rows["causal_hamburger", 12]["state_mb"]


def test_fid_inception_equals_the_official_code():
    """The FID Inception's inputs under the three resizes, and its pool3 features and
    logits for the three 400×250 images under TensorFlow's resize, against torch-fidelity's
    and pytorch-fid's (tests/fid_inception_check.py; TensorFlow's test runs the network on
    both image sets under all three resizes)."""
    errors = fid_inception_check.check_inputs_and_features(network_resizes=("tensorflow",),
                                                           network_sets=("large",))
    assert len(errors) == 2 * 3 + 2
    fid_inception_check.check_fid_inception_input_modes()


def test_fid_is_and_kid_equal_the_official_code():
    assert len(fid_inception_check.check_metrics()) == 10


def test_frechet_distance_streams_in_float64():
    """FrechetInceptionDistance over a Keras model's features, streamed in batches: float64
    sums (on the host off TensorFlow: JAX has no float64 without x64) equal to the one-shot
    Fréchet distance of the same features."""
    from kctx.metrics import FrechetInceptionDistance, frechet_distance

    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Dense(6)(keras.layers.Flatten()(inputs))
    extractor = keras.Model(inputs, features, name="tiny_features")
    real = rng.uniform(-1, 1, (300, 8, 8, 1)).astype("float32")
    generated = np.clip(real[:200] + rng.normal(0, 0.3, real[:200].shape), -1, 1) \
        .astype("float32")
    fid = FrechetInceptionDistance(extractor)
    for start in range(0, 300, 100):
        fid.update_state(real[start:start + 100], None)
    fid.update_state(None, generated)
    features = [keras.ops.convert_to_numpy(fid.features(x)).astype(np.float64)
                for x in (real, generated)]
    expected = frechet_distance(*(statistic for f in features
                                  for statistic in (f.mean(0), np.cov(f, rowvar=False))))
    assert float(fid.result()) == pytest.approx(expected, rel=1e-4)


def _zero_size_batch_gives_an_empty_output():
    """An empty batch passes every context block on PyTorch too, which refuses a reshape to
    (0, -1, C) and whose `max` kctx calls without `initial` (TensorFlow's suite checks the
    same: tests/test_bad_inputs.py; on JAX it would compile every block once more)."""
    x = keras.ops.convert_to_tensor(np.zeros((0, 4, 4, 32), "float32"))
    for name in context_block_names():
        assert tuple(keras.ops.shape(context_block(name)(x))) == (0, 4, 4, 32), name


def _nothing_kctx_computes_falls_back_to_the_cpu():
    """Every context block, the causal mixers, the language model and a reduced SegNeXt
    run forward and backward with their weights and inputs on PyTorch's ``meta`` device,
    which stands in for a GPU: a tensor kctx made on the CPU (as ``ops.max(...,
    initial=0.0)`` does on Keras 3.15's PyTorch backend, which stopped the Hamburger on a
    GPU) meets the others and fails here as it would there."""
    import torch

    from kctx.models import MIXERS, CausalLanguageModel, segnext

    def forward_backward(model, x):
        outputs = model(x, training=True)
        loss = sum(torch.sum(o.float()) for o in keras.tree.flatten(outputs))
        if loss.requires_grad:  # (ham_cd's solve on `meta` leaves the graph: forward only)
            loss.backward()
        assert all(o.device.type == "meta" for o in keras.tree.flatten(outputs))

    with keras.device("meta"):
        x = keras.ops.convert_to_tensor(rng.normal(size=(2, 4, 4, 32)).astype("float32"))
        x.requires_grad_(True)  # "none" has no weights: the gradient reaches the input
        for name in context_block_names():
            forward_backward(context_block(name), x)
        text = keras.ops.convert_to_tensor(rng.integers(0, 11, (2, 6)).astype("int32"))
        for mixer in MIXERS:
            forward_backward(CausalLanguageModel(vocabulary_size=11, embed_dim=8,
                                                 num_blocks=1, mixer=mixer), text)
        model = segnext(None, num_classes=3, channels=32, ham_channels=32, rank=4,
                        backbone_options=dict(embed_dims=(8, 16, 32, 32), depths=(1, 1, 1, 1),
                                              mlp_ratios=(2, 2, 2, 2)),
                        input_shape=(32, 32, 3))
        images = keras.ops.convert_to_tensor(rng.uniform(0, 255, (1, 32, 32, 3))
                                             .astype("float32"))
        forward_backward(model, images)


def _inference_copies_nothing_from_the_host():
    """After its first call, no context block, causal mixer or reduced SegNeXt makes a
    tensor from Python or NumPy data at inference (``torch.as_tensor`` / ``torch.tensor``
    of a non-tensor, which is what Keras' ``convert_to_tensor`` of a Python float does):
    on a GPU each is a host-to-device copy from pageable memory, which waits for the GPU's
    queue and makes ``torch.cuda.graph`` capture fail (issue 39's CUDA-graph column)."""
    import torch

    from kctx.models import MIXERS, CausalLanguageModel, segnext

    made = []

    def counting(function):
        def wrapper(data, *args, **kwargs):
            if not isinstance(data, torch.Tensor):
                made.append(repr(data)[:60])
            return function(data, *args, **kwargs)
        return wrapper

    def host_copies(model, x):
        with torch.no_grad():
            model(x, training=False)  # builds, draws the fixed dictionaries once
            originals = torch.as_tensor, torch.tensor
            torch.as_tensor, torch.tensor = (counting(f) for f in originals)
            try:
                del made[:]
                model(x, training=False)
            finally:
                torch.as_tensor, torch.tensor = originals
        return list(made)

    x = keras.ops.convert_to_tensor(rng.normal(size=(2, 4, 4, 32)).astype("float32"))
    copies = {name: host_copies(context_block(name), x) for name in context_block_names()}
    text = keras.ops.convert_to_tensor(rng.integers(0, 11, (2, 6)).astype("int32"))
    for mixer in MIXERS:
        copies[mixer] = host_copies(CausalLanguageModel(vocabulary_size=11, embed_dim=8,
                                                        num_blocks=1, mixer=mixer), text)
    model = segnext(None, num_classes=3, channels=32, ham_channels=32, rank=4,
                    backbone_options=dict(embed_dims=(8, 16, 32, 32), depths=(1, 1, 1, 1),
                                          mlp_ratios=(2, 2, 2, 2)), input_shape=(32, 32, 3))
    images = keras.ops.convert_to_tensor(rng.uniform(0, 255, (1, 32, 32, 3)).astype("float32"))
    copies["segnext"] = host_copies(model, images)
    assert {name: made for name, made in copies.items() if made} == {}


if BACKEND == "torch":  # (the JAX process checks that nothing is skipped)
    test_inference_copies_nothing_from_the_host = _inference_copies_nothing_from_the_host
    test_nothing_kctx_computes_falls_back_to_the_cpu = \
        _nothing_kctx_computes_falls_back_to_the_cpu
    test_zero_size_batch_gives_an_empty_output = _zero_size_batch_gives_an_empty_output


def _input_and_kernel_gradients(f, x, w, g):
    """f(x, w) and the gradients of Σ f(x, w)·g with respect to x and w, on this backend."""
    if BACKEND == "jax":
        import jax

        y, pullback = jax.vjp(f, x, w)
        return (y, *pullback(g))
    import torch

    x, w = (torch.tensor(a, requires_grad=True) for a in (x, w))
    y = f(x, w)
    d_x, d_w = torch.autograd.grad(torch.sum(y * torch.tensor(g)), (x, w))
    return y.detach(), d_x, d_w


@pytest.mark.parametrize("kernel_size,strides,padding,shape", [
    ((3, 7), (1, 1), "same", (2, 9, 23, 5)), ((3, 3), (2, 2), "same", (2, 9, 8, 3)),
    ((4, 2), (2, 1), "valid", (2, 9, 7, 2))])
def test_tap_depthwise_convolution_and_its_gradients(kernel_size, strides, padding, shape):
    """``kctx.ops.depthwise_conv_taps`` and its written-out gradients against the NumPy
    reference (tests/test_depthwise.py's on TensorFlow), and ``TapDepthwiseConv2D`` with
    the taps against ``keras.layers.DepthwiseConv2D`` of the same weights."""
    from kctx.layers import TapDepthwiseConv2D
    from kctx.ops import depthwise_conv_taps

    x = rng.normal(size=shape).astype("float32")
    w = rng.normal(size=kernel_size + shape[-1:]).astype("float32")
    expected, _, _ = ref.depthwise_conv(x, w, strides, padding)
    g = rng.normal(size=expected.shape).astype("float32")
    expected_dx, expected_dw = ref.depthwise_conv_gradients(x, w, g, strides, padding)
    y, d_x, d_w = (keras.ops.convert_to_numpy(a) for a in _input_and_kernel_gradients(
        lambda x, w: depthwise_conv_taps(x, w[..., None], strides=strides, padding=padding),
        x, w, g))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_x, expected_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_w, expected_dw, rtol=1e-5, atol=1e-4)

    options = dict(strides=strides, padding=padding, bias_initializer="random_normal")
    reference = keras.layers.DepthwiseConv2D(kernel_size, **options)
    layer = TapDepthwiseConv2D(kernel_size, taps=True, **options)
    reference.build(x.shape)
    layer.build(x.shape)
    layer.set_weights(reference.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)),
                               keras.ops.convert_to_numpy(reference(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind,expected", [("taps", (1152, 3456)), ("dense", (6912, 20736))])
def test_profile_counts_strided_and_grouped_convolutions_as_tensorflow(kind, expected):
    """``profile_layer``'s MACs of a strided convolution's training step on this backend are
    TensorFlow's (tests/test_depthwise.py): ``TapDepthwiseConv2D`` with the taps counted
    as its convolution, the input gradient's transposed convolution without the zeros
    between its inputs (JAX), a grouped kernel gradient counted once a group (PyTorch)."""
    from kctx.layers import TapDepthwiseConv2D

    options = dict(strides=2, padding="same", use_bias=False)
    layer = (TapDepthwiseConv2D(3, taps=True, **options) if kind == "taps" else
             keras.layers.Conv2D(6, 3, **options))
    result = profile_layer(layer, (2, 8, 8, 4), repeats=1, warmup=0, isolate=False)
    assert (result["macs"], result["train_macs"]) == expected


def test_tap_depthwise_convolution_takes_the_taps_where_measured_faster():
    """With ``taps=None``: on JAX's CPUs every configuration (``TAP_KERNELS["cpu"]``,
    "all"), on GPUs the strips at stride 1 ("strips", here on the CPU through the class's
    table); on PyTorch none. ``taps=True`` / ``False`` decide on every backend."""
    from kctx.layers import TapDepthwiseConv2D

    x = np.zeros((1, 8, 8, 3), "float32")
    configs = [((1, 7), 1), ((7, 1), 1), ((5, 5), 1), ((3, 7), 1), ((1, 7), 2), ((3, 3), 2)]
    uses = {}
    for kernels in ("all", "strips"):
        for kernel_size, strides in configs:
            layer = TapDepthwiseConv2D(kernel_size, strides=strides, padding="same")
            layer.TAP_KERNELS = {"cpu": kernels}
            uses[kernels, kernel_size, strides] = layer._uses_taps(x)
    jax_backend = BACKEND == "jax"
    assert uses == {**{("all", k, s): jax_backend for k, s in configs},
                    **{("strips", k, s): jax_backend and s == 1 and 1 in k
                       for k, s in configs}}
    assert TapDepthwiseConv2D.TAP_KERNELS == {"cpu": "all", "gpu": "strips"}
    assert TapDepthwiseConv2D(3, taps=True)._uses_taps(x)
    assert not TapDepthwiseConv2D((1, 7), taps=False)._uses_taps(x)


@pytest.mark.parametrize("size", [(24, 40), (5, 3)])  # up (SegNeXt's logits), down
def test_gathered_bilinear_resize_is_the_default_resize(size):
    """``kctx.ops.resize.GATHER_PLATFORMS``' form (PyTorch's two taps per axis, gathered
    and blended) computes what ``resize_bilinear`` computes otherwise on JAX
    (``jax.image.resize``, no antialiasing): the GPU experiment changes the speed only."""
    from kctx.ops import resize

    x = rng.normal(size=(2, 12, 10, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(resize.resize_bilinear(x, size))
    platforms = resize.GATHER_PLATFORMS
    try:
        resize.GATHER_PLATFORMS = ("gpu", "cpu")
        assert resize._gathers(x, size) == (BACKEND == "jax")
        got = keras.ops.convert_to_numpy(resize.resize_bilinear(x, size))
    finally:
        resize.GATHER_PLATFORMS = platforms
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_inference_function_is_the_model_as_one_program_per_shape():
    """kctx.export.inference_function on this backend: the model's inference call, one
    program per input shape (JAX: the weights as its constants, the values of the moment it
    was made; PyTorch: the exported program, compiled by torch.compile or not), and
    ``kctx.bench runtimes``' rows of this backend, in this process."""
    from kctx.export import inference_function
    from kctx.profile import RUNTIME_BACKENDS, runtime_latency

    inputs = keras.Input((None, None, 8))
    features = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    model = keras.Model(inputs, context_block("ham_nmf", rank=4, steps=2, seed=0)(features))
    x = rng.standard_normal((2, 6, 6, 8)).astype("float32")
    wide = rng.standard_normal((1, 6, 10, 8)).astype("float32")

    def check(function, images, tolerance=1e-4):
        # The model's own call after the function's: a tracer's stand-ins kept by a layer
        # (kctx.layers._eager_constants) would break it.
        np.testing.assert_allclose(keras.ops.convert_to_numpy(function(images)),
                                   keras.ops.convert_to_numpy(model(images, training=False)),
                                   rtol=tolerance, atol=tolerance)

    # On PyTorch the shapes' programs as exported (each compile is seconds of Inductor and
    # the C++ compiler), then one compiled by torch.compile.
    infer = inference_function(model, compile=BACKEND == "jax")
    for images in (x, wide, x):
        check(infer, images)
    assert list(infer.programs) == [(((2, 6, 6, 8), "float32"),), (((1, 6, 10, 8), "float32"),)]
    if BACKEND == "jax":
        with pytest.raises(ValueError, match="compile=False applies to TensorFlow and PyTorch"):
            inference_function(model, compile=False)
        with pytest.raises(ValueError, match="Received: mode='reduce-overhead'"):
            inference_function(model, mode="reduce-overhead")
        before = keras.ops.convert_to_numpy(infer(x))
        model.set_weights([2.0 * w for w in model.get_weights()])
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(infer(x)), before)
        assert not np.allclose(keras.ops.convert_to_numpy(inference_function(model)(x)), before)
    else:
        assert not hasattr(infer.programs[(((2, 6, 6, 8), "float32"),)], "_orig_mod")
        # The exported graph with what it computes from the weights alone computed once,
        # then without the export's metadata checks: the same outputs.
        import torch

        from kctx.bench.standalone import torch_census
        from kctx.export import _drop_metadata_checks, _fold_weights, _torch_exported

        tensor = keras.ops.convert_to_tensor(x)
        with torch.no_grad():
            program = _torch_exported(model, tensor)
            before = keras.ops.convert_to_numpy(program(tensor))
            census = torch_census(lambda: program(tensor), inputs=[tensor])
            assert census["kernels of weights alone"] > 0, census
            assert _fold_weights(program) > 0 and _fold_weights(program) == 0
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(program(tensor)), before)
            folded = torch_census(lambda: program(tensor), inputs=[tensor])
            assert folded["kernels of weights alone"] == 0, folded
            assert folded["kernels"] == census["kernels"] - census["kernels of weights alone"]
            assert _drop_metadata_checks(program) > 0 and _drop_metadata_checks(program) == 0
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(program(tensor)), before)
        # A function made after the weights change computes with the new ones.
        model.set_weights([2.0 * w for w in model.get_weights()])
        check(inference_function(model, compile=False), x)
        compiled = inference_function(model)
        check(compiled, x)
        assert hasattr(compiled.programs[(((2, 6, 6, 8), "float32"),)], "_orig_mod")
        with pytest.raises(ValueError, match="Unknown `mode`"):
            inference_function(model, mode="fastest")
        with pytest.raises(ValueError, match="`mode` needs compile=True"):
            inference_function(model, compile=False, mode="default")
    spec = {"block": "ham_nmf", "kwargs": {"rank": 4, "steps": 2}, "input_shape": [6, 6, 8]}
    for runtime in [r for r, backend in RUNTIME_BACKENDS.items() if backend == BACKEND]:
        if runtime == "torch_compile":
            continue  # compiled above; each compile is seconds of Inductor's C++ compiler
        row = runtime_latency(spec, runtime, batch=2, repeats=2, warmup=1, isolate=False)
        assert 0 < row["min_ms"] <= row["median_ms"] and row["first_call_ms"] > 0, runtime


def _keras_tree_keeps_nothing_alive_and_traverses_as_keras_does():
    """kctx._keras_fixes: Keras' tree functions on PyTorch (keras-team/keras#23110) no longer
    hold their structures in a reference cycle: with Python's cyclic collector off, no
    tensor of a training step of the language model (the causal ham's prefix sums stack
    their slices) outlives it, where Keras 3.15.1's left its graph's tensors; and the
    replaced functions give Keras' own results: the same containers, leaves (the very
    tensors, where the replacement returns a leaf and rebuilds a list or tuple without a
    pytree round trip) and order."""
    import collections
    import gc

    import torch
    from keras.src.tree import torchtree_impl

    from kctx import _keras_fixes as keras_fixes
    from kctx.models import CausalLanguageModel

    assert keras_fixes.apply() and not keras_fixes.tree_keeps_structures_alive()
    language_model = CausalLanguageModel(vocabulary_size=11, embed_dim=8, num_blocks=1,
                                         mixer_options={"rank": 3, "steps": 2})
    language_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    text = rng.integers(0, 11, (2, 17)).astype("int32")  # T = 16: blocked prefix sums (8)
    language_model.train_on_batch(text[:, :-1], text[:, 1:])  # builds the optimizer
    gc.collect()
    gc.disable()
    try:
        language_model.train_on_batch(text[:, :-1], text[:, 1:])
        alive = [t for t in gc.get_objects() if isinstance(t, torch.Tensor)
                 and t.grad_fn is not None]
    finally:
        gc.enable()
    assert not alive, [(tuple(t.shape), type(t.grad_fn).__name__) for t in alive[:5]]

    point = collections.namedtuple("point", "y x")
    tensor = torch.arange(3)
    structures = [{"b": [1, {"z": 2, "a": None}], "a": (3, point(4, [5]))},
                  collections.defaultdict(list, {"b": 1, "a": [2, 3]}),
                  collections.OrderedDict([("b", 1), ("a", 2)]), [], (), 7, None, tensor,
                  [tensor, (tensor, None), [[]], ({"b": 1, "a": 2},)], (point(1, 2), [3]),
                  keras.src.utils.tracking.TrackedList([1, [2, {"b": 3, "a": 4}]])]
    ordered = torchtree_impl._dict_to_ordered_dict
    traverse = torchtree_impl.traverse

    def keep_lists(x):
        if type(x) is int and x == 3:
            return keras.tree.MAP_TO_NONE
        return tuple(x) if isinstance(x, list) else None

    def shape(x):  # the containers' types, nested, and the leaves' identities
        if isinstance(x, (list, tuple)):
            return (type(x), [shape(item) for item in x])
        if isinstance(x, dict):
            return (type(x), [(key, shape(value)) for key, value in x.items()])
        return id(x) if isinstance(x, torch.Tensor) else x

    for structure in structures:
        assert repr(ordered(structure)) == repr(ordered.__wrapped__(structure))
        assert shape(ordered(structure)) == shape(ordered.__wrapped__(structure)), structure
        assert repr(keras.tree.flatten(structure)) == repr(
            torchtree_impl.torch_tree.tree_flatten(ordered.__wrapped__(structure))[0])
        for top_down in (True, False):
            assert repr(traverse(keep_lists, structure, top_down)) == repr(
                traverse.__wrapped__(keep_lists, structure, top_down)), (structure, top_down)

    def flattened(t):  # traced by dynamo, where the replacement walks as Keras does
        return keras.tree.flatten([t, (2 * t, None), {"b": t + 1, "a": [t - 1]}])

    eager, traced = flattened(tensor), torch.compile(flattened, backend="eager")(tensor)
    assert [None if x is None else x.tolist() for x in traced] == [
        None if x is None else x.tolist() for x in eager] == [
        [0, 1, 2], [0, 2, 4], None, [-1, 0, 1], [1, 2, 3]]


def _keras_conv_copies_nothing_and_computes_as_keras_does(monkeypatch):
    """kctx._keras_fixes: Keras' PyTorch convolution (keras-team/keras#23279) no longer
    copies a channels-last input twice: none of an input's size is copied, where Keras
    3.15.1's made two; and the fixed convolution gives Keras' own outputs and gradients
    (to float32 rounding) for 1-, 2- and 3-D, strided, dilated, grouped, depthwise,
    separable and channels-first convolutions, "same" and "valid". (With a Keras release
    that has its own fix, kctx replaces nothing, and no copy is made.) And which fixes
    ``KCTX_NO_KERAS_FIXES`` leaves out, a misspelt name refused naming the variable."""
    import torch
    from keras.src.backend.torch import nn

    from kctx import _keras_fixes as keras_fixes

    for value, left_alone in (("", set()), ("0", set()), ("1", {"tree", "conv", "pool"}),
                              ("conv", {"conv"}), ("tree, pool", {"tree", "pool"})):
        monkeypatch.setenv("KCTX_NO_KERAS_FIXES", value)
        assert keras_fixes._left_alone() == left_alone, value
    monkeypatch.setenv("KCTX_NO_KERAS_FIXES", "cnv")
    with pytest.raises(ValueError, match="Received: KCTX_NO_KERAS_FIXES='cnv'"):
        keras_fixes._left_alone()
    monkeypatch.delenv("KCTX_NO_KERAS_FIXES")
    replaced = "keras.src.backend.torch.nn.conv" in keras_fixes.apply()
    assert keras_fixes.conv_input_copies() == 0
    if not replaced:  # a Keras release with its own fix (#23199): nothing of kctx's to check
        return
    fixed = nn.conv
    nn.conv = fixed.__wrapped__  # Keras' own, for the count and as the reference
    try:
        assert keras_fixes.conv_input_copies() == 2
    finally:
        nn.conv = fixed
    ops = keras.ops
    cases = [  # (input shape, kernel shape, keras.ops function, keyword arguments)
        ((2, 9, 3), (3, 3, 4), ops.conv, {"padding": "same"}),
        ((2, 9, 7, 3), (3, 3, 3, 4), ops.conv, {"strides": 2, "padding": "same"}),
        ((2, 9, 7, 4), (3, 2, 2, 6), ops.conv, {"dilation_rate": 2}),  # 2 groups
        ((2, 9, 7, 3), (1, 7, 3, 1), ops.depthwise_conv, {"padding": "same"}),
        ((2, 9, 7, 3), (3, 3, 3, 2), ops.depthwise_conv, {"strides": (2, 1)}),
        ((2, 3, 9, 7), (3, 3, 3, 4), ops.conv,
         {"padding": "same", "data_format": "channels_first"}),
        ((1, 5, 6, 4, 3), (2, 3, 3, 3, 2), ops.conv, {"padding": "same"}),
    ]
    for shape, kernel_shape, function, kwargs in cases:
        x = torch.tensor(rng.standard_normal(shape), dtype=torch.float32, requires_grad=True)
        kernel = torch.tensor(rng.standard_normal(kernel_shape), dtype=torch.float32,
                              requires_grad=True)
        results = []
        for conv in (fixed, fixed.__wrapped__):
            nn.conv = conv
            try:
                y = function(x, kernel, **kwargs)
            finally:
                nn.conv = fixed
            results.append([y.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(
                (y * y).sum(), (x, kernel)))])
        for got, expected in zip(*results):
            np.testing.assert_allclose(got, expected, rtol=1e-5,
                                       atol=1e-5 * np.abs(expected).max())
    separable = keras.layers.SeparableConv2D(4, 3, padding="same")
    images = rng.standard_normal((2, 8, 8, 3)).astype("float32")
    with_the_fix = ops.convert_to_numpy(separable(images))
    nn.conv = fixed.__wrapped__
    try:
        np.testing.assert_allclose(with_the_fix, ops.convert_to_numpy(separable(images)),
                                   rtol=1e-5, atol=1e-5)
    finally:
        nn.conv = fixed


def _keras_pooling_copies_nothing_and_computes_as_keras_does():
    """kctx._keras_fixes: Keras' PyTorch pooling (keras-team/keras#23649) no longer copies a
    channels-last input to channels-first memory (one copy per function in Keras 3.15.1)
    nor returns a view the next operation copies again: the 2-D outputs are contiguous
    channels-last tensors. Outputs and input gradients equal Keras' own for max, average and
    adaptive pooling in 2-D and 3-D, strided, "same" (symmetric and not) and "valid", and
    Keras' own path is kept for 1-D and channels-first inputs."""
    import torch
    from keras.src.backend.torch import nn

    from kctx import _keras_fixes as keras_fixes

    replaced = [f for f in keras_fixes.apply() if f.rsplit(".", 1)[1] in keras_fixes.POOLS]
    assert keras_fixes.pool_input_copies() == 0
    if not replaced:  # a Keras release with its own fix (#23645): nothing of kctx's to check
        return
    ops = keras.ops
    cases = [  # (input shape, keras.ops function, arguments, keyword arguments, contiguous)
        ((2, 9, 7, 3), ops.max_pool, (2,), {}, True),
        ((2, 9, 7, 3), ops.max_pool, (3,), {"strides": 2, "padding": "same"}, False),
        ((2, 9, 8, 3), ops.max_pool, ((3, 2),), {"strides": (1, 2)}, True),
        ((2, 9, 7, 3), ops.average_pool, (3,), {"strides": 1, "padding": "same"}, True),
        ((2, 9, 7, 3), ops.average_pool, (2,), {"strides": 2, "padding": "same"}, False),
        ((2, 9, 7, 3), ops.average_pool, (2,), {"strides": 1}, True),
        ((2, 9, 7, 3), ops.adaptive_max_pool, ((2, 3),), {}, True),
        ((2, 9, 7, 3), ops.adaptive_average_pool, ((4, 3),), {}, True),
        ((2, 5, 6, 4, 3), ops.max_pool, (2,), {}, True),
        ((2, 5, 6, 4, 3), ops.average_pool, (3,), {"strides": 1, "padding": "same"}, False),
        ((2, 5, 6, 4, 3), ops.adaptive_average_pool, (2,), {}, False),
        ((2, 9, 3), ops.max_pool, (2,), {}, False),  # 1-D: Keras' own path
        ((2, 3, 9, 7), ops.average_pool, (2,), {"data_format": "channels_first"}, True),
    ]
    for shape, function, args, kwargs, contiguous in cases:
        x = torch.tensor(rng.standard_normal(shape), dtype=torch.float32, requires_grad=True)
        name = {ops.max_pool: "max_pool", ops.average_pool: "average_pool",
                ops.adaptive_max_pool: "adaptive_max_pool",
                ops.adaptive_average_pool: "adaptive_average_pool"}[function]
        fixed = getattr(nn, name)
        results = []
        for pool in (fixed, fixed.__wrapped__):
            setattr(nn, name, pool)
            try:
                y = function(x, *args, **kwargs)
            finally:
                setattr(nn, name, fixed)
            results.append([y.detach().numpy(), torch.autograd.grad((y * y).sum(), x)[0].numpy()])
            if pool is fixed:
                assert y.is_contiguous() or not contiguous, (shape, name, args, kwargs)
        for got, expected in zip(*results):  # (the layouts' kernels may sum in other orders)
            np.testing.assert_allclose(got, expected, rtol=1e-5,
                                       atol=1e-5 * np.abs(expected).max())
    images = rng.standard_normal((2, 8, 8, 3)).astype("float32")
    for layer in (keras.layers.MaxPooling2D(), keras.layers.AveragePooling2D(3, 1, "same")):
        assert layer(images).is_contiguous()


def _large_host_buffers_are_reused_without_page_faults():
    """kctx.host_memory (the runner's policy on PyTorch): once glibc keeps what it frees, a
    64 MiB tensor allocated again and again is served from memory the process holds, with
    no page faults, where glibc's default maps every one of them afresh (16,384 faults)."""
    import resource

    import torch

    from kctx.host_memory import reuse_freed_host_memory

    def faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.ones(16 * 2**20)  # 64 MiB: over glibc's largest mmap threshold (32 MiB)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    assert reuse_freed_host_memory()
    # glibc grows its heap for the first few aligned blocks before reusing them.
    counts = [faults() for _ in range(24)]
    assert max(counts[-4:]) < 100, counts


def _one_step_gradient_records_no_round(method, block_size):
    """Under the one-step gradient the K rounds are not recorded (as the official code's
    ``torch.no_grad()``): the tensors autograd saves for the backward pass are those of the
    final update alone, the same for K = 1 and K = 6, the Hamburger's and the causal
    ham's (where a recorded round would save (B, T, d, r) dictionaries)."""
    import torch

    from kctx.ops import causal_nmf, causal_vq, initial_bases

    def saved_bytes(steps, causal):
        x = torch.rand(2, 16, 6, requires_grad=True)
        saved = []

        def pack(tensor):
            saved.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            if causal:
                function = causal_nmf if method == "nmf" else causal_vq
                function(x, initial_bases(method, (6, 3), seed=0), steps=steps,
                         block_size=block_size)
            else:  # (batch, n positions, d channels) against a (batch, d, r) dictionary
                bases = initial_bases(method, (6, 3), seed=0)
                matrix_decomposition(x, keras.ops.tile(bases[None], (2, 1, 1)), steps=steps,
                                     method=method)
        return sum(saved)

    for causal in (True, False) if block_size is None else (True,):
        assert saved_bytes(1, causal) == saved_bytes(6, causal) > 0, causal


if BACKEND == "torch":  # what is PyTorch's own (the JAX process checks that nothing is skipped)
    test_keras_tree_on_pytorch_keeps_nothing_alive_and_traverses_as_keras_does = \
        _keras_tree_keeps_nothing_alive_and_traverses_as_keras_does
    test_keras_conv_on_pytorch_copies_nothing_and_computes_as_keras_does = \
        _keras_conv_copies_nothing_and_computes_as_keras_does
    test_keras_pooling_on_pytorch_copies_nothing_and_computes_as_keras_does = \
        _keras_pooling_copies_nothing_and_computes_as_keras_does
    test_large_host_buffers_are_reused_without_page_faults = \
        _large_host_buffers_are_reused_without_page_faults  # (Linux with glibc, as CI)
    test_one_step_gradient_records_no_round = pytest.mark.parametrize(
        "block_size", [None, 4])(pytest.mark.parametrize("method", ["nmf", "vq"])(
            _one_step_gradient_records_no_round))


def _docstring_examples_run_without_tensorflow(tmp_path, monkeypatch):
    """Every ``>>>`` example of the package runs on PyTorch in this process without
    TensorFlow, as a user of ``pip install "kctx[torch]"`` copies it (tests/test_docs.py
    runs them on TensorFlow), but those of TensorFlow-only APIs
    (``docstring_examples.TENSORFLOW_ONLY``) and, where JAX or Pillow is not installed, those
    that import it (``docstring_examples.NEEDS``). Not on JAX: there each example's eager
    operations compile one by one (the 306 examples took 173 s on JAX and 33 s on PyTorch,
    each in a process of its own, imports included; this test 15 s), and the JAX process
    runs the same layers, ops and models through the checks above."""
    monkeypatch.chdir(tmp_path)
    failures, attempted, skipped = run_docstring_examples(skip=TENSORFLOW_ONLY
                                                          + not_installed())
    assert not failures, "\n".join(failures)[:20000]
    assert attempted >= 100 and skipped <= 10, (attempted, skipped)


if BACKEND == "torch":  # (the JAX process checks that nothing is skipped)
    test_docstring_examples_run_without_tensorflow = _docstring_examples_run_without_tensorflow


def _every_block_exports_to_onnx_in_this_process(name, tmp_path):
    """ONNX on PyTorch needs no TensorFlow: Keras' ``torch.onnx`` route, each block's
    small model (tests/test_export.py's matrix on TensorFlow) run in ONNX Runtime at two
    batch sizes against Keras, at the matrix's tolerances."""
    model = block_model(name)
    path = export_model(model, str(tmp_path / "model.onnx"), format="onnx")
    artifact = load_artifact(path, "onnx")
    x = np.random.default_rng(0).standard_normal((2, *model.input_shape[1:])).astype("float32")
    for inputs in (x, x[:1]):
        expected = keras.ops.convert_to_numpy(model(inputs, training=False))
        np.testing.assert_allclose(artifact(inputs), expected, rtol=1e-4,
                                   atol=block_atol(name, expected, 1e-5))


def test_tensorflows_formats_need_tensorflow_installed(tmp_path):
    """On JAX and PyTorch the SavedModel and LiteRT artifacts (and JAX's ONNX) are
    TensorFlow's, written by a TensorFlow process (tests/test_export.py): without
    TensorFlow, ``export_model`` says what to install, and writes nothing."""
    model = block_model("none")
    formats = ["litert", "tf_saved_model"] + (["onnx"] if BACKEND == "jax" else [])
    for format in formats:
        path = str(tmp_path / f"model{SUFFIXES[format]}")
        with pytest.raises(ModuleNotFoundError, match=r"TensorFlow is not installed: pip "
                                                      r'install "kctx\[export\]"'):
            export_model(model, path, format=format)
        assert not os.path.exists(path)


if BACKEND == "torch":  # (the JAX process checks that nothing is skipped)
    test_every_block_exports_to_onnx_in_this_process = pytest.mark.parametrize(
        "name", context_block_names(None))(_every_block_exports_to_onnx_in_this_process)


def test_profile_layer_measures_on_this_backend():
    """``profile_layer`` on this backend (in this process on PyTorch, in a fresh JAX process
    on JAX): the Hamburger's MACs are Table 3's count at this shape (tests/test_profile.py's
    formula, the same on TensorFlow), its training step's include the backward products,
    and both calls are timed."""
    n, c, r, k = 8 * 8, 32, 4, 3
    grams = (k + 1) * (c * r * r + n * r * r) + k * (n * r * r + c * r * r)
    expected = n * c * c + (2 * k + 1) * n * c * r + grams + c * r * c + n * r * c
    result = profile_layer(Hamburger(rank=r, steps=k), (1, 8, 8, c), repeats=2,
                           train_repeats=1, warmup=1, isolate=BACKEND == "jax")
    assert result["backend"] == BACKEND and result["memory_source"] == "rss", result
    assert result["macs"] == expected, result
    assert result["train_macs"] > 2 * result["macs"], result
    assert result["infer_ms"] > 0 and result["train_ms"] > 0, result
    assert result["jit_compile"] == (BACKEND == "jax"), result
    # A layer whose call() takes no `training` (JAX's stateless_call passes it as given).
    attention = profile_layer({"block": "self_attention"}, (1, 4, 4, 8), repeats=1,
                              warmup=1, isolate=False)
    assert attention["macs"] > 0 and attention["train_macs"] > attention["macs"], attention


@pytest.mark.parametrize("name", sorted(TRAIN_STEP_MACS))
def test_training_step_macs_are_those_of_every_backend(name):
    """The training step's count is TensorFlow's (tests/test_profile.py): the products of
    the forward, of the gradients the step uses, and none other."""
    shape, expected = TRAIN_STEP_MACS[name]
    result = profile_layer({"block": name}, shape, modes=("train",), repeats=1, warmup=0,
                           isolate=False)
    assert result["train_macs"] == expected, result
