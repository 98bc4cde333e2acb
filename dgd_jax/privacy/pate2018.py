"""GNMax and Confident-GNMax (PATE 2018: Papernot, Song et al., "Scalable Private Learning with
PATE", ICLR 2018), data-independent and data-dependent RDP.

Sensitivity: one neighbouring change of the private set moves the shards of k teachers (k =
``teachers_changed``, ``data.partitions.TEACHERS_CHANGED``; PATE 2018 has k = 1), so at most k
votes change.

GNMax returns ``argmax_j (n_j + N(0, sigma^2))``. One changed teacher vote moves two counts by 1,
so the histogram's L2 sensitivity is sqrt(2): RDP(lam) = lam / sigma^2 (Prop. 8), i.e.
``GaussianDpEvent(noise_multiplier = sigma / sqrt(2))``. k changed votes can all move from class a
to class b (n_a - k, n_b + k): L2 sensitivity k sqrt(2), RDP k^2 lam / sigma^2.

Confident-GNMax first releases whether ``max_j n_j + N(0, sigma1^2) >= threshold``; only then it
answers with GNMax(sigma2). The max count moves by at most k between neighbours: the threshold
step is ``GaussianDpEvent(noise_multiplier = sigma1 / k)``, RDP k^2 lam / (2 sigma1^2).

Data-dependent bounds (a function of the private votes; see ``ledger`` for what that means):

* GNMax: Theorem 6 of PATE 2018 with q from Prop. 7 and orders mu2 = (sigma/k) sqrt(ln(1/q)),
  mu1 = mu2 + 1 (for k = 1 the choice of Prop. 10 and of tensorflow/privacy's pate_2018
  core.py). Theorem 6 holds for any mechanism with the two RDP guarantees it is given, so k
  enters through eps_i = k^2 mu_i / sigma^2 alone; q bounds Pr[GNMax(d) != argmax] at d itself.
* Threshold step: its output is one bit, so its data-dependent RDP is computed exactly: the Renyi
  divergence between Bernoulli(p) and Bernoulli(p'), p = Pr[answered | d], maximised over the
  neighbours' p' (max count m - k or m + k; the divergence is convex in p', so the extremes are
  the worst). The reference code instead applies Theorem 6 to min(p, 1 - p); the exact value is never
  larger than any valid bound.
"""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
from scipy import stats
from scipy.special import logsumexp

from dgd_jax.privacy import checks, events

# One changed teacher vote moves two histogram counts by 1 each.
L2_SENSITIVITY = math.sqrt(2.0)
# The maximum count moves by at most 1.
THRESHOLD_SENSITIVITY = 1.0


def _k(teachers_changed: int) -> int:
  return checks.count("teachers_changed", teachers_changed)


def gnmax_event(sigma: float, queries: int = 1, teachers_changed: int = 1
                ) -> dp_accounting.DpEvent:
  """``queries`` GNMax answers: GaussianDpEvent(sigma / (k sqrt(2))) each."""
  return events.gaussian_event(sigma, _k(teachers_changed) * L2_SENSITIVITY, queries)


def threshold_event(sigma1: float, queries: int = 1, teachers_changed: int = 1
                    ) -> dp_accounting.DpEvent:
  """``queries`` noisy threshold checks: GaussianDpEvent(sigma1 / k) each."""
  return events.gaussian_event(sigma1, _k(teachers_changed) * THRESHOLD_SENSITIVITY, queries)


def gnmax_rdp(sigma: float, orders, teachers_changed: int = 1) -> np.ndarray:
  """Data-independent RDP of one GNMax answer: k^2 lam / sigma^2 (PATE 2018 Prop. 8, k = 1)."""
  return events.gaussian_rdp(
      checks.positive("sigma", sigma) / (_k(teachers_changed) * L2_SENSITIVITY), orders)


def threshold_rdp(sigma1: float, orders, teachers_changed: int = 1) -> np.ndarray:
  """Data-independent RDP of one threshold check: k^2 lam / (2 sigma1^2)."""
  return events.gaussian_rdp(
      checks.positive("sigma1", sigma1) / (_k(teachers_changed) * THRESHOLD_SENSITIVITY), orders)


def gnmax_log_q(votes, sigma: float) -> np.ndarray:
  """ln of Prop. 7's bound on Pr[GNMax(d) != argmax], one per query:
  sum_{j != j*} Pr[N(0, 2 sigma^2) > n_j* - n_j], capped at 1 - 1/K."""
  votes = checks.votes(votes)
  sigma = checks.positive("sigma", sigma)
  top = np.argmax(votes, axis=1)
  gaps = np.take_along_axis(votes, top[:, None], axis=1) - votes
  terms = stats.norm.logsf(gaps, scale=math.sqrt(2.0) * sigma)  # PATE 2018 Prop. 7
  np.put_along_axis(terms, top[:, None], -np.inf, axis=1)
  return np.minimum(logsumexp(terms, axis=1), math.log1p(-1.0 / votes.shape[1]))


def _log1mexp(x: float) -> float:
  """ln(1 - e^x) for x <= 0, accurate at both ends (Maechler 2012)."""
  return math.log1p(-math.exp(x)) if x < -math.log(2.0) else math.log(-math.expm1(x))


def theorem6_rdp(logq: float, mu1: float, eps1: float, mu2: float, eps2: float,
                 orders) -> np.ndarray:
  """PATE 2018 Theorem 6, for a mechanism that is (mu1, eps1)- and (mu2, eps2)-RDP and whose likely
  outcome has Pr[M(D) != i*] <= q:

    D_lam(M(D) || M(D')) <= log((1-q) A^(lam-1) + q B^(lam-1)) / (lam - 1),
    A = (1-q) / (1 - (q e^eps2)^((mu2-1)/mu2)),   B = e^eps1 / q^(1/(mu1-1)),

  valid for lam <= mu1 (used for lam < mu1) when mu2 > 1, q e^eps2 < 1 (A > 0) and
  q <= e^((mu2-1) eps2) / (mu1/(mu1-1) * mu2/(mu2-1))^mu2 (the bound is non-decreasing in q there).
  Returns +inf at orders where it does not apply."""
  lam = checks.orders("orders", orders, minimum=1.0)
  out = np.full_like(lam, np.inf)
  if not (mu2 > 1.0 and mu1 > 1.0) or logq >= 0.0:
    return out
  applies = (logq + eps2 < 0.0 and logq <= (mu2 - 1.0) * eps2
             - mu2 * (math.log(mu1 / (mu1 - 1.0)) + math.log(mu2 / (mu2 - 1.0))))
  if not applies:
    return out
  mask = lam < mu1
  log1mq = _log1mexp(logq)
  log_a = log1mq - _log1mexp((logq + eps2) * (mu2 - 1.0) / mu2)
  log_b = eps1 - logq / (mu1 - 1.0)
  bound = np.logaddexp(log1mq + (lam - 1.0) * log_a, logq + (lam - 1.0) * log_b) / (lam - 1.0)
  out[mask] = bound[mask]  # PATE 2018 Thm. 6
  return out


def gnmax_rdp_data_dependent(votes, sigma: float, orders, teachers_changed: int = 1
                             ) -> np.ndarray:
  """Per-query data-dependent RDP of GNMax, shape [queries, orders]: min of Prop. 8 and Thm. 6
  with s = sigma / k, mu2 = s sqrt(ln(1/q)), mu1 = mu2 + 1, eps_i = mu_i / s^2."""
  lam = checks.orders("orders", orders, minimum=1.0)
  independent = gnmax_rdp(sigma, lam, teachers_changed)
  scaled = sigma / _k(teachers_changed)  # the one-vote sigma with the same RDP
  rows = []
  for logq in gnmax_log_q(votes, sigma):
    if np.isneginf(logq):  # the output is fixed: 0-RDP
      rows.append(np.zeros_like(lam))
      continue
    mu2 = scaled * math.sqrt(-logq)
    mu1 = mu2 + 1.0
    dependent = theorem6_rdp(logq, mu1, mu1 / scaled ** 2, mu2, mu2 / scaled ** 2, lam)
    rows.append(np.minimum(independent, dependent))
  return np.array(rows)


def threshold_rdp_data_dependent(votes, threshold: float, sigma1: float, orders,
                                 teachers_changed: int = 1) -> np.ndarray:
  """Per-query exact data-dependent RDP of the threshold bit, shape [queries, orders]:
  max over m' in {m - k, m + k} of D_lam(Bern(p(m)) || Bern(p(m'))), capped by
  k^2 lam / (2 sigma1^2)."""
  k = _k(teachers_changed)
  lam = checks.orders("orders", orders, minimum=1.0)[None, :]
  votes = checks.votes(votes)
  sigma1 = checks.positive("sigma1", sigma1)
  top = votes.max(axis=1)[:, None]

  def log_p(m):  # (ln Pr[answered], ln Pr[not answered]) with max count m
    return (stats.norm.logsf(threshold - m, scale=sigma1),
            stats.norm.logcdf(threshold - m, scale=sigma1))

  lp, lnp = log_p(top)
  worst = np.zeros((votes.shape[0], lam.shape[1]))
  for shift in (-float(k), float(k)):
    lq, lnq = log_p(top + shift)
    divergence = np.logaddexp(lam * lp + (1.0 - lam) * lq,
                              lam * lnp + (1.0 - lam) * lnq) / (lam - 1.0)  # Renyi of Bernoullis
    worst = np.maximum(worst, divergence)
  return np.minimum(worst, threshold_rdp(sigma1, lam[0], k)[None, :])
