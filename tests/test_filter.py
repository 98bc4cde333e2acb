"""The Renyi filter (Feldman & Zrnic 2021) for (Confident-)GNMax: it stops in time, the realised
RDP never exceeds the budget at any order, and a ledger never reports more than its budget."""
import math

import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.privacy import pate2018, renyi_filter
from dgd_jax.runtime.errors import ConfigError


def test_budget_inverts_the_improved_conversion():
  for eps, delta, order in [(1.0, 1e-5, 18.0), (2.0, 1e-5, 10.2), (10.0, 1e-6, 3.5)]:
    budget = renyi_filter.rdp_budget(eps, delta, order)
    got, at = privacy.improved_epsilon([order], [budget], delta)
    assert got == pytest.approx(eps, abs=1e-12) and at == order


def test_a_run_whose_cost_would_exceed_the_budget_stops_in_time():
  # Every threshold bit passes: each query costs 0.1 + 1.0; the budget admits 10.5 of them.
  out = renyi_filter.run_filter(np.ones(50, bool), budget=11.55, threshold_cost=0.1,
                                gnmax_cost=1.0)
  assert out.asked == 10 and out.stop_reason == "budget"
  assert out.spent == pytest.approx(11.0) and out.spent <= out.budget
  # Unanswered queries cost the threshold step only: more of them fit.
  bits = np.zeros(50, bool)
  bits[::10] = True
  out = renyi_filter.run_filter(bits, budget=11.55, threshold_cost=0.1, gnmax_cost=1.0)
  assert out.asked == 50 and out.stop_reason == "queries" and out.answered.sum() == 5
  assert out.spent == pytest.approx(10.0)


def test_realised_rdp_never_exceeds_the_budget_at_any_order():
  rng = np.random.default_rng(0)
  orders = np.array([2.0, 8.0, 32.0])
  for _ in range(200):
    budget = rng.uniform(0.5, 20.0, size=3)
    c1 = rng.uniform(0.0, 0.5) * orders / 32
    c2 = rng.uniform(0.1, 2.0) * orders / 32
    bits = rng.random(100) < rng.uniform(0.0, 1.0)
    out = renyi_filter.run_filter(bits, budget, c1, c2)
    realised = out.asked * c1 + out.answered.sum() * c2
    np.testing.assert_allclose(out.spent, realised)
    assert np.all(realised <= budget + 1e-12)
    if out.stop_reason == "budget":  # the next query could have exceeded it somewhere
      assert np.any(realised + c1 + c2 > budget)
      assert out.asked < bits.size


def filtered_run(passed, epsilon, sigma2, sigma1=None):
  """The stage's filter over ``passed``: the plan at the order chosen from public parameters."""
  mechanism = "gnmax" if sigma1 is None else "confident_gnmax"
  order = renyi_filter.filter_order(epsilon, 1e-5, mechanism, sigma2, sigma1)
  plan = privacy.FilteredQueries(sigma2, len(passed), epsilon, 1e-5, order,
                                 None if sigma1 is None else 200.0, sigma1)
  return plan.run_filter(passed)


def test_the_filtered_run_matches_what_the_stage_charges():
  rng = np.random.default_rng(1)
  votes = rng.multinomial(250, rng.dirichlet(np.full(10, 0.3)), size=400)
  passed = votes.max(axis=1) + rng.normal(0, 150, 400) >= 200
  out = filtered_run(passed, 1.0, 40.0, 150.0)
  assert out.stop_reason == "budget" and 0 < out.asked < 400
  lam = [out.order]
  cost = (out.asked * pate2018.threshold_rdp(150.0, lam)[0]
          + out.answered.sum() * pate2018.gnmax_rdp(40.0, lam)[0])
  assert cost == pytest.approx(out.spent) and cost <= out.budget
  gnmax = filtered_run(passed, 1.0, 40.0)
  assert gnmax.answered.all() and gnmax.asked < out.asked  # every GNMax query is charged


def test_a_data_independent_ledger_with_the_filter_never_reports_more_than_its_budget():
  for eps in (0.5, 1.0, 2.0, 5.0):
    order = renyi_filter.filter_order(eps, 1e-5, "confident_gnmax", 40.0, 150.0)
    record = privacy.FilteredQueries(40.0, 100_000, eps, 1e-5, order, 200.0, 150.0)
    book = privacy.PrivacyLedger([record])
    got = book.epsilons(1e-5, data_dependent=False)
    assert got["renyi_filter"].epsilon <= eps + 1e-9
    assert got["renyi_filter"].epsilon == pytest.approx(eps, abs=1e-9)
    assert got["rdp"].epsilon > 10 * eps  # the plan charges all 100,000 queries
    assert book.check_budget(eps + 1e-9, 1e-5).epsilon <= eps + 1e-9
    assert not got["renyi_filter"].data_dependent


def test_the_filter_budget_composes_with_the_records_before_it():
  before = privacy.GNMaxQueries(40.0, 50)
  order = renyi_filter.filter_order(2.0, 1e-5, "confident_gnmax", 40.0, 150.0,
                                    spent_before=before.rdp(privacy.DEFAULT_RDP_ORDERS))
  spent = float(before.rdp([order])[0])
  record = privacy.FilteredQueries(40.0, 10_000, 2.0, 1e-5, order, 200.0, 150.0,
                                   spent_before=spent)
  assert record.budget == pytest.approx(renyi_filter.rdp_budget(2.0, 1e-5, order) - spent)
  eps = privacy.PrivacyLedger([before, record]).epsilon(1e-5, "renyi_filter").epsilon
  assert eps == pytest.approx(2.0, abs=1e-9)
  with pytest.raises(ConfigError, match="no query fits"):
    privacy.FilteredQueries(40.0, 10, 0.1, 1e-5, order, 200.0, 150.0, spent_before=spent)


def test_realised_filter_record_keeps_its_diagnostics_apart():
  rng = np.random.default_rng(2)
  votes = rng.multinomial(250, rng.dirichlet(np.full(10, 0.3)), size=300).astype(float)
  passed = votes.max(axis=1) + rng.normal(0, 150, 300) >= 200
  out = filtered_run(passed, 1.0, 40.0, 150.0)
  record = privacy.FilteredQueries(40.0, 300, 1.0, 1e-5, out.order, 200.0, 150.0,
                                   asked=out.asked, answered=out.answered,
                                   stop_reason=out.stop_reason, votes=votes[:out.asked])
  json = privacy.PrivacyLedger([record]).to_json(1e-5)
  assert json["epsilons"]["renyi_filter"] == pytest.approx(1.0, abs=1e-9)
  assert "renyi_filter" not in json["data_dependent_accountants"]
  assert {"rdp_data_dependent", "rdp_answered_only"} <= set(json["data_dependent_accountants"])
  assert json["releases"][0]["answered"] == int(out.answered.sum())
  assert math.isfinite(json["epsilons"]["rdp_answered_only"])
  with pytest.raises(ConfigError, match="mask over the"):
    privacy.FilteredQueries(40.0, 300, 1.0, 1e-5, out.order, 200.0, 150.0, asked=3,
                            answered=np.ones(4, bool), stop_reason="budget")


def test_a_budget_below_one_querys_worst_case_is_refused_before_any_query():
  order = 10.0
  step = sum(privacy.FilteredQueries(40.0, 10, 5.0, 1e-5, order, 200.0, 150.0).step_rdp())
  budget = renyi_filter.rdp_budget(5.0, 1e-5, order)
  # Spend all but half a query's worst case: the filter could ask nothing, so it is refused.
  with pytest.raises(ConfigError, match="below one query's worst case"):
    privacy.FilteredQueries(40.0, 10, 5.0, 1e-5, order, 200.0, 150.0,
                            spent_before=budget - step / 2)
  assert privacy.FilteredQueries(40.0, 10, 5.0, 1e-5, order, 200.0, 150.0,
                                 spent_before=budget - 2 * step).budget == pytest.approx(2 * step)
