"""Keyed, jittable image augmentations for NHWC batches in [-1, 1].

Used where only augmentation-stable features should count: the student's consistency
regularisation on the unlabelled pool (FixMatch, Sohn et al. 2020: a weak view makes the
pseudo-label, a strong view is trained on it) and the generator's synthesis loss (DeepInversion's
random jitter/flip, Yin et al. 2020). Each example gets its own draw.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def translate(key: jax.Array, x: jnp.ndarray, max_shift: int) -> jnp.ndarray:
  """Each image shifted by an integer offset in [-max_shift, max_shift]^2, edges
  replicated (the background of centred images)."""
  if max_shift <= 0:
    return x
  n, h, w, _ = x.shape
  padded = jnp.pad(x, ((0, 0), (max_shift, max_shift), (max_shift, max_shift), (0, 0)),
                   mode="edge")
  offsets = jax.random.randint(key, (n, 2), 0, 2 * max_shift + 1)
  # Rows, then columns: each image picks one of 2 max_shift + 1 static slices per axis: the
  # same crop as a per-image dynamic_slice, without its gather and scatter-add gradient.
  pick = lambda axis: lambda k: (offsets[:, axis] == k)[:, None, None, None]
  rows = sum(jnp.where(pick(0)(k), padded[:, k:k + h], 0.0) for k in range(2 * max_shift + 1))
  return sum(jnp.where(pick(1)(k), rows[:, :, k:k + w], 0.0) for k in range(2 * max_shift + 1))


def flip(key: jax.Array, x: jnp.ndarray) -> jnp.ndarray:
  """Each image mirrored left-right with probability 1/2."""
  mirror = jax.random.bernoulli(key, 0.5, (x.shape[0], 1, 1, 1))
  return jnp.where(mirror, x[:, :, ::-1, :], x)


def cutout(key: jax.Array, x: jnp.ndarray, size: int, fill: float = 0.0) -> jnp.ndarray:
  """Each image with one ``size`` x ``size`` square (centre uniform over the image,
  clipped at the border) set to ``fill`` (DeVries & Taylor 2017)."""
  if size <= 0:
    return x
  n, h, w, _ = x.shape
  cy, cx = (jax.random.randint(k, (n, 1, 1, 1), 0, d)
            for k, d in zip(jax.random.split(key), (h, w)))
  rows = jnp.arange(h)[None, :, None, None]
  cols = jnp.arange(w)[None, None, :, None]
  inside = (jnp.abs(rows - cy) <= (size - 1) // 2) & (jnp.abs(cols - cx) <= (size - 1) // 2)
  return jnp.where(inside, fill, x)


def weak(key: jax.Array, x: jnp.ndarray, max_shift: int = 2, mirror: bool = True
         ) -> jnp.ndarray:
  """FixMatch's weak view: a small shift and (optionally) a mirror."""
  k_shift, k_flip = jax.random.split(key)
  x = translate(k_shift, x, max_shift)
  return flip(k_flip, x) if mirror else x


def strong(key: jax.Array, x: jnp.ndarray, max_shift: int = 4, mirror: bool = True,
           cutout_size: int = 12) -> jnp.ndarray:
  """FixMatch's strong view for greyscale images: a larger shift, mirror and cutout."""
  k_weak, k_cut = jax.random.split(key)
  return cutout(k_cut, weak(k_weak, x, max_shift, mirror), cutout_size)


def mixup(key: jax.Array, x: jnp.ndarray, targets: jnp.ndarray, alpha: float
          ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """mixup (Zhang et al. 2018): each example mixed with a random partner j of the batch,
  x~ = lam x_i + (1 - lam) x_j and t~ = lam t_i + (1 - lam) t_j with lam ~ Beta(alpha, alpha)
  per example; ``targets`` are one-hot (or soft) label vectors [B, K]."""
  k_lam, k_perm = jax.random.split(key)
  lam = jax.random.beta(k_lam, alpha, alpha, (x.shape[0],))
  partner = jax.random.permutation(k_perm, x.shape[0])
  def mix(a):
    weight = lam.reshape((-1,) + (1,) * (a.ndim - 1))  # broadcast over a's other axes
    return weight * a + (1 - weight) * a[partner]

  return mix(x), mix(targets)
