"""The teacher count a DGD run chooses for its private set's size (``num_teachers = 0``)."""
from __future__ import annotations

import json
import os

import pytest

import tiny_configs
from dgd_jax.configs import dgd as dgd_config_file
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan.context import config_slice
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError


@pytest.mark.parametrize("size,expected", [(8000, 100), (12000, 150), (20000, 250),
                                           (60000, 250), (1000, 12), (10, 10)])
def test_num_teachers_for_aims_at_80_examples_a_teacher(size, expected):
  assert query_plan.num_teachers_for(size) == expected
  assert f"{expected} teachers chosen for {size:,} private examples" in (
      query_plan.teachers_reason(size))


def test_too_few_examples_for_any_ensemble_is_refused():
  with pytest.raises(ConfigError, match="cannot be split"):
    query_plan.num_teachers_for(9)


@pytest.mark.integration
def test_the_dgd_presets_choose_and_full_fashion_mnist_keeps_the_papers_250():
  for arg in ("fashion_mnist", "fashion_mnist,cpu", "fashion_mnist,cpu,eps1"):
    assert dgd_config_file.get_config(arg).num_teachers == 0
  config = dgd_config_file.get_config("fashion_mnist,cpu")
  with config.unlocked():
    config.private_size = 8000
  assert plan_checks.run_config(config).num_teachers == 100


@pytest.mark.integration
def test_a_chosen_count_has_the_fingerprints_of_the_same_count_set_by_hand(npz_file):
  chosen = plan_checks.run_config(_auto(npz_file))
  by_hand = tiny_configs.dgd(npz_file)
  by_hand.num_teachers = 10  # 512 examples: N // 80 = 6, raised to MIN_TEACHERS
  assert chosen.num_teachers == 10
  assert chosen.num_teachers_chosen.startswith("10 teachers chosen for 512 private examples")
  for stage in ("teachers", "queries", "student"):
    keys = methods.config_keys(stage, by_hand)
    assert config_slice(chosen, keys) == config_slice(by_hand, keys)
  assert plan_checks.run_config(chosen) is chosen  # idempotent


@pytest.mark.integration
def test_the_report_says_who_chose_the_teachers(npz_file, tmp_path):
  report = pipeline.run(_auto(npz_file), str(tmp_path / "auto"), stages=("teachers",))
  assert report["num_teachers"] == 10
  assert report["stages"]["teachers"]["num_teachers"] == 10
  md = open(os.path.join(tmp_path / "auto", "report.md")).read()
  assert "Teachers: 10 teachers chosen for 512 private examples" in md
  recorded = json.load(open(os.path.join(tmp_path / "auto", "config.json")))
  assert recorded["num_teachers"] == 10 and recorded["num_teachers_chosen"]

  report = pipeline.run(tiny_configs.dgd(npz_file), str(tmp_path / "set"), stages=("teachers",))
  assert report["num_teachers_chosen"] is None
  md = open(os.path.join(tmp_path / "set", "report.md")).read()
  assert "Teachers: 4, as the config sets" in md


def _auto(npz_file):
  config = tiny_configs.dgd(npz_file)
  config.num_teachers = 0
  return config


def test_under_add_or_remove_one_the_count_needs_a_public_size(npz_file):
  config = _auto(npz_file)
  config.teachers.partition = "stable"  # claims add/remove-one, where N itself changes
  with pytest.raises(ConfigError, match="config.private_size"):
    plan_checks.run_config(config)
  config.private_size = 480  # a config value, the same for every neighbour
  assert plan_checks.run_config(config).num_teachers == 10


@pytest.mark.parametrize("size,epsilon,expected", [
    (1500, 10.0, 50), (8000, 10.0, 100), (60000, 10.0, 250), (1500, 1.0, 100),
    (8000, 1.0, 250), (60000, 1.0, 250), (8000, 3.0, 139)])
def test_a_small_budget_asks_for_more_and_smaller_shards(size, epsilon, expected):
  """Enough teachers that a vote histogram's noise per teacher at the reference count of
  answers stays within the aim, down to shards of MIN_IMAGES_PER_TEACHER; never fewer than
  N // 80 (the count without a budget), never more than 250."""
  n = query_plan.num_teachers_for(size, epsilon)
  assert n == expected
  assert query_plan.num_teachers_for(size) <= n <= query_plan.MAX_TEACHERS
  assert size // n >= query_plan.MIN_IMAGES_PER_TEACHER
  sigma = query_plan.unit_noise(epsilon, 1e-5) * query_plan.REFERENCE_QUERIES ** 0.5
  if size // query_plan.IMAGES_PER_TEACHER < n < min(query_plan.MAX_TEACHERS,
                                                     size // query_plan.MIN_IMAGES_PER_TEACHER):
    assert sigma / n <= query_plan.NOISE_PER_TEACHER < sigma / (n - 1)  # the least that fits
  assert "noise per teacher at 1,000 answers" in query_plan.teachers_reason(size, epsilon)


def test_the_plan_reads_only_public_quantities(tmp_path):
  """Two private sets of the same size but other images and labels get the same teachers,
  queries, noise and release: the plan reads N, the classes and the budget, never the data."""
  from conftest import write_npz  # pylint: disable=g-import-not-at-top
  plans = []
  for seed in (1, 2):
    config = dgd_config_file.get_config(
        f"npz:{write_npz(tmp_path, 1500, seed=seed, name=f'd{seed}.npz')},cpu")
    run = plan_checks.run_config(config)
    plans.append((run.num_teachers, run.num_teachers_chosen, query_plan.settings(run)))
  assert plans[0] == plans[1]
  assert plans[0][0] == query_plan.num_teachers_for(1500, 10.0)


@pytest.mark.integration
def test_too_weak_a_release_is_named_before_training_with_dp_sgd_instead(npz_file, tmp_path):
  assert query_plan.weak_signal(100, 1.0, 1e-5) and not query_plan.weak_signal(100, 10.0, 1e-5)
  config = _auto(npz_file)
  config.queries.update(plan="auto", aggregator="gaussian_histogram", num_queries=50)
  config.privacy.update(max_epsilon=1.0, accountant="pld")
  report = pipeline.run(config, str(tmp_path / "weak"), stages=("teachers",))
  warning = next(w for w in report["warnings"] if "clean labels' worth" in w)
  assert f"dpsgd.py:npz:{npz_file} --config.privacy.max_epsilon=1" in warning
  md = open(os.path.join(tmp_path / "weak", "report.md")).read()
  assert "**WARNING:" in md and "DP-SGD on the same data" in md
