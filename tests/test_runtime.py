"""rmbench_fast.engine.runtime: glibc keeps freed large blocks for reuse once told to (Linux only)."""

import platform
import subprocess
import sys

import pytest

PROBE = """
import os, sys, torch
if sys.argv[1] == "tuned":
    from rmbench_fast.engine.runtime import keep_freed_memory
    assert keep_freed_memory()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
x = torch.ones(5 << 20)  # 20 MiB, touched
before = rss()
del x
print(before - rss())
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_blocks_stay_for_reuse():
    released = {}
    for how in ("default", "tuned"):
        out = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True, check=True)
        released[how] = int(out.stdout)
    assert released["default"] >= 15  # glibc's own policy: a fresh 20 MiB block is unmapped when freed
    assert released["tuned"] <= 2  # kept: the next activation of that size faults in no new pages
