"""The compile tier: every jitted program of every preset (``StageSpec.programs``: the
baseline's, the teachers' and the teacher sweep's steps, the generator's or DeepInversion's,
the VAE's, the queries' vote chunk, the student's, DPDFD's, LDP's, DP-SGD's) compiled ahead
of time at the preset's full shapes on real Fashion-MNIST's shapes
(``pipeline.compile_programs``), nothing trained or run; the teachers' programs held to their
memory plan, every program to this host's free memory. What only running shows is the smoke
tier's (tests/test_smoke.py, outside CI; docs/PERFORMANCE.md, "Test tiers").

Marked ``compile`` (and ``slow``, so the README's test command leaves them out); ``.ci/run``
runs them after the suite: ``bash launch/test.sh -m compile``.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.configs import common
from dgd_jax.data import idx
from dgd_jax.plan import checks as plan_checks
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.training import memory_plan
import tiny_configs
from presets import (CPU_PRESETS, IDS, MOCK_SIZES, PRESETS, check_counts_for_the_data,
                     preset_stages, write_mock_data)

FASHION = "/usr/share/datasets/fashion-mnist"


def test_every_stage_lists_its_programs():
  missing = [n for n, spec in methods.STAGES.items() if spec.programs is None]
  assert not missing, missing


@pytest.mark.parametrize("module,arg,extra", [
    pytest.param(*p, marks=[pytest.mark.compile, pytest.mark.slow, pytest.mark.integration])
    for p in PRESETS], ids=IDS)
def test_every_program_compiles_at_the_presets_full_shapes(module, arg, extra):
  assert not idx.missing_files(FASHION), (
      f"Fashion-MNIST IDX files missing from {FASHION}: apt-get install dataset-fashion-mnist "
      "(.ci/run does this).")
  config = importlib.import_module(f"dgd_jax.configs.{module}").get_config(arg)
  assert not config.smoke  # the preset's own schedules and counts
  stages = preset_stages(module, arg) + tuple(extra)
  if "audit" in extra:  # as audit_run adds the block to a finished run's config
    with config.unlocked():
      config.audit = common.audit_config()
  compiled = pipeline.compile_programs(config, stages if extra else None)
  assert list(compiled) == list(stages)
  free, source = memory_plan.device_bytes()
  for stage, programs in compiled.items():
    assert programs, stage
    for name, sizes in programs.items():
      total = sizes["argument"] + sizes["output"] + sizes["temp"] - sizes["alias"]
      assert 0 < total <= free, (stage, name, total, free, source)
      if "budget" in sizes:  # the teachers' memory plan (compile_programs refuses more)
        assert total <= sizes["budget"], (stage, name)
  if "teachers" in compiled:
    assert compiled["teachers"]["train_step"]["budget"] > 0


# The quick start (README): DGD's CPU preset on Fashion-MNIST's 60,000 images, 250 teachers.
QUICK_START = ("dgd", "fashion_mnist,cpu")


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.integration
def test_the_quick_start_runs_one_call_of_every_program_at_its_shapes():
  """Each program the quick start runs, called once on zeros of its real shapes (the teachers'
  step over all 250 teachers, the inversion's, the votes' chunk, the student's): what a
  compile alone does not show (a program that compiles but fails or gives NaN when run)."""
  module, arg = QUICK_START
  config = importlib.import_module(f"dgd_jax.configs.{module}").get_config(arg)
  programs = pipeline.stage_programs(config)
  assert list(programs) == list(preset_stages(module, arg))
  assert plan_checks.run_config(config).num_teachers == 250
  for stage, named in programs.items():
    assert named, stage
    for name, program in named.items():
      leaves = [np.asarray(x) for x in jax.tree.leaves(program.execute())]
      assert leaves, (stage, name)
      assert all(np.isfinite(x).all() for x in leaves
                 if jnp.issubdtype(x.dtype, jnp.floating)), (stage, name)


# DGD Table II (100 ViT-B/16 teachers at 224 x 224) and DP-SGD on a public backbone's features,
# at CIFAR-10's shapes (a synthetic npz: CIFAR-10 is not on this host), planned for one H200's
# memory: every program within it.
CIFAR10_PRESETS = [("dgd", "paper,eps3,vit"), ("dpsgd", "backbone")]


@pytest.fixture(scope="module")
def cifar10_shapes(tmp_path_factory):
  path = tmp_path_factory.mktemp("cifar10") / "shapes.npz"
  rng = np.random.default_rng(0)
  np.savez(path, x_train=rng.integers(0, 256, (50_000, 32, 32, 3), dtype=np.uint8),
           y_train=np.arange(50_000) % 10, y_test=np.arange(10_000) % 10,
           x_test=rng.integers(0, 256, (10_000, 32, 32, 3), dtype=np.uint8))
  return str(path)


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("module,arg", CIFAR10_PRESETS)
def test_the_cifar10_presets_compile_at_full_shapes_within_an_h200(module, arg, cifar10_shapes,
                                                                  monkeypatch):
  monkeypatch.setenv(memory_plan.DEVICE_BYTES_ENV, str(memory_plan.H200_BYTES))
  make = importlib.import_module(f"dgd_jax.configs.{module}").get_config
  config = make(f"npz:{cifar10_shapes},{arg}")
  if module == "dgd":  # the named preset's config, but for where the images come from
    table2 = make("cifar10,paper")
    config.model.hidden = table2.model.hidden  # CIFAR-10's CNN: two more dense layers
    assert {**config.to_dict(), "dataset": ""} == {**table2.to_dict(), "dataset": ""}
  compiled = pipeline.compile_programs(config)
  assert list(compiled) == list(preset_stages(module, arg))
  for stage, programs in compiled.items():
    for name, sizes in programs.items():
      total = sizes["argument"] + sizes["output"] + sizes["temp"] - sizes["alias"]
      assert 0 < total <= memory_plan.H200_BYTES * memory_plan.HEADROOM, (stage, name, total)


# Each method's CPU preset on a private set of another size than Fashion-MNIST's 60,000, with
# 2,000 test images: the counts a preset derives from the data (teachers, DP-SGD's batch and
# steps, a public pool's share of the test split) and every program at those shapes.
@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("size", MOCK_SIZES)
def test_every_cpu_preset_plans_and_compiles_for_its_data(size, tmp_path):
  path = write_mock_data(tmp_path, size)
  for module, arg in CPU_PRESETS:
    config = importlib.import_module(f"dgd_jax.configs.{module}").get_config(f"npz:{path},{arg}")
    run = plan_checks.run_config(config)
    assert list(pipeline.compile_programs(config)) == list(preset_stages(module, arg)), arg
    check_counts_for_the_data(run, size)


@pytest.mark.integration
@pytest.mark.parametrize("make", ["dgd", "dgd_inversion", "pate"])
def test_tiny_runs_compile_every_planned_program_and_write_nothing(make, npz_file, tmp_path,
                                                                    monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = getattr(tiny_configs, make)(npz_file)
  logged = []
  compiled = pipeline.compile_programs(config, log=lambda *a: logged.append(a[:2]))
  assert list(compiled) == list(methods.plan_stages(plan_checks.run_config(config)))
  assert logged == [(s, p) for s, programs in compiled.items() for p in programs]
  assert all(compiled.values()) and all(v["temp"] >= 0 for ps in compiled.values()
                                        for v in ps.values())
  assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npz"]  # nothing trained or saved


@pytest.mark.integration
def test_a_program_over_its_memory_plan_is_refused(npz_file, monkeypatch):
  from dgd_jax.runtime.errors import ConfigError  # pylint: disable=g-import-not-at-top
  spec = methods.STAGES["baseline"]
  tight = lambda config, data: {name: dataclasses.replace(p, budget=1)
                                for name, p in spec.programs(config, data).items()}
  monkeypatch.setitem(methods.STAGES, "baseline", dataclasses.replace(spec, programs=tight))
  with pytest.raises(ConfigError, match="baseline.train_step needs .* over its memory plan"):
    pipeline.compile_programs(tiny_configs.baseline(npz_file))


@pytest.mark.integration
def test_compile_only_prints_every_program_and_needs_no_workdir(npz_file, tmp_path):
  config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "dgd_jax", "configs", "baseline.py")
  command = [sys.executable, "-m", "dgd_jax.main", f"--config={config}:npz:{npz_file},cpu"]
  run = subprocess.run(command + ["--compile_only"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, check=False)
  assert run.returncode == 0, run.stderr[-2000:]
  lines = [json.loads(line) for line in run.stdout.splitlines()]
  assert [(l["stage"], l["program"]) for l in lines] == [("baseline", "train_step"),
                                                          ("baseline", "logits")]
  assert all(l["temp_mib"] >= 0 and l["argument_mib"] > 0 for l in lines)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npz"]  # nothing written
  refused = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           check=False)
  assert refused.returncode != 0 and "--workdir" in refused.stderr
