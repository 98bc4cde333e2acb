"""Device mesh over the teacher axis, across every device of every process.

The ensemble's arrays have the teacher axis first; ``teacher_mesh`` lays it over a
one-dimensional mesh named ``'teachers'`` and ``put`` places arrays with
``NamedSharding(mesh, P('teachers'))``. The training and voting programs are written with
``jax.shard_map`` over that mesh: each device runs the same per-teacher code on its own
teachers, and vote histograms are summed across devices (and processes) with a reduction.
On one device the mesh has one member and the program is the plain one.

In a multi-process run (``distributed.py``) ``jax.devices()`` spans all processes; ``put``
builds global arrays from host data with ``jax.make_array_from_callback``, which asks each
process only for the shards of its own devices, and ``to_host`` gathers results back.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from dgd_jax.runtime.errors import ConfigError

AXIS = "teachers"


def mesh_size(num_teachers: int, num_devices: int, num_processes: int = 1) -> int:
  """The most devices that divide ``num_teachers`` evenly (every device holds the same
  number of teachers; e.g. 250 teachers on 8 devices use 5). A multi-process run must use
  every device, so there a count that does not divide is refused."""
  if num_processes > 1 and num_teachers % num_devices:
    raise ConfigError(
        f"{num_teachers} teachers do not split evenly over the {num_devices} devices of "
        f"{num_processes} processes. Use a teacher count (or, for a sweep, a total of "
        f"members) divisible by {num_devices}, or run on fewer devices.")
  return max(d for d in range(1, num_devices + 1) if num_teachers % d == 0)


def teacher_mesh(num_teachers: int, devices: list | None = None) -> Mesh:
  """A 1-D mesh named 'teachers' over ``mesh_size`` of ``devices`` (default: all)."""
  devices = list(devices if devices is not None else jax.devices())
  size = mesh_size(num_teachers, len(devices), jax.process_count())
  if size < len(devices):
    logging.info("teacher mesh: %d teachers on %d of %d devices (the most that divide them).",
                 num_teachers, size, len(devices))
  return Mesh(np.array(devices[:size]), (AXIS,))


def put(tree: Any, mesh: Mesh, spec: P = P(AXIS)) -> Any:
  """Global arrays from host (numpy) leaves, laid out by ``spec`` (default: teacher axis
  first); each process reads only the slices its own devices hold."""
  sharding = NamedSharding(mesh, spec)

  def one(leaf):
    leaf = np.asarray(leaf)
    return jax.make_array_from_callback(leaf.shape, sharding, lambda index: leaf[index])
  return jax.tree.map(one, tree)


def to_host(x: jax.Array) -> np.ndarray:
  """A numpy copy of ``x`` on every process, gathering shards held by other processes."""
  if x.is_fully_addressable or x.is_fully_replicated:
    return np.asarray(x)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))
