"""DPDFD's normalised-gradient Gaussian mechanism (Liu et al., IJCAI 2023, Algorithm 1, Eq. 4,
Sec. 4.4, Theorem 3): what the code releases, its sensitivity and sampling, as dp-accounting
events.

Eq. (4), as printed (Algorithm 1 line 7 writes the same normalisation):

    A_{C,sigma}(g) = (1/B) (sum_{i=1}^B C g_i / (||g||_2 + e) + N(0, sigma^2 C^2 I))

where g = dL_T / d phi_s(theta_s; D) is the gradient on the whole synthetic batch D and g_i its
row for example i. The paper divides by ||g||_2, not ||g_i||_2; REFERENCE Sec. 3 reads it as the
per-sample norm. Both readings are covered, as ``normalization``:

* ``"per_sample"``: g_bar_i = C g_i / (||g_i||_2 + e), so ||g_bar_i|| < C for each i (clipping to
  C, the Fig. 2 ablation, gives ||g_bar_i|| <= C: the same bound).
* ``"batch"``: g_bar_i = C g_i / (||g||_2 + e) with ||g||_2^2 the sum of the squared entries of
  everything normalised together, so the whole normalised array has L2 norm < C.

What sigma means is not consistent in the paper, and it changes epsilon by orders of magnitude, so
the convention is a required, named parameter here:

* ``noise_convention="multiplier"``: sigma multiplies C, noise std = sigma * C (Eq. 4 and
  Algorithm 1 line 8). Epsilon then does not depend on C.
* ``noise_convention="std"``: sigma is the absolute noise std (Fig. 1's N(0, sigma^2)). This is
  the reading under which Theorem 3 is written.

What the code releases (``dgd_jax.synthesis.dpdfd.mechanism``). The student needs one target
per example (y_s = phi_s(D) - gamma g_tilde, Algorithm 1 line 9), so the code does NOT add one
noise vector to the sum of the rows, as Algorithm 1 line 8 reads: it keeps the rows as a [B, K] matrix and adds an
independent N(0, std^2) draw to every entry (with n teachers, to the sum over teachers of each
row). One step therefore releases G_bar + Z, Z ~ N(0, std^2 I_{BK}): one Gaussian mechanism on a
B*K vector. Its L2 sensitivity Delta between neighbours gives RDP lam Delta^2 / (2 std^2) per step,
which equals that of m releases of sensitivity Delta / sqrt(m) for any m; the analyses below
state each step as the count and sensitivity that say what moves (B rows of 2C each, or one
matrix of 2C). Everything else (student, generator, the next steps' batches) is post-processing
of these releases, so T steps compose adaptively.

Analyses (``analysis``):

* ``"whole_batch"`` (default; assumes nothing about how the teacher(s) depend on the private
  data, so every row may change; valid under replace-one and add/remove-one).
    - one teacher, per_sample (or clip): every row has norm < C and may move by < 2C:
      **B T releases of sensitivity 2C** (||G_bar - G_bar'||_F < 2 sqrt(B) C);
    - one teacher, batch: ||G_bar||_F < C, so ||G_bar - G_bar'||_F < 2C: **T releases of 2C**;
    - n teachers, per_sample: each row is sum_j g_bar_ij, every term of norm < C and any may
      change: **B T releases of 2nC**;
    - n teachers, batch (one norm over the [n, B, K] stack, as ``dpdfd.bound`` computes it):
      ||sum_j G_bar_j||_F <= sqrt(n) (sum_j ||G_bar_j||_F^2)^(1/2) < sqrt(n) C (Cauchy-Schwarz):
      **T releases of 2 sqrt(n) C**.
* ``"disjoint_teachers"`` (Sec. 4.4 ensemble, teachers trained on pairwise disjoint shards): when
  one neighbouring change moves k teachers' shards (``teachers_changed``,
  ``data.partitions.TEACHERS_CHANGED``: 1 for the default partition under replace-one, 2 for
  the stable one under replace-one), only the terms g_bar_ij of those k teachers move, each row
  by < 2kC: **B T releases of sensitivity 2kC**. Needs per-sample normalisation (the batch norm
  couples all teachers, so one teacher moves every term) and teachers known to be disjoint
  (``teachers_disjoint``, checked on the actual shards by ``shards_disjoint``); refused
  otherwise.
* ``"direct"`` (Sec. 4.4, "direct training on private data"; ``dpdfd.direct_step``): each step
  draws B of the N private examples uniformly WITHOUT replacement (``sample_indices``), with a key
  that does not depend on the data, and releases the [B, K] noisy rows of those examples'
  bounded output gradients. LABEL DP ONLY: the step then back-propagates the targets through
  the model AT THE PRIVATE INPUTS x_i (the parameter gradient is sum_i J(x_i)^T (softmax(s_i) -
  softmax(y_s_i))), with no noise on that, so the released model is a noiseless function of the
  inputs and as example-level DP its epsilon is unbounded (for a linear model the update lies in
  the span of the batch's inputs). What the noise protects is the labels, the inputs being
  treated as public: replacing one example's label moves only the step's rows when that example
  is in the batch, by < 2C in L2 (per-sample rows: its own row; batch normalisation: all rows,
  but ||G_bar||_F < C), so each step is the Gaussian mechanism of sensitivity 2C on a uniform
  B-of-N subsample, replace-one: **T x SampledWithoutReplacementDpEvent(N, B,
  GaussianDpEvent(std / 2C))** (dp-accounting's RDP of Wang, Balle & Kasiviswanathan 2019,
  Thm. 27). Needs ``dataset_size`` N.
* ``"theorem3"``: the paper's claim (Theorem 3): (2 C^2 n B T lam / sigma^2 + log((lam-1)/lam)
  - (log delta + log lam)/(lam-1), delta)-DP, i.e. the improved RDP conversion of n B T Gaussian
  releases of sensitivity 2C with sigma read as the absolute std, no subsampling. With one
  teacher and per-sample normalisation this is exactly the code's release (``whole_batch``; the
  two agree when std is the same); with n > 1 teachers on disjoint shards it charges n times the
  releases the code makes (valid, n times conservative in RDP); with teachers whose data overlap
  it is n times too small in RDP (rows move by up to 2nC).
"""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
from scipy import optimize, special

from dgd_jax.privacy import checks, events
from dgd_jax.privacy.conversion import DEFAULT_RDP_ORDERS
from dgd_jax.runtime.errors import ConfigError

NOISE_CONVENTIONS = ("multiplier", "std")
ANALYSES = ("whole_batch", "disjoint_teachers", "direct", "theorem3")
NORMALIZATIONS = ("per_sample", "batch")
DEFAULT_ANALYSIS = "whole_batch"
DEFAULT_NORMALIZATION = "per_sample"

THEOREM3_CONDITIONS = (
    "the paper's claim (Theorem 3): n B T Gaussian releases of sensitivity 2C, sigma read as the "
    "absolute std, no subsampling. With one teacher and per-sample normalisation it is exactly "
    "the code's release (analysis whole_batch); with n > 1 teachers trained on disjoint shards "
    "it is n times conservative; with teachers whose training data overlap it is n times too "
    "small in RDP (each row can move by 2nC)")

DIRECT_LABEL_DP = (
    "LABEL DP ONLY: direct training back-propagates the noisy targets through the model at the "
    "private inputs without noise, so it protects the labels (inputs treated as public), not the "
    "examples; as example-level DP its epsilon is unbounded")


def absolute_noise_std(noise: float, noise_convention: str, norm_bound: float) -> float:
  """Absolute std of the Gaussian noise added to each entry of the normalised rows."""
  noise = checks.positive("noise (DPDFD sigma)", noise)
  norm_bound = checks.positive("norm_bound (DPDFD C)", norm_bound)
  checks.choice("DPDFD noise_convention", noise_convention, NOISE_CONVENTIONS)
  return noise * norm_bound if noise_convention == "multiplier" else noise  # Eq. 4 vs Fig. 1


def shards_disjoint(shards) -> bool:
  """Whether the teachers' training-index shards (a sequence of index arrays) are pairwise
  disjoint, the condition of analysis 'disjoint_teachers'."""
  flat = np.concatenate([np.asarray(s).ravel() for s in shards])
  return np.unique(flat).size == flat.size


def releases(norm_bound: float, batch_size: int, steps: int, num_teachers: int,
             analysis: str = DEFAULT_ANALYSIS, normalization: str = DEFAULT_NORMALIZATION,
             teachers_disjoint: bool = False, teachers_changed: int = 1) -> tuple[int, float]:
  """(number of Gaussian releases, L2 sensitivity of each) under ``analysis`` and
  ``normalization`` (module docstring). For 'direct' these are the T per-step releases, each
  run on a B-of-N subsample (``event`` adds the sampling)."""
  norm_bound = checks.positive("norm_bound (DPDFD C)", norm_bound)
  b = checks.count("batch_size", batch_size)
  t = checks.count("steps", steps)
  n = checks.count("num_teachers", num_teachers)
  checks.choice("DPDFD analysis", analysis, ANALYSES)
  checks.choice("DPDFD normalization", normalization, NORMALIZATIONS)
  c = norm_bound
  if analysis == "theorem3":
    return n * b * t, 2.0 * c  # Theorem 3: n B T releases of 2C
  if analysis == "direct":
    if n != 1:
      raise ConfigError(f"analysis 'direct' trains one model on the private data; got "
                        f"num_teachers={n}.")
    return t, 2.0 * c  # one label moves the [B, K] rows by < 2C in L2 (either normalisation)
  if analysis == "disjoint_teachers":
    if not teachers_disjoint:
      raise ConfigError(
          "analysis 'disjoint_teachers' needs teachers trained on pairwise disjoint shards, and "
          "these teachers are not known to be (teachers_disjoint=False): their training data may "
          "overlap, so one private example can move every teacher's term of a row (2nC). Use "
          "analysis 'whole_batch'.")
    if normalization != "per_sample":
      raise ConfigError(
          "analysis 'disjoint_teachers' needs per-sample normalisation: batch normalisation "
          "divides every teacher's rows by one norm over all teachers, so one teacher moves them "
          "all. Use normalization 'per_sample' or analysis 'whole_batch'.")
    k = checks.count("teachers_changed", teachers_changed)
    return b * t, 2.0 * k * c  # Sec. 4.4: k teachers change, each row moves by < 2kC
  if normalization == "batch":
    return t, 2.0 * math.sqrt(n) * c  # ||sum_j G_bar_j||_F < sqrt(n) C (Cauchy-Schwarz)
  return b * t, 2.0 * n * c  # each row: n terms of norm < C, any of which may change


def event(noise: float, noise_convention: str, norm_bound: float, batch_size: int, steps: int,
          num_teachers: int = 1, analysis: str = DEFAULT_ANALYSIS,
          normalization: str = DEFAULT_NORMALIZATION, teachers_disjoint: bool = False,
          dataset_size: int | None = None, teachers_changed: int = 1) -> dp_accounting.DpEvent:
  """dp-accounting event of the planned steps: GaussianDpEvent(std / sensitivity) composed over
  the releases; for 'direct', each step's Gaussian on a B-of-N subsample drawn without
  replacement (``SampledWithoutReplacementDpEvent``, replace-one)."""
  count, sensitivity = releases(norm_bound, batch_size, steps, num_teachers, analysis,
                                normalization, teachers_disjoint, teachers_changed)
  std = absolute_noise_std(noise, noise_convention, norm_bound)
  if analysis != "direct":
    return events.gaussian_event(std, sensitivity, count)
  if dataset_size is None:
    raise ConfigError("analysis 'direct' samples B of the N private examples per step: pass "
                      "dataset_size (N).")
  n = checks.count("dataset_size", dataset_size)
  if n < batch_size:
    raise ConfigError(f"dataset_size={n} is smaller than batch_size={batch_size}: a step draws "
                      "B distinct examples.")
  sampled = dp_accounting.SampledWithoutReplacementDpEvent(  # Wang et al. 2019, Thm. 27
      source_dataset_size=n, sample_size=int(batch_size),
      event=dp_accounting.GaussianDpEvent(std / sensitivity))
  return dp_accounting.SelfComposedDpEvent(sampled, count)


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


# ---- what a single-teacher conversion can learn (PRIVACY.md, "The single-teacher limit") -------


def information_nats(noise_std: float, norm_bound: float, batch_size: int, steps: int,
                     normalization: str = DEFAULT_NORMALIZATION) -> float:
  """Upper bound on the mutual information, in nats, between the teacher and everything the
  run releases: each step is a Gaussian channel of input power ||G_t||_F^2 <= B C^2 (per-sample
  rows; C^2 under batch normalisation) and noise variance std^2 per entry, whose capacity is at
  most power / (2 std^2) nats; T steps add (chain rule): B T C^2 / (2 std^2)."""
  std = checks.positive("noise_std", noise_std)
  c = checks.positive("norm_bound (DPDFD C)", norm_bound)
  b = checks.count("batch_size", batch_size)
  t = checks.count("steps", steps)
  checks.choice("DPDFD normalization", normalization, NORMALIZATIONS)
  power = (b if normalization == "per_sample" else 1) * c * c  # ||G_t||_F^2
  return t * power / (2.0 * std * std)  # sum over steps of (1/2) power / std^2


def _log_matches_mgf(lam: float, num_classes: int) -> float:
  """log of sum_{j=0}^K (e^lam - 1)^j / j!: an upper bound on log E[e^{lam M}] for M the
  number of classes a fixed guess gets right under a uniformly random relabelling (equal to it
  when the guess is a bijection: the factorial moments of fixed points are 1)."""
  j = np.arange(num_classes + 1)
  return float(special.logsumexp(j * math.log(math.expm1(lam)) - special.gammaln(j + 1)))


def accuracy_bound(information: float, num_classes: int) -> float:
  """Largest expected balanced accuracy of a label-symmetric conversion whose releases carry at
  most ``information`` nats about the teacher (Donsker-Varadhan over the K! relabellings):
  K a <= min_{lam > 0} (I + log sum_j (e^lam - 1)^j / j!) / lam, capped at 1."""
  info = checks.non_negative("information (nats)", information)
  k = checks.count("num_classes", num_classes, minimum=2)

  def bound(log_lam: float) -> float:
    lam = math.exp(log_lam)
    return (info + _log_matches_mgf(lam, k)) / (lam * k)

  # (I + Lambda(lam)) / lam is quasi-convex (Lambda convex, Lambda(0) = 0): one minimum.
  best = optimize.minimize_scalar(bound, bounds=(-30.0, 8.0), method="bounded",
                                  options={"xatol": 1e-10})
  return min(1.0, float(best.fun), bound(-30.0))


def information_needed(accuracy: float, num_classes: int) -> float:
  """Least information (nats) ``accuracy_bound`` allows ``accuracy`` with: the Legendre transform
  max_{lam > 0} (lam K a - log sum_j (e^lam - 1)^j / j!)."""
  a = checks.positive("accuracy", accuracy)
  k = checks.count("num_classes", num_classes, minimum=2)
  if a <= 1.0 / k:
    return 0.0
  best = optimize.minimize_scalar(
      lambda log_lam: -(math.exp(log_lam) * k * a - _log_matches_mgf(math.exp(log_lam), k)),
      bounds=(-30.0, 8.0), method="bounded", options={"xatol": 1e-10})
  return float(-best.fun)


def elementary_accuracy_bound(epsilon: float, delta: float, num_classes: int) -> float:
  """Balanced accuracy of a label-symmetric mechanism that is (epsilon, delta)-DP with respect
  to the whole teacher: a <= e^eps / K + delta (each relabelling that sends class k to j is a
  neighbour of the others; summing over j, K a_k <= e^eps + K delta)."""
  eps = checks.non_negative("epsilon", epsilon)
  k = checks.count("num_classes", num_classes, minimum=2)
  return min(1.0, math.exp(eps) / k + checks.delta(delta))
