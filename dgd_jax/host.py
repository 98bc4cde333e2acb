"""Host-process settings that XLA's CPU runtime needs to run at speed.

glibc's malloc serves large blocks by ``mmap`` and returns freed memory to the kernel
(``munmap``, heap trimming). XLA on CPU allocates and frees its large temporaries on every
step, so each step pays page faults on freshly mapped, zeroed pages: on the 2-core
development machine the baseline's 1500 steps spent 64 s in the kernel against 72 s of user
time, and trained in 62 s. Keeping freed memory in the process (a mmap threshold and a trim
threshold of 2 GiB) trains the same steps in 28 s (README, "Speed"). Results are unchanged:
only where freed memory goes changes. The price is that the process keeps its peak heap:
the quick start's peak resident memory was 2.28 GB with it, 2.22 GB without.
Set ``DGD_KEEP_FREED_MEMORY=0`` to leave malloc as it is."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD = 2**31 - 1  # the largest value mallopt accepts (an int)


def keep_freed_memory() -> bool:
  """Raise glibc's mmap and trim thresholds; True when both were set. A no-op (False) off
  Linux, on another C library, or with ``DGD_KEEP_FREED_MEMORY=0``."""
  if os.environ.get("DGD_KEEP_FREED_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    mallopt = libc.mallopt
  except (OSError, AttributeError, TypeError):  # not glibc (musl has no mallopt)
    return False
  return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD))
