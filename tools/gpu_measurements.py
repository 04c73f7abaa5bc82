"""Every GPU measurement of kctx in one command (issue 39's GPU tables).

Run on a machine with one CUDA GPU, JAX and PyTorch (no TensorFlow needed), from the
repository root, with the official code importable (torch, mmengine, mmcv-lite 2.1.0,
mmsegmentation 1.2.2; ``tools/official_mmseg.py`` stubs mmcv's compiled ops):

    python tools/gpu_measurements.py --sequential --out results/gpu

It measures, in processes that run one after another, each alone on the GPU
(``--sequential``; without it they build and compile together and then time one at a time,
:func:`kctx.bench.standalone.run_in_turn`, which ran an H200 out of memory with 27):

1. **SegNeXt T / S / B / L** at 512×512 (``python -m kctx.bench segnext-gpu``'s
   processes): batch-1 latency and batch-16 throughput, float32 and bfloat16, kctx on JAX
   and on PyTorch (eager and replayed as a CUDA graph), beside mmsegmentation's model
   (eager and as a CUDA graph);
2. **the Hamburger paper's Table 3 blocks** at 1×128²×512 (``kctx.bench.gpu_blocks``) on
   JAX and PyTorch against the device's copy bandwidth and matmul rates, beside mmseg's
   LightHam ``Hamburger`` module;
3. **training steps**: the HamGAN's (``python -m gan.bench``, the 128×128
   ``imagenet128_hamgan_baby`` with no block, the Hamburger and self-attention) and
   SegNeXt-T's on ADE20K's recipe (``python -m segmentation.bench --train-step``, batch 16
   of 512² crops, paramwise AdamW) on JAX and PyTorch, beside mmseg's training step.

Writes ``segnext_gpu.json``, ``blocks_gpu.json``, ``train_steps_gpu.json`` and
``gpu_measurements.md`` (the tables) to ``--out``, each JSON rewritten as results come
in, and prints the tables. ``--smoke`` runs the same protocol at toy sizes (on a CPU too:
``--official-device cpu``), to try it out. ``--report DIR ...`` prints the tables of
earlier runs' folders instead; a folder that ``tools/gpu_batch1_lease.sh`` wrote gives the
batch-1 table of :func:`batch1_report`.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
# This process only starts the others and writes tables; Keras needs a backend to import
# (the GPU machines have JAX and PyTorch, no TensorFlow).
os.environ.setdefault("KERAS_BACKEND", "jax")

from kctx.bench import generation as generation_bench  # noqa: E402
from kctx.bench import gpu_blocks, segnext_gpu  # noqa: E402
from kctx.bench.standalone import run_in_turn, run_together  # noqa: E402

OFFICIAL_SCRIPT = REPOSITORY / "tools" / "segnext_official_latency.py"
GAN_CONFIG = "imagenet128_hamgan_baby"


def segnext_arguments(args):
    """The ``kctx.bench segnext-gpu`` arguments of this run."""
    parser = argparse.ArgumentParser()
    segnext_gpu.add_arguments(parser)
    argv = ["--official-python", args.python, "--official-device", args.official_device,
            "--variants", *args.variants, "--check-fixtures",
            str(REPOSITORY / "tests" / "fixtures" / "segnext"), "--profile", *args.profile]
    if args.smoke:
        argv += ["--size", "64", "--batches", "1", "2", "--repeats", "2", "--warmup", "1",
                 "--batch-repeats", "2", "--batch-warmup", "1"]
    else:
        argv += ["--repeats", str(args.repeats), "--warmup", "5", "--batch-repeats",
                 str(args.batch_repeats), "--batch-warmup", "2"]
    return parser.parse_args(argv)


# JAX's persistent compilation cache: the compile-only processes write every program
# (XLA's autotuning choices included), the timed processes load them.
CACHE_VARIABLES = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                   "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def backend_env(backend, cache=None):
    env = {"KERAS_BACKEND": backend, "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(
               [str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    if backend == "jax" and cache:
        env.update(CACHE_VARIABLES, JAX_COMPILATION_CACHE_DIR=cache)
    return env


def compile_jobs(jobs):
    """The compile-only twins of the JAX processes: the SegNeXt and block processes with
    ``--compile-only``, the training-step benchmarks as they are (a few steps compile and
    run, without taking turns)."""
    twins = []
    for job in jobs:
        if job.get("env", {}).get("KERAS_BACKEND") != "jax":
            continue
        argv = list(job["argv"])
        if job["name"].startswith(("jax/", "blocks/")):
            argv.append("--compile-only")
        twins.append(dict(job, name=f"compile {job['name']}", argv=argv))
    return twins


def block_jobs(args, folder):
    """Table 3's blocks on each backend, and mmseg's LightHam module."""
    size, channels, repeats = (16, 64, 2) if args.smoke else (128, 512, args.repeats)
    jobs = []
    for backend in ("jax", "torch"):
        path = os.path.join(folder, f"blocks-{backend}.json")
        argv = [args.python, "-m", "kctx.bench.gpu_blocks", "--size", str(size),
                "--channels", str(channels), "--repeats", str(repeats), "--json", path]
        if args.smoke:
            argv += ["--warmup", "1", "--copy-mib", "16", "--matmul-size", "256"]
        jobs.append({"name": f"blocks/{backend}", "argv": argv, "json": path,
                     "env": backend_env(backend, args.jax_cache), "cwd": str(REPOSITORY)})
    path = os.path.join(folder, "blocks-official.json")
    argv = [args.python, str(OFFICIAL_SCRIPT), "--device", args.official_device, "--hamburger",
            "1", str(channels), str(size), str(size), "--rank", str(channels // 8),
            "--repeats", str(repeats), "--warmup", "10" if not args.smoke else "1",
            "--json", path]
    jobs.append({"name": "blocks/official", "argv": argv, "json": path})
    return jobs


def train_jobs(args, folder):
    """The HamGAN's and SegNeXt-T's training steps on each backend, and mmseg's."""
    batch, repeats = (2, 2) if args.smoke else (16, args.batch_repeats + 4)
    gan_batch = 2 if args.smoke else 64
    crop = 64 if args.smoke else 512
    jobs = []
    for backend in ("jax", "torch"):
        path = os.path.join(folder, f"gan-{backend}.json")
        argv = [args.python, "-m", "gan.bench", "--config",
                "digits" if args.smoke else GAN_CONFIG, "--batch-size", str(gan_batch),
                "--repeats", str(repeats), "--warmup", "3", "--json", path]
        jobs.append({"name": f"gan/{backend}", "argv": argv, "json": path,
                     "env": backend_env(backend, args.jax_cache), "cwd": str(REPOSITORY)})
    for backend in ("jax", "torch"):
        path = os.path.join(folder, f"segmentation-{backend}.json")
        argv = [args.python, "-c", (
            "import sys, segmentation.configs as c, segmentation.bench as b; "
            f"get = c.get_config; c.get_config = lambda n, **o: get(n, crop_size={crop}, **o); "
            "sys.exit(b.main(sys.argv[1:]))"), "--train-step", "--config", "segnext_ade20k",
            "--batch-size", str(batch), "--repeats", str(repeats), "--warmup", "3",
            "--json", path]
        jobs.append({"name": f"segmentation/{backend}", "argv": argv, "json": path,
                     "env": backend_env(backend, args.jax_cache), "cwd": str(REPOSITORY)})
    path = os.path.join(folder, "segmentation-official.json")
    argv = [args.python, str(OFFICIAL_SCRIPT), "--device", args.official_device, "--train-step",
            "--variant", "t", "--size", str(crop), "--batches", str(batch), "--repeats",
            str(repeats), "--warmup", "3", "--json", path]
    jobs.append({"name": "segmentation/official", "argv": argv, "json": path})
    return jobs


def train_table(results):
    lines = ["Training steps (ms per step, median)", f"{'Step':<46} {'kctx JAX':>10} "
             f"{'kctx PyTorch':>13} {'official':>10}", "-" * 82]
    gan = {b: results.get(f"gan/{b}", {}) for b in ("jax", "torch")}
    rows = {b: {r["context"]: r for r in (v if isinstance(v, list) else [])}
            for b, v in gan.items()}
    def cell(value, name, width):  # '—': not run in this run; 'failed': run, no time
        if value is not None:
            return f"{value:>{width}.1f}"
        return f"{'failed' if name in results else '—':>{width}}"

    for context in ("none", "ham_nmf", "self_attention"):
        cells = [rows[b].get(context, {}).get("step_ms") for b in ("jax", "torch")]
        any_row = next((rows[b][context] for b in rows if context in rows[b]), None)
        if any_row is None:
            continue
        label = f"HamGAN {any_row['config']} b{any_row['batch_size']} {context}"
        lines.append(f"{label:<46} {cell(cells[0], 'gan/jax', 10)} "
                     f"{cell(cells[1], 'gan/torch', 13)} {'—':>10}")
    names = [f"segmentation/{b}" for b in ("jax", "torch", "official")]
    seg = [results.get(name, {}) for name in names]
    label = "SegNeXt-T segnext_ade20k train step"
    values = [seg[0].get("step_ms"), seg[1].get("step_ms"), seg[2].get("median_ms")]
    if any(v is not None for v in values):
        batch = next((s.get("batch_size") for s in seg if s.get("batch_size")), None)
        lines.append(f"{label + (f' b{batch}' if batch else ''):<46} "
                     + " ".join(cell(v, name, w)
                                for v, name, w in zip(values, names, (10, 13, 10))))
    return "\n".join(lines)


def official_block_line(result):
    if "inference" not in result:
        return f"official LightHam module: failed: {result.get('error', '')}"
    return (f"official mmseg LightHam Hamburger (PyTorch eager): infer "
            f"{result['inference']['median_ms']:.3f} ms, train step "
            f"{result['train_step']['median_ms']:.3f} ms")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/gpu", help="folder for the JSON and tables")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python of every measuring process (kctx and the official)")
    parser.add_argument("--official-device", default="cuda")
    parser.add_argument("--variants", nargs="+", default=list(segnext_gpu.VARIANTS),
                        choices=segnext_gpu.VARIANTS)
    parser.add_argument("--parts", nargs="+", default=["segnext", "blocks", "train"],
                        choices=("segnext", "blocks", "train"))
    parser.add_argument("--jax-cache",
                        help="JAX's compilation cache folder (default: a new temporary one)")
    parser.add_argument("--compile-parallel", type=int, default=4,
                        help="compile-only JAX processes at once (each autotunes on the GPU "
                             "and keeps what it allocated until it exits)")
    parser.add_argument("--compile-timeout", type=float, default=600.0)
    parser.add_argument("--prepare-timeout", type=float, default=300.0)
    parser.add_argument("--run-timeout", type=float, default=90.0)
    parser.add_argument("--repeats", type=int, default=30,
                        help="timed calls at batch 1 and of the blocks")
    parser.add_argument("--batch-repeats", type=int, default=6,
                        help="timed SegNeXt calls at batch 16 (training steps: 4 more)")
    parser.add_argument("--select", nargs="+", metavar="PATTERN",
                        help="only the processes whose names match (fnmatch: 'jax/t/*', "
                             "'official/*', 'blocks/torch', 'gan/*', 'segmentation/jax')")
    parser.add_argument("--sequential", action="store_true",
                        help="run the processes one after another, each alone on the GPU "
                             "(no compile-only twins): slower, but no process's memory or "
                             "cuDNN / XLA autotuning meets another's (27 processes preparing "
                             "together ran an H200 out of memory)")
    parser.add_argument("--jax-options", nargs="+", default=[], metavar="OPTION",
                        choices=("matrix-resize", "square-taps", "backend-depthwise"),
                        help="the JAX SegNeXt processes' experiments (their --cell flags "
                             "without the dashes)")
    parser.add_argument("--smoke", action="store_true", help="toy sizes, to try it out")
    parser.add_argument("--profile", nargs="+", default=["t", "l"], metavar="VARIANT",
                        help="the variants whose PyTorch calls are profiled (float32)")
    parser.add_argument("--list", action="store_true", help="print the processes' names only")
    parser.add_argument("--report", nargs="+", metavar="DIR",
                        help="print the tables of earlier runs' folders (their JSON) instead")
    args = parser.parse_args(argv)
    if args.report:
        text = report_runs(args.report)
        print(text)
        return 0
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    import tempfile

    folder = tempfile.mkdtemp(prefix="kctx-gpu-")
    args.jax_cache = args.jax_cache or tempfile.mkdtemp(prefix="kctx-jax-cache-")
    seg_args = segnext_arguments(args)
    jobs = []
    if "segnext" in args.parts:
        for job in segnext_gpu.jobs_of(seg_args, folder):
            job.setdefault("env", {})
            if job["name"].startswith(("jax/", "torch/")):
                job["env"] = backend_env(job["name"].split("/")[0], args.jax_cache)
                job["cwd"] = str(REPOSITORY)
            if job["name"].startswith("jax/"):
                job["argv"] = job["argv"] + [f"--{option}" for option in args.jax_options]
            jobs.append(job)
    if "blocks" in args.parts:
        jobs += block_jobs(args, folder)
    if "train" in args.parts:
        jobs += train_jobs(args, folder)
    if args.select:  # the processes matching each pattern in turn, in the patterns' order
        import fnmatch

        selected = {}
        for pattern in args.select:
            selected.update({job["name"]: job for job in jobs if job["name"] not in selected
                             and fnmatch.fnmatch(job["name"], pattern)})
        jobs = list(selected.values())
    if args.list:
        print("\n".join(job["name"] for job in jobs))
        return 0
    command = " ".join(["python", "tools/gpu_measurements.py", *(argv or sys.argv[1:])])
    results = {}
    twins = [] if args.sequential else compile_jobs(jobs)
    if twins:  # JAX compiles first, a few processes at a time, into the cache
        start = time.time()
        run_together(twins, args.compile_parallel, args.compile_timeout)
        print(f"compiled {len(twins)} JAX processes' programs in {time.time() - start:.0f} s",
              flush=True)

    def write(name=None, result=None):
        if name is not None:
            results[name] = result
            summary = {k: v for k, v in result.items()
                       if k in ("error", "median_ms", "step_ms")} if isinstance(result, dict) \
                else {}
            print(f"RESULT {name} {json.dumps(summary)[:300]}", flush=True)
        seg = {k: v for k, v in results.items() if k.split("/")[0] in COLUMNS_PROCESSES}
        payload = segnext_gpu.run_payload(seg, seg_args, started) if seg else None
        if payload:
            payload["command"] = command
            _dump(os.path.join(args.out, "segnext_gpu.json"), payload)
        blocks = {k: v for k, v in results.items() if k.startswith("blocks/")}
        if blocks:
            _dump(os.path.join(args.out, "blocks_gpu.json"), {"command": command, **blocks})
        train = {k: v for k, v in results.items() if k.startswith(("gan/", "segmentation/"))}
        if train:
            _dump(os.path.join(args.out, "train_steps_gpu.json"), {"command": command, **train})
        return payload, blocks, train

    if args.sequential:  # each process alone on the GPU, from its start to its end
        for job in jobs:
            run_in_turn([job], args.prepare_timeout, args.run_timeout, on_result=write)
    else:
        run_in_turn(jobs, args.prepare_timeout, args.run_timeout, on_result=write)
    payload, blocks, train = write()
    tables = []
    if payload:
        device = (payload["device"] or {}).get("device_kind")
        tables.append(segnext_gpu.format_table(payload["rows"], device))
        fixtures = {k: v.get("fixtures") for k, v in results.items()
                    if isinstance(v, dict) and v.get("fixtures")}
        if fixtures:
            tables.append("Official fixtures on the GPU (max |kctx − official| / max |official|"
                          "): " + json.dumps(fixtures))
    if blocks:
        tables.append(gpu_blocks.format_table([blocks[k] for k in ("blocks/jax", "blocks/torch")
                                               if "rows" in blocks.get(k, {})]))
        tables.append(official_block_line(blocks.get("blocks/official", {})))
    if train:
        tables.append(train_table(train))
    text = "\n\n".join(tables) + f"\n\nCommand: {command}\nWall: {time.time() - started:.0f} s\n"
    with open(os.path.join(args.out, "gpu_measurements.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


COLUMNS_PROCESSES = ("jax", "torch", "official")


def report_runs(folders):
    """The tables of earlier runs (each folder: what ``--out`` received), one SegNeXt
    table over them all, each row from one run (kctx beside the official model of the
    same machine), then the blocks and the training steps."""
    rows, device, tables = [], None, []
    for folder in folders:
        path = os.path.join(folder, "segnext_gpu.json")
        if os.path.exists(path):
            with open(path) as f:
                payload = json.load(f)
            device = device or (payload.get("device") or {}).get("device_kind")
            for row in payload["rows"]:
                kctx = [c for name, c in row["frameworks"].items()
                        if not name.startswith("official") and "median_ms" in c]
                if kctx:
                    rows.append(dict(row, run=os.path.basename(os.path.normpath(folder))))
    if rows:
        table = segnext_gpu.format_table(rows, device).splitlines()
        table[1] += " | run"
        table[2] += "-" * 8
        for i, row in enumerate(rows):
            table[3 + i] += f" | {row['run']}"
        tables.append("\n".join(table))
    for folder in folders:
        if os.path.exists(os.path.join(folder, "default.json")):
            tables.append(batch1_report(folder))
        path = os.path.join(folder, "blocks_gpu.json")
        if os.path.exists(path):
            with open(path) as f:
                blocks = json.load(f)
            tables.append(f"Blocks ({os.path.basename(os.path.normpath(folder))}):\n"
                          + gpu_blocks.format_table([blocks[k] for k in ("blocks/jax",
                                                                         "blocks/torch")
                                                     if "rows" in blocks.get(k, {})])
                          + "\n" + official_block_line(blocks.get("blocks/official", {})))
        path = os.path.join(folder, "train_steps_gpu.json")
        if os.path.exists(path):
            with open(path) as f:
                train = json.load(f)
            tables.append(f"({os.path.basename(os.path.normpath(folder))}) "
                          + train_table(train))
    return "\n\n".join(tables)


# The kctx forms of tools/gpu_batch1_lease.sh, in its order: (file, key or None, the
# cells' key, label).
BATCH1_FORMS = (("default.json", None, "cells", "kctx JAX, its defaults"),
                ("variants.json", "torch_compile", "cells", "kctx PyTorch, torch.compile"),
                ("variants.json", "torch_compile", "cells_graph", "kctx PT, compiled + graph"),
                ("variants.json", "torch_export", "cells", "kctx PyTorch, torch.export"),
                ("variants.json", "torch_export", "cells_graph", "kctx PT, exported + graph"),
                ("variants.json", "command_buffers", "cells", "kctx, XLA command buffers"),
                ("variants.json", "nhwc", "cells", "kctx, NHWC float32 convs"),
                ("variants.json", "constant_weights", "cells", "kctx, weights as constants"),
                ("variants.json", "all_three", "cells", "kctx, those three together"),
                ("variants.json", "square_taps", "cells", "kctx, square kernels as taps"),
                ("variants.json", "torch_eager", "cells", "kctx PyTorch, Keras eager"),
                ("variants.json", "torch_eager", "cells_graph", "kctx PT, eager + graph"),
                ("variants.json", "torch_eager_released", "cells", "kctx PT eager, conv released"),
                ("variants.json", "torch_eager_released", "cells_graph",
                 "kctx PT graph, conv released"))


# The training steps of tools/gpu_batch1_lease.sh, by the name of their process.
TRAIN_STEPS = {"train_gathered": "kctx JAX, gathered resize",
               "train_matrix": "kctx JAX, jax.image.resize",
               "train_torch": "kctx PyTorch (eager)", "train_official": "official mmseg"}


def batch1_report(folder):
    """The table of one ``tools/gpu_batch1_lease.sh`` folder: SegNeXt-T float32 at batch 1
    (and 16 where measured) in each form, the official model eager and as a CUDA graph,
    each with its profile's busy GPU ms and kernels per call and the kctx forms' HLO
    census (transposes, kernels that read the weights alone) and host dispatch
    (``segnext_gpu.dispatch_us``); then the training steps and the generation benchmark's
    rows. ``x`` is over the official model's fastest form on the same machine (the goal:
    at most 0.7)."""
    def load(name):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            return json.load(f)

    def cell(result, batch, key="cells"):
        value = (result.get(key) or {}).get(str(batch)) or {}
        return value if "median_ms" in value else {}

    def ms(value):
        return f"{value['median_ms']:.2f} ({value['min_ms']:.2f})" if value else "—"

    official = load("official.json")
    best = {}
    for batch in (1, 16):
        times = [c["median_ms"] for c in (cell(official, batch), cell(official, batch,
                                                                      "cells_graph")) if c]
        best[batch] = min(times) if times else None

    def ratio(value, batch, flag=True):
        if not value or not best[batch]:
            return "—"
        share = value["median_ms"] / best[batch]
        return f"{share:.2f}{' !' if flag and share > segnext_gpu.GOAL else ''}"

    def profile(result, batch):
        found = (result.get("profiles") or {}).get(str(batch)) or {}
        busy = found.get("busy_ms", found.get("gpu_busy_ms"))
        kernels = found.get("kernels_per_call")
        return (f"{busy:.2f}" if busy is not None else "—",
                f"{kernels:.0f}" if kernels is not None else "—")

    def static(value):
        """The call's static census: XLA's HLO (layout changes, kernels of the weights
        alone) and JAX's host dispatch, or PyTorch's ATen kernels, or Inductor's."""
        census = value.get("hlo_census") or {}
        parts = [f"{census[k]} {k}" for k in sorted(census)
                 if k.startswith(("transpose", "copy")) or "weights alone" in k]
        if value.get("dispatch_us") is not None:
            parts.append(f"dispatch {value['dispatch_us']:.0f} µs")
        aten = value.get("torch_census") or {}
        if aten:
            parts.append(f"{aten['kernels']} ATen kernels "
                         f"({aten.get('kernels of weights alone', 0)} of weights alone)")
        inductor = value.get("inductor_census") or {}
        if inductor:
            parts.append(f"{inductor['kernels']} Inductor kernels "
                         f"({inductor.get('generated', 0)} generated)")
        return ", ".join(parts)

    lines = [f"SegNeXt-T float32, batch 1 and 16 ({os.path.basename(os.path.normpath(folder))}"
             f", {(load('default.json').get('device') or {}).get('device_kind', '?')}): ms per "
             "call, median (min); busy: the profile's GPU ms; x: over the official model's "
             "fastest form (goal <= 0.7, '!': missed)",
             f"{'form':30} | {'batch 1':>15} {'busy':>6} {'kernels':>7} {'x':>6} | "
             f"{'batch 16':>15} {'x':>6} | batch 1's kernels counted: HLO (and the host's "
             "dispatch), ATen, Inductor"]
    lines.append("-" * len(lines[1]))
    for label, key in (("official, eager", "cells"), ("official, CUDA graph", "cells_graph")):
        busy, kernels = profile(official, 1) if key == "cells" else ("", "")
        one, many = cell(official, 1, key), cell(official, 16, key)
        lines.append(f"{label:30} | {ms(one):>15} {busy:>6} {kernels:>7} "
                     f"{ratio(one, 1, False):>6} | {ms(many):>15} {ratio(many, 16, False):>6} | "
                     f"{static(cell(official, 1)) if key == 'cells' else ''}".rstrip())
    for name, key, cells, label in BATCH1_FORMS:
        result = load(name)
        result = result.get(key, {}) if key else result
        if not result:
            continue
        one, many = cell(result, 1, cells), cell(result, 16, cells)
        if cells != "cells" and not (one or many):
            continue
        busy, kernels = profile(result, 1) if cells == "cells" else ("", "")
        lines.append(f"{label:30} | {ms(one):>15} {busy:>6} {kernels:>7} {ratio(one, 1):>6} | "
                     f"{ms(many):>15} {ratio(many, 16):>6} | "
                     f"{static(one) if cells == 'cells' else ''}".rstrip())
    train = load("train_steps.json")
    if train:
        lines.append("")
        times = {name: value.get("step_ms", value.get("median_ms"))
                 for name, value in train.items()}
        official = times.get("train_official")

        def step(name):
            if times[name] is None:
                return f"{TRAIN_STEPS.get(name, name)}: {train[name].get('error', 'no time')}"[
                    :200]
            over = (f" ({times[name] / official:.2f}x)"
                    if official and name != "train_official" else "")
            return f"{TRAIN_STEPS.get(name, name)}: {times[name]:.1f}{over}"

        lines.append("SegNeXt-T's training step, ms (x: over the official model's): "
                     + "; ".join(step(name) for name in train))
    generation = load("generation.json")
    if generation:
        lines.append("")
        lines.append(generation_bench.format_table(generation))
    return "\n".join(lines)


def _dump(path, payload):
    with open(path + ".tmp", "w") as f:
        json.dump(payload, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    raise SystemExit(main())
