"""VAE triples: the tangent perturbation lies in the decoder Jacobian's span, the normal one
is orthogonal to the tangent direction, the eps1 latent noise has the stated scale."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.models.vae import VAE
from dgd_jax.training import triples

C = 4
VAE_MODEL = VAE(latent_dim=C, features=4)
PARAMS = VAE_MODEL.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)), jax.random.key(1))["params"]


def decode(z):
  return VAE_MODEL.apply({"params": PARAMS}, z, method=VAE.decode)


def student_kl(x, x_perturbed):
  """A fixed random linear 'student': KL between its softmax outputs."""
  w = jax.random.normal(jax.random.key(7), (28 * 28, 10)) * 0.1
  logits = lambda a: a.reshape(a.shape[0], -1) @ w
  p = jax.nn.log_softmax(logits(x))
  q = jax.nn.log_softmax(logits(x_perturbed))
  return jnp.sum(jnp.exp(p) * (p - q))


def jacobian_columns(z_i):
  """J of the decoder at one code, as [D, C]."""
  jac = jax.jacfwd(lambda z: decode(z[None])[0])(z_i)  # [28, 28, 1, C]
  return np.asarray(jac).reshape(-1, C)


def in_span_residual(vec, columns):
  coef, *_ = np.linalg.lstsq(columns, vec, rcond=None)
  return np.linalg.norm(vec - columns @ coef) / np.linalg.norm(vec)


@pytest.mark.integration
def test_tangent_in_jacobian_span_and_normal_orthogonal():
  with jax.enable_x64(True):  # a small finite step needs float64 to be first order
    z = jax.random.normal(jax.random.key(2), (3, C), jnp.float64)
    for divergence in (None, student_kl):
      check_triples(z, *triples.triples(decode, z, jax.random.key(3), eps_t=1e-4, eps_n=0.5,
                                        divergence=divergence))


def check_triples(z, x_hat, x_par, x_perp):
  """Tangent step in the span of J at z; normal step orthogonal to it, of length eps_n."""
  for i in range(3):
    cols = jacobian_columns(z[i])
    step = np.asarray(x_par[i] - x_hat[i]).reshape(-1)
    assert in_span_residual(step, cols) < 1e-3  # small step: first order in J v
    # The normal step is orthogonal to the tangent step it was made orthogonal to.
    normal = np.asarray(x_perp[i] - x_hat[i]).reshape(-1)
    np.testing.assert_allclose(np.linalg.norm(normal), 0.5, rtol=1e-4)
    assert abs(normal @ step) / (np.linalg.norm(normal) * np.linalg.norm(step)) < 1e-3
    # ...and, unlike a random direction, not confined to the tangent space.
    assert in_span_residual(normal, cols) > 0.5


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_adversarial_directions_increase_the_divergence_more_than_random():
  z = jax.random.normal(jax.random.key(4), (8, C))
  x_hat = decode(z)
  adv = triples.adversarial_input_direction(student_kl, x_hat, jax.random.key(5))
  rnd = triples._unit(jax.random.normal(jax.random.key(6), x_hat.shape))
  assert student_kl(x_hat, x_hat + 0.5 * adv) > 5 * student_kl(x_hat, x_hat + 0.5 * rnd)


def test_latent_noise_normalises_and_has_scale_2c_over_eps1():
  z = 3.0 * jax.random.normal(jax.random.key(8), (20000, C))
  clean = triples.latent_noise(jax.random.key(9), z, eps1=1e9)
  assert float(jnp.max(jnp.abs(clean))) <= 1.0 + 1e-6
  noisy = triples.latent_noise(jax.random.key(9), z, eps1=0.01)
  # Laplace(b): E|noise| = b = 2c / eps1 = 800 for c = 4.
  np.testing.assert_allclose(float(jnp.mean(jnp.abs(noisy - clean))), 2 * C / 0.01, rtol=0.03)
