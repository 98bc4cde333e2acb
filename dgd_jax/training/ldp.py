"""Client-private queries (Sun et al., "Not Just Cloud Privacy"): the client's transformer
(Algorithm 1: random masking, infinity-norm bounding, local Laplace noise) and the teacher's
robust training (Algorithm 2 and Eq. 3: LDP-perturbed copies plus a worst-case L2
perturbation found by projected gradient ascent). Pure and jittable.

The local noise is Algorithm 1's Laplace on a public integer grid, sampled exactly
(``privacy.local``'s docstring derives its epsilon): each bounded feature is rounded to
j g, g = B / K, j in [-K, K]; an integer k is drawn from the discrete Laplace of scale
t = K / sigma by ``noise.from_counts`` (64 uniform bits through an integer CDF table); the
client sends clip(j + k, -R, R) g. A float draw would leak the input through which float32
outputs are possible (Mironov 2012); the integer output's pmf is the table's, and
``privacy.ldp_local_epsilon`` is the epsilon that table realises.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dgd_jax.privacy import discrete, local, noise

# The paper's (sigma, mu) settings (LDP Table 1, Fig. 2).
PRESETS = {"ldp1": (1.0, 0.01), "ldp5": (5.0, 0.10)}
# B is data-independent: dgd_jax's images lie in [-1, 1], so B = 1 bounds every input
# (the paper's median-of-norms rule would read the private data).
DEFAULT_BOUND = 1.0


def mask(key: jax.Array, x: jnp.ndarray, mu: float) -> jnp.ndarray:
  """x with exactly ceil(N mu) of its N entries zeroed, placed uniformly (Algorithm 1 line 1)."""
  n = x.size
  zeros = math.ceil(round(n * mu, 9))
  ranks = jnp.argsort(jnp.argsort(jax.random.uniform(key, (n,))))
  return x * (ranks >= zeros).reshape(x.shape).astype(x.dtype)


def linf_bound(x: jnp.ndarray, b: float) -> jnp.ndarray:
  """x / max(1, ||x||_inf / B) (Algorithm 1 line 2)."""
  return x / jnp.maximum(1.0, jnp.max(jnp.abs(x)) / b)


def on_grid(x: jnp.ndarray, b: float) -> jnp.ndarray:
  """The grid point j of each feature of a bounded x: round(x K / B), int32 in [-K, K]."""
  k = local.LDP_GRID
  return jnp.clip(jnp.round(x * (k / b)), -k, k).astype(jnp.int32)


def grid_noise(key: jax.Array, shape, sigma: float) -> jax.Array:
  """Integer discrete Laplace(K / sigma) noise, exactly ``local.ldp_noise_counts(sigma)``'s pmf
  on -(R + K)..R + K (``noise.from_counts``). int32."""
  counts = local.ldp_noise_counts(sigma)
  support = (len(counts) - 1) // 2  # index i is k = i - support
  return noise.from_counts(key, discrete.cdf_words(counts), shape) - support


def transform(key: jax.Array, x: jnp.ndarray, sigma: float, mu: float,
              b: float = DEFAULT_BOUND) -> jnp.ndarray:
  """Algorithm 1 on a batch (leading axis): mask, bound, round to the grid, add discrete
  Laplace(K / sigma) grid units per feature, clip to [-R, R], send y B / K; one key per
  sample. sigma is static (it picks the noise table)."""
  r = local.ldp_output_range(sigma)

  def one(k, xi):
    k_mask, k_noise = jax.random.split(k)
    j = on_grid(linf_bound(mask(k_mask, xi, mu), b), b)
    y = jnp.clip(j + grid_noise(k_noise, xi.shape, sigma), -r, r)  # line 3 (the client's key)
    return (y * (b / local.LDP_GRID)).astype(x.dtype)

  return jax.vmap(one)(jax.random.split(key, x.shape[0]), x)


def worst_perturbation(loss_fn, x: jnp.ndarray, eta: float, steps: int) -> jnp.ndarray:
  """r with ||r_i||_2 <= eta per sample that (approximately) maximises ``loss_fn(x + r)``:
  projected gradient ascent from 0, step 2.5 eta / steps (Eq. 3's inner max)."""
  axes = tuple(range(1, x.ndim))

  def project(r):
    norms = jnp.sqrt(jnp.sum(r * r, axis=axes, keepdims=True))
    return r * jnp.minimum(1.0, eta / (norms + 1e-12))

  r = jnp.zeros_like(x)
  for _ in range(steps):  # unrolled: a conv inside lax.scan runs far slower on CPU
    g = jax.grad(lambda r: loss_fn(x + r))(r)
    g = g / (jnp.sqrt(jnp.sum(g * g, axis=axes, keepdims=True)) + 1e-12)
    r = project(r + 2.5 * eta / steps * g)
  return jax.lax.stop_gradient(r)


@dataclasses.dataclass(frozen=True)
class RobustSettings:
  """The client transform (Algorithm 1) and the robust teacher's Eq. 3."""

  sigma: float  # noise scale B / sigma (Algorithm 1 line 3; discrete, on the grid B / 255)
  mu: float  # masking rate
  bound: float  # B
  lam: float  # Eq. 3's share of perturbed samples
  eta: float  # ||r||_2 <= eta
  pgd_steps: int
  batch_size: int


def robust_step(state: Any, key: jax.Array, x: jnp.ndarray, y: jnp.ndarray,
                cfg: RobustSettings) -> tuple[Any, dict]:
  """One robust-teacher step on a minibatch drawn uniformly from (x, y)."""
  batch_key, update_key = jax.random.split(key)
  idx = jax.random.randint(batch_key, (cfg.batch_size,), 0, x.shape[0])
  return robust_update(state, update_key, x[idx], y[idx], cfg)


def robust_update(state: Any, key: jax.Array, xb: jnp.ndarray, yb: jnp.ndarray,
                  cfg: RobustSettings) -> tuple[Any, dict]:
  """One robust-teacher update (Algorithm 2, Eq. 3): (1 - lambda) CE on clean samples plus
  lambda CE on their client-transformed copies moved by the worst r, ||r||_2 <= eta."""
  x_tilde = transform(key, xb, cfg.sigma, cfg.mu, cfg.bound)  # Algorithm 2 line 2
  ce = lambda params, inputs: optax.softmax_cross_entropy_with_integer_labels(
      state.apply_fn(params, inputs), yb).mean()
  r = worst_perturbation(lambda inputs: ce(state.params, inputs), x_tilde, cfg.eta,
                         cfg.pgd_steps)

  def loss_fn(params):
    return (1 - cfg.lam) * ce(params, xb) + cfg.lam * ce(params, x_tilde + r)  # Eq. 3

  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  return state.apply_gradients(grads=grads), {"loss": loss}
