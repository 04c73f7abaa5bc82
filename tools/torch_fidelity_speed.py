#!/usr/bin/env python
"""Time torch-fidelity's FID Inception feature extraction (the PyTorch side of
a side-by-side speed benchmark).

kctx's FID benchmark calls this script through its ``--torch-python`` option
(the Python of a separate environment with torch and torch-fidelity, e.g.
``/work/fidenv/bin/python``; kctx itself is not needed here)::

    /work/fidenv/bin/python tools/torch_fidelity_speed.py \\
        [--weights tests/fixtures/fid_inception/random_inception.pth] \\
        [--images 256] [--size 299] [--batch-size 32] [--threads T] [--reuse-freed-host-memory]

It builds torch-fidelity's ``FeatureExtractorInceptionV3`` with the random
weights file (``--weights``; nothing is downloaded) requesting the "2048"
(pool3) and "logits_unbiased" features, makes ``--images`` random uint8 NCHW
images of ``--size`` x ``--size`` (torch-fidelity resizes them to 299 inside
its forward), runs one warm-up batch, then times the extraction of all images
in batches of ``--batch-size`` under ``torch.inference_mode()`` on the CPU with
``torch.set_num_threads(--threads)`` (default: all cores), with glibc's default host
memory or, with ``--reuse-freed-host-memory``, glibc keeping what it frees (as kctx's runner
makes it on PyTorch; ``kctx.bench fid`` asks for it unless ``--glibc-default``). It prints
one JSON object to stdout::

    {"tool": "torch-fidelity", "torch_fidelity_version": ..., "package_init": ...,
     "reuse_freed_host_memory": ..., "torch_version": ...,
     "threads": ..., "batch_size": ..., "images": ..., "size": ...,
     "seconds": ..., "images_per_second": ..., "seconds_per_image": ...}

Anything else (warnings) goes to stderr.

torch-fidelity's package imports torchvision (for its datasets and its other extractors),
which its InceptionV3 extractor does not use. Where no torchvision runs with the installed
torch (the registry has no CPU build of torchvision for torch 2.13), the script loads the
extractor's own modules without the package's ``__init__`` and says so on stderr and in
the JSON (``"package_init": false``); the extractor's code is the same.
"""

import argparse
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WEIGHTS = REPO_ROOT / "tests" / "fixtures" / "fid_inception" / "random_inception.pth"


def import_extractor():
    """(torch-fidelity's version, its ``FeatureExtractorInceptionV3``, whether the package's
    ``__init__`` ran); see the module's last paragraph."""
    try:
        import torch_fidelity
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

        return torch_fidelity.__version__, FeatureExtractorInceptionV3, True
    except (ImportError, RuntimeError) as error:  # RuntimeError: a torchvision for another torch
        print(f"torch-fidelity's package does not import ({type(error).__name__}: {error}); "
              "loading its InceptionV3 extractor's modules alone", file=sys.stderr)
    for name in [name for name in sys.modules if name.split(".")[0] == "torch_fidelity"]:
        del sys.modules[name]
    spec = importlib.util.find_spec("torch_fidelity")
    package = types.ModuleType("torch_fidelity")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["torch_fidelity"] = package
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3
    from torch_fidelity.version import __version__

    return __version__, FeatureExtractorInceptionV3, False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS,
                        help="state dict for FeatureExtractorInceptionV3 (default: %(default)s)")
    parser.add_argument("--images", type=int, default=256, help="images to time (default 256)")
    parser.add_argument("--size", type=int, default=299, help="image height = width (default 299)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: all cores)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random images")
    parser.add_argument("--reuse-freed-host-memory", action="store_true",
                        help="make glibc keep the host memory it frees, as kctx's runner does "
                        "on PyTorch (kctx/host_memory.py, loaded by its path: kctx itself "
                        "need not be importable here)")
    args = parser.parse_args(argv)
    if args.images < 1 or args.size < 1 or args.batch_size < 1:
        parser.error("--images, --size and --batch-size must be positive")

    import torch

    reused = False
    if args.reuse_freed_host_memory:
        spec = importlib.util.spec_from_file_location("host_memory",
                                                      REPO_ROOT / "kctx" / "host_memory.py")
        host_memory = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(host_memory)
        reused = host_memory.reuse_freed_host_memory()
    version, FeatureExtractorInceptionV3, package_init = import_extractor()

    threads = args.threads
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)

    if not args.weights.is_file():
        parser.error(f"weights file not found: {args.weights} (make it with tools/fid_fixtures.py)")
    model = FeatureExtractorInceptionV3(
        "inception-v3-compat", ["2048", "logits_unbiased"],
        feature_extractor_weights_path=str(args.weights))
    model.eval()

    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randint(0, 256, (args.images, 3, args.size, args.size), dtype=torch.uint8,
                           generator=gen)
    batches = list(torch.split(images, args.batch_size))

    with torch.inference_mode():
        pool3, logits = model(batches[0])  # warm-up
        assert pool3.shape == (len(batches[0]), 2048) and logits.shape == (len(batches[0]), 1008)
        start = time.perf_counter()
        for batch in batches:
            pool3, logits = model(batch)
        seconds = time.perf_counter() - start

    result = {
        "tool": "torch-fidelity",
        "torch_fidelity_version": version,
        "package_init": package_init,
        "reuse_freed_host_memory": reused,
        "torch_version": torch.__version__,
        "threads": threads,
        "batch_size": args.batch_size,
        "images": args.images,
        "size": args.size,
        "seconds": seconds,
        "images_per_second": args.images / seconds,
        "seconds_per_image": seconds / args.images,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
