"""Tests for the DAFL generator and the convolutional VAE (tiny, CPU-friendly)."""

from __future__ import annotations

import functools

import numpy as np
import jax
import jax.numpy as jnp
import optax
import pytest

from dgd_jax.models.generator import Generator
from dgd_jax.models.vae import VAE, elbo_terms, gaussian_kl

IMAGE_SHAPES = [(28, 28, 1), (32, 32, 3)]


# Test inputs come from NumPy: every distinct jax.random call compiles a small
# XLA program, which is slow on a 2-core CPU.
def _normal(seed: int, shape: tuple[int, ...]) -> jnp.ndarray:
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _uniform_images(seed: int, shape: tuple[int, ...]) -> jnp.ndarray:
  return jnp.asarray(np.random.default_rng(seed).uniform(-1.0, 1.0, shape), jnp.float32)


def _count(tree) -> int:
  return int(sum(np.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(tree)))


# Models are initialised once per shape and run through jitted functions: on a 2-core
# CPU, compiling whole programs is much cheaper than compiling every op eagerly.
@functools.lru_cache(maxsize=None)
def _init_generator(image_shape):
  model = Generator(image_shape=image_shape)  # latent_dim = 100
  z = jnp.zeros((1, 100))
  variables = jax.jit(model.init, static_argnames="train")(jax.random.PRNGKey(1), z, train=False)
  return model, variables


@functools.lru_cache(maxsize=None)
def _generator_apply(image_shape):
  model, _ = _init_generator(image_shape)
  return jax.jit(model.apply, static_argnames=("train", "mutable"))


@functools.lru_cache(maxsize=None)
def _init_vae(image_shape, batch: int = 4):
  model = VAE(image_shape=image_shape)
  x = _uniform_images(2, (batch, *image_shape))
  variables = jax.jit(model.init)(jax.random.PRNGKey(3), x, jax.random.PRNGKey(4))
  return model, variables, x


@functools.lru_cache(maxsize=None)
def _vae_apply(image_shape):
  model, _, _ = _init_vae(image_shape)
  return jax.jit(model.apply, static_argnames="method")


_elbo_terms = jax.jit(elbo_terms, static_argnums=0)


# ----------------------------------------------------------------------------- generator


@pytest.mark.parametrize("image_shape", IMAGE_SHAPES)
def test_generator_output_shapes(image_shape):
  model, variables = _init_generator(image_shape)
  z = _normal(0, (4, 100))
  out_eval = _generator_apply(image_shape)(variables, z, train=False)
  assert out_eval.shape == (4, *image_shape)
  assert bool(jnp.all(jnp.isfinite(out_eval)))


@pytest.mark.parametrize("image_shape", IMAGE_SHAPES)
def test_generator_train_output_is_standardised_per_channel(image_shape):
  model, variables = _init_generator(image_shape)
  z = _normal(0, (16, 100))
  out, updates = _generator_apply(image_shape)(variables, z, train=True, mutable=("batch_stats",))
  assert out.shape == (16, *image_shape)
  assert set(updates) == {"batch_stats"}
  mean = np.asarray(out).mean(axis=(0, 1, 2))
  std = np.asarray(out).std(axis=(0, 1, 2))
  assert mean.shape == (image_shape[2],)
  np.testing.assert_array_less(np.abs(mean), 1e-3)
  np.testing.assert_array_less(np.abs(std - 1.0), 0.05)


def test_generator_rejects_shape_not_divisible_by_4():
  model = Generator(image_shape=(30, 30, 1))
  z = jnp.zeros((2, 100))
  with pytest.raises(ValueError, match="divisible by 4"):
    model.init(jax.random.PRNGKey(0), z, train=False)


def test_generator_parameter_count():
  latent_dim, features = 100, 128
  h, w, c = 28, 28, 1
  _, variables = _init_generator((h, w, c))
  params = variables["params"]
  # First Dense: latent_dim -> features * (H//4) * (W//4), plus bias.
  dense_out = features * (h // 4) * (w // 4)
  assert _count(params["Dense_0"]) == latent_dim * dense_out + dense_out
  # Full hand count: Dense, 3 Convs, 3 affine BatchNorms (the last BN has no params).
  expected = (
      latent_dim * dense_out + dense_out
      + 2 * features  # BN0
      + 9 * features * features + features + 2 * features  # Conv1 + BN1
      + 9 * features * (features // 2) + features // 2 + 2 * (features // 2)  # Conv2 + BN2
      + 9 * (features // 2) * c + c  # Conv3
  )
  total = _count(params)
  print(f"Generator(28x28x1, latent 100) params: {total}")
  assert total > 0
  assert total == expected
  assert "BatchNorm_3" not in params  # affine-free final BatchNorm
  assert _count(variables["batch_stats"]["BatchNorm_3"]) == 2 * c


# ----------------------------------------------------------------------------- VAE


# Shapes are checked abstractly (jax.eval_shape traces init/apply without running
# them, which keeps this file fast on CPU); (30, 30, 1) exercises the decoder crop.
@pytest.mark.parametrize("image_shape", IMAGE_SHAPES + [(30, 30, 1)])
def test_vae_shapes(image_shape):
  model = VAE(image_shape=image_shape)
  x = jax.ShapeDtypeStruct((4, *image_shape), jnp.float32)
  key = jax.random.PRNGKey(0)
  variables = jax.eval_shape(model.init, key, x, key)
  x_hat, mean, logvar = jax.eval_shape(model.apply, variables, x, key)
  assert x_hat.shape == (4, *image_shape)
  assert mean.shape == logvar.shape == (4, 32)
  z = jax.ShapeDtypeStruct((4, 32), jnp.float32)
  decoded = jax.eval_shape(lambda v, z: model.apply(v, z, method=VAE.decode), variables, z)
  assert decoded.shape == (4, *image_shape)


@pytest.mark.integration
def test_vae_encode_and_decode_range():
  _, variables, x = _init_vae((28, 28, 1))
  apply = _vae_apply((28, 28, 1))
  x_hat, mean, logvar = apply(variables, x, jax.random.PRNGKey(5))
  assert x_hat.shape == (4, 28, 28, 1)
  enc_mean, enc_logvar = apply(variables, x, method=VAE.encode)
  np.testing.assert_allclose(enc_mean, mean)
  np.testing.assert_allclose(enc_logvar, logvar)
  # Large latents push the tanh to saturation; output must stay in [-1, 1].
  z = 100.0 * _normal(6, (4, 32))
  decoded = apply(variables, z, method=VAE.decode)
  assert decoded.shape == (4, 28, 28, 1)
  assert float(decoded.min()) >= -1.0 and float(decoded.max()) <= 1.0
  assert float(jnp.max(jnp.abs(decoded))) > 0.99  # saturates rather than being rescaled


@pytest.mark.integration
def test_vae_sampling_depends_only_on_key():
  _, variables, x = _init_vae((28, 28, 1))
  apply = _vae_apply((28, 28, 1))
  a, _, _ = apply(variables, x, jax.random.PRNGKey(7))
  b, _, _ = apply(variables, x, jax.random.PRNGKey(7))
  c, _, _ = apply(variables, x, jax.random.PRNGKey(8))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert float(jnp.max(jnp.abs(a - c))) > 1e-6


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_kl_is_exactly_zero_for_standard_normal_posterior():
  zeros = jnp.zeros((3, 32))
  np.testing.assert_array_equal(np.asarray(gaussian_kl(zeros, zeros)), np.zeros(3))
  # Hand-built case: zeroing the encoder head gives mean = logvar = 0 for every input.
  model, variables, x = _init_vae((28, 28, 1))
  params = jax.tree_util.tree_map(lambda p: p, variables["params"])
  params["enc_out"] = jax.tree_util.tree_map(jnp.zeros_like, params["enc_out"])
  terms = _elbo_terms(model, params, x, jax.random.PRNGKey(9))
  assert float(terms["kl"]) == 0.0
  assert float(terms["loss"]) == float(terms["reconstruction"])


def test_elbo_terms_match_numpy():
  model, variables, x = _init_vae((28, 28, 1))
  key = jax.random.PRNGKey(10)
  terms = _elbo_terms(model, variables["params"], x, key)
  outputs = _vae_apply((28, 28, 1))(variables, x, key)
  x_hat, mean, logvar = (np.asarray(t, np.float64) for t in outputs)
  x_np = np.asarray(x, np.float64)
  rec = np.mean(np.sum((x_hat - x_np) ** 2, axis=(1, 2, 3)))
  kl = np.mean(-0.5 * np.sum(1.0 + logvar - mean**2 - np.exp(logvar), axis=1))
  np.testing.assert_allclose(float(terms["reconstruction"]), rec, rtol=1e-5)
  np.testing.assert_allclose(float(terms["kl"]), kl, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(float(terms["loss"]), rec + kl, rtol=1e-5)
  assert float(terms["kl"]) >= 0.0


def test_vae_parameter_count():
  _, variables, _ = _init_vae((28, 28, 1))
  total = _count(variables["params"])
  print(f"VAE(28x28x1, c=32) params: {total}")
  f, c_lat, flat = 32, 32, 7 * 7 * 64
  expected = (
      16 * 1 * f + f  # enc conv1
      + 16 * f * 2 * f + 2 * f  # enc conv2
      + flat * 256 + 256 + 256 * 2 * c_lat + 2 * c_lat  # enc dense layers
      + c_lat * 256 + 256 + 256 * flat + flat  # dec dense layers
      + 16 * 2 * f * f + f  # deconv1
      + 16 * f * 1 + 1  # deconv2
  )
  assert total > 0
  assert total == expected


@pytest.mark.integration
def test_vae_overfits_tiny_batch():
  model, variables, _ = _init_vae((28, 28, 1))
  x = _uniform_images(11, (16, 28, 28, 1))
  optimizer = optax.adam(1e-3)
  params = variables["params"]
  opt_state = optimizer.init(params)
  eval_key = jax.random.PRNGKey(12)

  def loss_fn(p, key):
    return elbo_terms(model, p, x, key)["loss"]

  @jax.jit
  def step(p, state, key):
    loss, grads = jax.value_and_grad(loss_fn)(p, key)
    updates, state = optimizer.update(grads, state, p)
    return optax.apply_updates(p, updates), state, loss

  # The loss returned by `step` is evaluated at its input params; reusing the
  # jitted step with a fixed key (update discarded) avoids a second compilation.
  initial = float(step(params, opt_state, eval_key)[2])
  for key in jax.random.split(jax.random.PRNGKey(13), 30):
    params, opt_state, _ = step(params, opt_state, key)
  final = float(step(params, opt_state, eval_key)[2])
  assert np.isfinite(initial) and np.isfinite(final)
  assert final < initial
