"""decide.server.memory.tame_malloc: large buffers come back from the heap instead of fresh pages from the kernel.

Each case runs in its own interpreter: malloc settings are the whole process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# Allocates, touches and frees a 64 MiB block (over glibc's largest dynamic mmap threshold, 32 MiB) 20 times;
# prints the page faults of the last 10 rounds.
ROUNDS = """
import ctypes, ctypes.util, resource, sys
from decide.server.memory import tame_malloc
if sys.argv[1] == "tamed":
    assert tame_malloc()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 64 << 20
def round_():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
for _ in range(10):
    round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_large_blocks_are_reused_not_mapped_anew():
    pages = 10 * (64 << 20) // 4096
    assert faults("default") > pages // 2  # glibc's default: each round maps, and faults in, a fresh block
    assert faults("tamed") < pages // 100
