import json

import pytest
import tensorflow as tf

from block_models import TRAIN_STEP_MACS
from kctx.layers import Hamburger, SelfAttention2D
from kctx.profile import count_macs, count_params, profile_layer


def test_counts_matmul_family():
    assert count_macs(lambda a: tf.matmul(a, a, transpose_b=True), (5, 7)) == 5 * 7 * 5
    assert count_macs(lambda a: tf.matmul(a, a, transpose_a=True), (5, 7)) == 7 * 5 * 7
    assert count_macs(lambda a: tf.linalg.matmul(a, a, adjoint_b=True), (3, 4, 6)) == 3 * 4 * 6 * 4
    assert count_macs(lambda a: tf.einsum("bnd,bnr->bdr", a, a[..., :2]), (2, 9, 3)) == 2 * 9 * 3 * 2
    assert count_macs(lambda a: tf.einsum("...d,de->...e", a, tf.ones((4, 5))), (2, 3, 4)) == 2 * 3 * 4 * 5


def test_counts_convolutions_and_inverse():
    conv = lambda x: tf.nn.conv2d(x, tf.ones((3, 3, 4, 6)), 1, "SAME")  # noqa: E731
    assert count_macs(conv, (2, 8, 8, 4)) == 2 * 8 * 8 * 6 * 3 * 3 * 4
    depthwise = lambda x: tf.nn.depthwise_conv2d(x, tf.ones((3, 3, 4, 1)), [1] * 4, "VALID")  # noqa: E731
    assert count_macs(depthwise, (1, 8, 8, 4)) == 6 * 6 * 4 * 9
    assert count_macs(lambda a: tf.linalg.inv(a), (3, 5, 5)) == 3 * 125
    assert count_macs(lambda a: a * a + 1.0, (100, 100)) == 0


def test_training_graph_counts_backward_matmuls():
    w = tf.ones((7, 3))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.matmul(x, w))
        return y, tape.gradient(y, x)

    assert count_macs(step, (5, 7)) == 2 * 5 * 7 * 3  # forward + grad w.r.t. x
    # Without the loss the forward product feeds nothing (the sum's gradient does not
    # need it): TensorFlow does not run it, and it is not counted.
    assert count_macs(lambda x: step(x)[1], (5, 7)) == 5 * 7 * 3


def test_training_graph_skips_the_gradients_nothing_uses():
    """TensorFlow's einsum gradient builds the product for every input, the weights behind
    a ``stop_gradient`` included (as in the Hamburger's one-step gradient); TensorFlow
    prunes it before running, and so does the count."""
    w = tf.Variable(tf.ones((7, 3)))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.einsum("nk,km->nm", x, tf.stop_gradient(w)))
        return y, tape.gradient(y, x)

    by_op = {}
    assert count_macs(step, (5, 7), by_op=by_op) == 2 * 5 * 7 * 3, by_op


def test_paper_scale_counts():
    """Params and MACs at the paper's Table 3 shape (1×128×128×512), by tracing only."""
    shape = (1, 128, 128, 512)
    n, c, d, r, k = 128 * 128, 512, 512, 64, 6
    sa = SelfAttention2D()
    sa.build(shape)
    assert count_params(sa) == (4 * c * c + 1, 0)
    assert count_macs(lambda x: sa(x), shape) == 4 * n * c * c + 2 * n * n * c  # 292.06 G
    ham = Hamburger(rank=r, steps=k)
    ham.build(shape)
    # Non-trainable: the batch norm's moving statistics and the d×r inference dictionary.
    assert count_params(ham) == (c * d + d + d * c + 2 * c, 2 * c + d * r)
    # Lower bread; K+1 x·D and K xᵀ·C products with their r×r Grams; the
    # upper bread on the factors (Dᵀ·W_u then C·(Dᵀ·W_u)).
    grams = (k + 1) * (d * r * r + n * r * r) + k * (n * r * r + d * r * r)
    expected = n * c * d + (2 * k + 1) * n * d * r + grams + d * r * c + n * r * c
    assert count_macs(lambda x: ham(x, training=False), shape) == expected


@pytest.mark.parametrize("name", sorted(TRAIN_STEP_MACS))
def test_training_step_macs_are_those_of_every_backend(name):
    """The training step's count is the one JAX and PyTorch give (tests/backend_checks.py
    checks the same numbers there)."""
    shape, expected = TRAIN_STEP_MACS[name]
    result = profile_layer({"block": name}, shape, modes=("train",), repeats=1, warmup=0,
                           isolate=False)
    assert result["train_macs"] == expected, result


@pytest.mark.tf_kernels
@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "fresh-process"])
def test_profile_reports_everything(isolate):
    # Tensors here are 1 MiB, well above 256 KiB, the smallest size the oneDNN CPU
    # allocator keeps stats for (at exactly 256 KiB one CI machine saw a peak of 0).
    # In process, on a CPU where oneDNN is off, the allocator keeps no stats and the
    # resident set's growth is read: it grows only if the C heap freed by the warm-up
    # was handed back first (a CI machine once read -0.19 MB).
    result = profile_layer(Hamburger(rank=2, groups=2), (1, 32, 32, 256), repeats=2,
                           train_repeats=1, isolate=isolate)
    for key in ("params", "macs", "train_macs", "infer_ms", "train_ms", "infer_mem_mb",
                "train_mem_mb"):
        assert result[key] > 0, key
    assert result["train_macs"] > result["macs"]
    if isolate:  # the fresh process reads the caching allocator's stats on any CPU
        assert result["memory_source"] == "allocator", result
        # The step's inputs, cotangent and gradient of x alone are 3 MiB.
        assert result["train_mem_mb"] >= 3, result


def test_peak_memory_sees_the_attention_matrix():
    """SA at 64×64 positions holds a 4096² float32 attention matrix (64 MiB)."""
    shape = (1, 64, 64, 16)
    sa = profile_layer({"block": "self_attention"}, shape, modes=("infer",), repeats=1)
    ham = profile_layer({"block": "ham_nmf", "kwargs": {"rank": 2}}, shape, modes=("infer",),
                        repeats=1)
    assert sa["infer_mem_mb"] >= 64, sa
    assert ham["infer_mem_mb"] < 16, ham


def test_profile_rejects_unknown_mode():
    with pytest.raises(ValueError, match="modes"):
        profile_layer(Hamburger(), (1, 4, 4, 8), modes=("backward",))


def test_profile_on_another_backend_needs_a_fresh_process():
    """JAX and PyTorch profiles: tests/backend_checks.py."""
    with pytest.raises(ValueError, match=r"use isolate=True \(a fresh jax process\)"):
        profile_layer(Hamburger(), (1, 4, 4, 8), backend="jax", isolate=False)
    with pytest.raises(ValueError, match="Received: backend='mxnet'"):
        profile_layer(Hamburger(), (1, 4, 4, 8), backend="mxnet")


@pytest.mark.parametrize("argv,message", [
    (["table3", "--size", "0"], "--size: must be a positive integer. Received: '0'"),
    (["table3", "--repeats", "0"], "--repeats: must be a positive integer"),
    (["table3", "--methods", "foo"], "--methods: invalid choice: 'foo'"),
    (["table3", "--json", "/nonexistent/rows.json"], "its folder /nonexistent does not exist"),
    (["kao", "--sizes", "0"], "--sizes: must be a positive integer"),
    (["kao", "--sizes"], "--sizes: expected at least one argument"),
    (["nonlocal", "--methods", "foo"], "--methods: invalid choice"),
    (["nonlocal", "--plot", "{tmp}"], "is a directory"),
    (["psf", "--memory-limit-gb", "nan"], "must be a finite number > 0"),
    (["psf", "--batch", "-2"], "--batch: must be a positive integer"),
    (["sf-approx", "--steps", "1.5"], "--steps: must be a positive integer"),
    (["kanet", "--size", "x"], "--size: must be a positive integer"),
    (["runtimes", "--batches", "0"], "--batches: must be a positive integer"),
    (["runtimes", "--runtimes", "tensorrt"], "--runtimes: invalid choice: 'tensorrt'"),
    (["runtimes", "--models", "resnet"], "--models: invalid choice: 'resnet'"),
    (["depthwise", "--configs", "msca_3x3"], "--configs: invalid choice: 'msca_3x3'"),
    (["depthwise", "--repeats", "0"], "--repeats: must be a positive integer"),
    (["fid", "--backends", "numpy"], "--backends: invalid choice: 'numpy'"),
    (["fid", "--batch-size", "0"], "--batch-size: must be a positive integer"),
])
def test_bench_arguments_are_refused_before_anything_runs(argv, message, tmp_path, capsys):
    from kctx.bench.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main([arg.format(tmp=tmp_path) for arg in argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_gan_bench_arguments_are_refused(tmp_path, capsys):
    from gan.bench import main

    for argv, message in [(["--warmup", "0"], "--warmup: must be a positive integer"),
                          (["--json", str(tmp_path / "missing" / "rows.json")], "does not exist"),
                          (["--contexts", "foo"], "invalid choice")]:
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 2
        assert message in capsys.readouterr().err


def test_fid_bench_times_the_extractor_on_every_backend():
    """``kctx.bench fid``: its three backends by default (each timed in a process of its own;
    here TensorFlow's extraction in this process, 2 images), and its table beside a
    torch-fidelity row."""
    import argparse

    from kctx.bench.fid import DEFAULT_WEIGHTS, add_arguments, format_table, kctx_extraction
    from kctx.bench.standalone import cpu_model

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = parser.parse_args([])
    assert defaults.backends == ["tensorflow", "jax", "torch"] and not defaults.glibc_default
    assert parser.parse_args(["--glibc-default"]).glibc_default
    row = kctx_extraction(DEFAULT_WEIGHTS, images=2, size=40, batch_size=2)
    assert row["tool"] == "kctx (tensorflow)" and row["images_per_second"] > 0
    assert row["reuse_freed_host_memory"] is None  # TensorFlow's own allocator
    torch_row = {"tool": "torch-fidelity", "images_per_second": row["images_per_second"] / 2,
                 "seconds_per_image": 2 * row["seconds_per_image"],
                 "reuse_freed_host_memory": False}
    table = format_table({"rows": [row, torch_row], "fid_50k": None, "cpu": cpu_model()})
    assert "| kctx (tensorflow) |" in table and "| 0.50 |" in table, table
    assert "torch-fidelity: glibc's default host memory." in table, table


def test_retention_bench_reads_memory_in_a_fresh_process():
    from kctx.bench.retention import format_table, run_retention
    from kctx.profile import memory_kept_per_model

    with pytest.raises(ValueError, match="`models` must be more than 10"):
        memory_kept_per_model("conv", models=10)
    rows = run_retention(blocks=("conv",), models=11, clear_session=(True,), log=lambda *_: None)
    assert len(rows) == 1 and rows[0]["block"] == "conv" and rows[0]["clear_session"]
    assert 100 < rows[0]["rss_mb_after_first"] < 20_000
    assert rows[0]["kept_mb_per_model"] == pytest.approx(
        rows[0]["rss_mb_after_last"] - rows[0]["rss_mb_after_first"], abs=0.1)  # both rounded
    assert "MB/model" in format_table(rows)


def _bench(argv, capsys):
    """``python -m kctx.bench ARGV``'s ``main`` in this process (the benchmarks profile each
    method in a fresh process of their own); returns what it printed."""
    from kctx.bench.__main__ import main

    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def test_bench_table3_cli_writes_json(tmp_path, capsys):
    path = tmp_path / "table3.json"
    output = _bench(["table3", "--size", "16", "--channels", "32", "--repeats", "1",
                     "--train-repeats", "1", "--methods", "SA", "ham_nmf", "--peak-sizes", "256",
                     "512", "--json", str(path)], capsys)
    rows = json.loads(path.read_text())
    assert [r["method"] for r in rows] == ["SA", "Ham (NMF)"]  # --methods by label or block
    for row in rows:
        for key in ("method", "params", "macs", "infer_ms", "train_ms", "infer_mem_mb",
                    "train_mem_mb", "infer_speedup_vs_sa", "roofline_ms"):
            assert key in row, key
    assert "Ham (NMF)" in output and "GFLOP/s (square sizes 256: " in output
    assert rows[0]["matmul_peak_gflops"] > 0


def test_bench_nonlocal_cli_counts_linear_and_quadratic_costs(tmp_path, capsys):
    path, png = tmp_path / "nonlocal.json", tmp_path / "nonlocal.png"
    output = _bench(["nonlocal", "--sizes", "8", "--channels", "16", "--channel-sweep",
                     "--methods", "CONV", "NL", "Poly-NL", "--repeats", "1", "--json", str(path),
                     "--plot", str(png)], capsys)
    rows = {r["method"]: r for r in json.loads(path.read_text())}
    assert set(rows) == {"CONV", "NL", "Poly-NL"} and png.stat().st_size > 0
    n, c = 64, 16
    assert rows["CONV"]["macs"] == n * c * c
    # Poly-NL: Gram matrix, W₂ product and output product, 2·N·C² + C³ (+ O(C²) terms).
    assert 2 * n * c * c + c ** 3 <= rows["Poly-NL"]["macs"] <= 1.1 * (2 * n * c * c + c ** 3)
    # NL: the two N×N products with C/2-wide embeddings dominate.
    assert rows["NL"]["macs"] >= 2 * n * n * (c // 2)
    assert "goal" not in output  # no 128² row in this run


@pytest.mark.tf_kernels
def test_depthwise_bench_profiles_both_forms_of_each_configuration():
    """``kctx.bench depthwise``'s rows (here in this process, on TensorFlow): the
    convolution and the taps of each configuration, the same MACs, and the table's ratio."""
    from kctx.bench import memory_measure
    from kctx.bench.depthwise import format_table, run_depthwise

    rows = run_depthwise(names=("kanet_3x3_stride2",), repeats=1, isolate=False,
                         log=lambda *_: None)
    assert [(row["config"], row["form"], row["layer"]) for row in rows] == [
        ("kanet_3x3_stride2", "convolution", "DepthwiseConv2D"),
        ("kanet_3x3_stride2", "taps", "TapDepthwiseConv2D")]
    assert rows[0]["macs"] == rows[1]["macs"] == 64 * 16 * 16 * 96 * 9
    assert rows[0]["backend"] == "tensorflow" and "xla_train_temp_mb" not in rows[0]
    # The memory is TensorFlow's CPU-allocator peak where the allocator keeps statistics
    # (oneDNN on), else the resident set's growth; the table says which.
    assert {row["memory_source"] for row in rows} <= {"allocator", "rss"}
    table = format_table(rows)
    assert "kanet_3x3_stride2" in table
    assert f"memory of the training step: {memory_measure(rows)}." in table
    assert set(memory_measure(rows).split(" / ")) <= {
        "TensorFlow CPU-allocator peak", "the resident set's growth (TensorFlow)"}


def test_runtime_latency_runs_every_runtime_in_a_fresh_process():
    """Each runtime of `kctx.bench runtimes` on a small ham; the table marks a runtime that
    failed. The bench runs every row in a fresh process (the same worker code for each):
    here the Keras-JAX row (on the JAX backend) and the ONNX Runtime row do, the other
    TensorFlow rows run in this process (a fresh one imports TensorFlow and Keras again).
    The rows of kctx.export.inference_function on JAX and PyTorch run in
    tests/backend_checks.py's processes of those backends."""
    from kctx.bench.runtimes import format_table
    from kctx.profile import RUNTIME_BACKENDS, RUNTIMES, runtime_latency

    spec = {"block": "ham_nmf", "kwargs": {"rank": 4, "steps": 2}, "input_shape": [8, 8, 16]}
    rows = []
    for runtime in [r for r in RUNTIMES if r == "keras_jax" or r not in RUNTIME_BACKENDS]:
        row = runtime_latency(spec, runtime, batch=2, repeats=2, warmup=1, threads=1,
                              isolate=runtime in ("keras_jax", "onnxruntime"))
        assert row["median_ms"] > 0 and row["min_ms"] <= row["median_ms"], runtime
        assert row["first_call_ms"] > 0, runtime
        assert (row["artifact_bytes"] is None) == runtime.startswith("keras"), runtime
        rows.append(dict(row, model="ham", title="small ham", batch=2, runtime=runtime))
    rows[-1] = dict(rows[-1], error="failed to invoke")
    table = format_table(rows)
    assert "Keras-JAX jit" in table and table.splitlines()[2].split()[-1] == "failed"
    with pytest.raises(ValueError, match="Received: runtime='tensorrt'"):
        runtime_latency(spec, "tensorrt", batch=1)
