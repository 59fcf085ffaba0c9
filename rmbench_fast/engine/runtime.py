"""Process settings for scoring on CPU.

glibc serves every allocation above its mmap threshold (at most 32 MiB, adjusted on the fly) with
a fresh mmap, and returns it at free: each large activation of a forward pass is then new pages
the kernel must fault in and zero. A pass over RM-Bench took about a million page faults and 7% of
its CPU time in the kernel that way (2-core CPU, hidden 512, 16k-token batches). With the
threshold fixed at 32 MiB, freed memory kept for reuse, and CPU batches whose activations stay
under it (engine: 2048 tokens by default), the same pass takes a few thousand faults.
"""

from __future__ import annotations

import ctypes
import gc
import platform
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest
TRIM_THRESHOLD = 512 << 20


def keep_freed_memory() -> bool:
    """Tell glibc malloc to reuse freed large blocks instead of unmapping them. True when set
    (Linux with glibc); elsewhere nothing changes."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc), so run.json can count the interpreter's
    start and the imports before a run began; None where /proc is not there."""
    import os

    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def startup_without_collector():
    """The block runs with the cyclic garbage collector paused (`rmbench-fast score` around its run),
    which each model pass computed in this process turns on for itself (engine.score). The imports
    and loading before a pass (torch, transformers: a million objects that live as long as the
    process) otherwise set off full collections over all of them: 0.3-0.6 s of a run's fixed cost
    on a 2-core CPU (issue 34). Yields resume(), which turns it back on for the rest of the block;
    after the block it is as before. What the start-up leaves in cycles is frozen with the rest at
    the first pass and never collected before the process ends: a bounded amount (peak memory +10 MB
    in a measured run), nothing per batch."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield gc.enable
    finally:
        if on:
            gc.enable()


def pauses_collector(engine: str, tp: int) -> bool:
    """Whether a run keeps the collector paused until its first pass: only where its passes compute in
    this process (not on Ray, not over --tp ranks), else this process would run long without it."""
    return engine == "local" and tp == 1
