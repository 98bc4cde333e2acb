"""DPDFD's normalised-gradient Gaussian mechanism (Liu et al., IJCAI 2023, Algorithm 1, Eq. 4,
Theorem 3).

Eq. (4), as printed (Algorithm 1 line 7 writes the same normalisation):

    A_{C,sigma}(g) = (1/B) (sum_{i=1}^B C g_i / (||g||_2 + e) + N(0, sigma^2 C^2 I))

where g = dL_T / d phi_s(theta_s; D) is the gradient on the whole synthetic batch D and g_i its
row for example i. The paper divides by ||g||_2, not ||g_i||_2; REFERENCE Sec. 3 reads it as the
per-sample norm. Both readings are covered, as ``normalization``:

* ``"per_sample"``: g_bar_i = C g_i / (||g_i||_2 + e), so ||g_bar_i|| < C for each i.
* ``"batch"``: g_bar_i = C g_i / (||g||_2 + e) with ||g||_2^2 = sum_i ||g_i||^2 (Eq. 4 as printed),
  so sum_i ||g_bar_i||^2 < C^2.

What sigma means is not consistent in the paper, and it changes epsilon by orders of magnitude, so
the convention is a required, named parameter here:

* ``noise_convention="multiplier"``: sigma multiplies C, noise std = sigma * C (Eq. 4 and
  Algorithm 1 line 8). Epsilon then does not depend on C.
* ``noise_convention="std"``: sigma is the absolute noise std (Fig. 1's N(0, sigma^2)). This is
  the reading under which Theorem 3 is written; with it a smaller C gives a smaller epsilon, as the
  paper says in Sec. 4.2.

Relations (``relation``):

* ``"whole_batch"`` (default, conservative). The teacher is trained on the private data, so one
  private example may change the teacher and with it every gradient of every step. Nothing else is
  assumed; the bound holds for any two private datasets, under replace-one and add/remove-one.
  One teacher (Algorithm 1): each step releases S + N(0, std^2 I) with S = sum_i g_bar_i, one noise
  draw for the batch. Neighbours' sums S, S' satisfy ||S - S'|| <= ||S|| + ||S'||, and
    - per_sample: ||S|| <= sum_i ||g_bar_i|| < B C, so the L2 sensitivity is 2 B C;
    - batch: ||S|| <= sum_i ||g_bar_i|| <= sqrt(B) (sum_i ||g_bar_i||^2)^(1/2) < sqrt(B) C
      (Cauchy-Schwarz), so the L2 sensitivity is 2 sqrt(B) C. Tight: with all g_i equal,
      ||S|| = B C ||g_1|| / (sqrt(B) ||g_1|| + e) -> sqrt(B) C, and S' = -S is reachable.
  T steps are T Gaussian releases of that sensitivity (adaptive composition; the generator and the
  student are post-processing of the noisy outputs). 2 B C is also a valid bound under batch
  normalisation (sqrt(B) <= B), so per_sample is the safe default when unsure.
  n > 1 teachers (Sec. 4.4): each synthetic example i gets its own draw,
  g_tilde_i = (1/n)(sum_j g_bar_ij + N(0, sigma^2 C^2 I)); every g_bar_ij has norm < C under either
  normalisation (||g_ij|| <= ||g||), so without any assumption on the teachers' data one release
  moves by at most 2 n C: B T releases of sensitivity 2 n C (no tighter bound is derived for batch
  normalisation with n > 1).
* ``"direct"`` (Sec. 4.4, "direct training on private data"): the model sees B *distinct*
  private examples per step, chosen independently of the data, and the rows are its own
  per-example output gradients, bounded by C. Under replace-one one example moves at most its
  own row, by less than 2C: T Gaussian releases of sensitivity 2C (no subsampling
  amplification is claimed).
* ``"theorem3"``: the paper's claim (Theorem 3): (2 C^2 n B T lam / sigma^2 + log((lam-1)/lam)
  - (log delta + log lam)/(lam-1), delta)-DP for all lam, i.e. the improved RDP conversion of n B T
  Gaussian releases of L2 sensitivity 2C and absolute std sigma, no subsampling amplification.
  Valid only if (a) with one teacher, each step's noisy sum moves by at most 2 sqrt(B) C between
  neighbours: true under batch normalisation by ||g||_2 (Eq. 4 as printed; it then equals
  whole_batch/batch) or when one private example changes at most one normalised gradient per step,
  false under per-sample normalisation with a teacher trained on the private data (then up to B
  times too small in RDP); and (b) with n > 1 teachers, the teachers are trained on disjoint data
  (one private example moves one teacher) and each synthetic example gets its own noise draw; with
  per-sample normalisation and overlapping teacher data it can be n times too small.
"""
from __future__ import annotations

import math

import dp_accounting
import numpy as np

from dgd_jax.privacy import checks, events
from dgd_jax.privacy.conversion import DEFAULT_RDP_ORDERS

NOISE_CONVENTIONS = ("multiplier", "std")
RELATIONS = ("whole_batch", "theorem3", "direct")
NORMALIZATIONS = ("per_sample", "batch")
DEFAULT_RELATION = "whole_batch"
DEFAULT_NORMALIZATION = "per_sample"

THEOREM3_CONDITIONS = (
    "the paper's claim (Theorem 3), valid only if each step's noisy sum moves by at most "
    "2 sqrt(B) C between neighbours (normalisation by the whole batch's gradient norm ||g||_2 as "
    "Eq. 4 prints it, or one private example changing at most one normalised gradient per step; "
    "NOT per-sample normalisation with a teacher trained on the private data, where it can be B "
    "times too small) and, for n > 1 teachers, only if the teachers are trained on disjoint data "
    "and each synthetic example gets its own noise draw")


def absolute_noise_std(noise: float, noise_convention: str, norm_bound: float) -> float:
  """Absolute std of the Gaussian noise added to the sum of normalised gradients."""
  noise = checks.positive("noise (DPDFD sigma)", noise)
  norm_bound = checks.positive("norm_bound (DPDFD C)", norm_bound)
  checks.choice("DPDFD noise_convention", noise_convention, NOISE_CONVENTIONS)
  return noise * norm_bound if noise_convention == "multiplier" else noise  # Eq. 4 vs Fig. 1


def releases(norm_bound: float, batch_size: int, steps: int, num_teachers: int,
             relation: str = DEFAULT_RELATION,
             normalization: str = DEFAULT_NORMALIZATION) -> tuple[int, float]:
  """(number of Gaussian releases, L2 sensitivity of each) under ``relation`` and
  ``normalization`` (module docstring)."""
  norm_bound = checks.positive("norm_bound (DPDFD C)", norm_bound)
  batch_size = checks.count("batch_size", batch_size)
  steps = checks.count("steps", steps)
  num_teachers = checks.count("num_teachers", num_teachers)
  checks.choice("DPDFD relation", relation, RELATIONS)
  checks.choice("DPDFD normalization", normalization, NORMALIZATIONS)
  if relation == "theorem3":
    return num_teachers * batch_size * steps, 2.0 * norm_bound  # Theorem 3: n B T releases of 2C
  if relation == "direct":  # Sec. 4.4: a model trained on B distinct private examples per step
    return steps, 2.0 * norm_bound  # one example moves only its own row (< C): 2C per step
  if num_teachers > 1:
    return batch_size * steps, 2.0 * num_teachers * norm_bound  # Sec. 4.4: a draw per example
  if normalization == "batch":
    return steps, 2.0 * math.sqrt(batch_size) * norm_bound  # Eq. 4: ||sum_i g_bar_i|| < sqrt(B) C
  return steps, 2.0 * batch_size * norm_bound  # Alg. 1 line 8: ||sum_i g_bar_i|| < B C


def event(noise: float, noise_convention: str, norm_bound: float, batch_size: int, steps: int,
          num_teachers: int = 1, relation: str = DEFAULT_RELATION,
          normalization: str = DEFAULT_NORMALIZATION) -> dp_accounting.DpEvent:
  """dp-accounting event: GaussianDpEvent(noise_std / sensitivity) composed over the releases."""
  count, sensitivity = releases(norm_bound, batch_size, steps, num_teachers, relation,
                                normalization)
  std = absolute_noise_std(noise, noise_convention, norm_bound)
  return events.gaussian_event(std, sensitivity, count)


def theorem3_epsilon(noise_std: float, norm_bound: float, batch_size: int, steps: int,
                     delta: float, num_teachers: int = 1,
                     orders=DEFAULT_RDP_ORDERS) -> tuple[float, float]:
  """(epsilon, optimal lam) of DPDFD Theorem 3 with sigma = ``noise_std`` (absolute std),
  minimised over ``orders`` (all > 1). The paper's claim; see ``THEOREM3_CONDITIONS``."""
  delta = checks.delta(delta)
  sigma = checks.positive("noise_std", noise_std)
  c = checks.positive("norm_bound (DPDFD C)", norm_bound)
  n_b_t = (checks.count("num_teachers", num_teachers) * checks.count("batch_size", batch_size)
           * checks.count("steps", steps))
  lam = checks.orders("orders", orders, minimum=1.0)
  eps = (2.0 * c * c * n_b_t * lam / sigma ** 2 + np.log((lam - 1.0) / lam)
         - (math.log(delta) + np.log(lam)) / (lam - 1.0))  # DPDFD Theorem 3
  best = int(np.argmin(eps))
  return float(eps[best]), float(lam[best])
