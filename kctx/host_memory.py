"""How the process's C allocator treats large host buffers: PyTorch's CPU tensors come from
``malloc``, and glibc's ``malloc`` maps every block above its mmap threshold (at most
32 MiB) afresh from the kernel and unmaps it when freed.

A tensor of the language workflow's default decoder (B = 16, T = 512, a dictionary of
d × r = 256 × 16 per position: 134 MB) then costs page faults and the kernel's zeroing of
every page on each use: a sum of two of them into a fresh tensor took 60–62 ms where the
same sum into a tensor already held took 9–13 ms, and the training step 11.0–12.2 s on 2
cores, with 5.5 million page faults a step. TensorFlow and XLA keep such buffers in
allocators of their own; PyTorch's CPU allocator does not (PyTorch's tuning guide suggests
jemalloc or tcmalloc, loaded before the process starts). :func:`reuse_freed_host_memory`
makes glibc keep them instead, in a running process: the same step took 3.7–4.4 s with
at most 62,465 page faults (``python tools/torch_host_memory.py``;
``results/torch_host_memory.json``).

The cost: what the process frees stays in it, to be reused, so its resident memory stays
at the peak of its working set rather than falling between steps, and glibc's heap holds
more than the largest working set (5.1 GB after those steps, against a peak of 3.4 GB
without it).
"""

import ctypes
import ctypes.util
import sys

__all__ = ["reuse_freed_host_memory"]

# glibc's mallopt parameters (malloc.h), and the trim threshold that turns trimming off
# (mallopt(3): "Setting M_TRIM_THRESHOLD to -1 disables trimming completely"). A finite
# one does not do: at 2 GiB, the largest an int holds, the language step's heap, whose
# top is more than that free after every step, was returned and faulted in again (600,000
# page faults a step).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = -1


def _glibc():
    """The C library when it is glibc, else None (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc alone has it
        libc.mallopt
    except (OSError, AttributeError):
        return None
    return libc


def reuse_freed_host_memory():
    """Makes glibc's ``malloc`` serve every block from its heap (``M_MMAP_MAX`` = 0) and
    keep what is freed (no trimming), so that a large buffer freed by one
    operation is the next one's without page faults. For the whole process, from now on;
    the :mod:`kctx.training` runner calls it on the PyTorch backend.

    Returns:
        ``True`` where it was applied, ``False`` where the C library is not glibc (the
        process is left as it is).

    Example, a training loop of one's own on PyTorch (for the whole process, so not run
    here)::

        from kctx.host_memory import reuse_freed_host_memory

        reuse_freed_host_memory()  # True on Linux with glibc
        model.fit(dataset, epochs=10)
    """
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
