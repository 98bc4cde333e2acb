"""Convolutional variational auto-encoder (Kingma & Welling, 2014).

A small VAE with a diagonal-Gaussian posterior q(z|x) = N(mean, diag(exp(logvar)))
over a c-dimensional latent (default c = 32), a standard-normal prior p(z) = N(0, I)
and a tanh decoder, sized for 28x28x1 and 32x32x3 images with pixels in [-1, 1].
Sampling uses the reparameterisation trick with an explicit PRNG key argument, so
the module is pure and needs no ``rngs`` collection. ``elbo_terms`` gives the
(negative) evidence lower bound split into reconstruction and KL terms.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


class VAE(nn.Module):
  """Conv encoder / transposed-conv decoder VAE.

  Attributes:
    image_shape: (H, W, C) of the inputs and reconstructions.
    latent_dim: latent size c.
    features: channels of the first conv layer (the second has 2 * features).
  """

  image_shape: tuple[int, int, int] = (28, 28, 1)
  latent_dim: int = 32
  features: int = 32
  tanh_output: bool = True  # False: a linear output for data not bounded to [-1, 1]

  def setup(self) -> None:
    height, width, channels = self.image_shape
    # Spatial size of the decoder's first feature map: two stride-2 stages.
    self._init_h = math.ceil(height / 4)
    self._init_w = math.ceil(width / 4)
    # Encoder q(z|x).
    self.enc_conv1 = nn.Conv(self.features, (4, 4), strides=(2, 2), padding="SAME")
    self.enc_conv2 = nn.Conv(2 * self.features, (4, 4), strides=(2, 2), padding="SAME")
    self.enc_dense = nn.Dense(256)
    self.enc_out = nn.Dense(2 * self.latent_dim)
    # Decoder p(x|z).
    self.dec_dense1 = nn.Dense(256)
    self.dec_dense2 = nn.Dense(2 * self.features * self._init_h * self._init_w)
    self.dec_deconv1 = nn.ConvTranspose(self.features, (4, 4), strides=(2, 2), padding="SAME")
    self.dec_deconv2 = nn.ConvTranspose(channels, (4, 4), strides=(2, 2), padding="SAME")

  def encode(self, x: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """x [B, H, W, C] -> (mean, logvar), each [B, latent_dim]."""
    h = nn.relu(self.enc_conv1(x))
    h = nn.relu(self.enc_conv2(h))
    h = h.reshape((h.shape[0], -1))
    h = nn.relu(self.enc_dense(h))
    mean, logvar = jnp.split(self.enc_out(h), 2, axis=-1)
    return mean, logvar

  def decode(self, z: jnp.ndarray) -> jnp.ndarray:
    """z [B, latent_dim] -> x_hat [B, H, W, C] (in [-1, 1] with ``tanh_output``)."""
    height, width, _ = self.image_shape
    h = nn.relu(self.dec_dense1(z))
    h = nn.relu(self.dec_dense2(h))
    h = h.reshape((z.shape[0], self._init_h, self._init_w, 2 * self.features))
    h = nn.relu(self.dec_deconv1(h))
    h = self.dec_deconv2(h)
    h = h[:, :height, :width, :]  # crop when H or W is not a multiple of 4
    return jnp.tanh(h) if self.tanh_output else h

  def __call__(self, x: jnp.ndarray,
               key: jax.Array) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Encode, sample z with the reparameterisation trick, decode.

    Returns (x_hat, mean, logvar).
    """
    mean, logvar = self.encode(x)
    # Reparameterisation trick (Kingma & Welling Eq. 10): z = mean + sigma * eps, eps ~ N(0, I).
    eps = jax.random.normal(key, mean.shape, dtype=mean.dtype)
    z = mean + jnp.exp(0.5 * logvar) * eps
    return self.decode(z), mean, logvar


def gaussian_kl(mean: jnp.ndarray, logvar: jnp.ndarray) -> jnp.ndarray:
  """Per-example KL(N(mean, diag(exp(logvar))) || N(0, I)), summed over latent dims: [B]."""
  # Kingma & Welling, Appendix B: -KL = 0.5 * sum(1 + log sigma^2 - mu^2 - sigma^2).
  return -0.5 * jnp.sum(1.0 + logvar - jnp.square(mean) - jnp.exp(logvar), axis=-1)


def elbo_terms(model: VAE, params: Any, x: jnp.ndarray,
               key: jax.Array) -> dict[str, jnp.ndarray]:
  """Negative-ELBO terms of ``model`` on a batch ``x``, averaged over the batch.

  Args:
    model: the VAE module.
    params: its ``"params"`` collection (i.e. ``variables["params"]``).
    x: images [B, H, W, C] in [-1, 1].
    key: PRNG key for the reparameterised sample z.

  Returns:
    dict with ``reconstruction`` (per-example sum of squared error over pixels,
    a Gaussian -log p(x|z) up to constants), ``kl`` (per-example
    KL(q(z|x) || p(z))) and ``loss = reconstruction + kl`` (-ELBO, Eq. 10).
  """
  x_hat, mean, logvar = model.apply({"params": params}, x, key)
  # -E_q[log p(x|z)] (Eq. 10, first term), single-sample Monte Carlo estimate.
  reconstruction = jnp.mean(jnp.sum(jnp.square(x_hat - x), axis=(1, 2, 3)))
  # KL(q(z|x) || p(z)) in closed form (Eq. 10 / Appendix B).
  kl = jnp.mean(gaussian_kl(mean, logvar))
  return {"reconstruction": reconstruction, "kl": kl, "loss": reconstruction + kl}
