"""``python -m kctx.bench <benchmark> [options]``: print a table, optionally write JSON."""

import argparse
import os
import sys

BENCHMARKS = {
    "table3": (
        "kctx.bench.table3",
        "Hamburger paper, Table 3: params, MACs, memory and time of SA and the hams",
    ),
    "kao": (
        "kctx.bench.kao",
        "Kronecker Attention Networks, Table 1: Attn, Attn+Pool, KAO_KV, KAO_QKV cost",
    ),
    "nonlocal": (
        "kctx.bench.non_local",
        "Poly-NL paper, Fig. 2: time and memory of CONV, NL, E-NL, L-GNN, Poly-NL, Ham, KAO",
    ),
    "depthwise": (
        "kctx.bench.depthwise",
        "Depthwise convolutions (the KANets', MSCAN's) as the backend's convolution and as "
        "a sum of taps: time and memory of a call and of a training step",
    ),
    "sf-approx": (
        "kctx.bench.sf_approx",
        "Sparse factorization, Table 1 / Fig. 4: TSVD vs SF errors on offline real matrices",
    ),
    "psf": (
        "kctx.bench.psf",
        "PSF-Attn vs Transformer: training-step time and peak memory versus length",
    ),
    "kanet": (
        "kctx.bench.kanet",
        "Kronecker Attention Networks, Tables 2-4: params and MAdds of KANets and baselines",
    ),
    "runtimes": (
        "kctx.bench.runtimes",
        "Inference latency in Keras (TF, XLA, JAX, PyTorch), inference_function (JAX, "
        "torch.export, torch.compile), ONNX Runtime, LiteRT fp32 and int8",
    ),
    "segnext": (
        "kctx.bench.segnext",
        "SegNeXt T/S/B/L: params, MACs, CPU latency in Keras-TF, XLA, ONNX Runtime, LiteRT "
        "vs the official PyTorch model",
    ),
    "segnext-gpu": (
        "kctx.bench.segnext_gpu",
        "SegNeXt T/S/B/L on a GPU: batch-1 latency and batch-16 throughput, float32 and "
        "bfloat16, on JAX and PyTorch, beside the official model on the same GPU",
    ),
    "fid": (
        "kctx.bench.fid",
        "FID Inception features: images/s of kctx (Keras-TF, JAX, PyTorch) beside "
        "torch-fidelity; FID over 50k images",
    ),
    "generation": (
        "kctx.bench.generation",
        "Causal language models: tokens/s and decoding-state memory against the generated "
        "length (causal Hamburger, attention's key-value cache, linear attention, causal conv)",
    ),
    "retention": (
        "kctx.bench.retention",
        "Memory a process keeps per model built and fitted (sweeps of many models)",
    ),
}


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="python -m kctx.bench", description=__doc__)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    import importlib

    modules = {}
    for name, (module_name, help_text) in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    modules[args.benchmark].main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
