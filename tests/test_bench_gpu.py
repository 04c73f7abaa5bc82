"""The GPU benchmarks' plumbing, on the CPU: processes that take turns on the device, the
SegNeXt table, XLA's HLO census and the committed H200 runs' report (the measurements
themselves need a GPU: tools/gpu_measurements.py)."""

import importlib.util
import json
import os
import sys
import textwrap

import pytest

from kctx.bench import segnext_gpu
from kctx.bench.standalone import run_in_turn, run_together

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDALONE = os.path.join(REPOSITORY, "kctx", "bench", "standalone.py")


def _job(tmp_path, name, body):
    """A measuring process that loads standalone.py by path (no kctx, no Keras) and
    writes its JSON."""
    path = tmp_path / f"{name}.json"
    script = textwrap.dedent(f"""
        import importlib.util, json, sys, time
        spec = importlib.util.spec_from_file_location("standalone", {STANDALONE!r})
        standalone = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(standalone)
        path = {str(path)!r}
    """) + textwrap.dedent(body)
    return {"name": name, "argv": [sys.executable, "-c", script], "json": str(path)}


TIMED = textwrap.dedent("""
    standalone.wait_for_turn()
    start = time.time()
    time.sleep(0.3)
    json.dump({"start": start, "end": time.time()}, open(path, "w"))
""")


def test_processes_prepare_together_and_time_one_at_a_time(tmp_path):
    jobs = [_job(tmp_path, "a", TIMED), _job(tmp_path, "b", TIMED),
            _job(tmp_path, "broken", "raise SystemExit('no model')"),
            _job(tmp_path, "slow", "time.sleep(60)\n" + TIMED)]
    seen = []
    results = run_in_turn(jobs, prepare_timeout=4, run_timeout=10, log=lambda *_: None,
                          on_result=lambda name, result: seen.append(name))
    assert seen == ["a", "b", "broken", "slow"]
    assert results["a"]["end"] <= results["b"]["start"]  # never both on the device
    assert "failed" in results["broken"]["error"]
    assert "no model" in results["broken"]["stderr_tail"]
    assert "not ready after 4 s" in results["slow"]["error"]


def test_compile_processes_run_side_by_side_without_taking_turns(tmp_path):
    jobs = [_job(tmp_path, f"compile {i}", TIMED) for i in range(3)]  # wait_for_turn: no-op
    jobs.append(_job(tmp_path, "fails", "raise SystemExit(4)"))
    codes = run_together(jobs, max_parallel=2, timeout=60, log=lambda *_: None)
    assert codes == {"compile 0": 0, "compile 1": 0, "compile 2": 0, "fails": 4}


def _args(**overrides):
    import argparse

    parser = argparse.ArgumentParser()
    segnext_gpu.add_arguments(parser)
    args = parser.parse_args(["--variants", "t", "--batches", "1", "16"])
    vars(args).update(overrides)
    return args


def _cell(ms, batch):
    return {"median_ms": ms, "images_per_s": batch * 1e3 / ms}


def test_segnext_rows_compare_kctx_best_with_the_official_best():
    results = {
        "jax/t/float32": {"cells": {"1": _cell(6.0, 1), "16": _cell(60.0, 16)}},
        "torch/t/float32": {"cells": {"1": _cell(90.0, 1), "16": _cell(100.0, 16)},
                            "cells_graph": {"1": {"error": "capture"},
                                            "16": _cell(30.0, 16)}},
        "official/t/float32": {"cells": {"1": _cell(12.0, 1), "16": _cell(40.0, 16)},
                               "cells_graph": {"1": _cell(10.0, 1), "16": {"error": "no"}}},
        "jax/t/bfloat16": {"error": "not ready after 240 s"},
    }
    rows = segnext_gpu.rows_of(results, _args())
    by_key = {(r["dtype"], r["batch"]): r for r in rows}
    batch1 = by_key["float32", 1]
    assert batch1["best"] == "jax" and batch1["official_best_ms"] == 10.0
    assert batch1["ratio"] == 0.6 and batch1["meets_goal"]
    batch16 = by_key["float32", 16]
    assert batch16["best"] == "torch_graph" and batch16["ratio"] == 0.75
    assert not batch16["meets_goal"]
    assert by_key["bfloat16", 1]["ratio"] is None  # nothing measured
    table = segnext_gpu.format_table(rows, "NVIDIA H200")
    line = next(line for line in table.splitlines() if "float32      16" in line)
    assert "0.75 !" in line and "30.0" in line and "533/s" in line
    assert "kctx PT graph" in table and "NVIDIA H200" in table


def test_hlo_census_counts_the_kernels_outside_fusions():
    class Compiled:
        def as_text(self):
            return textwrap.dedent("""
                %fused_computation.1 (p: f32[4]) -> f32[4] {
                  %p = f32[4]{0} parameter(0)
                  ROOT %t = f32[4]{0} transpose(f32[4]{0} %p), dimensions={0}
                }
                ENTRY %main (x: f32[4]) -> f32[4] {
                  %x = f32[4]{0} parameter(0)
                  %c = (f32[4]{0}, s8[0]{0}) custom-call(f32[4]{0} %x), custom_call_target="__cudnn$convForward"
                  %f = f32[4]{0} fusion(f32[4]{0} %x), kind=kLoop, calls=%fused_computation.1
                  ROOT %t2 = f32[4]{0} transpose(f32[4]{0} %f), dimensions={0}
                }
            """)

    assert segnext_gpu.hlo_census(Compiled(), inputs=[(4,)]) == {
        "custom-call __cudnn$convForward": 1, "fusion": 1, "transpose": 1}


def test_hlo_census_tells_the_kernels_that_read_the_weights_alone():
    """A kernel whose operands come from the weights and constants alone (a filter's
    layout change) is counted once more; one that reads the image is not, however far
    down the image's value flows."""
    class Compiled:
        def as_text(self):
            return textwrap.dedent("""
                %fused_scale (p0: f32[3,3,8,8], p1: f32[]) -> f32[8,8,3,3] {
                  %p0 = f32[3,3,8,8]{3,2,1,0} parameter(0)
                  ROOT %t = f32[8,8,3,3]{3,2,1,0} transpose(f32[3,3,8,8]{3,2,1,0} %p0), dimensions={3,2,0,1}
                }
                ENTRY %main (w: f32[3,3,8,8], b: f32[8], x: f32[1,32,32,8]) -> f32[1,32,32,8] {
                  %w = f32[3,3,8,8]{3,2,1,0} parameter(0)
                  %b = f32[8]{0} parameter(1)
                  %x = f32[1,32,32,8]{3,2,1,0} parameter(2)
                  %two = f32[] constant(2)
                  %wt = f32[8,8,3,3]{3,2,1,0} fusion(f32[3,3,8,8]{3,2,1,0} %w, f32[] %two), kind=kLoop, calls=%fused_scale
                  %xt = f32[1,8,32,32]{3,2,1,0} transpose(f32[1,32,32,8]{3,2,1,0} %x), dimensions={0,3,1,2}
                  %c = (f32[1,8,32,32]{3,2,1,0}, u8[0]{0}) custom-call(f32[1,8,32,32]{3,2,1,0} %xt, f32[8,8,3,3]{3,2,1,0} %wt, f32[8]{0} %b), custom_call_target="__cudnn$convBiasActivationForward"
                  %g = f32[1,8,32,32]{3,2,1,0} get-tuple-element((f32[1,8,32,32]{3,2,1,0}, u8[0]{0}) %c), index=0
                  ROOT %y = f32[1,32,32,8]{3,2,1,0} transpose(f32[1,8,32,32]{3,2,1,0} %g), dimensions={0,2,3,1}
                }
            """)

    assert segnext_gpu.hlo_census(Compiled(), inputs=[(1, 32, 32, 8)]) == {
        "custom-call __cudnn$convBiasActivationForward": 1, "fusion": 1,
        "fusion of weights alone": 1, "transpose": 2}
    # Without the image's shape every parameter counts as a weight.
    assert segnext_gpu.hlo_census(Compiled())["transpose of weights alone"] == 2


def _gpu_measurements():
    path = os.path.join(REPOSITORY, "tools", "gpu_measurements.py")
    spec = importlib.util.spec_from_file_location("gpu_measurements", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_committed_h200_runs_report():
    """results/gpu_h200 (the leases of tools/gpu_measurements.py) stays readable: the
    report the docs' GPU tables come from."""
    tool = _gpu_measurements()
    folders = [os.path.join(REPOSITORY, "results", "gpu_h200", name)
               for name in ("lease1", "lease2", "lease3", "lease3b")]
    text = tool.report_runs(folders)
    assert "SegNeXt on NVIDIA H200" in text
    line = next(line for line in text.splitlines()
                if line.startswith("SegNeXt-T  float32       1") and "lease3b" in line)
    assert "7.02" in line  # kctx's PyTorch call replayed as a CUDA graph
    assert "SegNeXt-T segnext_ade20k train step b16             124.0" in text
    line = next(line for line in text.splitlines()
                if line.startswith("SegNeXt-L  float32       1") and "lease1" in line)
    assert "14.53" in line and "21.81" in line
    assert "official mmseg LightHam Hamburger" in text and "HamGAN" in text
    with open(os.path.join(folders[0], "blocks_gpu.json")) as f:
        ceilings = json.load(f)["blocks/jax"]["ceilings"]
    assert ceilings["copy_gb_per_s"] > 1000


def test_the_batch1_lease_folder_reports_every_form_against_the_official_best(tmp_path):
    """``--report`` on a folder of tools/gpu_batch1_lease.sh: each kctx form's batch-1 time
    over the official model's fastest form (here its CUDA graph), with the profile's busy
    time and kernels and the census's transposes and weight-only kernels; forms that did
    not run are left out, the training steps and the generation rows follow."""
    def cell(median, minimum, census=None):
        return {"median_ms": median, "min_ms": minimum, "hlo_census": census or {}}

    files = {
        "default.json": {"device": {"device_kind": "NVIDIA H200"},
                         "cells": {"1": cell(3.0, 2.8, {"transpose": 99, "fusion": 301,
                                                        "fusion of weights alone": 31}),
                                   "16": cell(13.0, 12.9)},
                         "profiles": {"1": {"busy_ms": 1.5, "kernels_per_call": 500.0}}},
        "official.json": {"cells": {"1": dict(cell(12.0, 11.0),
                                              torch_census={"kernels": 499,
                                                            "kernels of weights alone": 1}),
                                    "16": cell(27.0, 26.0)},
                          "cells_graph": {"1": cell(2.5, 2.4), "16": cell(26.0, 25.0)},
                          "profiles": {"1": {"gpu_busy_ms": 2.2, "kernels_per_call": 610.0}}},
        "variants.json": {"command_buffers": {"cells": {"1": dict(cell(1.5, 1.4),
                                                                  dispatch_us=212.4)}},
                          "torch_compile": {"cells": {"1": dict(cell(2.0, 1.9),
                                                                inductor_census={
                                                                    "kernels": 421,
                                                                    "generated": 196})},
                                            "cells_graph": {"1": cell(1.2, 1.1),
                                                            "16": cell(11.0, 10.5)},
                                            "profiles": {"1": {"gpu_busy_ms": 1.0,
                                                               "kernels_per_call": 200.0}}},
                          "nhwc": {"cells": {"1": {"error": "XLA refused the flag"}}},
                          "torch_eager_released": {"cells": {"1": cell(110.0, 100.0)}}},
        "train_steps.json": {"train_gathered": {"step_ms": 120.5},
                             "train_matrix": {"error": "timed out"},
                             "train_torch": {"step_ms": 640.0},
                             "train_official": {"median_ms": 200.0}},
        "generation.json": [{"mixer": "attention", "options": {}, "length": 1024, "batch": 1,
                             "compiled": "jax.jit", "params": 10, "ms_per_token": 1.0,
                             "tokens_per_second": 1000.0, "state_mb": 1.0}],
    }
    for name, payload in files.items():
        (tmp_path / name).write_text(json.dumps(payload))
    text = _gpu_measurements().report_runs([str(tmp_path)])
    lines = {line.split("|")[0].strip(): line for line in text.splitlines() if "|" in line}
    assert "NVIDIA H200" in text
    assert lines["kctx JAX, its defaults"].split("|")[1].split() == [
        "3.00", "(2.80)", "1.50", "500", "1.20", "!"]
    assert "99 transpose" in lines["kctx JAX, its defaults"]
    assert "31 fusion of weights alone" in lines["kctx JAX, its defaults"]
    assert lines["kctx JAX, its defaults"].split("|")[2].split() == ["13.00", "(12.90)",
                                                                     "0.50"]
    assert lines["kctx, XLA command buffers"].split("|")[1].split() == [
        "1.50", "(1.40)", "—", "—", "0.60"]
    assert lines["kctx, XLA command buffers"].split("|")[3].strip() == "dispatch 212 µs"
    assert lines["official, eager"].split("|")[1].split() == ["12.00", "(11.00)", "2.20",
                                                              "610", "4.80"]
    assert lines["kctx, NHWC float32 convs"].split("|")[1].split() == ["—", "—", "—", "—"]
    assert "kctx, weights as constants" not in lines  # not run
    # Keras' eager call on PyTorch with Keras' convolution as released (step 11).
    assert lines["kctx PT eager, conv released"].split("|")[1].split()[:2] == [
        "110.00", "(100.00)"]
    assert "kctx PyTorch, Keras eager" not in lines
    # PyTorch's compiled program as it runs and replayed as a CUDA graph (no profile).
    assert lines["kctx PyTorch, torch.compile"].split("|")[1].split() == [
        "2.00", "(1.90)", "1.00", "200", "0.80", "!"]
    assert lines["kctx PT, compiled + graph"].split("|")[1].split() == ["1.20", "(1.10)",
                                                                        "0.48"]
    # The kernels each PyTorch call launches, counted from ATen's dispatch or Inductor's code.
    assert lines["official, eager"].split("|")[3].strip() == (
        "499 ATen kernels (1 of weights alone)")
    assert lines["kctx PyTorch, torch.compile"].split("|")[3].strip() == (
        "421 Inductor kernels (196 generated)")
    assert lines["kctx PT, compiled + graph"].split("|")[2].split() == ["11.00", "(10.50)",
                                                                        "0.42"]
    assert ("kctx JAX, gathered resize: 120.5 (0.60x); kctx JAX, jax.image.resize: timed out; "
            "kctx PyTorch (eager): 640.0 (3.20x); official mmseg: 200.0") in text
    assert "attention" in text and "1000.0" in text


def test_the_gpu_benchmark_refuses_tensorflow():
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("the suite's main process runs TensorFlow")
    with pytest.raises(ValueError, match="JAX and PyTorch"):
        segnext_gpu.Runner()


@pytest.mark.parametrize("kernel_size", [(5, 5), (21, 1), (4, 2)])
def test_depthwise_taps_compute_keras_depthwise_convolution(kernel_size):
    """``--depthwise-taps``' form (a sum of shifted taps) is the stride-1 "same"
    ``DepthwiseConv2D`` it stands in for, odd and even kernels, with the bias."""
    import keras
    import numpy as np

    from kctx.ops.depthwise import depthwise_conv_taps

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 9, 23, 5)).astype("float32")
    layer = keras.layers.DepthwiseConv2D(kernel_size, padding="same",
                                         bias_initializer="random_normal")
    expected = np.asarray(layer(x))
    got = np.asarray(depthwise_conv_taps(x, layer.kernel, layer.bias))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_dispatch_us_calls_a_program_of_the_same_arguments():
    """``dispatch_us`` compiles a program of the call's arguments as they are (a pytree of
    weights and the image, all kept) and times its calls: a positive µs per call."""
    import jax.numpy as jnp

    weights = ([jnp.ones((3, 3)), jnp.zeros(4)], [jnp.ones(2)])
    assert segnext_gpu.dispatch_us((weights, jnp.ones((1, 8, 8, 3))), calls=5) > 0


def test_jax_profile_sums_the_traced_operations():
    """``jax_profile`` (the JAX side of the GPU tables' profiles) reads JAX's trace: on a
    CPU, XLA's operations of the traced calls."""
    import jax
    import jax.numpy as jnp

    from kctx.bench.standalone import jax_profile

    f = jax.jit(lambda x: jnp.sin(x) @ x)
    x = jnp.ones((64, 64))
    profile = jax_profile(lambda: f(x), jax.block_until_ready, calls=2)
    assert profile["calls"] == 2 and profile["device"] == "cpu" and profile["wall_ms"] > 0
    assert profile["top_operations"], profile
