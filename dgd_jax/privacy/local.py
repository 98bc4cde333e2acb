"""Pure-DP terms outside the teacher queries: DGD's VAE latent noise (eps1) and the LDP paper's
client-side local epsilon.

DGD Sec. III-E: Laplace noise of scale 2c/eps1 on the normalised c-dimensional latent code of each
synthetic example gives eps1-DP (Theorem 1 of DGD), composed with the label queries by adding eps1
(basic composition). The derivation needs each latent coordinate in [-1, 1] (L1 sensitivity 2c);
the neighbours are synthetic examples, not private ones, so this term protects the synthetic set,
and adding it to the label-query epsilon is a conservative (never smaller) total.

LDP paper (Sun et al., "Not Just Cloud Privacy"), Algorithm 1: the student masks ceil(N mu) of its
N features to 0, scales x so that ||x||_inf <= B, and perturbs every feature. The paper adds
Lap(B/sigma) in real arithmetic; a float32 draw would not keep that epsilon (Mironov 2012: the
outputs possible for x and x' differ), so ``training.ldp.transform`` implements its integer
counterpart on a public grid, and the epsilon reported here is the one that implementation
realises:

* grid: step g = B / K, K = ``LDP_GRID`` = 255 (every 8-bit pixel (2p - 255) / 255 of the
  [-1, 1] images, and the masked 0, lie on it); each bounded feature is rounded to the nearest
  grid point j in [-K, K] (deterministic pre-processing of the client's own input);
* noise: k from the discrete Laplace of scale t = K / sigma grid units, P(k) ~ exp(-|k| / t)
  (the two-sided geometric mechanism), the sent value y g with y = clip(j + k, -R, R) and R =
  ``ldp_output_range(sigma)`` = K + ceil(LDP_TAIL_SCALES t) (B plus 8 noise scales);
* ideal epsilon per feature: P(y | j) / P(y | j') <= exp(|j - j'| / t) for the unclipped
  j + k, and clipping is post-processing, so sigma (inputs in [0, B], |j - j'| <= K) or
  2 sigma (inputs in [-B, B], 2K) as for the paper's Laplace;
* realised epsilon per feature (``ldp_feature_epsilon``): k is drawn exactly from 64-bit
  integer counts (``discrete.discrete_laplace_counts``, support R + K so that every y in
  [-R, R] is possible for every j), and the epsilon is the exact max over j, j', y of
  log P(y | j) / P(y | j') for those counts (``discrete.clipped_shift_epsilon``): the ideal
  value plus the counts' rounding excess;
* per sample (standard local DP, any two samples are neighbours): (N - ceil(N mu)) times the
  per-feature epsilon (pure DP composes over the independently noised features). The mask is
  independent of the data, so a mixture over masks keeps this epsilon; no amplification from
  the random mask is claimed.

B cancels: the local epsilon does not depend on it. It protects the student's (client's) samples
from the teacher, a different party and relation from the teachers' central DP: do not add it to
the label-query epsilon.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from dgd_jax.privacy import checks, discrete
from dgd_jax.runtime.errors import ConfigError

LDP_RELATIONS = ("sample", "feature")
LDP_GRID = 255  # K: the client's grid step is B / K
LDP_TAIL_SCALES = 8  # R = K + ceil(8 t): outputs clipped to B plus 8 noise scales


def vae_latent_noise_scale(eps1: float, latent_dim: int) -> float:
  """Laplace scale that gives DGD's eps1 on a c-dimensional latent code: 2c / eps1 (Sec. III-E)."""
  return 2.0 * checks.count("latent_dim", latent_dim) / checks.positive("eps1", eps1)


def vae_latent_epsilon(noise_scale: float, latent_dim: int) -> float:
  """Pure epsilon of DGD's latent perturbation with Laplace scale ``noise_scale``: 2c / scale."""
  return 2.0 * checks.count("latent_dim", latent_dim) / checks.positive("noise_scale", noise_scale)


def ldp_noise_scale(sigma: float) -> float:
  """t = K / sigma: the discrete Laplace scale in grid units (B / sigma in units of B / K)."""
  return LDP_GRID / checks.positive("sigma (LDP noise parameter)", sigma)


def ldp_output_range(sigma: float) -> int:
  """R = K + ceil(LDP_TAIL_SCALES t): the client sends y B / K with y in [-R, R]."""
  return LDP_GRID + math.ceil(round(LDP_TAIL_SCALES * ldp_noise_scale(sigma), 9))


def ldp_noise_counts(sigma: float) -> np.ndarray:
  """The client's integer noise table: discrete Laplace(t) counts summing to 2^64 on
  k = -(R + K)..R + K, every clipped output reachable from every grid input."""
  support = ldp_output_range(sigma) + LDP_GRID
  return discrete.discrete_laplace_counts(ldp_noise_scale(sigma), support)


@functools.lru_cache(maxsize=64)
def ldp_feature_epsilon(sigma: float, nonnegative: bool = False) -> float:
  """Realised pure epsilon of one feature of the client's transform (the module docstring):
  the exact max log-ratio of the implemented pmf over grid inputs in [0, K] (nonnegative) or
  [-K, K]: sigma or 2 sigma plus the counts' rounding excess (where 2 sigma nears
  ln 2^64 ~ 44 the tail counts sit at their floor of 1 and the value departs from it)."""
  sigma = checks.positive("sigma (LDP noise parameter)", sigma)
  inputs = (0 if nonnegative else -LDP_GRID, LDP_GRID)
  return discrete.clipped_shift_epsilon(ldp_noise_counts(sigma), inputs, ldp_output_range(sigma))


def ldp_local_epsilon(sigma: float, num_features: int, mask_rate: float = 0.0,
                      nonnegative: bool = False, relation: str = "sample") -> float:
  """Local pure epsilon of one perturbed student sample (LDP paper, Algorithm 1, as
  ``training.ldp.transform`` implements it: ``ldp_feature_epsilon`` per unmasked feature)."""
  sigma = checks.positive("sigma (LDP noise parameter)", sigma)
  num_features = checks.count("num_features", num_features)
  mask_rate = checks.non_negative("mask_rate", mask_rate)
  if mask_rate >= 1.0:
    raise ConfigError(f"mask_rate={mask_rate} masks every feature: use a rate in [0, 1).")
  checks.choice("LDP relation", relation, LDP_RELATIONS)
  per_feature = ldp_feature_epsilon(sigma, bool(nonnegative))  # range B or 2B over scale B/sigma
  if relation == "feature":
    return per_feature
  masked = math.ceil(round(num_features * mask_rate, 9))  # ceil(N mu) zeros, as in the paper
  return (num_features - masked) * per_feature
