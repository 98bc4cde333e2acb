"""Client-private queries (Sun et al., "Not Just Cloud Privacy"): the client's transformer
(Algorithm 1: random masking, infinity-norm bounding, local Laplace noise) and the teacher's
robust training (Algorithm 2 and Eq. 3: LDP-perturbed copies plus a worst-case L2
perturbation found by projected gradient ascent). Pure and jittable; the local epsilon is
``privacy.ldp_local_epsilon``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dgd_jax.privacy import noise

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


def transform(key: jax.Array, x: jnp.ndarray, sigma: float, mu: float,
              b: float = DEFAULT_BOUND) -> jnp.ndarray:
  """Algorithm 1 on a batch (leading axis): mask, bound, add Lap(B / sigma) per feature;
  one key per sample."""

  def one(k, xi):
    k_mask, k_noise = jax.random.split(k)
    xi = linf_bound(mask(k_mask, xi, mu), b)
    return xi + (b / sigma) * noise.laplace(k_noise, xi.shape)  # line 3 (the client's key)

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

  sigma: float  # Laplace scale B / sigma (Algorithm 1 line 3)
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
