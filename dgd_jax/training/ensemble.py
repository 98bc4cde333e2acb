"""The teacher ensemble: one teacher's pure train step, lifted over a teacher axis.

Every array of the ensemble has the teacher axis first: parameters and optimizer state
[n, ...], keys [n], partitions [n, m]. Each device holds the training examples of its own
teachers once (``Partitions.localize``: the union of their partitions, not a copy per
teacher; in a multi-process run no process holds another's examples): member i samples its
minibatch from ``indices[i, :sizes[i]]``, indices into its device's examples. Rows padded
to a common length, each with its own ``size``, let ensembles of different sizes (a
teacher-count sweep) train as one program.

Lifting: ``member_step`` is written for one teacher and lifted with ``jax.vmap`` over
chunks of ``chunk`` teachers, the chunks run by ``lax.map`` (a scan). ``chunk = n`` is the
plain vmap over all teachers, best on GPU/TPU; on XLA:CPU the batched matmuls of a wide
vmap run several times slower than small chunks (see ``python -m dgd_jax.bench``), so
the CPU default is a small chunk. Either way there is no Python loop over teachers and
one jitted program per ensemble. The program runs under ``jax.shard_map`` over the
'teachers' mesh (``placement.py``): each device steps its own teachers, so the result is the
same on one device, many, or many processes.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import placement
from dgd_jax.training import train

# Teachers per vmapped chunk when the config says 0 ("auto"): measured with
# `python -m dgd_jax.bench teachers` on a 2-core CPU (docs/PERFORMANCE.md, "Teacher
# training against a PyTorch loop").
AUTO_CHUNK = {"cpu": 1}
QUERY_CHUNK = 500  # queries each teacher labels at a time (memory: n x QUERY_CHUNK labels)


def auto_chunk(chunk: int, num_teachers: int) -> int:
  """``chunk`` if given (> 0), else the backend's default (all teachers off CPU)."""
  if chunk > 0:
    return min(chunk, num_teachers)
  return min(AUTO_CHUNK.get(jax.default_backend(), num_teachers), num_teachers)


@dataclasses.dataclass(frozen=True)
class Partitions:
  """Each member's training examples as rows of indices into the shared training set.

  indices: [n, m] int32, row i valid up to ``sizes[i]`` (the rest is padding).
  sizes: [n] int32, each >= 1.
  """

  indices: np.ndarray
  sizes: np.ndarray

  def __post_init__(self):
    if self.indices.ndim != 2 or self.sizes.shape != self.indices.shape[:1]:
      raise ConfigError(f"Partitions need indices [n, m] and sizes [n]; got "
                        f"{self.indices.shape} and {self.sizes.shape}.")
    if self.sizes.size and (self.sizes.min() < 1 or self.sizes.max() > self.indices.shape[1]):
      raise ConfigError(f"Partition sizes must lie in [1, {self.indices.shape[1]}]; got "
                        f"{self.sizes.min()}..{self.sizes.max()}: every teacher needs data.")

  @classmethod
  def stack(cls, rows: list[np.ndarray]) -> "Partitions":
    """Pads index rows of different lengths to a common length (a sweep's members)."""
    width = max(len(r) for r in rows)
    indices = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
      indices[i, :len(r)] = r
    return cls(indices, np.array([len(r) for r in rows], np.int32))

  def localize(self, num_shards: int) -> tuple[np.ndarray, "Partitions"]:
    """Per-shard examples for ``num_shards`` devices holding consecutive equal blocks of
    teachers: ``rows`` [S, U] (indices into the training set; shard s's union of its
    teachers' partitions, padded with its first row) and the partitions re-indexed into
    them. ``x_train[rows[s]][local.indices[i]] == x_train[self.indices[i]]`` for teacher i
    of shard s, so a member draws the same examples."""
    n = len(self.sizes)
    if n % num_shards:
      raise ConfigError(f"{n} teachers do not split into {num_shards} equal shards.")
    per, valid = n // num_shards, np.arange(self.indices.shape[1]) < self.sizes[:, None]
    unions = [np.unique(self.indices[s * per:(s + 1) * per][valid[s * per:(s + 1) * per]])
              for s in range(num_shards)]
    rows = np.stack([np.pad(u, (0, max(map(len, unions)) - len(u)), mode="edge")
                     for u in unions]).astype(np.int32)
    local = np.stack([np.searchsorted(unions[i // per], self.indices[i]) for i in range(n)])
    return rows, Partitions(np.where(valid, local, 0).astype(np.int32), self.sizes)


def init_teachers(model: nn.Module, tx: optax.GradientTransformation, key: jax.Array,
                  num_teachers: int, image_shape: tuple[int, ...], mesh: Mesh
                  ) -> train.TrainState:
  """n independently initialised teachers (member i from ``split(key, n)[i]``), stacked and
  created in place on the teacher mesh (each device initialises its own teachers)."""
  @functools.partial(jax.jit, out_shardings=NamedSharding(mesh, P(placement.AXIS)))
  def init(key):
    keys = jax.random.split(key, num_teachers)
    return jax.vmap(lambda k: train.create_train_state(model, tx, k, image_shape))(keys)
  return init(key)


def refit_heads(head: Any, features: jnp.ndarray, labels: jnp.ndarray, parts: Partitions,
                cfg: train.FitConfig, key: jax.Array) -> Any:
  """n teachers that share a student's backbone: each a copy of its last layer ``head``
  (Dense params) trained on its own partition of (``features`` [N, d], ``labels`` [N]), the
  backbone's features of the training set, by ``cfg``'s Adam on the cross-entropy with
  minibatches drawn like ``member_step``'s. Returns the stacked heads [n, ...]; member i reads
  only the rows ``parts.indices[i, :parts.sizes[i]]``."""
  tx = train.optimizer(cfg)
  n = len(parts.sizes)
  indices, sizes = jnp.asarray(parts.indices), jnp.asarray(parts.sizes)
  features, labels = jnp.asarray(features), jnp.asarray(labels)

  def one(p, opt, idx, size, k):
    rows = idx[jax.random.randint(k, (cfg.batch_size,), 0, size)]
    grads = jax.grad(lambda p: train.cross_entropy(
        features[rows] @ p["kernel"] + p["bias"], labels[rows]))(p)
    updates, opt = tx.update(grads, opt, p)
    return optax.apply_updates(p, updates), opt

  def step(carry, k):
    return jax.vmap(one)(*carry, indices, sizes, jax.random.split(k, n)), None

  @jax.jit
  def fit(key):
    start = jax.vmap(lambda _: (head, tx.init(head)))(jnp.arange(n))
    return jax.lax.scan(step, start, jax.random.split(key, cfg.num_steps))[0][0]

  return fit(key)


@jax.jit
def head_labels(heads: Any, features: jnp.ndarray) -> jnp.ndarray:
  """Each teacher's label [n, Q] from the stacked heads ``heads`` ([n, ...],
  ``refit_heads``) on samples whose backbone features are ``features`` [Q, d]: a
  ``predict_fn`` for ``teacher_predictions`` and ``vote_histograms``."""
  logits = jnp.einsum("qd,ndk->nqk", features, heads["kernel"]) + heads["bias"][:, None]
  return jnp.argmax(logits, -1).astype(jnp.int32)


def member_step(state: train.TrainState, key: jax.Array, x_all: jnp.ndarray,
                y_all: jnp.ndarray, indices: jnp.ndarray, size: jnp.ndarray, batch_size: int,
                robust=None):
  """One teacher's step: a minibatch drawn uniformly (with replacement) from its own
  partition ``indices[:size]`` (rows of ``x_all``, ``y_all``: its device's examples), then
  one optimizer update; ``robust(state, key, xb, yb)``
  replaces the plain update (e.g. ``ldp.robust_update``, LDP Eq. 3)."""
  rows = jax.random.randint(key, (batch_size,), 0, size)
  idx = indices[rows]
  if robust is not None:
    return robust(state, jax.random.fold_in(key, 1), x_all[idx], y_all[idx])
  return train.update(state, x_all[idx], y_all[idx], key=key)


def lift(fn, chunk: int):
  """``fn`` over the leading axis of its tuple argument: vmap within chunks, lax.map
  across them."""
  return lambda xs: jax.lax.map(fn, xs, batch_size=chunk if chunk > 1 else None)


def make_train_step(mesh: Mesh, batch_size: int, chunk: int, robust=None):
  """A jitted ``step(state, key, x_shards, y_shards, indices, sizes) -> (state, metrics
  [n])``; ``x_shards``/``y_shards`` [S, U, ...] and the partitions from
  ``Partitions.localize(S)`` for the mesh's S devices. Member i uses ``split(key, n)[i]``.
  The state is donated. ``robust``: see ``member_step``."""

  def local(state, x_shard, y_shard, indices, sizes, keys):
    def one(args):
      s, idx, size, k = args
      return member_step(s, k, x_shard[0], y_shard[0], idx, size, batch_size, robust)
    return lift(one, chunk)((state, indices, sizes, keys))

  sharded = jax.shard_map(local, mesh=mesh, in_specs=P(placement.AXIS),
                          out_specs=P(placement.AXIS))

  @functools.partial(jax.jit, donate_argnums=0)
  def step(state, key, x_shards, y_shards, indices, sizes):
    keys = jax.random.split(key, indices.shape[0])
    return sharded(state, x_shards, y_shards, indices, sizes, keys)

  return step


def place_examples(mesh: Mesh, parts: Partitions, x_train: np.ndarray, y_train: np.ndarray):
  """The arguments ``make_train_step``'s step takes after the state and key: (x_shards, y_shards,
  indices, sizes) on the mesh, each device holding only its own teachers' examples."""
  rows, local = parts.localize(mesh.size)
  sharding = NamedSharding(mesh, P(placement.AXIS))

  def gathered(source):  # shard s's examples, read only by the process that holds shard s
    shape = rows.shape + source.shape[1:]
    return jax.make_array_from_callback(shape, sharding, lambda index: source[rows[index[0]]])
  return (gathered(x_train), gathered(y_train)) + placement.put((local.indices, local.sizes),
                                                               mesh)


def make_predict_fn(mesh: Mesh, apply_fn, chunk: int):
  """A jitted ``predict(params, x) -> labels [n, Q]``: every teacher's argmax label for
  each query, sharded over the teacher axis like ``params``."""

  def local(params, x):
    return lift(lambda p: jnp.argmax(apply_fn(p, x), -1).astype(jnp.int32), chunk)(params)

  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(placement.AXIS), P()),
                               out_specs=P(placement.AXIS)))


@functools.partial(jax.jit, static_argnums=1)
def histogram(labels: jnp.ndarray, num_classes: int) -> jnp.ndarray:
  """Vote histograms [Q, K] from teacher labels [n, Q]: the sum over the teacher axis
  (across devices when ``labels`` is sharded)."""
  return jax.nn.one_hot(labels, num_classes, dtype=jnp.int32).sum(axis=0)


def in_chunks(fn, queries: np.ndarray, query_chunk: int, axis: int) -> np.ndarray:
  """``fn`` over ``queries`` ``query_chunk`` at a time (the last chunk padded, so ``fn``
  traces once), results concatenated along ``axis``."""
  q = len(queries)
  query_chunk = max(1, min(query_chunk, q))
  pad = -q % query_chunk
  if pad:
    queries = np.concatenate([queries, np.zeros((pad,) + queries.shape[1:], queries.dtype)])
  out = [placement.to_host(fn(queries[i:i + query_chunk]))
         for i in range(0, len(queries), query_chunk)]
  return np.take(np.concatenate(out, axis=axis), np.arange(q), axis=axis)


def teacher_predictions(predict_fn, params: Any, queries: np.ndarray,
                        query_chunk: int = QUERY_CHUNK) -> np.ndarray:
  """Every teacher's label for every query, [n, Q] (memory: n x ``query_chunk``)."""
  return in_chunks(lambda x: predict_fn(params, x), queries, query_chunk, axis=1)


def vote_histograms(predict_fn, params: Any, queries: np.ndarray, num_classes: int,
                    query_chunk: int = QUERY_CHUNK) -> np.ndarray:
  """Vote histograms [Q, K] int32 for any number of queries, ``query_chunk`` at a time,
  so device memory stays bounded."""
  return in_chunks(lambda x: histogram(predict_fn(params, x), num_classes), queries,
                    query_chunk, axis=0)
