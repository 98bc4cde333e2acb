"""Host-process settings that XLA's CPU runtime needs to run at speed.

Freed memory (``keep_freed_memory``, applied when dgd_jax is imported):

glibc's malloc serves large blocks by ``mmap`` and returns freed memory to the kernel
(``munmap``, heap trimming). XLA on CPU allocates and frees its large temporaries on every
step, so each step pays page faults on freshly mapped, zeroed pages, time in the kernel
rather than in the step. Keeping freed memory in the process (a mmap threshold and a trim
threshold of 2 GiB) spares those faults, so the same steps train faster (docs/PERFORMANCE.md).
Results are unchanged: only where freed memory goes changes. The price is that the process
keeps its peak heap (somewhat more resident memory).
Set ``DGD_KEEP_FREED_MEMORY=0`` to leave malloc as it is.

One host device per core (``use_every_core``, applied by the command-line tools to a
single-process run before the first device use): XLA:CPU exposes one device by default, and
one teacher's step does not keep two cores busy through intra-op threads alone. With a device
per core the teacher mesh (``placement.teacher_mesh``) runs a teacher on every core at once:
the teachers train faster (docs/PERFORMANCE.md, "What XLA:CPU needs from the host and from
the model"), with the same results. Single-model stages stay on one device and are
unchanged. Set ``DGD_CPU_DEVICES=1`` (or a count of your own) to override."""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import os
import platform
import sys

import numpy as np

from dgd_jax.runtime.errors import ConfigError

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


DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def use_every_core() -> int:
  """Asks XLA for one CPU device per core this process may run on (``DGD_CPU_DEVICES``
  overrides the count), through ``XLA_FLAGS``. Only the CPU platform reads the flag, and only
  when its backend starts, so call it before the first device use; XLA_FLAGS that already
  set a device count are left as they are. Returns the count asked for (0: left alone)."""
  flags = os.environ.get("XLA_FLAGS", "")
  if DEVICE_COUNT_FLAG in flags:
    return 0
  asked = os.environ.get("DGD_CPU_DEVICES", "0")
  if not asked.isdigit():
    raise ConfigError(f"DGD_CPU_DEVICES={asked!r}: give a whole number of CPU devices (1: XLA's "
                     "default single device; unset: one per core).")
  count = int(asked) or len(os.sched_getaffinity(0))
  if count <= 1:
    return 0
  os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_COUNT_FLAG}={count}".strip()
  return count


# The packages whose versions can change a run's numbers.
SOFTWARE = ("jax", "jaxlib", "flax", "optax", "numpy", "dp-accounting", "jax-privacy",
            "tensorflow-datasets")


def noise_platform() -> dict:
  """What decides the values a secret key's draws take: the JAX backend (XLA's rng_bit_generator,
  behind the ``rbg`` keys, is platform-specific), JAX's and NumPy's versions."""
  import jax  # pylint: disable=import-outside-toplevel
  return {"backend": jax.default_backend(), "jax": jax.__version__,
          "jaxlib": importlib.metadata.version("jaxlib"), "numpy": np.__version__}


def software() -> dict:
  """The Python, package versions and JAX backend this process runs with, for a report to
  record what produced its numbers (a package not installed reads None)."""
  import jax  # pylint: disable=import-outside-toplevel
  versions = {}
  for name in SOFTWARE:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  devices = jax.devices()
  return {"python": platform.python_version(), **versions, "backend": jax.default_backend(),
          "device_kind": devices[0].device_kind, "devices": len(devices)}
