"""Device mesh over the teacher axis.

The ensemble's arrays have the teacher axis first; ``teacher_mesh`` lays it over a
one-dimensional mesh named ``'teachers'`` and ``shard_teachers`` places arrays with
``NamedSharding(mesh, P('teachers'))``. The training and voting programs are written with
``jax.shard_map`` over that mesh: each device runs the same per-teacher code on its own
teachers, and vote histograms are summed across devices with ``psum``. On one device the
mesh has one member and the program is the plain one.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "teachers"


def teacher_mesh(num_teachers: int, devices: list | None = None) -> Mesh:
  """A 1-D mesh over the most devices that divide ``num_teachers`` evenly (every device
  holds the same number of teachers; e.g. 250 teachers on 8 devices use 5)."""
  devices = list(devices if devices is not None else jax.devices())
  size = max(d for d in range(1, len(devices) + 1) if num_teachers % d == 0)
  return Mesh(np.array(devices[:size]), (AXIS,))


def shard_teachers(tree: Any, mesh: Mesh) -> Any:
  """Places every leaf (teacher axis first) with ``NamedSharding(mesh, P('teachers'))``."""
  return jax.device_put(tree, NamedSharding(mesh, P(AXIS)))


def replicate(tree: Any, mesh: Mesh) -> Any:
  """Places every leaf whole on every device of the mesh (the shared training set)."""
  return jax.device_put(tree, NamedSharding(mesh, P()))
