"""`python -m kctx.bench segnext`: the CLI's JSON, its MAC count, the official column's
plumbing (with a stand-in for tools/segnext_official_latency.py: no PyTorch here).
Timings are never asserted."""

import importlib.util
import json
import os
import sys
import textwrap

import pytest

from kctx.bench import segnext as bench
from kctx.models.segnext import ATTENTION_KERNEL, MSCAN_VARIANTS, STRIP_KERNELS

FAKE_OFFICIAL = textwrap.dedent("""\
    import argparse, json
    parser = argparse.ArgumentParser()
    for name in ("--variant", "--size", "--num-classes", "--repeats", "--warmup", "--threads"):
        parser.add_argument(name)
    parser.add_argument("--layer-profile", action="store_true")
    args = parser.parse_args()
    print("some log line")
    print("SEGNEXT_OFFICIAL_RESULT " + json.dumps({
        "variant": args.variant, "median_ms": 1000.0, "min_ms": 990.0, "times_ms": [1000.0],
        "threads": int(args.threads), "params": 4263414, "macs_flop_counter": 123,
        "macs_fvcore": 456, "others_cpu_pct": 0.0}))
""")


def _depthwise_macs(variant, size):
    """Hand count of MSCAN's depthwise convolutions: per block, a 5×5 and the 1×k, k×1
    strips (k = 7, 11, 21) on C channels, and the MLP's 3×3 on C·ratio, at H/4 ... H/32."""
    settings = MSCAN_VARIANTS[variant]
    taps = ATTENTION_KERNEL ** 2 + 2 * sum(STRIP_KERNELS)
    total = 0
    for stage, (channels, depth, ratio) in enumerate(
            zip(settings["embed_dims"], settings["depths"], settings["mlp_ratios"])):
        positions = (size // 2 ** (stage + 2)) ** 2
        total += depth * positions * (channels * taps + int(channels * ratio) * 9)
    return total


def test_segnext_cli_writes_json_with_the_official_column(tmp_path, capsys):
    from kctx.bench.__main__ import main

    script = tmp_path / "official.py"
    script.write_text(FAKE_OFFICIAL)
    path = tmp_path / "segnext.json"
    main(["segnext", "--variants", "t", "--size", "64", "--repeats", "1", "--warmup", "1",
          "--runtimes", "keras", "--official-python", sys.executable, "--official-script",
          str(script), "--json", str(path)])
    printed = capsys.readouterr().out
    payload = json.loads(path.read_text())
    for key in ("command", "cpu", "versions", "threads", "load", "rows", "repeats"):
        assert key in payload, key
    assert payload["threads"] == 2 and payload["cpu"]["logical_cpus"] == os.cpu_count()
    assert payload["command"].startswith("python -m kctx.bench segnext --variants t ")
    assert payload["versions"]["kctx"]["tensorflow"]
    [row] = payload["rows"]
    assert row["variant"] == "t" and row["size"] == 64 and "paper" not in row
    assert row["params"] == 4_263_414  # the official model's parameters() at 150 classes
    assert row["keras_count_params"] == row["params"] + row["non_trainable_params"]
    keras_cell = row["runtimes"]["keras"]
    assert keras_cell["median_ms"] > 0 and len(keras_cell["times_ms"]) == 1
    assert keras_cell["threads"] == 2 and not keras_cell["jit_compile"]
    assert row["official"]["median_ms"] == 1000.0
    assert row["best_runtime"] == "keras"
    assert row["ratio"] == pytest.approx(keras_cell["median_ms"] / 1000.0, abs=1e-3)
    assert row["meets_goal"] == (row["ratio"] <= bench.GOAL)
    # The MAC count: its parts add up, and the depthwise convs equal a hand count.
    assert sum(row["macs_by_op"].values()) == row["macs"]
    assert row["macs_by_op"]["DepthwiseConv2dNative"] == _depthwise_macs("t", 64)
    assert 0 < row["macs_hamburger"] < row["macs"]
    assert "SegNeXt-T" in printed and "Keras-TF" in printed and "Official PT" in printed


def test_table_says_not_run_without_the_official_python():
    row = {"variant": "s", "size": 512, "num_classes": 150, "params": 13_932_886,
           "macs": 15_000_000_000, "paper": {"params_m": 13.9, "gflops": 15.9},
           "runtimes": {"keras": {"median_ms": 200.0, "times_ms": [200.0], "threads": 2},
                        "onnx": {"error": "boom"}},
           "official": {"status": "not run"}, "ratio": None, "meets_goal": None}
    table = bench.format_table([row])
    line = next(line for line in table.splitlines() if line.startswith("SegNeXt-S"))
    assert "not run" in line and "failed" in line and "200.0" in line and "13.9" in line
    assert "ONNX Runtime" in table and "LiteRT" not in table.splitlines()[0]


def test_official_script_uses_the_bench_layer_kinds():
    """The tool's layer kinds are the bench's names (it runs without kctx installed)."""
    path = os.path.join(os.path.dirname(__file__), "..", "tools", "segnext_official_latency.py")
    spec = importlib.util.spec_from_file_location("segnext_official_latency", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)  # imports no torch at module level
    assert tool.RESULT_MARKER == bench.OFFICIAL_MARKER
    names = {tool.CONV_1X1, tool.CONV_3X3, tool.ELEMENTWISE, tool.LAYOUT, tool.HEAD_RESIZE,
             tool.HEAD_CONV, tool.HEAD_NORM, tool.HAMBURGER, tool.UPSAMPLE, tool.OVERHEAD,
             tool.depthwise_kind(1, 21)}
    assert names <= set(bench.LAYER_KINDS)
    assert os.path.samefile(path, bench.OFFICIAL_SCRIPT)


@pytest.mark.parametrize("argv, message", [
    (["--variants", "xl"], "--variants: invalid choice: 'xl'"),
    (["--runtimes", "tensorrt"], "--runtimes: invalid choice: 'tensorrt'"),
    (["--repeats", "0"], "--repeats: must be a positive integer"),
])
def test_segnext_arguments_are_refused_before_anything_runs(argv, message, capsys):
    from kctx.bench.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(["segnext", *argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
