"""The DGD/PATE classifier (baseline, teachers, student) in flax linen.

DGD Section IV-A: two 3x3 conv layers (64 and 128 channels, stride 1, padding 1), each
followed by ReLU and 2x2 max-pooling, then a softmax layer; the SVHN variant adds fully
connected layers of 384 and 192 units. Xavier initialisation. ``width`` scales the conv
channels for quick CPU presets.

The convolutions are written as shifted-window im2col followed by one matmul (``lowering=
'im2col'``, the default): the same math as ``lax.conv`` (a test checks it), but it lowers to a
plain dot, which XLA runs well on every backend and under ``jax.vmap`` (a vmapped
``lax.conv`` becomes a grouped convolution, which is slow on XLA:CPU; see
shared/REFERENCE.md Section 7). A model that is never vmapped may take ``lowering='conv'``:
on XLA:CPU its steps run faster than im2col's at batch 250 or at width 0.5 and slower at
small batches and width 0.25 (docs/PERFORMANCE.md, "What XLA:CPU needs from the host and
from the model"), so DeepInversion's view of the baseline and the student take it. The
parameters are the same under both.
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

xavier = nn.initializers.xavier_uniform()


LOWERINGS = ("im2col", "conv")


class Conv3x3(nn.Module):
  """3x3 convolution, stride 1, zero padding 1 (SAME), as im2col + matmul or as ``lax.conv``
  (``lowering``, module docstring)."""

  features: int
  lowering: str = "im2col"

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    height, width, channels = x.shape[-3:]
    kernel = self.param("kernel", xavier, (3, 3, channels, self.features))
    bias = self.param("bias", nn.initializers.zeros, (self.features,))
    if self.lowering not in LOWERINGS:
      raise ValueError(f"lowering={self.lowering!r}; it must be one of {LOWERINGS}.")
    if self.lowering == "conv":
      batch = x.shape[:-3]
      y = jax.lax.conv_general_dilated(x.reshape((-1,) + x.shape[-3:]), kernel, (1, 1), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
      return y.reshape(batch + y.shape[1:]) + bias
    padded = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [(1, 1), (1, 1), (0, 0)])
    # Patch channel order (di, dj, c) matches kernel.reshape(9 * C, F).
    patches = jnp.concatenate([padded[..., i:i + height, j:j + width, :]
                               for i in range(3) for j in range(3)], axis=-1)
    return patches @ kernel.reshape(9 * channels, self.features) + bias


def max_pool_2x2(x: jnp.ndarray) -> jnp.ndarray:
  """2x2 max-pooling with stride 2 (odd trailing rows/columns dropped, as in PyTorch)."""
  *batch, h, w, c = x.shape
  x = x[..., :h // 2 * 2, :w // 2 * 2, :]
  return x.reshape(*batch, h // 2, 2, w // 2, 2, c).max(axis=(-4, -2))


class Classifier(nn.Module):
  """Paper CNN. ``__call__`` returns logits; ``with_features=True`` also returns the
  backbone features before the head (the f(.) of DGD Eq. 2 and Eq. 6)."""

  num_classes: int = 10
  width: float = 1.0  # multiplies ``channels``
  hidden: Sequence[int] = ()  # () for MNIST/Fashion-MNIST, (384, 192) for SVHN
  channels: tuple[int, int] = (64, 128)  # conv1, conv2 at width 1 (DGD IV-A)
  lowering: str = "im2col"  # of the convolutions: 'conv' where never vmapped (docstring)

  def setup(self):
    c1, c2 = (max(1, round(c * self.width)) for c in self.channels)
    self.conv1 = Conv3x3(c1, self.lowering)
    self.conv2 = Conv3x3(c2, self.lowering)
    self.fcs = [nn.Dense(h, kernel_init=xavier) for h in self.hidden]
    self.head = nn.Dense(self.num_classes, kernel_init=xavier)

  def backbone(self, x: jnp.ndarray) -> jnp.ndarray:
    x = max_pool_2x2(nn.relu(self.conv1(x)))
    x = max_pool_2x2(nn.relu(self.conv2(x)))
    x = x.reshape(x.shape[:-3] + (-1,))
    for fc in self.fcs:
      x = nn.relu(fc(x))
    return x

  def __call__(self, x: jnp.ndarray, with_features: bool = False, train: bool = False):
    del train  # no dropout or batch statistics: the same function in training and evaluation
    features = self.backbone(x)
    logits = self.head(features)
    return (logits, features) if with_features else logits
