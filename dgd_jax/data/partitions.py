"""Disjoint teacher partitions of the private training set (PATE Section 2.1, DGD III-A), and
how many teachers' shards one neighbouring change of the private set moves under each.

Two partitioners (``teachers.partition``):

* 'shuffle' (default): equal shards of a seeded permutation of the positions. An example's
  teacher depends on its position and on the dataset size. Replacing the example at position
  k changes one teacher's shard (the one holding k). Adding or removing an example changes
  the size and re-deals every shard, so add/remove-one neighbours are not covered.
* 'stable': an example's teacher is a keyed hash H of the example itself (its pixels and label,
  keyed with the seed) modulo n, independent of every other example. Adding or removing one
  example changes one teacher's shard. Replacing x by x' takes x out of teacher H(x) and puts
  x' into teacher H(x'): TWO shards change (one when the hashes collide), so the teacher-vote
  sensitivities double under replace-one. Shard sizes are multinomial, nearly equal for N >> n.

``TEACHERS_CHANGED`` holds these counts; the privacy records scale their sensitivities by them
(``privacy.releases``), one ledger per neighbouring relation the partition covers.
"""
from __future__ import annotations

import hashlib

import numpy as np

from dgd_jax.runtime.errors import ConfigError, DatasetError


def check_count(total: int, num_teachers: int) -> None:
  """Refuses fewer than one teacher, or more teachers than the ``total`` training examples."""
  if num_teachers < 1:
    raise ConfigError(f"num_teachers={num_teachers}; it must be at least 1.")
  if num_teachers > total:
    raise ConfigError(f"num_teachers={num_teachers} is more than the {total} training "
                      f"examples; each teacher needs at least one. Use num_teachers <= {total}.")


def partition_indices(total: int, num_teachers: int, seed: int) -> np.ndarray:
  """Indices [num_teachers, total // num_teachers] of disjoint, equal-size shards of a
  shuffled range(total); the remainder (total mod num_teachers) is dropped. Deterministic
  per seed."""
  check_count(total, num_teachers)
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


PARTITIONS = ("shuffle", "stable")
# For each partition and neighbouring relation it covers, the most teachers whose shards one
# neighbouring change moves (module docstring); a relation not listed is not covered.
TEACHERS_CHANGED = {"shuffle": {"replace_one": 1},
                    "stable": {"replace_one": 2, "add_or_remove_one": 1}}


def stable_partition(x: np.ndarray, y: np.ndarray, num_teachers: int, seed: int
                     ) -> list[np.ndarray]:
  """Indices of each teacher's shard: example i goes to teacher H_seed(x_i, y_i) mod n, H the
  64-bit keyed BLAKE2b (module docstring). Every example is used; a teacher left with no
  example is refused."""
  check_count(len(x), num_teachers)
  key = str(seed).encode()
  owner = np.array([int.from_bytes(hashlib.blake2b(
      np.ascontiguousarray(xi).tobytes() + np.int64(yi).tobytes(), key=key,
      digest_size=8).digest(), "little") % num_teachers for xi, yi in zip(x, y)], np.int64)
  shards = [np.flatnonzero(owner == t) for t in range(num_teachers)]
  empty = sum(not len(s) for s in shards)
  if empty:
    raise ConfigError(f"The stable partition of {len(x)} examples left {empty} of "
                      f"{num_teachers} teachers without data: use fewer teachers.")
  return shards


def teacher_shards(x: np.ndarray, y: np.ndarray, num_teachers: int, seed: int,
                   partition: str = "shuffle") -> list[np.ndarray]:
  """Each teacher's example indices under ``partition`` (module docstring)."""
  if partition == "shuffle":
    return list(partition_indices(len(x), num_teachers, seed))
  if partition == "stable":
    return stable_partition(x, y, num_teachers, seed)
  raise ConfigError(f"teachers.partition={partition!r}; use one of {PARTITIONS}.")


def config_shards(config, x: np.ndarray, y: np.ndarray, num_teachers: int | None = None
                  ) -> list[np.ndarray]:
  """Each teacher's indices into (x, y), the private training set, under the run's
  ``teachers.partition`` (``num_teachers`` defaults to ``config.num_teachers``)."""
  return teacher_shards(x, y, num_teachers or config.num_teachers, config.seed,
                        config.teachers.partition)
