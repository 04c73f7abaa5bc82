"""What ``kctx.bench`` shares with the tool scripts that time the official models.

Standard library only, so that a tool script in another virtual environment (without
Keras) loads this file by its path (``tools/segnext_official_latency.py`` does) and
reports the same quantities under the same names as ``kctx.bench``: how busy the other
processes kept the machine while something was timed, and the layer kinds of SegNeXt's
per-layer profile.
"""

# Layer kinds of SegNeXt's per-layer profile (``--layer-profile`` of ``kctx.bench segnext``
# and of tools/segnext_official_latency.py), so the two line up.
CONV_1X1, CONV_3X3 = "conv 1×1", "conv 3×3 (stem, patch embeds)"
ELEMENTWISE = "element-wise (gate, layer scale, adds)"
LAYOUT = "layout (flatten, permute, copies)"
HEAD_RESIZE, HEAD_CONV = "head: resize + concat", "head: conv 1×1"
HEAD_NORM, HAMBURGER = "head: GroupNorm + ReLU", "head: Hamburger (breads, NMF, GN)"
UPSAMPLE = "logits upsampling, input normalisation"
OVERHEAD = "outside the layers (runtime, output copy)"


def depthwise_kind(height, width):
    """The layer kind of a depthwise convolution with a height × width kernel."""
    return f"depthwise {height}×{width}"



def cpu_jiffies():
    """(busy jiffies of the whole machine, all jiffies, steal jiffies, this process's),
    from ``/proc/stat`` and ``/proc/self/stat`` (Linux)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()
    return (user + nice + system + irq + softirq, sum(fields[:8]), steal,
            int(own[11]) + int(own[12]))


def other_load(before, after):
    """CPU share (% of all cores) used by other processes, and stolen by the hypervisor,
    between two :func:`cpu_jiffies` readings.

    Examples:
        >>> other_load((100, 1000, 0, 40), (160, 1100, 1, 80))
        {'others_cpu_pct': 20.0, 'steal_pct': 1.0}
    """
    busy, total, steal, own = (b - a for a, b in zip(before, after))
    if total <= 0:
        return {"others_cpu_pct": None, "steal_pct": None}
    return {"others_cpu_pct": round(100 * max(0, busy - own) / total, 1),
            "steal_pct": round(100 * steal / total, 1)}


def cpu_model():
    """The CPU's model name, family / model / stepping, the vector-instruction flags
    that decide TensorFlow's and PyTorch's kernels, and the logical CPU count."""
    import os
    import platform

    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in ("model name", "cpu family", "model", "stepping") and key not in info:
                    info[key] = value
                elif key == "flags" and "flags" not in info:
                    info["flags"] = [flag for flag in value.split()
                                     if flag in ("avx2", "fma", "avx512f", "avx512_bf16",
                                                 "avx512_vnni", "amx_tile")]
    except OSError:
        pass
    return {"model_name": info.get("model name", platform.processor() or platform.machine()),
            "family": info.get("cpu family"), "model": info.get("model"),
            "stepping": info.get("stepping"), "flags": info.get("flags", []),
            "logical_cpus": os.cpu_count()}


def package_versions(names):
    """``{"python": ..., name: version or None}`` of installed distributions."""
    import importlib.metadata
    import platform

    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions

