"""VAE triples for the DGD student (DGD Eq. 4; tangent-normal adversarial regularisation,
TNAR, Yu et al. 2019): for an unlabelled synthetic x, the reconstruction x_hat and its
perturbations along the data manifold (x_par, tangent) and off it (x_perp, normal).

* z: a sample of the VAE posterior q(z|x); optionally normalised to ||z||_inf <= 1 and
  perturbed with Laplace noise of scale 2c/eps1 (DGD's eps1 term: L1 sensitivity 2c over
  c coordinates in [-1, 1]).
* x_hat = dec(z).
* tangent: x_par = dec(z + eps_t v) for a unit latent direction v, so for a small step
  x_par - x_hat ~ eps_t J v with J the decoder Jacobian: it lies in the span of J's
  columns (TNAR's tangent space). v is random, or adversarial: one power iteration of the
  student's KL along decoded directions (TNAR uses conjugate-gradient steps on J^T H J;
  this is the simpler power step, stated as such).
* normal: a unit input-space direction d (random, or VAT's adversarial power iteration)
  with its component along the tangent direction J v removed, x_perp = x_hat + eps_n d_perp.

Jacobian products are ``jax.jvp`` / ``jax.vjp``; nothing materialises J.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def _unit(v: jnp.ndarray) -> jnp.ndarray:
  """Each example (leading axis) scaled to unit L2 norm."""
  axes = tuple(range(1, v.ndim))
  return v / (jnp.sqrt(jnp.sum(v * v, axis=axes, keepdims=True)) + 1e-12)


def _dot(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
  return jnp.sum(a * b, axis=tuple(range(1, a.ndim)), keepdims=True)


def latent_noise(key: jax.Array, z: jnp.ndarray, eps1: float) -> jnp.ndarray:
  """DGD's eps1 term: z normalised to ||z||_inf <= 1, plus Laplace(2c / eps1) per coordinate
  (c = latent size; the L1 distance of two such codes is at most 2c)."""
  c = z.shape[-1]
  z = z / jnp.maximum(1.0, jnp.max(jnp.abs(z), axis=-1, keepdims=True))
  return z + (2.0 * c / eps1) * jax.random.laplace(key, z.shape)


def tangent_direction(decode: Callable, z: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
  """J v: the decoded direction of latent direction v at z (a jvp)."""
  return jax.jvp(decode, (z,), (v,))[1]


def adversarial_latent_direction(decode: Callable, divergence: Callable, z: jnp.ndarray,
                                 key: jax.Array, xi: float = 1e-1) -> jnp.ndarray:
  """One power step for the latent direction whose decoded change most moves the student:
  v = unit(grad_v divergence(dec(z), dec(z + xi v0))) from a random v0."""
  v0 = _unit(jax.random.normal(key, z.shape))
  x_hat = jax.lax.stop_gradient(decode(z))
  grad = jax.grad(lambda v: divergence(x_hat, decode(z + xi * v)))(v0)
  return _unit(jax.lax.stop_gradient(grad))


def adversarial_input_direction(divergence: Callable, x_hat: jnp.ndarray, key: jax.Array,
                                xi: float = 1.0) -> jnp.ndarray:
  """VAT's power step in input space: d = unit(grad_d divergence(x_hat, x_hat + xi d0))."""
  d0 = _unit(jax.random.normal(key, x_hat.shape))
  grad = jax.grad(lambda d: divergence(x_hat, x_hat + xi * d))(d0)
  return _unit(jax.lax.stop_gradient(grad))


def remove_component(d: jnp.ndarray, t: jnp.ndarray) -> jnp.ndarray:
  """d minus its projection on t, per example (the normal part of d w.r.t. tangent t)."""
  t = _unit(t)
  return d - _dot(d, t) * t


def triples(decode: Callable, z: jnp.ndarray, key: jax.Array, eps_t: float, eps_n: float,
            divergence: Callable | None = None) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """(x_hat, x_par, x_perp) for latent codes z (DGD Eq. 4). With ``divergence(x, x')`` (the
  student's KL between its predictions) the directions are adversarial, else random."""
  latent_key, input_key = jax.random.split(key)
  if divergence is None:
    v = _unit(jax.random.normal(latent_key, z.shape))
  else:
    v = adversarial_latent_direction(decode, divergence, z, latent_key)
  x_hat = decode(z)
  x_par = decode(z + eps_t * v)  # tangent: along the decoder's manifold
  t = tangent_direction(decode, z, v)
  if divergence is None:
    d = _unit(jax.random.normal(input_key, x_hat.shape))
  else:
    d = adversarial_input_direction(divergence, x_hat, input_key)
  x_perp = x_hat + eps_n * _unit(remove_component(d, t))  # normal: orthogonal to J v
  return x_hat, x_par, x_perp
