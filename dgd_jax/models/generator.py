"""DAFL data-free generator (Chen et al., 2019, "Data-Free Learning of Student Networks").

This is the generator G(z) of DAFL, used as the image generator in the data-free
distillation objective of DGD (Eq. 2) and in DPDFD. It maps a latent vector
z ~ N(0, I) to an image through a dense layer, two nearest-neighbour x2
upsampling stages with 3x3 convolutions, a tanh, and a final affine-free
BatchNorm (PyTorch's ``BatchNorm2d(affine=False)``); that last layer standardises
the outputs per channel over the batch, so generated images roughly match data
scaled to [-1, 1] (zero mean, unit variance per channel) rather than being hard
clipped to the tanh range.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

# PyTorch BatchNorm momentum 0.1 (weight of the new batch) == flax momentum 0.9
# (weight of the old running average).
_BN_MOMENTUM: float = 0.9


def _upsample_nearest_2x(x: jnp.ndarray) -> jnp.ndarray:
  """Nearest-neighbour x2 upsampling of an NHWC tensor (F.interpolate(scale_factor=2))."""
  return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


class Generator(nn.Module):
  """DAFL generator: z [B, latent_dim] -> images [B, H, W, C].

  Attributes:
    image_shape: (H, W, C) of the generated images; H and W must be divisible by 4.
    latent_dim: dimensionality of the latent z.
    features: channels of the first feature map (DAFL uses 128).
    standardize_output: DAFL's final affine-free BatchNorm, which matches data that was
      standardised per channel (DAFL's MNIST); False keeps the tanh output in [-1, 1],
      the range of dgd_jax's data.
  """

  image_shape: tuple[int, int, int] = (28, 28, 1)
  latent_dim: int = 100
  features: int = 128
  standardize_output: bool = True

  @nn.compact
  def __call__(self, z: jnp.ndarray, train: bool = True) -> jnp.ndarray:
    height, width, channels = self.image_shape
    if height % 4 != 0 or width % 4 != 0:
      raise ValueError(
          "Generator image_shape height and width must be divisible by 4 (two x2 "
          f"upsampling stages); got image_shape={self.image_shape}.")
    if z.ndim != 2 or z.shape[-1] != self.latent_dim:
      raise ValueError(f"Expected z of shape [B, {self.latent_dim}], got {z.shape}.")
    init_h, init_w = height // 4, width // 4

    def batch_norm(**kwargs) -> nn.BatchNorm:
      return nn.BatchNorm(use_running_average=not train, momentum=_BN_MOMENTUM, **kwargs)

    # l1: Linear(latent_dim, features * init_size^2), then view as a feature map.
    x = nn.Dense(self.features * init_h * init_w)(z)
    x = x.reshape((z.shape[0], init_h, init_w, self.features))
    # conv_blocks0: BatchNorm2d(features).
    x = batch_norm()(x)
    # conv_blocks1: upsample, Conv 3x3, BatchNorm, LeakyReLU(0.2).
    x = _upsample_nearest_2x(x)
    x = nn.Conv(self.features, (3, 3), strides=(1, 1), padding="SAME")(x)
    # DAFL passes 0.8 as BatchNorm2d's positional `eps` argument; kept as-is.
    x = batch_norm(epsilon=0.8)(x)
    x = nn.leaky_relu(x, negative_slope=0.2)
    # conv_blocks2: upsample, Conv 3x3 (features//2), BatchNorm, LeakyReLU, Conv 3x3 C, tanh.
    x = _upsample_nearest_2x(x)
    x = nn.Conv(self.features // 2, (3, 3), strides=(1, 1), padding="SAME")(x)
    # DAFL passes 0.8 as BatchNorm2d's positional `eps` argument; kept as-is.
    x = batch_norm(epsilon=0.8)(x)
    x = nn.leaky_relu(x, negative_slope=0.2)
    x = nn.Conv(channels, (3, 3), strides=(1, 1), padding="SAME")(x)
    x = jnp.tanh(x)
    if self.standardize_output:
      # BatchNorm2d(channels, affine=False): per-channel standardisation of the output.
      x = batch_norm(use_scale=False, use_bias=False)(x)
    return x
