"""Disjoint teacher partitions of the private training set (PATE Section 2.1, DGD III-A)."""
from __future__ import annotations

import numpy as np

from dgd_jax.errors import ConfigError, DatasetError


def partition_indices(total: int, num_teachers: int, seed: int) -> np.ndarray:
  """Indices [num_teachers, total // num_teachers] of disjoint, equal-size shards of a
  shuffled range(total); the remainder (total mod num_teachers) is dropped. Deterministic
  per seed."""
  if num_teachers < 1:
    raise ConfigError(f"num_teachers={num_teachers}; it must be at least 1.")
  if num_teachers > total:
    raise ConfigError(f"num_teachers={num_teachers} is more than the {total} training "
                      f"examples; each teacher needs at least one. Use num_teachers <= {total}.")
  per_teacher = total // num_teachers
  order = np.random.default_rng(seed).permutation(total)[:num_teachers * per_teacher]
  return order.reshape(num_teachers, per_teacher)


def teacher_partitions(x: np.ndarray, y: np.ndarray, num_teachers: int, seed: int
                       ) -> tuple[np.ndarray, np.ndarray, int]:
  """Shuffles (x, y) with ``seed`` and splits it into ``num_teachers`` disjoint equal shards.

  Returns (x_parts [n, m, ...], y_parts [n, m], dropped) where m = len(x) // n and
  ``dropped`` = len(x) - n * m examples that no teacher sees.
  """
  if len(y) != len(x):
    raise DatasetError(f"{len(x)} examples but {len(y)} labels.")
  idx = partition_indices(len(x), num_teachers, seed)
  return x[idx], y[idx], len(x) - idx.size
