"""LNMax (Laplace noisy max) label queries: PATE 2017 (Papernot et al., ICLR 2017) and DGD Eq. (3).

Mechanism: each query returns ``argmax_j (n_j + Lap(b))`` over the teachers' vote histogram n.
PATE 2017 writes the scale as b = 1/gamma; DGD writes b = 2/eps0 (DGD's experiments: b = 40, so
eps0 = 0.05 per query; PATE's MNIST runs: b = 20, gamma = 0.05, eps = 0.1 per query).

Sensitivity: when one neighbouring change of the private set moves k teachers' shards (k =
``teachers_changed``, ``data.partitions.TEACHERS_CHANGED``: 1 for the default partition under
replace-one), at most k votes change, each moving from a class to another, so the histogram's
L1 sensitivity is 2k and each query is (2k/b)-DP = (2 k gamma)-DP (PATE 2017 App. B Thm. 3 has
k = 1). For dp-accounting (RDP and PLD) a query is ``LaplaceDpEvent(noise_multiplier = b / 2k)``:
a one-dimensional Laplace of scale b with a shift of 2k. For k = 1 that is conservative: the full noisy histogram, of which the argmax is a post-processing, is
two Laplace(b) releases shifted by 1 each, whose RDP and PLD are smaller (tests check it).
"""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
from scipy.special import logsumexp

from dgd_jax.privacy import checks, events

# One changed teacher vote moves two histogram counts by 1 each.
L1_SENSITIVITY = 2.0


def per_query_epsilon(noise_scale: float, teachers_changed: int = 1) -> float:
  """Pure epsilon of one LNMax query: 2k/b = 2 k gamma (PATE 2017 App. B Thm. 3, k = 1: DGD's
  eps0), k the teachers one neighbouring change moves."""
  k = checks.count("teachers_changed", teachers_changed)
  return k * L1_SENSITIVITY / checks.positive("noise_scale", noise_scale)


def query_event(noise_scale: float, queries: int = 1, teachers_changed: int = 1
                ) -> dp_accounting.DpEvent:
  """dp-accounting event of ``queries`` LNMax queries: LaplaceDpEvent(b / 2k) per query."""
  k = checks.count("teachers_changed", teachers_changed)
  return events.laplace_event(noise_scale, k * L1_SENSITIVITY, queries)


def advanced_composition_epsilon(pure_eps, counts, delta: float) -> float:
  """Advanced composition as written in PATE 2017 App. B and DGD Sec. III-E:
  T eps^2 + eps sqrt(2 T ln(1/delta)) for T queries of pure eps (with eps = 2 gamma this is
  PATE's 4 T gamma^2 + 2 gamma sqrt(2 T ln(1/delta)); with eps = eps0 it is DGD's formula).
  For several groups (eps_i, T_i) it is S + sqrt(2 S ln(1/delta)) with S = sum_i T_i eps_i^2.

  Dwork-Rothblum-Vadhan's theorem has T eps (e^eps - 1) where this formula has T eps^2; the formula
  is still a valid bound because pure eps-DP implies (eps^2/2)-zCDP (Bun & Steinke 2016), whose
  composition gives S/2 + sqrt(2 S ln(1/delta)), which is smaller.
  """
  delta = checks.delta(delta)
  pure_eps = np.atleast_1d(np.asarray(pure_eps, dtype=np.float64))
  counts = np.atleast_1d(np.asarray(counts, dtype=np.float64))
  s = float(np.sum(counts * pure_eps ** 2))
  return s + math.sqrt(2.0 * s * math.log(1.0 / delta))  # PATE 2017 App. B; DGD Sec. III-E


def log_q(votes, noise_scale: float) -> np.ndarray:
  """ln of PATE 2017 Lemma 4's bound on q = Pr[M(d) != argmax], one per query:
  q <= sum_{j != j*} (2 + gamma gap_j) / (4 exp(gamma gap_j)), gap_j = n_j* - n_j,
  capped at 1 - 1/K (the argmax of iid-noised counts wins with probability >= 1/K)."""
  votes = checks.votes(votes)
  gamma = 1.0 / checks.positive("noise_scale", noise_scale)
  top = np.argmax(votes, axis=1)
  gaps = gamma * (np.take_along_axis(votes, top[:, None], axis=1) - votes)
  terms = np.log(2.0 + gaps) - math.log(4.0) - gaps  # PATE 2017 Lemma 4
  np.put_along_axis(terms, top[:, None], -np.inf, axis=1)  # the sum runs over j != j*
  return np.minimum(logsumexp(terms, axis=1), math.log1p(-1.0 / votes.shape[1]))


def _log1mexp(x: np.ndarray) -> np.ndarray:
  """ln(1 - e^x) elementwise for x <= 0 (-inf at 0), accurate at both ends (Maechler 2012)."""
  x = np.asarray(x, dtype=np.float64)
  with np.errstate(divide="ignore", over="ignore"):
    return np.where(x < -math.log(2.0), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))


def log_moment_bound(logq, pure_eps: float, moment_orders) -> np.ndarray:
  """PATE 2017 bound on the log-moment alpha(l) of a pure-eps mechanism whose likely outcome has
  Pr[M(d) != o*] <= q, per query (rows) and order (columns):

    min( eps^2 l (l+1) / 2,                                  # Thm. 3 (Bun & Steinke 2016)
         log((1-q) ((1-q) / (1 - e^eps q))^l + q e^(eps l)), # Thm. 1 (data-dependent)
         eps l )                                             # pure DP

  Theorem 1's proof bounds the moment at Pr[M(d) != o*] = q' and then needs the expression to be
  non-decreasing in q' on [0, q]. With u = (1-q)/(1-e^eps q), the derivative is positive whenever
  u <= e^eps, i.e. q <= 1/(e^eps + 1), so the data-dependent term is used only there (the condition
  of tensorflow/privacy's pate_2018 ``rdp_pure_eps``). The PATE 2017 reference code uses q < 0.5,
  which is larger and, for eps > ln 2, reaches q >= e^-eps where 1 - e^eps q <= 0 and the formula is
  undefined. Elsewhere only the data-independent terms apply.
  """
  logq = np.atleast_1d(np.asarray(logq, dtype=np.float64))[:, None]
  l = checks.orders("moment_orders", moment_orders, minimum=0.0)[None, :]
  eps = checks.positive("pure_eps", pure_eps)
  independent = np.minimum(0.5 * eps * eps * l * (l + 1.0), eps * l)  # Thm. 3 and pure DP
  usable = logq <= -np.logaddexp(0.0, eps)  # q <= 1 / (e^eps + 1), in log space (no overflow)
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    logq = np.minimum(logq, 0.0)
    log1mq = _log1mexp(logq)
    log1m_eq = _log1mexp(np.minimum(logq + eps, 0.0))  # ln(1 - e^eps q)
    dependent = np.logaddexp(log1mq + l * (log1mq - log1m_eq), logq + eps * l)  # Thm. 1
  return np.where(usable, np.minimum(independent, dependent), independent)


def log_moments(noise_scale: float, queries: int, moment_orders, votes=None,
                teachers_changed: int = 1) -> np.ndarray:
  """Summed log-moments alpha(l) of ``queries`` LNMax queries (PATE 2017 Thm. 2.1, composability):
  data-independent (Thm. 3) without ``votes``; data-dependent (Thm. 1 with Lemma 4) with them.
  Thm. 1 holds for any eps-DP mechanism, so k changed teachers enter through eps = 2k/b alone."""
  eps = per_query_epsilon(noise_scale, teachers_changed)
  if votes is None:
    logq = np.zeros(1)  # q = 1: only the data-independent terms apply
    return checks.count("queries", queries) * log_moment_bound(logq, eps, moment_orders)[0]
  return np.sum(log_moment_bound(log_q(votes, noise_scale), eps, moment_orders), axis=0)


def rdp_data_dependent(votes, noise_scale: float, orders, teachers_changed: int = 1
                       ) -> np.ndarray:
  """Data-dependent RDP curve (summed over queries) at Renyi orders lam = l + 1: the per-query
  minimum of the exact Laplace RDP of ``query_event`` and PATE 2017 Thm. 1 as alpha(l) / l."""
  lam = checks.orders("orders", orders, minimum=1.0)
  eps = per_query_epsilon(noise_scale, teachers_changed)
  bound = log_moment_bound(log_q(votes, noise_scale), eps, lam - 1.0) / (lam - 1.0)
  return np.sum(np.minimum(bound, events.laplace_rdp(eps, lam)[None, :]), axis=0)
