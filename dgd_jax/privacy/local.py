"""Pure-DP terms outside the teacher queries: DGD's VAE latent noise (eps1) and the LDP paper's
client-side local epsilon.

DGD Sec. III-E: Laplace noise of scale 2c/eps1 on the normalised c-dimensional latent code of each
synthetic example gives eps1-DP (Theorem 1 of DGD), composed with the label queries by adding eps1
(basic composition). The derivation needs each latent coordinate in [-1, 1] (L1 sensitivity 2c);
the neighbours are synthetic examples, not private ones, so this term protects the synthetic set,
and adding it to the label-query epsilon is a conservative (never smaller) total.

LDP paper (Sun et al., "Not Just Cloud Privacy"), Algorithm 1: the student masks ceil(N mu) of its
N features to 0, scales x so that ||x||_inf <= B, and adds Lap(B/sigma) to every feature. Between
two samples each unmasked feature moves by at most B (inputs in [0, B]) or 2B (inputs in
[-B, B]), so with Laplace scale B/sigma:

* per feature (the paper's relation: "x and x' differ by only one feature"): eps = sigma or
  2 sigma;
* per sample (standard local DP, any two samples are neighbours): eps = (N - ceil(N mu)) times
  that. The mask is independent of the data, so a mixture over masks keeps this epsilon; no
  amplification from the random mask is claimed.

B cancels: the local epsilon does not depend on it. It protects the student's (client's) samples
from the teacher, a different party and relation from the teachers' central DP: do not add it to
the label-query epsilon.
"""
from __future__ import annotations

import math

from dgd_jax.privacy import checks
from dgd_jax.runtime.errors import ConfigError

LDP_RELATIONS = ("sample", "feature")


def vae_latent_noise_scale(eps1: float, latent_dim: int) -> float:
  """Laplace scale that gives DGD's eps1 on a c-dimensional latent code: 2c / eps1 (Sec. III-E)."""
  return 2.0 * checks.count("latent_dim", latent_dim) / checks.positive("eps1", eps1)


def vae_latent_epsilon(noise_scale: float, latent_dim: int) -> float:
  """Pure epsilon of DGD's latent perturbation with Laplace scale ``noise_scale``: 2c / scale."""
  return 2.0 * checks.count("latent_dim", latent_dim) / checks.positive("noise_scale", noise_scale)


def ldp_local_epsilon(sigma: float, num_features: int, mask_rate: float = 0.0,
                      nonnegative: bool = False, relation: str = "sample") -> float:
  """Local pure epsilon of one perturbed student sample (LDP paper, Algorithm 1: Lap(B/sigma))."""
  sigma = checks.positive("sigma (LDP noise parameter)", sigma)
  num_features = checks.count("num_features", num_features)
  mask_rate = checks.non_negative("mask_rate", mask_rate)
  if mask_rate >= 1.0:
    raise ConfigError(f"mask_rate={mask_rate} masks every feature: use a rate in [0, 1).")
  checks.choice("LDP relation", relation, LDP_RELATIONS)
  per_feature = sigma if nonnegative else 2.0 * sigma  # range B or 2B over Laplace scale B/sigma
  if relation == "feature":
    return per_feature
  masked = math.ceil(round(num_features * mask_rate, 9))  # ceil(N mu) zeros, as in the paper
  return (num_features - masked) * per_feature
