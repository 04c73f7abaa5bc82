"""How busy the other processes kept the machine while a benchmark timed something.

Standard library only, so that a tool script in another virtual environment (without
Keras) can load this file by its path (``tools/segnext_official_latency.py`` does) and
report the same quantities as ``kctx.bench``.
"""


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

    Example:

    >>> other_load((100, 1000, 0, 40), (160, 1100, 1, 80))
    {'others_cpu_pct': 20.0, 'steal_pct': 1.0}
    """
    busy, total, steal, own = (b - a for a, b in zip(before, after))
    if total <= 0:
        return {"others_cpu_pct": None, "steal_pct": None}
    return {"others_cpu_pct": round(100 * max(0, busy - own) / total, 1),
            "steal_pct": round(100 * steal / total, 1)}
