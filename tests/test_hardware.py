"""What a session records about the machine (hardware.py): the host's peak RSS of a record."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import os, resource, sys, threading
from runwatch.files.hardware import memory_peaks

# Linux keeps a process's peak across exec, so a child of a large test worker starts with the
# worker's peak; a forked grandchild starts from its own memory.
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

before = memory_peaks()["host_rss_peak_bytes"]

def grow():  # another thread touches 64 MiB, then frees them
    block = bytearray(64 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1

worker = threading.Thread(target=grow)
worker.start()
worker.join()
after = memory_peaks()["host_rss_peak_bytes"]
print(before, after, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)
os._exit(0)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no resource module")
def test_the_peak_is_the_processs_whichever_thread_asks_and_grew():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    before, after, whole = map(int, out.split())
    unit = 1 if sys.platform == "darwin" else 1024
    assert after == whole * unit  # the process's peak (RUSAGE_SELF), not the asking thread's own
    assert after - before >= 32 * 2**20  # the other thread's 64 MiB (less what the old peak held) are in it
