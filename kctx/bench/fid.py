"""``python -m kctx.bench fid``: FID Inception feature extraction, kctx beside torch-fidelity.

Images per second of pool3 features and unbiased logits (what FID, IS and KID need) of
random 8-bit images at 299×299 (``--size``), in batches, after a warm-up batch, each
runtime in a fresh process on the same CPU one after the other: kctx on Keras' TensorFlow,
JAX and PyTorch backends (``--backends``), and torch-fidelity's
``FeatureExtractorInceptionV3`` through ``tools/torch_fidelity_speed.py`` in another virtual
environment (``--torch-python``).
kctx's time includes its resize ("tensorflow", the TF1 bilinear: an identity at 299,
as torch-fidelity's) and scaling; both use the same weights file (``--weights``: the
fixture's random weights by default; the real file gives the same speed).

Then the time of FID over 50,000 generated images on this CPU, projected from what is
measured: 50,000 × (kctx's fastest time per image + the float64 statistics update per
image, timed on 2048-d features) + the Fréchet distance of two 2048-d Gaussians (timed).

Goal (the GAN-evaluation issue): kctx at most 0.7× torch-fidelity's time per image.

Example:
    python -m kctx.bench fid --torch-python /path/to/venv/bin/python --json fid.json
"""

import json
import os
import subprocess
import sys
import time

from kctx.arguments import output_path, positive_int
from kctx.bench import report
from kctx.bench.standalone import cpu_jiffies, cpu_model, other_load, package_versions
from kctx.profile.layer_profile import run_worker

GOAL = 0.7
DEFAULT_WEIGHTS = os.path.join("tests", "fixtures", "fid_inception", "random_inception.pth")
TORCH_SCRIPT = os.path.join("tools", "torch_fidelity_speed.py")
BACKENDS = ("tensorflow", "jax", "torch")


def _images(count, size, seed=0):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, (count, size, size, 3)).astype("uint8")


def kctx_extraction(weights, images=256, size=299, batch_size=32, resize="tensorflow",
                    reuse_host_memory=True):
    """Time the FID Inception extractor in this process (its backend): images / s. On
    PyTorch, ``reuse_host_memory`` first makes glibc keep the host memory it frees, as the
    workflows' runner does there (:func:`kctx.host_memory.reuse_freed_host_memory`)."""
    import keras
    import numpy as np

    from kctx.host_memory import reuse_freed_host_memory
    from kctx.metrics import fid_inception, prepare_images

    reused = None  # TensorFlow and JAX: their own allocators
    if keras.backend.backend() == "torch":
        reused = bool(reuse_host_memory) and reuse_freed_host_memory()

    extractor = fid_inception(weights, resize=resize)
    data = _images(images + batch_size, size)

    def run(batch):
        prepared = prepare_images(batch, (0, 255), extractor)
        features, logits = extractor.features_and_logits(prepared)
        return keras.ops.convert_to_numpy(features), keras.ops.convert_to_numpy(logits)

    run(data[:batch_size])  # warm-up: compilation and allocation
    before = cpu_jiffies()
    start = time.perf_counter()
    for first in range(batch_size, batch_size + images, batch_size):
        features, _ = run(data[first:first + batch_size])
    seconds = time.perf_counter() - start
    assert np.isfinite(features).all()
    return {"tool": f"kctx ({keras.backend.backend()})", "batch_size": batch_size,
            "images": images, "size": size, "seconds": seconds,
            "reuse_freed_host_memory": reused,
            "images_per_second": images / seconds, "seconds_per_image": seconds / images,
            **other_load(before, cpu_jiffies())}


def statistics_seconds_per_image(dim=2048, batch=256, repeats=4):
    """The float64 FID statistics update (Σf, Σffᵀ) per image, in NumPy."""
    import numpy as np

    features = np.random.default_rng(0).standard_normal((batch, dim)).astype("float32")
    total, outer = np.zeros(dim), np.zeros((dim, dim))
    start = time.perf_counter()
    for _ in range(repeats):
        cast = features.astype(np.float64)
        total += cast.sum(0)
        outer += cast.T @ cast
    return (time.perf_counter() - start) / (repeats * batch)


def frechet_seconds(dim=2048):
    """One Fréchet distance between two dim-d Gaussians (``kctx.metrics.frechet_distance``)."""
    import numpy as np

    from kctx.metrics import frechet_distance

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2 * dim, dim)), rng.standard_normal((2 * dim, dim)) + 0.1
    mu1, mu2, s1, s2 = a.mean(0), b.mean(0), np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    start = time.perf_counter()
    frechet_distance(mu1, s1, mu2, s2)
    return time.perf_counter() - start


def _run_torch(python, script, request, threads, timeout=None):
    command = [python, script, "--weights", request["weights"], "--images",
               str(request["images"]), "--size", str(request["size"]), "--batch-size",
               str(request["batch_size"]), "--threads", str(threads)]
    if request["reuse_host_memory"]:
        command.append("--reuse-freed-host-memory")
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if completed.returncode != 0:
        raise RuntimeError(f"torch-fidelity's script failed with exit code "
                           f"{completed.returncode}:\n{completed.stderr[-4000:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["tool"] = "torch-fidelity"
    return result


def run_fid(backends=BACKENDS, torch_python=None, torch_script=TORCH_SCRIPT,
            weights=DEFAULT_WEIGHTS, images=256, size=299, batch_size=32, samples=50_000,
            reuse_host_memory=True):
    """Measure every runtime (fresh processes, one after the other); returns the rows.
    ``reuse_host_memory``: the PyTorch processes (kctx's and torch-fidelity's) make glibc keep
    the host memory they free, as kctx's runner does on PyTorch."""
    request = {"weights": weights, "images": images, "size": size, "batch_size": batch_size,
               "reuse_host_memory": reuse_host_memory}
    rows = []
    for backend in backends:
        rows.append(run_worker("kctx.bench.fid:kctx_extraction", request, backend=backend))
        print(f"  {rows[-1]['tool']}: {rows[-1]['images_per_second']:.2f} images/s", flush=True)
    if torch_python:
        rows.append(_run_torch(torch_python, torch_script, request, threads=os.cpu_count()))
        print(f"  torch-fidelity: {rows[-1]['images_per_second']:.2f} images/s", flush=True)
    torch_row = next((row for row in rows if row["tool"] == "torch-fidelity"), None)
    kctx_rows = [row for row in rows if row["tool"].startswith("kctx")]
    for row in kctx_rows:
        if torch_row:
            row["time_vs_torch_fidelity"] = row["seconds_per_image"] / torch_row["seconds_per_image"]
    fastest = min(kctx_rows, key=lambda row: row["seconds_per_image"]) if kctx_rows else None
    summary = None
    if fastest:
        statistics = statistics_seconds_per_image()
        frechet = frechet_seconds()
        summary = {"samples": samples, "extraction_runtime": fastest["tool"],
                   "extraction_seconds_per_image": fastest["seconds_per_image"],
                   "statistics_seconds_per_image": statistics, "frechet_seconds": frechet,
                   "projected_seconds": samples * (fastest["seconds_per_image"] + statistics)
                   + frechet,
                   "goal": GOAL,
                   "goal_met": (fastest["seconds_per_image"]
                                <= GOAL * torch_row["seconds_per_image"]) if torch_row else None}
    return {"rows": rows, "fid_50k": summary, "cpu": cpu_model(),
            "versions": package_versions(("kctx", "keras", "tensorflow", "jax", "jaxlib", "torch",
                                          "numpy", "scipy")),
            "command": " ".join(["python -m kctx.bench fid"] + sys.argv[2:])}


def format_table(result):
    rows = result["rows"]
    torch_row = next((row for row in rows if row["tool"] == "torch-fidelity"), None)
    lines = ["| runtime | images/s | ms / image | × torch-fidelity's time | others' CPU % |",
             "|---|---:|---:|---:|---:|"]
    for row in rows:
        ratio = (f"{row['seconds_per_image'] / torch_row['seconds_per_image']:.2f}"
                 if torch_row else "–")
        lines.append(f"| {row['tool']} | {row['images_per_second']:.2f} | "
                     f"{1000 * row['seconds_per_image']:.1f} | {ratio} | "
                     f"{row.get('others_cpu_pct', '–')} |")
    summary = result["fid_50k"]
    if summary:
        lines += ["", f"FID over {summary['samples']:,} generated images on this CPU "
                  f"({summary['extraction_runtime']}): {summary['projected_seconds'] / 60:.1f} "
                  f"min projected = {summary['samples']:,} × ("
                  f"{1000 * summary['extraction_seconds_per_image']:.1f} ms extraction + "
                  f"{1000 * summary['statistics_seconds_per_image']:.2f} ms statistics) + "
                  f"{summary['frechet_seconds']:.1f} s Fréchet distance."]
        if summary["goal_met"] is not None:
            lines.append(f"Goal (kctx ≤ {GOAL}× torch-fidelity's time per image): "
                         f"{'met' if summary['goal_met'] else 'NOT met'}.")
    policies = {True: "glibc keeps the host memory it frees (kctx.host_memory)",
                False: "glibc's default host memory"}
    lines += [f"{row['tool']}: {policies[row['reuse_freed_host_memory']]}." for row in rows
              if row.get("reuse_freed_host_memory") is not None]
    cpu = result["cpu"]
    lines.append(f"CPU: {cpu['model_name']} (family {cpu['family']} model {cpu['model']}, "
                 f"{cpu['logical_cpus']} logical CPUs).")
    return "\n".join(lines)


def add_arguments(parser):
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=BACKENDS,
                        help="kctx's Keras backends to time")
    parser.add_argument("--torch-python", help="a Python with torch and torch-fidelity "
                        "(then torch-fidelity is timed too)")
    parser.add_argument("--torch-script", default=TORCH_SCRIPT)
    parser.add_argument("--weights", default=DEFAULT_WEIGHTS,
                        help="a FID Inception .pth (pytorch-fid's / torch-fidelity's layout)")
    parser.add_argument("--images", type=positive_int, default=256)
    parser.add_argument("--size", type=positive_int, default=299)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--glibc-default", action="store_true",
                        help="leave the PyTorch processes' host memory to glibc's default "
                        "(unmapping large freed blocks) instead of the runner's reuse")
    parser.add_argument("--json", type=output_path, help="write the result as JSON")


def main(args):
    result = run_fid(args.backends, args.torch_python, args.torch_script, args.weights,
                     args.images, args.size, args.batch_size,
                     reuse_host_memory=not args.glibc_default)
    report(result, format_table(result), args.json)

