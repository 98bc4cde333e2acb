"""Memory planning for the teacher ensemble, before anything is allocated.

The ensemble's programs (``ensemble.make_train_step``, ``ensemble.make_predict_fn``) hold,
on each device, the state of all its teachers and their training examples, and run its
teachers ``chunk`` at a time. So a device needs

  fixed   = 2 x train state (parameters + optimizer state) of each of its teachers (a step's
            input and output) + its training examples,
  member  = the larger of one member's plain step on ``batch_size`` examples and one
            member's forward pass on ``query_chunk`` queries: XLA's own count of their
            temporary buffers and outputs (``compile().memory_analysis()``),
  total   = fixed + chunk x member.

Everything is computed on abstract values (``jax.eval_shape``, ``lower``): no array is built.
Where a backend gives no memory analysis, ``member`` sums every intermediate of the two
programs' jaxprs, which errs high (XLA fuses and frees most of them). ``plan`` picks the
largest chunk, at most the one asked for, that fits the device's free memory:
``memory_stats()`` where the backend reports it (GPU, TPU), the host's MemAvailable shared by
its devices on CPU, else DEFAULT_DEVICE_BYTES. tests/test_memory.py holds the estimate to
the measured peak RSS on CPU for two widths.
"""
from __future__ import annotations

import dataclasses
import math
import os

import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp
import optax

from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import ensemble
from dgd_jax.training import train

DEFAULT_DEVICE_BYTES = 8 * 2**30  # when neither the backend nor the OS reports free memory
# The share of the free memory a plan may fill: the true peak exceeds the estimate (it also
# holds the compiler's own memory; tests/test_memory.py compares the two), and planning to
# this share keeps that peak within the free memory.
HEADROOM = 0.7
GIB = 2**30


def nbytes(tree) -> int:
  """Bytes of a pytree of arrays or ShapeDtypeStructs."""
  return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


# Plans for a device other than this host's (bytes): e.g. an H200's 141 GB while compiling its
# preset's programs on a CPU host (tests/test_compile.py).
DEVICE_BYTES_ENV = "DGD_DEVICE_BYTES"
H200_BYTES = 141 * 10**9  # the datasheet's HBM3e


def device_bytes() -> tuple[int, str]:
  """Free bytes on one local device and where the number comes from (``DEVICE_BYTES_ENV``
  where it is set)."""
  if os.environ.get(DEVICE_BYTES_ENV):
    return int(float(os.environ[DEVICE_BYTES_ENV])), DEVICE_BYTES_ENV
  devices = jax.local_devices()
  try:
    stats = devices[0].memory_stats()
  except Exception:  # pylint: disable=broad-except  # backends without the query raise
    stats = None
  if stats and "bytes_limit" in stats:
    return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)), "memory_stats()"
  try:
    with open("/proc/meminfo") as f:
      kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    return kib * 1024 // len(devices), "MemAvailable (host, shared by its devices)"
  except (OSError, StopIteration):
    return DEFAULT_DEVICE_BYTES, "DEFAULT_DEVICE_BYTES"


def program_bytes(fn, *args) -> int:
  """Bytes ``fn(*args)`` needs beyond its inputs (abstract args): XLA's temporary buffers
  and outputs, or every intermediate of its jaxpr where the backend does not say."""
  try:
    analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
  except NotImplementedError:
    analysis = None
  if analysis is not None:
    return int(analysis.temp_size_in_bytes + analysis.output_size_in_bytes)
  return jaxpr_bytes(fn, *args)


def jaxpr_bytes(fn, *args) -> int:
  """Bytes of every intermediate of ``fn``'s jaxpr on abstract ``args``, sub-programs
  included: an upper bound on what ``fn`` holds at once (XLA fuses and frees most)."""
  def walk(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
      subs = [getattr(p, "jaxpr", p) for p in eqn.params.values()
              if isinstance(p, (jax.extend.core.ClosedJaxpr, jax.extend.core.Jaxpr))]
      total += sum(walk(j) for j in subs) if subs else nbytes([v.aval for v in eqn.outvars])
    return total
  return walk(jax.make_jaxpr(fn)(*args).jaxpr)


@dataclasses.dataclass(frozen=True)
class Plan:
  """A device's memory for the ensemble, in bytes, and the chunk chosen."""

  chunk: int
  fixed: int  # teacher states (twice) and training examples
  member: int  # one member's step or prediction batch, whichever is larger
  free: int  # the device's free memory
  source: str  # where ``free`` comes from

  @property
  def total(self) -> int:
    return self.fixed + self.chunk * self.member

  def describe(self) -> str:
    return (f"teachers' memory per device: {self.fixed / GIB:.3g} GiB states and examples + "
            f"chunk {self.chunk} x {self.member / GIB:.3g} GiB per member = "
            f"{self.total / GIB:.3g} GiB of {self.free / GIB:.3g} GiB free ({self.source}, "
            f"{HEADROOM:.0%} usable)")


def estimate(model: nn.Module, tx: optax.GradientTransformation, image_shape, *,
             teachers_per_device: int, examples_per_device: int, batch_size: int,
             query_chunk: int) -> tuple[int, int]:
  """(fixed, member) bytes of the ensemble's programs on one device (module docstring)."""
  state = jax.eval_shape(lambda: train.create_train_state(model, tx, jax.random.key(0),
                                                          image_shape))
  image = lambda n: jax.ShapeDtypeStruct((n, *image_shape), jnp.float32)
  examples = examples_per_device * (math.prod(image_shape) * 4 + 4)  # float32 image, int label
  fixed = 2 * teachers_per_device * nbytes(state) + examples
  step = program_bytes(train.update, state, image(batch_size),
                       jax.ShapeDtypeStruct((batch_size,), jnp.int32))
  predict = program_bytes(model.apply, state.params, image(query_chunk))
  return fixed, max(step, predict)


def for_teachers(model: nn.Module, tx: optax.GradientTransformation, image_shape,
                 mesh, num_teachers: int, num_examples: int, batch_size: int, chunk: int = 0
                 ) -> tuple[int, "Plan"]:
  """(the teachers per chunk asked for, ``ensemble.auto_chunk(chunk, n)``; the ``plan`` that
  fits it) for n teachers of ``model`` over ``mesh``, every device holding the whole training
  set of ``num_examples`` (an ensemble's programs: ``estimate``)."""
  fixed, member = estimate(model, tx, image_shape,
                           teachers_per_device=-(-num_teachers // mesh.size),
                           examples_per_device=num_examples, batch_size=batch_size,
                           query_chunk=ensemble.QUERY_CHUNK)
  wanted = ensemble.auto_chunk(chunk, num_teachers)
  return wanted, plan(fixed, member, wanted)


def plan(fixed: int, member: int, chunk: int, free: int | None = None,
         source: str = "given") -> Plan:
  """The largest chunk <= ``chunk`` whose total fits HEADROOM of the free memory; refuses
  when even one teacher at a time cannot fit."""
  if free is None:
    free, source = device_bytes()
  usable = int(HEADROOM * free)
  fits = (usable - fixed) // member if usable > fixed else 0
  if fits < 1:
    one = Plan(1, fixed, member, free, source)
    raise ConfigError(
        f"The teacher ensemble does not fit: {one.describe()}. Use fewer teachers per device "
        "(or more devices), a narrower model or a smaller batch.")
  return Plan(min(chunk, fits), fixed, member, free, source)
