"""Sweeps (DGD Fig. 3, 4, 6, 7, 8): grids of overrides, shared stage folders, CSV and plots."""
from __future__ import annotations

import csv
import json
import os

import pytest

from dgd_jax.plan import checks as plan_checks
from dgd_jax.runner import methods
from dgd_jax.runner import sweep
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import write_json
from dgd_jax.plan import query_checks

import tiny_configs


def read_csv(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def run_sweep(config, workdir, *specs, **kwargs):
  axes = [sweep.parse_axis(s, config) for s in specs]
  rows = sweep.run(config, str(workdir), axes, **kwargs)
  assert read_csv(workdir / "sweep.csv") and (workdir / "sweep.md").exists()
  return rows


def test_parse_axis_casts_and_links_fields(npz_file):
  config = tiny_configs.dgd(npz_file)
  names, points = sweep.parse_axis("queries.num_queries=27,750", config)
  assert names == ("queries.num_queries",) and points == [(27,), (750,)]
  names, points = sweep.parse_axis("student.w_normal,student.adversarial=0:false,0.5:true",
                                   config)
  assert points == [(0.0, False), (0.5, True)]
  with pytest.raises(ConfigError, match="does not have"):
    sweep.parse_axis("queries.nope=1", config)
  with pytest.raises(ConfigError, match="2 fields"):
    sweep.parse_axis("student.w_normal,student.w_tangent=1", config)


def test_accounting_sweep_trains_nothing(npz_file, tmp_path):
  config = tiny_configs.dgd(npz_file)
  rows = run_sweep(config, tmp_path / "s", "queries.noise_scale=20,40,80",
                   accounting_only=True)
  rdp = [r["rdp"] for r in rows]
  assert rdp == sorted(rdp, reverse=True)  # more noise, smaller epsilon (Fig. 8 left)
  assert all(r["advanced_composition"] > r["rdp"] for r in rows)
  assert (tmp_path / "s" / "epsilon.png").read_bytes()[:4] == b"\x89PNG"
  assert not [d for d in os.listdir(tmp_path / "s") if d.startswith("noise")]


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_query_sweep_shares_the_unchanged_stages(npz_file, tmp_path):  # Fig. 3
  config = tiny_configs.dgd(npz_file)
  rows = run_sweep(config, tmp_path / "s", "queries.num_queries=20,50")
  assert [r["queries"] for r in rows] == [20, 50]
  assert rows[0]["epsilon"] < rows[1]["epsilon"]
  a, b = (tmp_path / "s" / r["workdir"] for r in rows)
  for stage in ("baseline", "teachers", "generator"):
    assert os.path.realpath(a / stage) == os.path.realpath(b / stage), stage
  assert not (a / "vae").exists()  # Eq. 6 is off: the student reads no VAE (student.uses_vae)
  for stage in ("queries", "student"):
    assert os.path.realpath(a / stage) != os.path.realpath(b / stage), stage
  for png in ("accuracy.png", "epsilon.png"):
    assert (tmp_path / "s" / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_synthetic_amount_and_source_sweeps(npz_file, tmp_path):  # Fig. 6 and Fig. 4
  config = tiny_configs.dgd(npz_file)
  rows = run_sweep(config, tmp_path / "amount", "generator.num_synthetic=128,256",
                   columns=["generator.synthetic_student_accuracy"])
  assert [r["generator.num_synthetic"] for r in rows] == [128, 256]
  assert all(0 <= r["generator.synthetic_student_accuracy"] <= 1 for r in rows)
  assert "generator.synthetic_student_accuracy" in read_csv(tmp_path / "amount" /
                                                            "sweep.csv")[0]
  rows = run_sweep(config, tmp_path / "source", "pool.source=synthetic,train",
                   reuse=[str(tmp_path / "amount" / rows[1]["workdir"])])
  raw = tmp_path / "source" / rows[1]["workdir"]
  assert not (raw / "generator").exists()  # RAW: the private images are the pool
  assert os.path.realpath(tmp_path / "source" / rows[0]["workdir"] / "teachers") == \
      os.path.realpath(tmp_path / "amount" / "num_synthetic=256" / "teachers")  # reused
  assert all(0 <= r["test_accuracy"] <= 1 for r in rows)


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_vae_regulariser_by_aggregation_sweep(npz_file, tmp_path):  # Fig. 7
  config = tiny_configs.pate(npz_file)
  config.student.unlabelled_batch_size = 8
  rows = run_sweep(config, tmp_path / "s", "queries.aggregator=lnmax,gnmax",
                   "student.w_normal,student.w_tangent=0:0,0.1:0.1")
  assert len(rows) == 4 and len({r["workdir"] for r in rows}) == 4
  assert len(os.listdir(tmp_path / "s" / "stages")) == 1 + 1 + 2 + 4  # teachers, vae, ...


def test_sweep_refuses_a_point_over_budget_before_training(npz_file, tmp_path):
  config = tiny_configs.dgd(npz_file)
  config.privacy.max_epsilon = 5.0
  with pytest.raises(ConfigError, match="above the maximum epsilon 5"):
    run_sweep(config, tmp_path / "s", "queries.num_queries=20,3000")
  assert not (tmp_path / "s").exists()


def test_boolean_axis_and_string_fields_leave_the_accuracy_plot_alone(tmp_path):
  # The accuracy plot draws test_accuracy and the asked --columns only: not the axis values
  # (here booleans) or text fields such as the accountant.
  rows = [{"teachers.augment": flag, "test_accuracy": acc, "accountant": "rdp",
           "workdir": f"augment={flag}"} for flag, acc in ((True, 0.5), (False, 0.6))]
  sweep._write(str(tmp_path), [(("teachers.augment",), [(True,), (False,)])], rows, False)
  assert (tmp_path / "accuracy.png").exists() and (tmp_path / "sweep.csv").exists()
  assert "| teachers.augment | test_accuracy | accountant | workdir |" in (
      tmp_path / "sweep.md").read_text()


def test_accounting_sweep_has_a_column_per_claimed_relation(npz_file, tmp_path):
  rows = run_sweep(tiny_configs.dgd(npz_file), tmp_path / "s", "teachers.partition=shuffle,stable",
                   accounting_only=True)
  shuffle, stable = rows
  assert "epsilon[add_or_remove_one]" not in shuffle  # the shuffle does not cover it
  assert shuffle["neighbours"] == stable["neighbours"] == "replace_one"
  # The stable partition: add/remove-one as the shuffle's replace-one (one teacher moved),
  # replace-one with two teachers moved, which is the headline (every accountant's column).
  assert stable["epsilon[add_or_remove_one]"] == pytest.approx(shuffle["epsilon[replace_one]"])
  assert stable["epsilon[replace_one]"] == stable["rdp"] > 1.9 * shuffle["rdp"]


def test_a_seed_axis_is_summarised_as_mean_and_range_per_setting(tmp_path):
  rows = [{"seed": seed, "student.propagation": prop, "test_accuracy": acc, "noiseless": clean,
           "accountant": "rdp", "workdir": f"s{seed}p{prop}"}
          for seed, prop, acc, clean in ((1, 0, 0.50, 0.6), (1, 10, 0.70, 0.8),
                                         (2, 0, 0.40, 0.5), (2, 10, 0.60, 0.9),
                                         (3, 0, 0.45, 0.4), (3, 10, 0.80, 0.7))]
  axes = [(("seed",), [(1,), (2,), (3,)]), (("student.propagation",), [(0,), (10,)])]
  sweep._write(str(tmp_path), axes, rows, False, columns=["noiseless"])
  summary = json.loads((tmp_path / "seeds.json").read_text())
  assert [r["student.propagation"] for r in summary] == [0, 10]
  without, with_ = summary
  assert without["seeds"] == with_["seeds"] == 3
  assert without["test_accuracy_mean"] == pytest.approx(0.45)
  assert (with_["test_accuracy_min"], with_["test_accuracy_max"]) == (0.6, 0.8)
  assert with_["noiseless_mean"] == pytest.approx(0.8)
  assert "Over the seeds (mean, min, max):" in (tmp_path / "sweep.md").read_text()
  # Without a seed axis there is nothing to summarise.
  os.makedirs(tmp_path / "no_seed")
  sweep._write(str(tmp_path / "no_seed"), axes[1:], [{k: v for k, v in r.items() if k != "seed"}
                                                     for r in rows[:2]], False)
  assert not (tmp_path / "no_seed" / "seeds.json").exists()


def test_a_joined_axis_whose_first_field_repeats_plots_every_point(tmp_path, monkeypatch):
  drawn = {}
  monkeypatch.setattr(sweep.plots, "line_plot",
                      lambda path, xs, series, **kw: drawn.setdefault(os.path.basename(path),
                                                                      (xs, series)))
  names = ("dpsgd.batch_size", "dpsgd.num_steps", "dpsgd.width")
  rows = [{**dict(zip(names, (16384, 147, w))), "test_accuracy": acc, "epsilon": 3.0,
           "workdir": f"w{w}"} for w, acc in ((16, 0.5), (32, 0.6))]
  sweep._write(str(tmp_path), [(names, [(16384, 147, 16), (16384, 147, 32)])], rows, False)
  xs, series = drawn["accuracy.png"]
  assert xs == ["16384:147:16", "16384:147:32"]
  assert series["test_accuracy"] == [0.5, 0.6]  # neither point overwrites the other


def test_a_reused_workdir_of_another_format_is_refused_before_anything_is_linked(npz_file,
                                                                                tmp_path):
  from dgd_jax.runtime.errors import WorkdirConflictError  # pylint: disable=g-import-not-at-top
  old = tmp_path / "old"
  old.mkdir()
  (old / "config.json").write_text(json.dumps({"method": "dgd"}))  # no "format": format 1
  config = tiny_configs.dgd(npz_file)
  with pytest.raises(WorkdirConflictError, match="format 1"):
    sweep.run(config, str(tmp_path / "s"), [sweep.parse_axis("seed=1", config)],
              reuse=[str(old)])
  assert not (tmp_path / "s").exists()


def test_the_filter_with_an_automatic_plan_is_refused(npz_file):
  config = tiny_configs.dgd(npz_file)
  config.queries.update(plan="auto", filter=True, aggregator="gnmax")
  config.privacy.accountant = "renyi_filter"
  with pytest.raises(ConfigError, match="plan='fixed'"):
    query_checks.check(config)


def test_reuse_links_a_finished_stage_written_before_a_neutral_field_was_added(npz_file,
                                                                               tmp_path):
  """--reuse finds a finished teachers stage whose stage.json predates teachers.mixup when the
  sweep asks for mixup 0 (what that stage did), and not when it asks for mixup."""
  config = plan_checks.run_config(tiny_configs.dgd(npz_file))
  old = tmp_path / "old" / "teachers"
  old.mkdir(parents=True)
  part = methods.stage_slice("teachers", config)
  del part["teachers"]["mixup"]
  write_json(str(old / "stage.json"), {"stage": "teachers", "config": part})
  write_json(str(old / "result.json"), {})
  sweep._link_stages(config, str(tmp_path / "s"), "plain", [str(tmp_path / "old")])
  assert os.path.realpath(tmp_path / "s" / "plain" / "teachers") == os.path.realpath(old)
  config.teachers.mixup = 0.4
  sweep._link_stages(config, str(tmp_path / "s"), "mixup", [str(tmp_path / "old")])
  assert os.path.realpath(tmp_path / "s" / "mixup" / "teachers") != os.path.realpath(old)


def test_a_column_one_point_lacks_is_blank_and_a_string_column_is_not_plotted(tmp_path):
  """A class-count release has no label agreement: its cell is blank (a warning says so) and
  the sweep keeps its other points; an aggregator's name is tabulated, not drawn."""
  report = {"stages": {"queries": {"aggregator": "gnmax", "agreement": 0.6}}}
  assert sweep._column(report, "stages.queries.agreement", "p") == 0.6
  assert sweep._column({"stages": {"queries": {}}}, "stages.queries.agreement", "p") is None
  rows = [{"num_teachers": n, "test_accuracy": acc, "stages.queries.aggregator": agg,
           "stages.queries.agreement": agree, "workdir": f"n{n}"}
          for n, acc, agg, agree in ((25, 0.7, "gaussian_class_count", None),
                                     (100, 0.75, "gaussian_histogram", 0.61))]
  axes = [(("num_teachers",), [(25,), (100,)])]
  sweep._write(str(tmp_path), axes, rows, False,
               columns=["stages.queries.aggregator", "stages.queries.agreement"])
  table = (tmp_path / "sweep.md").read_text()
  assert "| 25 | 0.7 | gaussian_class_count |  | n25 |" in table
  assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
