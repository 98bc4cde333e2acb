"""Smoke runs of every preset: the paper presets at the shapes that decide memory and
compilation (widths, batch sizes, teacher counts, latent sizes, the query chunk), every
schedule cut to ``SMOKE_STEPS`` steps and every count (queries, synthetic samples, test
images, audit splits) to what runs each shape once by the ``,smoke`` modifier, through every
stage of their method on real Fashion-MNIST; and each CPU preset on 1,500 and on 8,000 mock
images, with the counts it derives from them. A crash on a shape or a config path shows up
here, not on a user's GPU.

The runs are marked ``smoke`` (and ``slow``, so the default test command leaves them out), a
tier CI does not run: CI proves every preset's programs by compiling them at full shapes
(tests/test_compile.py), and this tier shows what only running does (docs/PERFORMANCE.md,
"Test tiers"). Run it before changing a stage's glue between its programs, a preset, or the
data path: ``bash launch/test.sh -m smoke --dist loadgroup``.
Presets that share a stage's config slice (the paper teachers of the teachers, DGD and DPDFD
ensemble presets, DGD's baseline and generator across its budgets) share its folder, as
sweep points do: each stage is trained once per slice and reused by the other presets run in
the same process (``xdist_group``, ``GROUPS``), so nothing is trained twice at once.
"""
from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys

import pytest

from dgd_jax.cli.audit import audit_run
from dgd_jax.configs import common
from dgd_jax.data import idx
from dgd_jax.plan import checks as plan_checks
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.files import fingerprint, plain
from dgd_jax.training import ensemble
from presets import (CPU_PRESETS, IDS, MOCK_SIZES, PRESETS, check_counts_for_the_data,
                     write_mock_data)

# Methods whose presets share the paper teachers' config slice run in one process (xdist_group)
# so the 250 teachers are trained once for all of them; every other method is its own group.
GROUPS = {"teachers": "dgd", "dpdfd": "dgd"}

FASHION = "/usr/share/datasets/fashion-mnist"



def smoke_config(module: str, arg: str):
  config = importlib.import_module(f"dgd_jax.configs.{module}").get_config(f"{arg},smoke")
  return plan_checks.smoke_schedules(config)


def _leaves(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    out.update(_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
  return out


def test_every_method_has_a_smoke_preset():
  covered = {smoke_config(m, a).method for m, a, _ in PRESETS}
  assert covered == set(methods.METHODS), set(methods.METHODS) - covered


@pytest.mark.parametrize("module,arg,extra", PRESETS, ids=IDS)
def test_smoke_keeps_every_shape_and_cuts_every_schedule(module, arg, extra):
  full = importlib.import_module(f"dgd_jax.configs.{module}").get_config(arg)
  smoke = smoke_config(module, arg)
  assert not full.smoke and smoke.smoke
  assert plan_checks.smoke_schedules(full) is full  # a full run is untouched
  assert plain(plan_checks.smoke_schedules(smoke)) == plain(smoke)  # idempotent
  before, after = _leaves(plain(full)), _leaves(plain(smoke))
  changed = {k for k in after if before.get(k, "<absent>") != after[k]}
  schedules = {k for k in before if k.split(".")[-1] in common.SCHEDULES}
  assert schedules, "every method has a schedule to cut"
  for k in schedules:
    assert after[k] <= common.SMOKE_STEPS, k
  counts = {"test_size", "queries.num_queries", "queries.first_round", "generator.num_synthetic",
            "dpdfd.num_synthetic", "pool.size", "audit.splits", "teachers.eval_size"}
  allowed = schedules | {k for k in before if k.split(".")[-1] == "decay_every"} | {
      "smoke", "log_every", "checkpoint_every"} | counts
  assert changed <= allowed, changed - allowed  # widths, batches, teacher counts, latents: kept
  assert after["checkpoint_every"] == common.SMOKE_STEPS  # one checkpoint, the last step's
  if "queries" in smoke:
    assert after["queries.num_queries"] == min(before["queries.num_queries"],
                                               common.SMOKE_QUERIES)
  for block in ("generator", "dpdfd"):
    if f"{block}.num_synthetic" in before:  # 0 (as many as the private set) is cut too
      assert 0 < after[f"{block}.num_synthetic"] <= common.SMOKE_SYNTHETIC
      assert after[f"{block}.num_synthetic"] >= after.get("queries.num_queries", 0)
  if "teachers" in smoke:
    assert 0 < after["teachers.eval_size"] <= common.SMOKE_TEST_SIZE
  public = "pool" in smoke and smoke.pool.source == "public"
  assert smoke.test_size == common.SMOKE_TEST_SIZE + (smoke.pool.size if public else 0)
  if public:  # every query still fits the pool
    assert smoke.queries.num_queries < smoke.pool.size <= (full.pool.size or float("inf"))


def test_smoke_queries_fill_one_query_chunk():
  """A smoke run's queries run the teachers at the full query chunk, the shape a real run
  compiles, exactly once."""
  assert common.SMOKE_QUERIES == ensemble.QUERY_CHUNK


def test_smoke_cuts_the_audit_and_leaves_its_shapes():
  config = smoke_config("dgd", "fashion_mnist")
  with config.unlocked():  # as audit_run adds the block to a finished run's config
    config.audit = common.audit_config()
  audit = plan_checks.smoke_schedules(config).audit
  full = common.audit_config()
  assert audit.splits == common.SMOKE_AUDIT_SPLITS < full.splits
  assert audit.inversion_steps == common.SMOKE_STEPS
  assert (audit.examples, audit.inversion_batch) == (full.examples, full.inversion_batch)


TOY_GROUPS = """
import os, pytest
@pytest.mark.parametrize("i", [pytest.param(i, marks=pytest.mark.xdist_group("g" if i < 4 else
                                                                             f"h{i}"))
                               for i in range(8)])
def test_toy(i):
  with open(os.path.join(os.environ["TOY_OUT"], str(i)), "w") as f:
    f.write(os.environ["PYTEST_XDIST_WORKER"])
"""


@pytest.mark.integration
def test_loadgroup_runs_a_group_in_one_process(tmp_path):
  """The smoke runs share trained stages within a group (GROUPS): that holds only if
  ``--dist loadgroup`` (as the smoke tier's command passes it) keeps a group's tests on one
  worker with the installed pytest and pytest-xdist."""
  (tmp_path / "test_toy.py").write_text(TOY_GROUPS)
  (tmp_path / "pytest.ini").write_text("[pytest]\n")
  out = tmp_path / "out"
  out.mkdir()
  run = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
       "-p", "no:cacheprovider", str(tmp_path / "test_toy.py")],
      cwd=tmp_path, env={**os.environ, "TOY_OUT": str(out)}, capture_output=True, text=True)
  assert run.returncode == 0, run.stdout + run.stderr
  workers = {int(f.name): f.read_text() for f in out.iterdir()}
  assert len(workers) == 8 and len({workers[i] for i in range(4)}) == 1, workers


@pytest.fixture(scope="session")
def shared_stages(tmp_path_factory):
  """This process's stage folders, one per stage and config slice (module docstring)."""
  return tmp_path_factory.mktemp("smoke_stages")


def link_shared_stages(config, workdir, shared) -> None:
  """Links each planned stage's folder in ``workdir`` to the shared folder of its config
  slice, so that a stage another preset already ran with the same slice is reused."""
  config = plan_checks.run_config(config)
  workdir.mkdir()
  for name in methods.plan_stages(config):
    part = methods.stage_slice(name, config)
    folder = shared / f"{name}-{fingerprint(part)}"
    folder.mkdir(exist_ok=True)
    os.symlink(folder, workdir / name)


@pytest.mark.parametrize("module,arg,extra", [
    pytest.param(*p, marks=[pytest.mark.smoke, pytest.mark.slow, pytest.mark.integration,
                            pytest.mark.xdist_group(GROUPS.get(p[0], p[0]))])
    for p in PRESETS], ids=IDS)
def test_smoke_run_through_every_stage(module, arg, extra, tmp_path, shared_stages):
  # As every real-data test: a missing dataset fails loudly rather than skipping the run.
  assert not idx.missing_files(FASHION), (
      f"Fashion-MNIST IDX files missing from {FASHION}: apt-get install dataset-fashion-mnist "
      "(.ci/run does this).")
  config = smoke_config(module, arg)
  method = methods.method(config)
  stages = tuple(methods.plan_stages(config)) + extra
  tmp_path = tmp_path / "run"
  link_shared_stages(config, tmp_path, shared_stages)
  report = pipeline.run(config, str(tmp_path))
  if "audit" in extra:  # as `python -m dgd_jax.audit --workdir=...` runs it
    report = audit_run(str(tmp_path), {})
  assert report["smoke"] and report["preset"] == config.preset
  accuracy = report["test_accuracy"]  # the teacher methods report per-stage accuracies
  assert (accuracy is None and method.name in ("teachers", "teacher_sweep")
          or 0.0 <= accuracy <= 1.0), accuracy
  for name in stages:
    assert os.path.exists(tmp_path / name / "result.json"), name
  if method.privacy_stage:
    assert math.isfinite(report["privacy"]["epsilon"])
    assert report["privacy"]["epsilon"] <= config.privacy.max_epsilon or not (
        config.privacy.max_epsilon)
  assert "SMOKE RUN" in (tmp_path / "report.md").read_text()


@pytest.fixture(scope="session")
def mock_data(tmp_path_factory):
  """The mock npz of each size in MOCK_SIZES, written once per process."""
  folder = tmp_path_factory.mktemp("mock_data")
  return {size: write_mock_data(folder, size) for size in MOCK_SIZES}


@pytest.mark.parametrize("size", MOCK_SIZES)
@pytest.mark.parametrize("module,arg", [
    pytest.param(*p, marks=[pytest.mark.smoke, pytest.mark.slow, pytest.mark.integration])
    for p in CPU_PRESETS], ids=[f"{m}:{a}" for m, a in CPU_PRESETS])
def test_every_cpu_preset_runs_on_data_of_its_size(module, arg, size, mock_data, tmp_path):
  """Each CPU preset through every stage of its method on 1,500 and on 8,000 images, with
  the counts and schedules it derives from them (CI compiles the same programs at the same
  shapes: tests/test_compile.py)."""
  full = importlib.import_module(f"dgd_jax.configs.{module}").get_config(
      f"npz:{mock_data[size]},{arg}")
  check_counts_for_the_data(plan_checks.run_config(full), size)  # what the smoke run cuts
  config = smoke_config(module, f"npz:{mock_data[size]},{arg}")
  report = pipeline.run(config, str(tmp_path / "run"))
  accuracy = report["test_accuracy"]
  assert accuracy is None and module == "teachers" or 0.0 <= accuracy <= 1.0, accuracy
  for name in methods.plan_stages(plan_checks.run_config(config)):
    assert os.path.exists(tmp_path / "run" / name / "result.json"), name
  if methods.method(config).privacy_stage:  # within the budget, where the preset sets one
    assert (math.isfinite(report["privacy"]["epsilon"]) and
            report["privacy"]["epsilon"] <= (config.privacy.max_epsilon or math.inf))


@pytest.mark.integration
def test_the_override_makes_a_smoke_run_too(npz_file, tmp_path):
  """--config.smoke=True (set after get_config, as the flag does) cuts the schedules when the
  run starts; the report says it is a smoke run."""
  config = importlib.import_module("dgd_jax.configs.baseline").get_config(f"npz:{npz_file},cpu")
  config.smoke = True
  report = pipeline.run(config, str(tmp_path))
  assert report["smoke"] and report["stages"]["baseline"]["num_steps"] == common.SMOKE_STEPS
  assert report["config"]["test_size"] == common.SMOKE_TEST_SIZE
  assert report["stages"]["baseline"]["train_accuracy_size"] == common.SMOKE_TEST_SIZE
