"""PATE as a method: teachers label a public pool (the head of the test split), a student
learns from it and is evaluated on the rest; least-confident query selection."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan.artefacts import QUERIES, VOTES
from dgd_jax.plan.context import Context
from dgd_jax.runtime.workdir import Stage, Workdir
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.stages import queries
from dgd_jax.plan import query_checks

import tiny_configs
from report_checks import assert_noiseless_named

POOL = tiny_configs.PATE_POOL


def test_least_confident_picks_the_lowest_top_probabilities():
  probs = np.array([[0.9, 0.1], [0.5, 0.5], [0.7, 0.3], [0.55, 0.45], [1.0, 0.0]])
  np.testing.assert_array_equal(queries.least_confident(probs, 2), [1, 3])
  np.testing.assert_array_equal(queries.least_confident(probs, 3), [1, 3, 2])


@pytest.mark.integration
def test_pate_end_to_end_with_a_dp_headline_and_the_data_dependent_diagnostic(npz_file,
                                                                             tmp_path):
  report = pipeline.run(tiny_configs.pate(npz_file), str(tmp_path / "p"))
  assert report["method"] == "pate" and report["queries"] == 40
  assert "noisy_label_agreement_with_plurality" in assert_noiseless_named(
      str(tmp_path / "p"))["noiseless"]
  assert set(report["stage_seconds"]) == {"teachers", "queries", "student"}  # Eq. 6 off: no VAE
  student = report["stages"]["student"]
  assert student["num_evaluated"] == 128 - POOL  # evaluated on the test examples not pooled
  assert student["num_labelled"] == 40 and student["num_unlabelled"] == POOL - 40
  # The headline is a DP guarantee (every query charged); PATE 2017's data-dependent epsilon
  # is a diagnostic beside it, never the headline.
  assert report["accountant"] == "rdp" and not report["epsilon_is_data_dependent"]
  md = (tmp_path / "p" / "report.md").read_text()
  assert "(rdp accountant, 40 queries)" in md and "DATA-DEPENDENT, 40" not in md
  votes = np.load(tmp_path / "p" / "queries" / VOTES)
  ledger = privacy.PrivacyLedger([privacy.LNMaxQueries(20.0, 40, votes)])
  assert report["epsilon"] == pytest.approx(ledger.epsilon(1e-5, "rdp").epsilon, rel=1e-12)
  assert report["epsilons_data_dependent"]["rdp_data_dependent"] == pytest.approx(
      ledger.epsilon(1e-5, "rdp_data_dependent").epsilon, rel=1e-12)
  assert "rdp_data_dependent" in md  # named as a diagnostic
  assert any("public" in note for note in report["covers"]["not_covered"])
  # The default 'shuffle' partition supports replace-one only, and the report says so.
  assert report["privacy"]["epsilon_by_neighbours"] == {"replace_one": report["epsilon"]}
  assert "Add/remove-one is not covered" in report["privacy"]["neighbours"]
  assert "Neighbouring datasets: replace-one (epsilon" in (tmp_path / "p" / "report.md").read_text()


@pytest.mark.integration
def test_pate_plus_least_confident_selection(npz_file, tmp_path):
  config = tiny_configs.pate(npz_file, ",plus")
  config.queries.update(selection="least_confident", first_round=10, threshold=1.0,
                        sigma1=1.0, noise_scale=1.0, filter=False)  # every query charged
  config.privacy.update(max_epsilon=float("inf"), accountant="rdp_data_dependent")
  config.teachers.partition = "stable"  # teachers on shards of unequal sizes
  report = pipeline.run(config, str(tmp_path / "p"))
  sizes = report["stages"]["teachers"]
  assert sizes["partition"] == "stable" and sizes["dropped_examples"] == 0
  # The stable partition covers add/remove-one (one teacher moved) and replace-one (two): each
  # relation has its epsilon, the headline is the larger, replace-one's.
  by = report["privacy"]["epsilon_by_neighbours"]
  assert set(by) == {"replace_one", "add_or_remove_one"}
  assert report["epsilon"] == by["replace_one"] > by["add_or_remove_one"]
  assert report["epsilon_neighbours"] == "replace_one"
  votes = np.load(tmp_path / "p" / "queries" / VOTES)
  with np.load(tmp_path / "p" / "queries" / QUERIES) as q:
    answered = q["answered"]
  for relation, k in (("replace_one", 2), ("add_or_remove_one", 1)):
    record = privacy.ConfidentGNMaxQueries(1.0, 1.0, 1.0, 40, answered, votes,
                                           teachers_changed=k, neighbours=relation)
    assert by[relation] == pytest.approx(privacy.PrivacyLedger([record]).epsilon(
        1e-5, "rdp_data_dependent").epsilon, rel=1e-12)
  with np.load(tmp_path / "p" / "queries" / QUERIES) as q:
    indices = q["indices"]
  assert len(indices) == 40 and len(set(indices.tolist())) == 40  # nobody asked twice
  assert report["accountant"] == "rdp_data_dependent"
  assert report["stages"]["queries"]["answered"] <= 40
  # release/ states the tightest data-independent epsilon instead (report_checks)
  public = json.loads((tmp_path / "p" / "release" / "report.json").read_text())
  assert not public["epsilon_is_data_dependent"] and public["epsilon"] not in by.values()
  assert public["accountant"] in report["epsilons"]
  assert "privacy.epsilon (rdp_data_dependent)" in public["withheld"]
  assert_noiseless_named(str(tmp_path / "p"))


def test_the_public_pool_is_nine_tenths_of_the_test_split_unless_set(npz_file):
  from dgd_jax.configs import pate as pate_config  # pylint: disable=g-import-not-at-top
  config = pate_config.get_config(f"npz:{npz_file},cpu")
  assert config.pool.size == 0
  assert plan_checks.run_config(config).pool.size == 115  # int(0.9 x 128 test images)
  config.pool.size = 100
  assert plan_checks.run_config(config).pool.size == 100


@pytest.mark.integration
def test_pate_refuses_a_pool_that_leaves_nothing_to_evaluate(npz_file, tmp_path):
  config = tiny_configs.pate(npz_file)
  config.pool.size = 128
  with pytest.raises(ConfigError, match="0 < size < 128"):
    pipeline.run(config, str(tmp_path / "p"))
  config = tiny_configs.pate(npz_file)
  config.queries.update(selection="least_confident", first_round=0)
  with pytest.raises(ConfigError, match="first_round"):
    pipeline.run(config, str(tmp_path / "q"))


@pytest.mark.integration
def test_pate_student_reads_only_the_pool_images_and_noisy_labels(npz_file, tmp_path):
  from dgd_jax.data import load_dataset
  from dgd_jax.stages import student
  workdir = tmp_path / "p"
  config = tiny_configs.pate(npz_file)
  pipeline.run(config, str(workdir), stages=("queries", "vae"))
  real = load_dataset(f"npz:{npz_file}")

  class EvaluationLabelsOnly(np.ndarray):  # the pool's true labels raise when read
    def __getitem__(self, index):
      if np.any(np.arange(len(self))[index] < POOL):
        raise AssertionError("the student read a true label of the public pool")
      return np.asarray(self)[index]

  PublicOnly = tiny_configs.without_training_data(
      real, y_test=real.y_test.view(EvaluationLabelsOnly))

  with pytest.raises(AssertionError, match="true label of the public pool"):
    PublicOnly.y_test[:POOL]  # the guard works
  wd = Workdir(str(workdir))
  stage = Stage(wd, "student", methods.stage_slice("student", config))
  stage.begin()
  result = student.run(Context(config, wd, stage, PublicOnly, {}))
  assert result["num_evaluated"] == 128 - POOL and 0 <= result["test_accuracy"] <= 1


def test_a_confident_threshold_above_the_ensemble_is_refused_with_the_fix(npz_file, tmp_path):
  """PATE 2018's T = 200 asks for 200 agreeing teachers: with 4 the noise alone would pick
  the answered queries."""
  config = tiny_configs.pate(npz_file, ",plus")
  assert config.queries.threshold == 200.0 and config.num_teachers == 4
  with pytest.raises(ConfigError, match=r"threshold=200 is above the 4 teachers' largest vote "
                     r"count.*--config.queries.threshold=3.2 --config.queries.sigma1=2.4"):
    pipeline.run(config, str(tmp_path / "p"))
  assert not (tmp_path / "p").exists()
  config.queries.update(threshold=3.0, sigma1=2.0)
  query_checks.check(plan_checks.run_config(config))  # within the ensemble: accepted
