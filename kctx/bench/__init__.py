"""Benchmarks that reproduce the papers' cost tables: ``python -m kctx.bench --help``."""

import json


def report(rows, table, json_path=None):
    """Print a benchmark's ``table`` and, with ``json_path``, write its ``rows`` as JSON."""
    print()
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)
        print(f"\nwrote {json_path}")
    return rows


_BACKENDS = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
_MEMORY = {"rss": "the resident set's growth", "cuda_allocator": "the CUDA allocator's peak",
           "device_peak_since_start": "the device's peak since its process started"}
_MACS = {"tensorflow": "the traced graph", "jax": "the jaxpr",
         "torch": "a run's matrix products (FlopCounterMode)"}


def _backends(rows):
    return sorted({row.get("backend", "tensorflow") for row in rows if "skipped" not in row})


def memory_measure(rows):
    """What the profiled ``rows``' memory is, from their ``backend`` and ``memory_source``
    (:func:`kctx.profile.profile_layer`'s): "TensorFlow CPU-allocator peak", "the resident
    set's growth (PyTorch)", ..."""
    measures = []
    for row in rows:
        if "skipped" in row or not row.get("memory_source"):
            continue
        backend, source = row.get("backend", "tensorflow"), row["memory_source"]
        measure = ("TensorFlow CPU-allocator peak" if source == "allocator" else
                   f"{_MEMORY.get(source, source)} ({_BACKENDS.get(backend, backend)})")
        if measure not in measures:
            measures.append(measure)
    return " / ".join(measures) or "not measured"


def macs_source(rows):
    """Where the profiled ``rows``' MACs were counted from, by backend."""
    return " / ".join(_MACS.get(backend, backend) for backend in _backends(rows))

