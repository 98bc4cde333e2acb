"""PATE+ (Confident-GNMax) under a Renyi filter and with a smooth-sensitivity release, end to
end on the tiny PATE config: the headline is the filter's DP epsilon, the data-dependent
diagnostics beside it, and what the stage saved is what the filter let through."""
from __future__ import annotations

import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.configs import pate as pate_config_file
from dgd_jax.plan import dgd as dgd_plan
from dgd_jax.plan.artefacts import QUERIES, VOTES
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.plan import query_checks

import tiny_configs
from report_checks import assert_noiseless_named


def test_plus_preset_plans_a_filter_and_refuses_misplaced_budgets():
  config = pate_config_file.get_config("fashion_mnist,cpu,plus,eps1")
  assert config.queries.filter and config.privacy.max_epsilon == 1.0
  assert config.privacy.accountant == "renyi_filter"
  record = dgd_plan.releases(config)[-1]
  assert isinstance(record, privacy.FilteredQueries) and record.queries == 1000
  book = privacy.PrivacyLedger([record])
  assert book.check_budget(1.0 + 1e-9, 1e-5).epsilon == pytest.approx(1.0, abs=1e-9)
  assert book.epsilon(1e-5, "rdp", data_dependent=False).epsilon > 3  # the unfiltered plan
  ss = pate_config_file.get_config("fashion_mnist,cpu,plus,ss")
  assert ss.queries.smooth_sensitivity and not ss.queries.get("filter", False)
  guard = pate_config_file.get_config("fashion_mnist,cpu,eps3")  # LNMax: the budget guard
  assert guard.privacy.max_epsilon == 3.0 and not guard.queries.get("filter", False)
  picky = pate_config_file.get_config("fashion_mnist,cpu,plus")
  picky.queries.update(selection="least_confident", first_round=100)
  with pytest.raises(ConfigError, match="least_confident"):
    query_checks.check(picky)
  picky.queries.update(selection="random", filter=True)
  picky.privacy.accountant = "rdp"
  with pytest.raises(ConfigError, match="renyi_filter"):
    query_checks.check(picky)
  lnmax = pate_config_file.get_config("fashion_mnist,cpu")
  lnmax.queries.filter = True
  lnmax.privacy.max_epsilon = 3.0
  with pytest.raises(ConfigError, match="gnmax or confident_gnmax"):
    dgd_plan.releases(lnmax)


@pytest.mark.integration
def test_filtered_pate_plus_headline_is_the_filter_epsilon(npz_file, tmp_path):
  config = tiny_configs.pate(npz_file, ",plus,eps1")
  # 4 teachers, threshold 2 of their votes; at eps 1 this noise admits about 20 of 40 queries.
  config.queries.update(threshold=2.0, sigma1=20.0, noise_scale=30.0)
  report = pipeline.run(config, str(tmp_path / "p"))
  stage = report["stages"]["queries"]
  f = stage["filter"]
  assert f["stop_reason"] == "budget" and f["queries"] == 40 and 0 < f["asked"] < 40
  assert f["spent_rdp"] <= f["budget_rdp"]
  assert report["accountant"] == "renyi_filter" and not report["epsilon_is_data_dependent"]
  assert report["epsilon"] == pytest.approx(1.0, abs=1e-9)
  assert report["epsilons"]["rdp"] > 1.0  # the whole plan, every query charged
  assert "rdp_answered_only" in report["epsilons_data_dependent"]  # the diagnostics beside it
  with np.load(tmp_path / "p" / "queries" / QUERIES) as q:
    indices, answered, labels = q["indices"], q["answered"], q["labels"]
  votes = np.load(tmp_path / "p" / "queries" / VOTES)
  assert len(indices) == len(votes) == f["asked"] == stage["num_queries"]
  assert answered.sum() == f["answered"] == stage["answered"]
  assert np.all(labels[~answered] == -1)
  assert report["stages"]["student"]["num_labelled"] == f["answered"]
  # The realised cost at the filter's order, recomputed, is within the budget.
  step1 = privacy.pate2018.threshold_rdp(20.0, [f["order"]])[0]
  step2 = privacy.pate2018.gnmax_rdp(30.0, [f["order"]])[0]
  assert f["asked"] * step1 + f["answered"] * step2 == pytest.approx(f["spent_rdp"])
  text = (tmp_path / "p" / "report.md").read_text()
  assert "(renyi_filter accountant, " in text and "DATA-DEPENDENT, " not in text.split("\n\n")[1]
  assert f"Renyi filter (Feldman & Zrnic 2021; its epsilon is a DP guarantee" in text
  assert "Data-dependent diagnostics (not DP releases): rdp_data_dependent" in text


@pytest.mark.integration
def test_smooth_sensitivity_release_in_the_queries_stage(npz_file, tmp_path):
  """The release at parameters the public plan fixed before the votes, composed into the
  headline at its order; PATE 2018's vote-chosen release beside it as a diagnostic."""
  config = tiny_configs.pate(npz_file, ",plus,ss")
  config.queries.update(threshold=2.0, sigma1=1.5, noise_scale=2.0)
  report = pipeline.run(config, str(tmp_path / "p"), stages=("queries",))
  s = report["stages"]["queries"]["smooth_sensitivity"]
  assert s["queries"] == 40 and s["charged"] == "answered"
  assert s["answered"] == report["stages"]["queries"]["answered"]
  assert s["epsilon"] == pytest.approx(s["epsilon_before"] + s["gnss_rdp"])
  assert s["conditions"] == {"C5": True, "C6": True}
  assert s["source"] == "plan" and s["dp_release"]
  plan = dgd_plan.ss_plan(config)
  assert (s["order"], s["beta"], s["sigma_ss"]) == (plan.order, plan.beta, plan.sigma_ss)
  assert s["diagnostic"]["source"] == "votes" and not s["diagnostic"]["dp_release"]
  # The headline: the queries' data-independent RDP and the release's cost, at its order.
  assert report["accountant"] == "smooth_sensitivity" and not report["epsilon_is_data_dependent"]
  record = dgd_plan.planned(config, "replace_one")
  lam = np.array([plan.order])
  expected, _ = privacy.improved_epsilon(lam, record.rdp(lam) + plan.rdp, 1e-5)
  assert report["epsilon"] == pytest.approx(expected, rel=1e-12)
  assert report["epsilon"] > privacy.PrivacyLedger([record]).epsilon(1e-5, "rdp").epsilon
  assert "rdp" not in report["epsilons"]  # an accountant that cannot hold the release
  md = (tmp_path / "p" / "report.md").read_text()
  assert "Smooth-sensitivity release of the data-dependent epsilon" in md
  assert "a DP release" in md and "composed into the headline" in md
  assert "DIAGNOSTIC, not a DP release" in md
  assert any("smooth-sensitivity release" in n for n in report["covers"]["not_covered"])
  assert "stages.queries.smooth_sensitivity" in assert_noiseless_named(
      str(tmp_path / "p"))["noiseless"]


def test_smooth_sensitivity_needs_its_accountant_and_fixed_parameters_set_together():
  config = pate_config_file.get_config("fashion_mnist,cpu,plus,ss")
  assert config.privacy.accountant == "smooth_sensitivity"
  assert isinstance(dgd_plan.releases(config)[-1], privacy.SmoothSensitivityCost)
  config.privacy.accountant = "rdp"
  with pytest.raises(ConfigError, match="accountant='smooth_sensitivity'"):
    query_checks.check(config)
  config.privacy.accountant = "smooth_sensitivity"
  config.queries.ss_order = 5.0
  with pytest.raises(ConfigError, match="set all three"):
    dgd_plan.ss_plan(config)
  config.queries.update(ss_beta=0.05, ss_sigma=8.0)
  plan = dgd_plan.ss_plan(config)
  assert (plan.order, plan.beta, plan.sigma_ss, plan.source) == (5.0, 0.05, 8.0, "config")
  plain = pate_config_file.get_config("fashion_mnist,cpu,plus")
  plain.privacy.accountant = "smooth_sensitivity"
  plain.queries.filter = False
  with pytest.raises(ConfigError, match="makes none of"):
    query_checks.check(plain)
