"""Models trained with DP-SGD (Tramer & Boneh, ICLR 2021): a linear classifier or a small CNN
on ScatterNet features (``models.scattering``), and the end-to-end tanh CNN of Papernot et al.
(AAAI 2021), whose bounded activations suit clipped, noisy gradients.

Convolutions are im2col + one matmul (as ``models.classifier``): DP-SGD differentiates each
example separately (``jax.vmap``), and a vmapped ``lax.conv`` kernel gradient becomes a grouped
convolution, slow on XLA:CPU. Normalisation is per example (group norm), so it reads no other
example and needs no privacy budget.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from dgd_jax.models.classifier import xavier


class Conv(nn.Module):
  """k x k convolution with stride and zero padding, VALID after padding, as im2col + matmul."""

  features: int
  kernel: int
  stride: int = 1
  padding: int = 0

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    k, s, p = self.kernel, self.stride, self.padding
    channels = x.shape[-1]
    w = self.param("kernel", xavier, (k, k, channels, self.features))
    b = self.param("bias", nn.initializers.zeros, (self.features,))
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [(p, p), (p, p), (0, 0)])
    h, wd = (x.shape[-3] - k) // s + 1, (x.shape[-2] - k) // s + 1
    # Patch channel order (di, dj, c) matches w.reshape(k k C, F).
    patches = jnp.concatenate([x[..., i:i + s * (h - 1) + 1:s, j:j + s * (wd - 1) + 1:s, :]
                               for i in range(k) for j in range(k)], axis=-1)
    return patches @ w.reshape(k * k * channels, self.features) + b


def max_pool(x: jnp.ndarray, window: int = 2, stride: int = 1) -> jnp.ndarray:
  """window x window max-pooling (VALID) with ``stride``, by shifted slices."""
  h, w = (x.shape[-3] - window) // stride + 1, (x.shape[-2] - window) // stride + 1
  return jnp.max(jnp.stack([x[..., i:i + stride * (h - 1) + 1:stride,
                              j:j + stride * (w - 1) + 1:stride, :]
                            for i in range(window) for j in range(window)]), axis=0)


class TanhCNN(nn.Module):
  """Papernot et al. 2021 / Tramer & Boneh Table 9 (MNIST-like): conv 16 8x8/2 (pad 3), tanh,
  max-pool 2/1, conv 32 4x4/2, tanh, max-pool 2/1, dense 32, tanh, dense K."""

  num_classes: int = 10

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    x = max_pool(jnp.tanh(Conv(16, 8, 2, 3)(x)))
    x = max_pool(jnp.tanh(Conv(32, 4, 2)(x)))
    x = x.reshape(x.shape[:-3] + (-1,))
    x = jnp.tanh(nn.Dense(32, kernel_init=xavier)(x))
    return nn.Dense(self.num_classes, kernel_init=xavier)(x)


def group_norm_module(groups: int, affine: bool) -> nn.GroupNorm:
  """Per-example group norm of the scattering coefficients; Tramer & Boneh's is not affine
  (``affine=False``): a learnt scale and shift would only share the clip norm with the head."""
  return nn.GroupNorm(num_groups=groups, use_scale=affine, use_bias=affine)


def group_norm(x: jnp.ndarray, groups: int, affine: bool) -> jnp.ndarray:
  """``group_norm_module`` applied inside a compact module."""
  return group_norm_module(groups, affine)(x)


class ScatterLinear(nn.Module):
  """Group norm of the scattering coefficients (per example), then a linear softmax layer
  (Tramer & Boneh Sec. 3: ScatterNet + linear)."""

  num_classes: int = 10
  groups: int = 27
  norm_affine: bool = False

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    x = group_norm(x, self.groups, self.norm_affine)
    return nn.Dense(self.num_classes)(x.reshape(x.shape[:-3] + (-1,)))


class ScatterCNN(nn.Module):
  """Group norm of the scattering coefficients, then a small tanh CNN (Tramer & Boneh Table 10,
  MNIST-like): conv 64 3x3 (pad 1), tanh, max-pool 2/2, conv 64 3x3 (pad 1), tanh, dense 32,
  tanh, dense K."""

  num_classes: int = 10
  groups: int = 27
  norm_affine: bool = False
  channels: int = 64

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    x = group_norm(x, self.groups, self.norm_affine)
    x = max_pool(jnp.tanh(Conv(self.channels, 3, 1, 1)(x)), 2, 2)
    x = jnp.tanh(Conv(self.channels, 3, 1, 1)(x))
    x = x.reshape(x.shape[:-3] + (-1,))
    x = jnp.tanh(nn.Dense(32, kernel_init=xavier)(x))
    return nn.Dense(self.num_classes, kernel_init=xavier)(x)


MODELS = {"scatternet_linear": ScatterLinear, "scatternet_cnn": ScatterCNN, "cnn": TanhCNN}
SCATTERING = ("scatternet_linear", "scatternet_cnn")  # models that read ScatterNet features
