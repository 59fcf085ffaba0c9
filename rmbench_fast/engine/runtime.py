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
import platform

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
