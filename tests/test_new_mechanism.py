"""A new release mechanism registered in this file alone (its vote function, its record with
sensitivity, accountant event and summary): the privacy command, the query planner, a DGD
run and its report use it with no other file changed."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import ClassVar

import dp_accounting
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.labelling import aggregation
from dgd_jax.privacy import noise, releases
from dgd_jax.runtime.errors import ConfigError

NAME = "laplace_histogram"


@dataclasses.dataclass(frozen=True, eq=False)
class LaplaceHistogramQueries(releases.TeacherRelease):
  """``queries`` vote histograms released whole with Laplace noise of scale b on every
  count: one changed vote moves two counts by one, L1 sensitivity 2k, so each is
  (2k / b)-DP."""

  noise_scale: float
  queries: int

  mechanism: ClassVar[str] = NAME
  covers: ClassVar[str] = ("Covers the Laplace-noised vote histograms released whole. "
                           + releases.TEACHER_EXCLUSIONS)
  noise_field: ClassVar[str] = "noise_scale"
  count_field: ClassVar[str] = "queries"

  def __post_init__(self):
    self._check_neighbours()
    self._check_queries("noise_scale (Laplace b)")

  def event(self) -> dp_accounting.DpEvent:
    one = dp_accounting.LaplaceDpEvent(self.noise_scale / (2 * self.teachers_changed))
    return dp_accounting.SelfComposedDpEvent(one, self.queries)

  def summary(self) -> str:
    return (f"{NAME}, {self.queries} vote histograms with Laplace b = {self.noise_scale:g} "
            "on every count")


def laplace_histogram(key, votes, scale, *_):
  noisy = votes + scale * noise.laplace(key, votes.shape)
  return aggregation.plurality(noisy)._replace(votes=votes, released=noisy)


ROW = aggregation.Aggregator(
    LaplaceHistogramQueries, laplace_histogram, "histograms", "least_noise", "vote shares",
    "the Laplace-noised vote histograms of {} queries, released whole")


def register() -> None:
  """The one step that makes the mechanism known everywhere."""
  aggregation.register(ROW)


@pytest.fixture(autouse=True)
def registered(monkeypatch):
  """Registered for one test: the other test files see the registries as shipped."""
  monkeypatch.setattr(aggregation, "AGGREGATORS", dict(aggregation.AGGREGATORS))
  monkeypatch.setattr(releases, "MECHANISMS", dict(releases.MECHANISMS))
  register()


def test_the_registries_hold_it_and_refuse_a_second_class_of_its_name():
  assert aggregation.AGGREGATORS[NAME] is ROW and releases.MECHANISMS[NAME] is (
      LaplaceHistogramQueries)
  assert NAME in aggregation.planned_by("least_noise") and aggregation.releases_counts(NAME)
  aggregation.register(ROW)  # the same row again: a no-op
  impostor = dataclasses.make_dataclass("Impostor", [], bases=(LaplaceHistogramQueries,),
                                        frozen=True, eq=False)
  with pytest.raises(ConfigError, match="already LaplaceHistogramQueries"):
    releases.register(impostor)
  # Its epsilon is what the Laplace mechanism gives: q queries of pure (2 / b)-DP compose to
  # at most 2q / b; PLD is tighter at delta > 0.
  record = releases.build_release(NAME, queries=10, noise_scale=20.0)
  eps = privacy.epsilon_of(record, 1e-5, "pld")
  assert 0 < eps <= 10 * 2 / 20.0 + 1e-9
  assert record.summary().startswith(f"{NAME}, 10 vote histograms")
  with pytest.raises(ConfigError, match="has no data-dependent analysis"):
    releases.build_release(NAME, queries=2, noise_scale=1.0, votes=np.array([[3, 1], [2, 2]]))


def test_the_privacy_command_plans_it():
  """``python -m dgd_jax.privacy`` with this file imported first (the registration)."""
  code = ("import runpy, sys; sys.path.insert(0, 'tests'); "
          "import test_new_mechanism as m; m.register(); "
          "sys.argv = ['dgd_jax.privacy'] + sys.argv[1:]; "
          "runpy.run_module('dgd_jax.privacy', run_name='__main__', alter_sys=True)")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  run = lambda *a: subprocess.run([sys.executable, "-c", code, *a], cwd=repo,
                                  capture_output=True, text=True, timeout=120, check=False)
  out = run(f"--mechanism={NAME}", "--noise_scale=20", "--queries=10")
  assert out.returncode == 0, out.stderr
  assert f"Privacy plan: {NAME}, 10 vote histograms with Laplace b = 20" in out.stdout
  calibrated = run(f"--mechanism={NAME}", "--queries=10", "--target_epsilon=1", "--json")
  assert calibrated.returncode == 0, calibrated.stderr
  plan = json.loads(calibrated.stdout)
  b = plan["calibration"]["min_noise"]
  assert privacy.epsilon_of(LaplaceHistogramQueries(b, 10), 1e-5, "pld") == pytest.approx(
      1.0, abs=1e-3)


def test_the_planner_and_a_dgd_run_use_it(npz_file, tmp_path):
  """The automatic plan gives it the least noise that fits; the queries stage releases its
  histograms, the student learns their shares, and report.md names its plan."""
  import tiny_configs  # pylint: disable=g-import-not-at-top
  from dgd_jax.plan import queries as query_plan  # pylint: disable=g-import-not-at-top
  from dgd_jax.runner import pipeline  # pylint: disable=g-import-not-at-top
  config = tiny_configs.dgd(npz_file)
  config.queries.update(plan="auto", aggregator=NAME, num_queries=40)
  config.privacy.update(max_epsilon=8.0, accountant="pld")
  chosen = query_plan.settings(config)
  assert (chosen.aggregator, chosen.num_queries) == (NAME, 40)
  planned = LaplaceHistogramQueries(chosen.noise_scale, 40)
  assert privacy.epsilon_of(planned, config.privacy.delta, "pld") == pytest.approx(8.0, abs=1e-3)
  report = pipeline.run(config, str(tmp_path / "run"))
  assert report["stages"]["queries"]["aggregator"] == NAME
  assert report["epsilon"] == pytest.approx(8.0, abs=1e-3)
  with open(tmp_path / "run" / "report.md") as f:
    md = f.read()
  assert "the Laplace-noised vote histograms of 40 queries, released whole" in md
  histograms = np.load(tmp_path / "run" / "queries" / "queries.npz")
  assert jnp.ndim(histograms["histograms"]) == 2
