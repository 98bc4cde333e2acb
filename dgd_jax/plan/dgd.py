"""DGD's and PATE's plan: the releases a run makes before its student learns (the private
baseline's DP-SGD steps where DGD has one, the label queries of ``plan/queries.py``, under a
Renyi filter where ``queries.filter`` asks, and the smooth-sensitivity release of their
data-dependent epsilon where ``queries.smooth_sensitivity`` asks), each under the neighbouring
relations the teacher partition covers: what the budget guard and ``sweep --accounting_only``
account before anything is trained."""
from __future__ import annotations

import numpy as np

from dgd_jax import privacy
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan.context import config_teachers_changed
from dgd_jax.plan.queries import release, settings
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.privacy import renyi_filter, smooth_sensitivity
from dgd_jax.runtime.errors import ConfigError


def neighbours(config) -> tuple[str, ...]:
  """The neighbouring relations the run's teacher partition covers (each has its ledger)."""
  return tuple(config_teachers_changed(config))


def releases(config, neighbours: str = "replace_one") -> list[privacy.Release]:
  """The planned label queries, the DP-SGD steps of DGD's private baseline where it has one,
  and the smooth-sensitivity release of the queries' data-dependent epsilon where the config
  asks for one, under the relation ``neighbours``: what the budget guard and ``sweep
  --accounting_only`` account before anything is trained."""
  before = dpsgd_plan.baseline_releases(config, neighbours)
  after = [ss_cost(config, neighbours)] if config.queries.smooth_sensitivity else []
  return [*before, planned(config, neighbours, before), *after]


def ss_plan(config) -> smooth_sensitivity.SmoothSensitivityPlan:
  """The smooth-sensitivity release's order, beta and sigma_ss, fixed before any vote is read
  (PATE 2018 Thm. 23): ``queries.ss_order``, ``ss_beta``, ``ss_sigma`` where set, else
  ``smooth_sensitivity.plan_release`` on the planned queries and an assumed histogram
  (``queries.assumed_consensus``): public parameters only."""
  q, c = settings(config), config.queries
  confident = q.aggregator == "confident_gnmax"
  given = (c.ss_order, c.ss_beta, c.ss_sigma)
  if any(given):
    if not all(given):
      raise ConfigError(f"config.queries.ss_order/ss_beta/ss_sigma = {given}: set all three "
                        "(the release's fixed parameters), or none for the public plan.")
    return smooth_sensitivity.SmoothSensitivityPlan(*map(float, given), "config")
  return smooth_sensitivity.plan_release(
      q.num_queries, config.num_teachers, c.num_classes, q.threshold if confident else None,
      q.sigma1 if confident else None, q.noise_scale, config.privacy.delta,
      c.assumed_consensus)


def ss_cost(config, neighbours: str = "replace_one") -> privacy.SmoothSensitivityCost:
  """The ledger record of the smooth-sensitivity release (its Thm. 23 cost at its order)."""
  plan = ss_plan(config)
  return privacy.SmoothSensitivityCost(plan.order, plan.beta, plan.sigma_ss, plan.source,
                                       neighbours=neighbours)


def filtered(config) -> bool:
  """Whether the queries run under a Renyi filter (``config.queries.filter``)."""
  return bool(config.queries.filter)


def planned(config, neighbours: str, before=()) -> privacy.Release:
  """The planned queries' record under ``neighbours``: the plan, or with ``queries.filter``
  the plan under a Renyi filter whose budget is ``privacy.max_epsilon`` less what the records
  ``before`` it spend at the filter's order (chosen from public parameters only)."""
  plan = release(config, neighbours=neighbours)
  if not filtered(config):
    return plan
  if not isinstance(plan, (privacy.GNMaxQueries, privacy.ConfidentGNMaxQueries)):
    raise ConfigError(f"config.queries.filter needs aggregator gnmax or confident_gnmax (the "
                      f"Renyi filter charges the GNMax step when answered); got {plan.mechanism}.")
  p = config.privacy
  if not privacy_checks.has_budget(p.max_epsilon):
    raise ConfigError("config.queries.filter spends config.privacy.max_epsilon, which is inf: "
                      "set the budget (e.g. --config.privacy.max_epsilon=2).")
  confident = isinstance(plan, privacy.ConfidentGNMaxQueries)
  sigma1, threshold = (plan.sigma1, plan.threshold) if confident else (None, None)
  orders = np.asarray(privacy.DEFAULT_RDP_ORDERS)
  spent = sum((r.rdp(orders) for r in before), np.zeros_like(orders))
  order = renyi_filter.filter_order(p.max_epsilon, p.delta, plan.mechanism, plan.noise_scale,
                                    sigma1, orders=orders,
                                    teachers_changed=plan.teachers_changed, spent_before=spent)
  return privacy.FilteredQueries(
      plan.noise_scale, plan.queries, p.max_epsilon, p.delta, order, threshold, sigma1,
      spent_before=float(spent[np.argmin(np.abs(orders - order))]),
      teachers_changed=plan.teachers_changed, neighbours=neighbours)
