"""A Renyi privacy filter for (Confident-)GNMax queries (Feldman & Zrnic 2021, "Individual
Privacy Accounting via a Renyi Filter", Thm. 3.1 with Renyi budgets fixed in advance).

A sequence of mechanisms chosen adaptively, each with an RDP bound rho_i(lam) that is known
before it runs (a function of the earlier outputs only), is (lam, B(lam))-RDP if the
interaction stops before sum_i rho_i(lam) could exceed the budget B(lam) fixed before the
first query. Confident-GNMax is such a sequence: query i's threshold step (RDP
k^2 lam / (2 sigma1^2)) runs on every query; its GNMax step (k^2 lam / sigma2^2) runs only
when the threshold bit it follows said "answer", so only then is it charged. Both costs are
data-independent; what is charged depends on the released bits alone, which the filter may
read. So, unlike summing the realised costs of a run after the fact, a filtered run's
epsilon is a DP guarantee: the budget B converted at delta.

The rule applied here: before query i, continue only if, at every order with a finite budget,
the spent cost plus query i's worst case (threshold and GNMax) is within the budget; so a query
whose threshold bit says "answer" can always be answered. Plain GNMax (no threshold step)
charges every query the GNMax cost.

The budget: one order lam* (``filter_order``, chosen from public parameters only) with
B(lam*) = the RDP that the improved conversion (Balle et al. 2020 Thm. 21) turns into the
target epsilon at delta, less what other records of the ledger spend at lam*; every other
order's budget is +inf (a finite one could only stop the filter earlier: epsilon is the
minimum over orders).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from dgd_jax.privacy import checks, conversion, pate2018
from dgd_jax.runtime.errors import ConfigError

STOP_REASONS = ("budget", "queries")


def rdp_budget(epsilon: float, delta: float, order: float) -> float:
  """The RDP at ``order`` whose improved conversion is ``epsilon`` at ``delta``:
  B = eps - ln(1 - 1/lam) + ln(delta lam) / (lam - 1) (inverse of Balle et al. 2020 Thm. 21 /
  Canonne, Kamath & Steinke 2020 Prop. 12, as ``dp_accounting.rdp.compute_epsilon``)."""
  epsilon = checks.positive("epsilon", epsilon)
  delta = checks.delta(delta)
  order = float(order)
  if not order > 1.01:
    raise ConfigError(f"filter order {order:g} must exceed 1.01 (the improved conversion's "
                      "domain).")
  return epsilon - math.log1p(-1.0 / order) + math.log(delta * order) / (order - 1.0)


def step_rdp(mechanism: str, sigma2: float, sigma1: float | None, orders,
             teachers_changed: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """(threshold step RDP, GNMax RDP) per query at ``orders``, data-independent; the threshold
  step costs 0 for plain GNMax."""
  checks.choice("mechanism", mechanism, ("gnmax", "confident_gnmax"))
  gnmax = pate2018.gnmax_rdp(sigma2, orders, teachers_changed)
  if mechanism == "gnmax":
    return np.zeros_like(gnmax), gnmax
  return pate2018.threshold_rdp(sigma1, orders, teachers_changed), gnmax


def filter_order(epsilon: float, delta: float, mechanism: str, sigma2: float,
                 sigma1: float | None, answer_rate: float = 1.0,
                 orders=conversion.DEFAULT_RDP_ORDERS, teachers_changed: int = 1,
                 spent_before=None) -> float:
  """The order lam* whose budget admits the most queries at an assumed (public) rate of
  answered queries: argmax (B(lam) - spent_before(lam)) / (threshold + rate * GNMax)(lam).
  Reads no votes."""
  lam = checks.orders("orders", orders, minimum=1.01)
  step1, step2 = step_rdp(mechanism, sigma2, sigma1, lam, teachers_changed)
  budget = np.array([rdp_budget(epsilon, delta, o) for o in lam])
  if spent_before is not None:
    budget = budget - np.asarray(spent_before, dtype=np.float64)
  room = budget / (step1 + answer_rate * step2)
  best = int(np.argmax(room))
  if not room[best] > 0:
    raise ConfigError(f"no Renyi order leaves any budget for queries at epsilon {epsilon:g}, "
                      f"delta {delta:g}: the records before the queries spend it all.")
  return float(lam[best])


@dataclasses.dataclass(frozen=True)
class FilterOutcome:
  """Where the filter stopped: ``asked`` queries asked (the first ``asked`` of the plan),
  ``answered`` a boolean mask over them, ``spent`` the RDP spent at the filter's order(s),
  ``stop_reason`` 'budget' (the next query could exceed it) or 'queries' (the plan ran out
  first)."""

  asked: int
  answered: np.ndarray
  spent: float
  budget: float
  order: float
  stop_reason: str

  def to_json(self) -> dict:
    return {"asked": self.asked, "answered": int(self.answered.sum()), "spent_rdp": self.spent,
            "budget_rdp": self.budget, "order": self.order, "stop_reason": self.stop_reason}


def run_filter(passed, budget, threshold_cost, gnmax_cost) -> FilterOutcome:
  """Runs the filter over the threshold bits ``passed`` (one per planned query, in order: the
  bit query i's threshold step releases if it is asked). ``budget``, ``threshold_cost`` and
  ``gnmax_cost`` are per order (scalars or arrays over the same orders; +inf budget: no
  limit at that order). Query i is asked only if, at every order, spent + threshold_cost +
  gnmax_cost <= budget; it then costs threshold_cost, plus gnmax_cost if its bit passed
  (Feldman & Zrnic 2021 Alg. 1)."""
  passed = np.asarray(passed, dtype=bool)
  budget, c1, c2 = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, dtype=np.float64))
                                         for x in (budget, threshold_cost, gnmax_cost)))
  spent = np.zeros_like(budget)
  for asked, bit in enumerate(passed):
    if np.any(spent + c1 + c2 > budget):
      return FilterOutcome(asked, passed[:asked].copy(), _scalar(spent), _scalar(budget),
                           math.nan, "budget")
    spent = spent + c1 + (c2 if bit else 0.0)
  return FilterOutcome(len(passed), passed.copy(), _scalar(spent), _scalar(budget), math.nan,
                       "queries")


def _scalar(x: np.ndarray):
  return float(x[0]) if x.size == 1 else x
