"""Few-label learning over an unlabelled pool, in a data-independent feature space.

With a few dozen to a few hundred released labels over a pool of thousands, which samples are
asked about and how their labels reach the rest matter more than the student's loss. Both
functions here work in the ScatterNet feature space (``models.scattering``: a fixed transform
of each image, so it carries nothing of the private data or of any trained model) and read only
the pool and the released labels, so they are post-processing of the release:

* ``representative``: the queries (PATE App. C's choice of what to ask, from public information
  only): k-means on the pool's features, the sample nearest each centre (class coverage and no
  near-duplicates), as in TypiClust's cold start (Hacohen et al. 2022).
* ``propagate``: label propagation (Zhou et al. 2004, "Learning with local and global
  consistency"): on the symmetric k-nearest-neighbour graph W of the pool,
  F <- alpha S F + (1 - alpha) Y with S = D^-1/2 W D^-1/2 and Y the released labels one-hot
  (zero rows for the rest), iterated; each row of F, normalised, is that sample's label
  distribution.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import sparse

from dgd_jax.models import scattering


def features(images: np.ndarray, dims: int = 50, scales: int = 2, orientations: int = 8
             ) -> np.ndarray:
  """Per-image ScatterNet coefficients, whitened onto the pool's ``dims`` leading principal
  components and scaled to unit L2 norm, so that the dot product is a cosine similarity. The
  principal components are the pool's own statistics (the pool is what the queries are about;
  nothing private or trained enters). Whitening weighs the leading components alike, so the
  few largest ones do not dominate the distances, and the k-NN graph ``propagate`` spreads
  labels on follows the classes more closely than on the raw coefficients."""
  f = np.asarray(scattering.features(images, scales, orientations), np.float32)
  f = f.reshape(len(f), -1)
  f = f - f.mean(0)
  if len(f) <= f.shape[1]:  # few samples: the thin SVD of f itself
    z = np.linalg.svd(f.astype(np.float64), full_matrices=False)[0][:, :dims]
  else:  # many: the eigenvectors of the D x D scatter matrix
    z = f @ principal_axes(f, dims)
  return (z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def principal_axes(f: np.ndarray, dims: int) -> np.ndarray:
  """[D, dims] projection (f's dtype) of centred rows f [N, D], N > D: its columns are the
  ``dims`` leading eigenvectors of f^T f, each divided by the square root of its eigenvalue, so
  that f @ W has orthonormal columns (the whitened principal components); it applies to other
  rows centred by f's mean too."""
  values, vectors = np.linalg.eigh((f.T @ f).astype(np.float64))  # ascending order
  top = slice(len(values) - 1, max(len(values) - 1 - dims, -1), -1)
  return (vectors[:, top] / np.sqrt(np.maximum(values[top], 1e-12))).astype(f.dtype)


def _kmeans_plus_plus(f: np.ndarray, k: int, key: jax.Array) -> np.ndarray:
  """k-means++ seeding (Arthur & Vassilvitskii 2007): each next centre drawn with probability
  proportional to its squared distance from the nearest centre so far."""
  rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
  chosen = [int(rng.integers(len(f)))]
  nearest = np.maximum(2.0 - 2.0 * f @ f[chosen[0]], 0.0)  # unit rows: |a - b|^2
  for _ in range(k - 1):
    chosen.append(int(rng.choice(len(f), p=nearest / nearest.sum())) if nearest.sum() > 0
                  else int(rng.integers(len(f))))
    nearest = np.minimum(nearest, np.maximum(2.0 - 2.0 * f @ f[chosen[-1]], 0.0))
  return f[chosen]


@functools.partial(jax.jit, static_argnames=("k", "iterations"))
def _lloyd(f: jnp.ndarray, centres: jnp.ndarray, k: int, iterations: int):

  def step(centres, _):
    owner = jnp.argmax(f @ centres.T, axis=1)  # cosine k-means (unit rows)
    one_hot = jax.nn.one_hot(owner, k, dtype=f.dtype)
    sums = one_hot.T @ f
    counts = one_hot.sum(0)[:, None]
    moved = jnp.where(counts > 0, sums / jnp.maximum(counts, 1), centres)
    return moved / jnp.maximum(jnp.linalg.norm(moved, axis=1, keepdims=True), 1e-12), None

  centres, _ = jax.lax.scan(step, centres, None, length=iterations)
  return centres


def representative(f: np.ndarray, k: int, key: jax.Array, iterations: int = 30) -> np.ndarray:
  """Indices of ``k`` distinct pool samples: the one nearest each of k cosine k-means centres
  (k-means++ seeding, then Lloyd's iterations) of the unit-norm features ``f`` (a centre whose
  nearest sample is taken already gives its next nearest)."""
  centres = np.asarray(_lloyd(jnp.asarray(f), jnp.asarray(_kmeans_plus_plus(f, k, key)), k,
                             iterations))
  order = np.argsort(-(centres @ f.T), axis=1)
  chosen: list[int] = []
  taken = set()
  for row in order:
    pick = next(int(i) for i in row if int(i) not in taken)
    taken.add(pick)
    chosen.append(pick)
  return np.sort(np.array(chosen, np.int64))


def knn_graph(f: np.ndarray, neighbours: int, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
  """(indices [N, k], cosine similarities [N, k]) of each row's k nearest other rows."""
  fj = jnp.asarray(f)

  @jax.jit
  def top(block):
    sims = block @ fj.T
    return jax.lax.top_k(sims, neighbours + 1)

  idx, sim = [], []
  for start in range(0, len(f), chunk):
    s, i = top(fj[start:start + chunk])
    idx.append(np.asarray(i)[:, 1:])  # the first is the row itself
    sim.append(np.asarray(s)[:, 1:])
  return np.concatenate(idx), np.concatenate(sim)


def propagate(f: np.ndarray, labelled: np.ndarray, labels: np.ndarray, num_classes: int,
              neighbours: int = 10, alpha: float = 0.99, iterations: int = 30
              ) -> tuple[np.ndarray, np.ndarray]:
  """(label distributions [N, K], reached [N]) for every pool row (module docstring): labels
  (class indices [L], or distributions [L, K]) of the rows ``labelled`` spread over the
  symmetric k-NN graph of ``f`` (weights: cosine similarity, clipped at 0), each class's
  column then divided by its total (class mass normalisation, Zhu et al. 2003: a class with
  many labels does not flood the graph) and each row normalised. A row no label reached
  within ``iterations`` hops (``reached`` False) has the uniform distribution."""
  n = len(f)
  idx, sim = knn_graph(f, neighbours)
  w = sparse.csr_matrix((np.maximum(sim.ravel(), 0.0), (np.repeat(np.arange(n), neighbours),
                                                        idx.ravel())), shape=(n, n))
  w = w.maximum(w.T)  # symmetric
  inv = 1.0 / np.sqrt(np.maximum(np.asarray(w.sum(1)).ravel(), 1e-12))
  s = sparse.diags(inv) @ w @ sparse.diags(inv)  # D^-1/2 W D^-1/2
  y = np.zeros((n, num_classes))
  if np.ndim(labels) == 2:
    y[labelled] = labels
  else:
    y[labelled, labels] = 1.0
  out = y
  for _ in range(iterations):
    out = alpha * (s @ out) + (1.0 - alpha) * y  # Zhou et al. 2004, Eq. (1)
  out = out / np.maximum(out.sum(0, keepdims=True), 1e-300)  # class mass normalisation
  total = out.sum(1, keepdims=True)
  uniform = np.full(num_classes, 1.0 / num_classes)
  return np.where(total > 0, out / np.maximum(total, 1e-300), uniform), total[:, 0] > 0
