"""A Vision Transformer classifier in flax linen, laid out as big_vision's ``models/vit.py``.

Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words" (ViT); the variants' sizes are
Table 2 of Steiner et al. 2021, "How to train your ViT?" (AugReg). The parameter tree carries
big_vision's names, so its checkpoints and the AugReg ones load into it (``models.pretrained``):

  embedding/{kernel [p, p, C, D], bias [D]}     the patchify "convolution"
  pos_embedding [1, h*w, D]                       learned, added to the patches (posemb='learn')
  cls [1, 1, D]                                   the class token, appended after (pool='tok')
  Transformer/encoderblock_{i}/LayerNorm_0, MultiHeadDotProductAttention_0/{query, key,
      value, out}, LayerNorm_1, MlpBlock_0/{Dense_0, Dense_1}
  Transformer/encoder_norm
  head/{kernel [D, num_classes], bias}            zero-initialised, as big_vision fine-tunes

As in big_vision, the position embeddings cover the patch grid only and are added before the
class token is prepended (the original ViT code's extra class-token row is folded into
``cls`` on loading). Images are float32 NHWC in [-1, 1] with any leading batch shape.

The patchify step is a stride-p, p x p convolution without padding, written as a reshape of
non-overlapping patches followed by one matmul: the same math as ``lax.conv`` (a test checks
it), but a plain dot under ``jax.vmap`` over an ensemble's parameters, where a vmapped
``lax.conv`` becomes a grouped convolution that XLA:CPU runs slowly (``models.classifier``).
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from dgd_jax.runtime.errors import ConfigError

# (width D, depth, mlp_dim, num_heads): AugReg Table 2; "mu" is this repository's CPU-sized
# ViT for tests and quick presets (not big_vision's "mu").
VARIANTS = {
    "mu": (64, 2, 256, 4),
    "Ti": (192, 12, 768, 3),
    "S": (384, 12, 1536, 6),
    "M": (512, 12, 2048, 8),
    "B": (768, 12, 3072, 12),
    "L": (1024, 24, 4096, 16),
    "H": (1280, 32, 5120, 16),
}
POOLS = ("tok", "gap")
POSEMBS = ("learn", "sincos2d")

xavier = nn.initializers.xavier_uniform()


def decode_variant(variant: str) -> dict[str, int]:
  """``'B/16'`` -> width, depth, mlp_dim, num_heads and patch_size (0 where ``variant`` has
  no '/p'); ``''`` -> all 0 (every size given by the module's fields)."""
  if not variant:
    return dict(width=0, depth=0, mlp_dim=0, num_heads=0, patch_size=0)
  name, _, patch = variant.partition("/")
  if name not in VARIANTS or (patch and not (patch.isdigit() and int(patch) > 0)):
    raise ConfigError(f"ViT variant={variant!r}: use '<size>/<patch>' with a size among "
                      f"{tuple(VARIANTS)} and a positive patch, e.g. 'B/16'.")
  width, depth, mlp_dim, num_heads = VARIANTS[name]
  return dict(width=width, depth=depth, mlp_dim=mlp_dim, num_heads=num_heads,
              patch_size=int(patch or 0))


def posemb_sincos_2d(h: int, w: int, width: int) -> jnp.ndarray:
  """Fixed 2D sine-cosine position embeddings [1, h*w, width] (MoCo v3, Chen et al. 2021):
  a quarter of the channels each for sin/cos of the column and of the row."""
  if width % 4:
    raise ConfigError(f"posemb='sincos2d' needs a width divisible by 4, not {width}: use "
                      "posemb='learn' or another width.")
  y, x = np.mgrid[:h, :w]
  omega = 1.0 / 10_000.0 ** (np.arange(width // 4) / max(width // 4 - 1, 1))
  y = y.reshape(-1, 1) * omega
  x = x.reshape(-1, 1) * omega
  pe = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
  return jnp.asarray(pe[None], jnp.float32)


class PatchEmbedding(nn.Module):
  """p x p convolution with stride p and no padding (ViT Eq. 1's patch projection E), as a
  reshape into patches and one matmul; ``nn.Conv``'s parameters and initialisers."""

  features: int
  patch_size: int

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    n, height, width, channels = x.shape
    p = self.patch_size
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (p, p, channels, self.features))
    bias = self.param("bias", nn.initializers.zeros, (self.features,))
    h, w = height // p, width // p
    # Patch channel order (di, dj, c) matches kernel.reshape(p * p * C, D).
    patches = x.reshape(n, h, p, w, p, channels).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(n, h, w, p * p * channels)
    return patches @ kernel.reshape(p * p * channels, self.features) + bias


class MlpBlock(nn.Module):
  """The transformer's feed-forward block: Dense, GELU, dropout, Dense (ViT Eq. 3)."""

  mlp_dim: int
  dropout: float = 0.0

  @nn.compact
  def __call__(self, x: jnp.ndarray, deterministic: bool = True) -> jnp.ndarray:
    inits = dict(kernel_init=xavier, bias_init=nn.initializers.normal(stddev=1e-6))
    y = nn.gelu(nn.Dense(self.mlp_dim, **inits)(x))
    y = nn.Dropout(rate=self.dropout)(y, deterministic)
    return nn.Dense(x.shape[-1], **inits)(y)


class Encoder1DBlock(nn.Module):
  """Pre-norm transformer block: x + MSA(LN(x)), then x + MLP(LN(x)) (ViT Eqs. 2-3)."""

  mlp_dim: int
  num_heads: int
  dropout: float = 0.0

  @nn.compact
  def __call__(self, x: jnp.ndarray, deterministic: bool = True) -> jnp.ndarray:
    y = nn.LayerNorm()(x)
    y = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, kernel_init=xavier,
                                        deterministic=deterministic)(y, y)
    x = x + nn.Dropout(rate=self.dropout)(y, deterministic)
    y = MlpBlock(self.mlp_dim, self.dropout)(nn.LayerNorm()(x), deterministic)
    return x + nn.Dropout(rate=self.dropout)(y, deterministic)


class Encoder(nn.Module):
  """``depth`` blocks and a final LayerNorm (ViT Eq. 4's LN)."""

  depth: int
  mlp_dim: int
  num_heads: int
  dropout: float = 0.0

  @nn.compact
  def __call__(self, x: jnp.ndarray, deterministic: bool = True) -> jnp.ndarray:
    for i in range(self.depth):
      x = Encoder1DBlock(self.mlp_dim, self.num_heads, self.dropout,
                         name=f"encoderblock_{i}")(x, deterministic)
    return nn.LayerNorm(name="encoder_norm")(x)


class ViT(nn.Module):
  """Vision Transformer classifier with the paper classifier's interface: ``__call__``
  returns logits; ``with_features=True`` also returns the pooled representation the head
  reads (the class token's output, or the tokens' mean with ``pool='gap'``); ``train=True``
  turns dropout on (rng ``'dropout'``). ``width``, ``depth``, ``mlp_dim``, ``num_heads`` and
  ``patch_size`` override ``variant``'s sizes where > 0."""

  num_classes: int = 10
  variant: str = "Ti/16"  # '<size>/<patch>', a size of VARIANTS; '' = every size below given
  width: int = 0
  depth: int = 0
  mlp_dim: int = 0
  num_heads: int = 0
  patch_size: int = 0
  pool: str = "tok"  # 'tok': class token; 'gap': mean of the output tokens
  dropout: float = 0.0
  posemb: str = "learn"  # 'learn', or fixed 'sincos2d'
  head_zeroinit: bool = True  # big_vision's fine-tuning head; False: lecun-normal

  def dims(self) -> dict[str, int]:
    """The sizes in use: the fields where > 0, else the variant's."""
    dims = decode_variant(self.variant)
    for name in dims:
      if getattr(self, name) > 0:
        dims[name] = getattr(self, name)
    missing = [name for name, value in dims.items() if value <= 0]
    if missing:
      raise ConfigError(f"ViT variant={self.variant!r} leaves {', '.join(missing)} unset: give "
                        "a variant such as 'B/16', or set those fields > 0.")
    if dims["width"] % dims["num_heads"]:
      raise ConfigError(f"ViT width {dims['width']} is not a multiple of num_heads "
                        f"{dims['num_heads']}: choose sizes whose heads divide the width.")
    return dims

  @nn.compact
  def __call__(self, x: jnp.ndarray, with_features: bool = False, train: bool = False):
    dims = self.dims()
    if self.pool not in POOLS:
      raise ConfigError(f"ViT pool={self.pool!r}: use one of {POOLS}.")
    if self.posemb not in POSEMBS:
      raise ConfigError(f"ViT posemb={self.posemb!r}: use one of {POSEMBS}.")
    p = dims["patch_size"]
    height, width = x.shape[-3:-1]
    if height % p or width % p:
      raise ConfigError(f"images of {height}x{width} do not split into {p}x{p} patches: "
                        "resize them to a multiple of the patch size (config.model.image_size)"
                        " or choose another patch size.")
    batch = x.shape[:-3]
    x = x.reshape((-1,) + x.shape[-3:])

    tokens = PatchEmbedding(dims["width"], p, name="embedding")(x)
    n, h, w, d = tokens.shape
    tokens = tokens.reshape(n, h * w, d)
    if self.posemb == "learn":  # big_vision: added to the patches, before the class token
      pe = self.param("pos_embedding", nn.initializers.normal(stddev=1 / np.sqrt(d)),
                      (1, h * w, d))
    else:
      pe = posemb_sincos_2d(h, w, d)
    tokens = tokens + pe
    if self.pool == "tok":
      cls = self.param("cls", nn.initializers.zeros, (1, 1, d))
      tokens = jnp.concatenate([jnp.broadcast_to(cls, (n, 1, d)), tokens], axis=1)
    tokens = nn.Dropout(rate=self.dropout)(tokens, not train)

    encoded = Encoder(dims["depth"], dims["mlp_dim"], dims["num_heads"], self.dropout,
                      name="Transformer")(tokens, not train)
    features = encoded[:, 0] if self.pool == "tok" else encoded.mean(axis=1)

    kernel_init = nn.initializers.zeros if self.head_zeroinit else nn.initializers.lecun_normal()
    logits = nn.Dense(self.num_classes, kernel_init=kernel_init, name="head")(features)
    logits = logits.reshape(batch + logits.shape[1:])
    features = features.reshape(batch + features.shape[1:])
    return (logits, features) if with_features else logits
