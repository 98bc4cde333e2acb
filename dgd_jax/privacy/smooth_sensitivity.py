"""Smooth-sensitivity release of PATE 2018's data-dependent epsilon (Papernot, Song et al.,
"Scalable Private Learning with PATE", ICLR 2018, Sec. 4 and App. B-C).

A data-dependent RDP bound beta(x) (``pate2018``) is a function of the private votes; publishing
it leaks. PATE 2018 publishes instead

    beta(x) + SS_b(x) * N(0, sigma_ss^2),   SS_b(x) = max_d e^(-b d) LS(x, d)    (Sec. 4.2)

where LS(x, d) bounds the local sensitivity of beta at any dataset at distance d from x. That
"Gaussian noise scaled by smooth sensitivity" (GNSS) release is itself (lam, c)-RDP with
c = lam e^(2b) / sigma_ss^2 + (b lam - ln(1 - 2 lam b) / 2) / (lam - 1) for 1 < lam < 1/(2b)
(App. C, Thm. 23), so the answers plus the noisy epsilon are (lam, beta(x) + c)-RDP at x.

Local sensitivities, one query at a time, summed over the queries (LS of a sum <= sum of LS).
SS_b needs A(x, d) = max over datasets y within distance d of x of LS(y); for a sum that is at
most the sum over queries of each query's largest LS within distance d. So each query's LS at
distance d (below) is made monotone in d (a running maximum, ``within``) before the sum: the
sum of values at distance exactly d is not beta-smooth, because one query may peak at d while
another peaks at d' != d. (tensorflow/privacy's research/pate_2018 sums the per-distance
values as they are; we depart from it there, PRIVACY.md.)

* GNMax (App. B.4, Alg. 3-5): beta depends on the votes through q = Prop. 7's bound only; one
  changed vote moves q within [B_l(q), B_u(q)] (Prop. 12). Below q0 (where Thm. 6 meets the
  data-independent lam / sigma^2) beta is Thm. 6 with Prop. 10's orders, above it lam / sigma^2;
  between q1 = B_l(q0) and q0 the local sensitivity is a plateau (Prop. 13). The sensitivity at
  distance d follows the path that moves q towards that plateau one vote at a time (Alg. 4, 5).
  That beta is monotone in q (C5) and its one-step change too (C6) is what Prop. 13 assumes:
  ``check_conditions`` verifies both numerically, and the release refuses orders where they fail.
* Threshold step: its bound depends on the votes through the maximum count m only; one changed
  vote moves m by at most 1, so LS(x, d) = max over m' = m +- d of |beta(m' +- 1) - beta(m')|.

Everything assumes one changed example moves one teacher's vote (k = 1): the SS release refuses
k > 1. Host-side NumPy/SciPy only.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
from scipy import optimize, special, stats

from dgd_jax.privacy import checks, conversion, noise, pate2018
from dgd_jax.runtime.errors import ConfigError


def _log1mexp(x: float) -> float:
  """ln(1 - e^x) for x <= 0."""
  if x == 0.0:
    return -math.inf
  return math.log1p(-math.exp(x)) if x < -math.log(2.0) else math.log(-math.expm1(x))


def log_q(counts, sigma: float) -> float:
  """ln of Prop. 7's bound on Pr[GNMax != argmax] for one vote histogram (``pate2018``)."""
  counts = np.asarray(counts, dtype=np.float64)
  top = int(np.argmax(counts))
  gaps = np.delete(counts[top] - counts, top)
  logq = special.logsumexp(stats.norm.logsf(gaps, scale=math.sqrt(2.0) * sigma))  # Prop. 7
  return float(min(logq, math.log1p(-1.0 / counts.size)))


def gnmax_theorem6(logq: float, sigma: float, order: float) -> float:
  """Thm. 6 at ``order`` with Prop. 10's mu2 = sigma sqrt(ln 1/q), mu1 = mu2 + 1,
  eps_i = mu_i / sigma^2, evaluated without checking its conditions (the caller keeps
  q <= q0, where they hold)."""
  mu2 = sigma * math.sqrt(-logq)
  mu1 = mu2 + 1.0
  eps1, eps2 = mu1 / sigma ** 2, mu2 / sigma ** 2
  log1mq = _log1mexp(logq)
  log_a = (order - 1.0) * (log1mq - _log1mexp((logq + eps2) * (1.0 - 1.0 / mu2)))
  log_b = (order - 1.0) * (eps1 - logq / (mu1 - 1.0))
  return float(np.logaddexp(log1mq + log_a, logq + log_b) / (order - 1.0))  # PATE 2018 Thm. 6


def _theorem6_applies(logq: float, sigma: float, order: float) -> bool:
  """mu1 >= order and Lemma 9's bound on q (Thm. 6's conditions, Prop. 10's orders)."""
  mu2 = sigma * math.sqrt(-logq)
  mu1 = mu2 + 1.0
  if mu1 < order:
    return False
  eps2 = mu2 / sigma ** 2
  return logq <= (mu2 - 1.0) * eps2 - mu2 * math.log(mu1 / (mu1 - 1.0) * mu2 / (mu2 - 1.0))


@functools.lru_cache(maxsize=4096)
def log_q0(sigma: float, order: float) -> float:
  """ln q0: the largest q at which Thm. 6 is used; above it the data-independent lam / sigma^2
  is smaller (App. B.4). The root of Thm. 6 - lam / sigma^2 in ln q, bracketed below the
  natural bound min(-(1 + 1/sigma)^2, -((lam - 0.99)/sigma)^2, -1/sigma^2)."""
  independent = order / sigma ** 2

  def excess(logq):
    return gnmax_theorem6(logq, sigma, order) - independent

  upper = min(-(1.0 + 1.0 / sigma) ** 2, -((order - 0.99) / sigma) ** 2, -1.0 / sigma ** 2)
  if not _theorem6_applies(upper, sigma, order):
    raise ConfigError(f"Thm. 6 does not apply below q = exp({upper:g}) for sigma={sigma:g}, "
                      f"order={order:g}: no smooth-sensitivity analysis at this order.")
  if excess(upper) < 0.0:
    return upper
  lower = 2.0 * upper
  while excess(lower) > 0.0:
    if lower < -10000.0:
      raise ConfigError(f"no q0 above exp(-10000) for sigma={sigma:g}, order={order:g}.")
    lower *= 1.5
  root, info = optimize.brentq(excess, lower, upper, full_output=True)
  if not info.converged or not _theorem6_applies(root, sigma, order):
    raise ConfigError(f"q0 not found for sigma={sigma:g}, order={order:g}.")
  return float(root)


def gnmax_rdp(logq: float, sigma: float, order: float) -> float:
  """The GNMax bound the release uses: Thm. 6 below q0, lam / sigma^2 at and above it."""
  if logq < log_q0(sigma, order):
    return gnmax_theorem6(logq, sigma, order)
  return order / sigma ** 2  # Prop. 8


def q_lower(q: float, sigma: float, num_classes: int) -> float:
  """B_l(q): the smallest Prop. 7 bound one changed vote can reach from q (Prop. 12)."""
  m = num_classes - 1
  return float(m / 2.0 * special.erfc(1.0 / sigma + special.erfcinv(2.0 * q / m)))


def q_upper(q: float, sigma: float, num_classes: int) -> float:
  """B_u(q): the largest Prop. 7 bound one changed vote can reach from q, capped at 1
  (Prop. 12)."""
  m = num_classes - 1
  return float(min(1.0, m / 2.0 * special.erfc(-1.0 / sigma + special.erfcinv(2.0 * q / m))))


@functools.lru_cache(maxsize=4096)
def log_q1(sigma: float, order: float, num_classes: int) -> float:
  """ln q1 = ln B_l(q0): below the plateau (Prop. 13)."""
  return math.log(q_lower(math.exp(log_q0(sigma, order)), sigma, num_classes))


def gnmax_local_sensitivity(logq: float, sigma: float, num_classes: int, order: float) -> float:
  """Alg. 3: a bound on the local sensitivity of ``gnmax_rdp`` at a histogram whose Prop. 7
  bound is q; q in [q1, q0] is moved to q1, where the plateau's maximum is (Prop. 13)."""
  if log_q1(sigma, order, num_classes) <= logq <= log_q0(sigma, order):
    logq = log_q1(sigma, order, num_classes)
  q = math.exp(logq)
  here = gnmax_rdp(logq, sigma, order)
  up = gnmax_rdp(math.log(q_upper(q, sigma, num_classes)), sigma, order)
  down = gnmax_rdp(math.log(q_lower(q, sigma, num_classes)), sigma, order)
  return max(up - here, here - down)  # PATE 2018 Alg. 3


def gnmax_local_sensitivities(counts, num_teachers: int, sigma: float, order: float
                              ) -> np.ndarray:
  """LS(x, d) of ``gnmax_rdp`` for d = 0 .. num_teachers - 1 (Alg. 4-5): from the histogram,
  move one vote at a time towards the plateau [q1, q0] (from the runner-up to the top when q is
  above q0, from the top to the runner-up when below q1); once there, the plateau's value."""
  num_classes = len(counts)
  lo, hi = log_q1(sigma, order, num_classes), log_q0(sigma, order)
  plateau = gnmax_local_sensitivity(lo, sigma, num_classes, order)
  out = np.full(num_teachers, plateau)
  logq = log_q(counts, sigma)
  if lo <= logq <= hi:
    return out
  path = sorted((float(c) for c in counts), reverse=True)
  out[0] = gnmax_local_sensitivity(logq, sigma, num_classes, order)
  widen = logq > hi  # q too large: widen the gap between the top two counts
  d = 0
  while (widen and logq > hi and path[1] > 0) or (not widen and logq < lo):
    d += 1
    if widen:
      path[0] += 1
      path[1] -= 1
      i = 1
      while i < num_classes - 1 and path[i] < path[i + 1]:  # keep the counts sorted
        path[i], path[i + 1] = path[i + 1], path[i]
        i += 1
    else:
      path[0] -= 1
      path[1] += 1
    logq = log_q(path, sigma)
    out[d] = gnmax_local_sensitivity(logq, sigma, num_classes, order)  # Alg. 4-5
  return out


def threshold_rdp_theorem6(log_pr_answered: float, sigma1: float, orders) -> np.ndarray:
  """The threshold step's bound in PATE 2018's code: Thm. 6 applied to min(p, 1 - p) with the
  GNMax bound of std sqrt(2) sigma1 (the maximum has sensitivity 1, half GNMax's)."""
  lam = checks.orders("orders", orders, minimum=1.0)
  logq = min(log_pr_answered, _log1mexp(log_pr_answered))
  s = math.sqrt(2.0) * sigma1
  independent = lam / s ** 2
  if np.isneginf(logq):
    return np.zeros_like(lam)
  mu2 = s * math.sqrt(-logq)
  return np.minimum(independent, pate2018.theorem6_rdp(logq, mu2 + 1.0, (mu2 + 1.0) / s ** 2, mu2,
                                                       mu2 / s ** 2, lam))


def threshold_rdp_by_count(num_teachers: int, threshold: float, sigma1: float, order: float,
                           bound: str = "exact") -> np.ndarray:
  """The threshold step's data-dependent RDP at ``order`` for every maximum count
  m = 0 .. num_teachers: 'exact' (``pate2018.threshold_rdp_data_dependent``, the Renyi
  divergence of the answered bit) or 'theorem6' (``threshold_rdp_theorem6``)."""
  checks.choice("bound", bound, ("exact", "theorem6"))
  counts = np.arange(num_teachers + 1, dtype=np.float64)
  if bound == "exact":
    votes = np.stack([counts, np.zeros_like(counts)], axis=1)  # maximum count m
    return pate2018.threshold_rdp_data_dependent(votes, threshold, sigma1, [order])[:, 0]
  return np.array([threshold_rdp_theorem6(
      float(stats.norm.logsf(threshold - m, scale=sigma1)), sigma1, [order])[0] for m in counts])


def threshold_local_sensitivities(max_count: int, rdp_by_count: np.ndarray) -> np.ndarray:
  """LS(x, d) of the threshold bound, d = 0 .. n - 1, for a histogram with maximum count m:
  the largest one-vote change of ``rdp_by_count`` at m + d or m - d (those at distance d;
  the discounted maximum makes the nearer counts' entries binding)."""
  n = len(rdp_by_count) - 1
  steps = np.abs(np.diff(rdp_by_count))  # steps[v] = |beta(v + 1) - beta(v)|
  at = np.full(n + 1, -np.inf)  # LS at maximum count v: the larger one-vote change
  at[:n] = steps
  at[1:] = np.maximum(at[1:], steps)
  out = np.zeros(n)
  for d in range(min(n, max(max_count, n - max_count))):
    candidates = [at[v] for v in (max_count + d, max_count - d) if 0 <= v <= n]
    out[d] = max(candidates)
  return out


def within(local_sensitivities) -> np.ndarray:
  """max_{d' <= d} LS(x, d'): a query's local sensitivity bound at distance d made a bound
  for every dataset within distance d (what a sum over queries needs)."""
  return np.maximum.accumulate(np.asarray(local_sensitivities, dtype=np.float64))


def discounted_max(beta: float, local_sensitivities) -> float:
  """SS_beta = max_d e^(-beta d) LS(x, d) (Sec. 4.2)."""
  ls = np.asarray(local_sensitivities, dtype=np.float64)
  return float(np.max(ls * np.exp(-beta * np.arange(ls.size))))


def gnss_rdp(beta: float, sigma_ss: float, order: float) -> float:
  """RDP at ``order`` of releasing f(x) + SS_beta(x) N(0, sigma_ss^2) (App. C, Thm. 23), valid
  for 1 < order < 1 / (2 beta)."""
  if beta > 0 and not 1.0 < order < 1.0 / (2.0 * beta):
    raise ConfigError(f"order={order:g} is outside (1, 1/(2 beta)) = (1, {1 / (2 * beta):g}): "
                      "Thm. 23 does not apply; lower beta or the order.")
  return (order * math.exp(2.0 * beta) / sigma_ss ** 2
          + (-0.5 * math.log(1.0 - 2.0 * order * beta) + beta * order) / (order - 1.0))


def _theorem6_in_q(logq: np.ndarray, sigma: float, order: float) -> np.ndarray:
  return np.array([gnmax_theorem6(float(l), sigma, order) for l in logq])


def check_conditions(sigma: float, num_classes: int, order: float, points: int = 4000,
                     span: float = 60.0) -> tuple[bool, bool]:
  """(C5, C6) of App. B.4.2 at ``order``: C5, Thm. 6 (Prop. 10's orders) is non-decreasing in q
  on (0, q0]; C6, beta(B_u(q)) - beta(q) is non-decreasing on (0, B_l(q0)]. Checked on
  ``points`` log-spaced q from q0 e^(-span) up (PATE 2018's code minimises the symbolic
  derivative numerically instead), to a relative tolerance of 1e-12."""
  top = log_q0(sigma, order)
  grid = np.linspace(top - span, top, points)
  beta = _theorem6_in_q(grid, sigma, order)
  c5 = bool(np.all(np.diff(beta) >= -1e-12 * np.abs(beta[1:])))
  if not c5:
    return False, False
  top6 = math.log(q_lower(math.exp(top), sigma, num_classes))
  grid6 = np.linspace(top6 - span, top6, points)
  up = np.log([q_upper(math.exp(l), sigma, num_classes) for l in grid6])
  step = _theorem6_in_q(up, sigma, order) - _theorem6_in_q(grid6, sigma, order)
  c6 = bool(np.all(np.diff(step) >= -1e-12 * np.maximum(np.abs(step[1:]), 1e-300)))
  return c5, c6


@functools.lru_cache(maxsize=4096)
def conditions_hold(sigma: float, num_classes: int, order: float) -> tuple[bool, bool]:
  """``check_conditions``, cached; (False, False) where q0 itself does not exist."""
  try:
    return check_conditions(sigma, num_classes, order)
  except ConfigError:
    return False, False


# The vote histogram a public plan assumes (``plan_release``) when none is given: the share of
# the teachers behind each query's top class (the query planner's default assumed consensus).
ASSUMED_CONSENSUS = 0.5
PARAMETER_SOURCES = ("config", "plan", "votes")  # 'votes': a diagnostic, never a DP release


@dataclasses.dataclass(frozen=True)
class SmoothSensitivityPlan:
  """The GNSS release's parameters: the order lam, beta and sigma_ss. Thm. 23 holds for
  parameters fixed before the data is seen, so only a plan whose ``source`` is 'config' (set
  by hand) or 'plan' (``plan_release``, on an assumed histogram) makes a DP release; 'votes'
  (``choose_from_votes``, PATE 2018's analysis) chose them from the private votes and its
  release is a diagnostic."""

  order: float
  beta: float
  sigma_ss: float
  source: str

  def __post_init__(self):
    checks.choice("source", self.source, PARAMETER_SOURCES)
    checks.positive("sigma_ss", self.sigma_ss)
    if not self.beta > 0:
      raise ConfigError(f"beta={self.beta}: the smooth sensitivity's discount must be > 0.")
    gnss_rdp(self.beta, self.sigma_ss, self.order)  # 1 < order < 1/(2 beta) (Thm. 23)

  @property
  def dp_release(self) -> bool:
    return self.source != "votes"

  @property
  def rdp(self) -> float:
    """The release's own (lam, c)-RDP cost c (Thm. 23): data-independent."""
    return gnss_rdp(self.beta, self.sigma_ss, self.order)


def _best_order(votes: np.ndarray, threshold, sigma1, sigma2: float, mask: np.ndarray,
                delta: float, orders, repeat: int = 1) -> float:
  """The order minimising the classic data-dependent epsilon of ``votes`` (each row
  ``repeat`` times) over ``orders`` where C5/C6 hold (PATE 2018's choice)."""
  grid = checks.orders("orders", orders if orders is not None else np.concatenate(
      [np.arange(2, 100.5, 0.5), np.logspace(2, np.log10(500), num=100)]), minimum=1.0)
  curve = np.zeros_like(grid)
  if threshold is not None:
    curve += pate2018.threshold_rdp_data_dependent(votes, threshold, sigma1, grid).sum(axis=0)
  curve += pate2018.gnmax_rdp_data_dependent(votes[mask], sigma2, grid).sum(axis=0)
  ranked = grid[np.argsort(repeat * curve + math.log(1.0 / delta) / (grid - 1.0), kind="stable")]
  order = next((float(o) for o in ranked if all(conditions_hold(sigma2, votes.shape[1],
                                                                float(o)))), None)
  if order is None:
    raise ConfigError(f"conditions C5/C6 of PATE 2018 App. B.4.2 fail at every order for "
                      f"sigma2={sigma2:g}: no smooth-sensitivity release.")
  return order


def _best_beta(rdp: float, ls: np.ndarray, order: float) -> tuple[float, float]:
  """(beta, sigma_ss) minimising rdp + c + 2 SS sigma_ss over beta in 0.3/lam .. 0.495/lam
  with sigma_ss = (lam e^(2 beta) / SS)^(1/3) (PATE 2018's choice); (0.3/lam, 1) where no
  local sensitivity is positive (nothing to hide)."""
  best = (math.inf, 0.3 / order, 1.0)
  for beta in ([] if not np.any(ls > 0) else np.arange(0.3 / order, 0.495 / order, 0.01 / order)):
    ss = discounted_max(beta, ls)
    sigma_ss = (order * math.exp(2.0 * beta) / ss) ** (1.0 / 3.0)  # argmin c + 2 SS sigma
    score = rdp + gnss_rdp(beta, sigma_ss, order) + 2.0 * ss * sigma_ss
    if score < best[0]:
      best = (score, float(beta), float(sigma_ss))
  return best[1], best[2]


def _charged(votes: np.ndarray, answered) -> tuple[np.ndarray, str]:
  if answered is None:
    return np.ones(votes.shape[0], dtype=bool), "every"
  mask = np.asarray(answered, dtype=bool)
  if mask.shape != (votes.shape[0],):
    raise ConfigError(f"answered mask has shape {mask.shape}; expected ({votes.shape[0]},).")
  return mask, "answered"


def _choose(votes, threshold, sigma1, sigma2: float, delta: float, answered, orders, order,
            source: str, repeat: int = 1) -> SmoothSensitivityPlan:
  """The order (unless given), beta and sigma_ss of PATE 2018's analysis of ``votes``, each
  row standing for ``repeat`` identical queries (sums over queries scale by it)."""
  votes, delta = checks.votes(votes), checks.delta(delta)
  mask, _ = _charged(votes, answered)
  order = float(order) if order is not None else _best_order(votes, threshold, sigma1, sigma2,
                                                              mask, delta, orders, repeat)
  _check_order(sigma2, votes.shape[1], order)
  rdp, ls = confident_gnmax_terms(votes, threshold, sigma1, sigma2, order, mask)
  beta, sigma_ss = _best_beta(repeat * float(rdp), repeat * ls, order)
  return SmoothSensitivityPlan(order, beta, sigma_ss, source)


def choose_from_votes(votes, threshold: float | None, sigma1: float | None, sigma2: float,
                      delta: float, answered=None, orders=None, order: float | None = None
                      ) -> SmoothSensitivityPlan:
  """PATE 2018's analysis: the order (unless given) minimising the classic data-dependent
  epsilon of the private ``votes`` over ``orders``, then beta and sigma_ss minimising
  epsilon + 2 std. These look at the votes: the plan's source is 'votes', and a release made
  with it is a DIAGNOSTIC, not DP (the reference script's own warning: such results "cannot
  be released")."""
  return _choose(votes, threshold, sigma1, sigma2, delta, answered, orders, order, "votes")


def assumed_votes(num_queries: int, num_teachers: int, num_classes: int,
                  consensus: float = ASSUMED_CONSENSUS) -> np.ndarray:
  """[Q, K] histograms of a public assumption: round(consensus n) votes on one class, the rest
  spread as evenly as whole votes allow over the others. Reads no private data."""
  checks.count("num_queries", num_queries)
  if not 0 < consensus <= 1:
    raise ConfigError(f"consensus={consensus}: the assumed share of the top class must lie in "
                      "(0, 1].")
  top = int(round(consensus * num_teachers))
  rest = num_teachers - top
  row = np.zeros(num_classes)
  row[0] = top
  row[1:] = rest // (num_classes - 1)
  row[1:1 + rest % (num_classes - 1)] += 1
  return np.tile(row, (num_queries, 1))


@functools.lru_cache(maxsize=64)
def plan_release(num_queries: int, num_teachers: int, num_classes: int,
                 threshold: float | None, sigma1: float | None, sigma2: float, delta: float,
                 consensus: float = ASSUMED_CONSENSUS, orders=None) -> SmoothSensitivityPlan:
  """Parameters fixed before any vote is read: PATE 2018's choice made on ``assumed_votes``
  (every query charged) instead of the private ones, as the query planner chooses its noise
  on an assumed consensus. A release with them is (lam, c)-RDP by Thm. 23, c = ``rdp``."""
  row = assumed_votes(1, num_teachers, num_classes, consensus)  # every query alike
  return _choose(row, threshold, sigma1, sigma2, delta, None, orders, None, "plan",
                 repeat=checks.count("num_queries", num_queries))


def _check_order(sigma2: float, num_classes: int, order: float) -> None:
  if not all(conditions_hold(sigma2, num_classes, order)):
    raise ConfigError(f"conditions C5/C6 of PATE 2018 App. B.4.2 fail for sigma2={sigma2:g}, "
                      f"{num_classes} classes, order {order:g}: the GNMax local-sensitivity "
                      "bound does not hold there; no smooth-sensitivity release.")


@dataclasses.dataclass(frozen=True)
class SmoothSensitivityRelease:
  """One smooth-sensitivity release of a Confident-GNMax run's data-dependent epsilon at
  ``order``. ``rdp`` is the data-dependent RDP at that order; ``epsilon_before`` its
  conversion at that order by dp-accounting's improved rule, the headline's
  (``conversion.improved_epsilon``); ``epsilon`` adds the GNSS release's own RDP
  (``gnss_rdp``): the expected released value; ``std`` = SS sigma_ss, the std of the noise on
  it; ``released`` = epsilon + std * z for the standard normal draw z. ``source``: where the
  order, beta and sigma_ss came from; ``dp_release``: whether they were fixed before the votes
  were read (Thm. 23), else the release is a diagnostic."""

  order: float
  beta: float
  smooth_sensitivity: float
  sigma_ss: float
  rdp: float
  gnss_rdp: float
  epsilon_before: float
  epsilon: float
  std: float
  released: float
  delta: float
  charged: str
  queries: int
  answered: int
  conditions: tuple[bool, bool]
  source: str = "votes"
  dp_release: bool = False

  def to_json(self) -> dict:
    return {**dataclasses.asdict(self), "conditions": {"C5": self.conditions[0],
                                                       "C6": self.conditions[1]}}


CHARGES = ("answered", "every")


def confident_gnmax_terms(votes, threshold: float | None, sigma1: float | None, sigma2: float,
                          order: float, charged_gnmax: np.ndarray, threshold_bound: str = "exact"
                          ) -> tuple[float, np.ndarray]:
  """(data-dependent RDP at ``order``, A(x, d): a bound on its local sensitivity at every
  dataset within distance d, the sum over queries of each query's ``within``) of a run: the
  threshold step on every query (skipped when ``threshold`` is None: plain GNMax) and GNMax on
  the queries where ``charged_gnmax`` is True."""
  votes = np.asarray(votes, dtype=np.float64)
  num_teachers = int(round(votes[0].sum()))
  total, ls = 0.0, np.zeros(num_teachers)
  if threshold is not None:
    by_count = threshold_rdp_by_count(num_teachers, threshold, sigma1, order, threshold_bound)
    for row in votes:
      m = int(round(row.max()))
      total += by_count[m]
      ls += within(threshold_local_sensitivities(m, by_count))
  for row in votes[charged_gnmax]:
    total += gnmax_rdp(log_q(row, sigma2), sigma2, order)
    ls += within(gnmax_local_sensitivities(row, num_teachers, sigma2, order))
  return total, ls


def release_confident_gnmax(votes, threshold: float | None, sigma1: float | None, sigma2: float,
                            delta: float, plan: SmoothSensitivityPlan, answered=None,
                            rng: np.random.Generator | None = None, teachers_changed: int = 1
                            ) -> SmoothSensitivityRelease:
  """The smooth-sensitivity release of a (Confident-)GNMax run's data-dependent epsilon at the
  ``plan``'s order, beta and sigma_ss (Thm. 23: beta(x) + SS_beta(x) sigma_ss N(0, 1) is
  (lam, c)-RDP when they are fixed before the votes; ``plan.dp_release`` says whether they
  were).

  ``answered`` (a boolean mask) charges GNMax on the answered queries only (PATE 2018's
  accounting of a run); None charges it on every query. Orders where C5/C6 fail are refused.
  ``rng`` draws the noise of ``released`` (None: a fresh generator)."""
  if checks.count("teachers_changed", teachers_changed) != 1:
    raise ConfigError(f"teachers_changed={teachers_changed}: the smooth-sensitivity analysis "
                      "assumes one changed example moves one teacher's vote (k = 1).")
  votes = checks.votes(votes)
  delta = checks.delta(delta)
  mask, charged = _charged(votes, answered)
  order = float(plan.order)
  _check_order(sigma2, votes.shape[1], order)
  conditions = conditions_hold(sigma2, votes.shape[1], order)
  rdp, ls = confident_gnmax_terms(votes, threshold, sigma1, sigma2, order, mask)
  rdp, cost = float(rdp), plan.rdp
  ss = discounted_max(plan.beta, ls) if np.any(ls > 0) else 0.0  # SS_beta(x) (Sec. 4.2)
  before = conversion.improved_epsilon([order], [rdp], delta)[0]  # as the ledger converts
  rng = np.random.default_rng() if rng is None else rng
  std = ss * plan.sigma_ss
  return SmoothSensitivityRelease(
      order=order, beta=float(plan.beta), smooth_sensitivity=float(ss),
      sigma_ss=float(plan.sigma_ss), rdp=rdp, gnss_rdp=float(cost),
      epsilon_before=before, epsilon=float(before + cost), std=float(std),
      released=float(before + cost + std * noise.numpy_normal(rng)), delta=delta,
      charged=charged, queries=int(votes.shape[0]), answered=int(mask.sum()),
      conditions=conditions, source=plan.source, dp_release=plan.dp_release)
