"""Runs a method's stages in a workdir, reusing finished stages, and writes the report.

A method is a sequence of stages (``methods.METHODS``); each stage is a pure-ish function of
its config slice (``methods.config_keys``), the dataset, a public key derived from
``config.seed`` and, where it releases under DP, the run's secret noise
(``Workdir.noise_source``). Its outputs are cached under ``<workdir>/<stage>/`` and reused by any later
run whose slice matches; a mismatching slice is refused before anything is written.
"""
from __future__ import annotations

import copy
import functools
import os
import time
from typing import Callable

import jax
from absl import logging

from dgd_jax.configs.common import smoke_schedules
from dgd_jax.data import load_private
from dgd_jax.data.partitions import config_teachers_changed
from dgd_jax.plan import artefacts
from dgd_jax.plan import backbone
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import pool
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan.context import Config, Context, Program, memory, private_size
from dgd_jax.plan.workdir import Stage, Workdir
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.privacy.noise import NoiseSource
from dgd_jax.runner import methods
from dgd_jax.runner import release as release_lib
from dgd_jax.runner import report as report_lib
from dgd_jax.runner.methods import STAGES
from dgd_jax.runtime import distributed
from dgd_jax.runtime import tensorboard
from dgd_jax.runtime.errors import (ConfigError, PrivacyAuditError, UserInputError,
                                    WorkdirConflictError)
from dgd_jax.synthesis import generative


def check_config(config: Config) -> None:
  """Raises ConfigError naming the field and the fix for values no stage can use."""
  methods.method(config)  # a known method
  if config.model.module:  # importable, a flax module, for a method that takes one
    artefacts.user_model(config, 2)
    widths = [f"{b}.width" for b in ("teachers", "student") if config.get(b, {}).get("width")]
    if widths:
      logging.warning("config.model.module=%s is every classifier of the run; the paper "
                      "classifier's widths (%s) are not used.", config.model.module,
                      ", ".join(widths))
  if not config.model.width > 0:
    raise ConfigError(f"config.model.width={config.model.width}; it must be > 0.")
  for block in ("baseline", "teachers", "vae", "student", "dpdfd", "ldp"):  # training blocks
    if block not in config:
      continue
    for name in ("num_steps", "batch_size"):
      if config[block][name] < 1:
        raise ConfigError(f"config.{block}.{name}={config[block][name]}; it must be >= 1.")
    if config[block].get("width", 0) < 0:  # teachers, student: 0 = the model's width
      raise ConfigError(f"config.{block}.width={config[block].width}; it must be > 0, or 0 "
                        "for config.model.width.")
    if not config[block].learning_rate > 0:
      raise ConfigError(f"config.{block}.learning_rate={config[block].learning_rate}; "
                        "it must be > 0.")
  if "num_teachers" in config and config.num_teachers < 0:
    raise ConfigError(f"config.num_teachers={config.num_teachers}; it must be >= 1, or 0 "
                      "for the count chosen for the private set's size.")
  for block in ("teachers", "sweep"):
    if block in config and not all(b > 0 for b in config[block].noise_scales):
      raise ConfigError(f"config.{block}.noise_scales={config[block].noise_scales}: Laplace "
                        "scales must be > 0 (the plurality vote is reported separately).")
  if "generator" in config:
    g = config.generator
    if g.synthesis not in generative.SYNTHESES:
      raise ConfigError(f"config.generator.synthesis={g.synthesis!r}; it must be one of "
                        f"{generative.SYNTHESES}.")
    if not 0 <= g.target_mix <= 0.5:
      raise ConfigError(f"config.generator.target_mix={g.target_mix}; it must be in [0, 0.5] "
                        "(the share of a second class in an inverted sample's target; 0: one "
                        "class).")
    if g.target_mix and g.synthesis != "inversion":
      raise ConfigError(f"config.generator.target_mix={g.target_mix} mixes DeepInversion's "
                        f"targets; generator.synthesis={g.synthesis!r} has none: set "
                        "generator.synthesis='inversion', or target_mix=0.")
  if "pool" in config:
    pool.check(config)
  if "sweep" in config and not all(n >= 1 for n in config.sweep.sizes):
    raise ConfigError(f"config.sweep.sizes={config.sweep.sizes}: teacher counts must be >= 1.")


def run_config(config: Config) -> Config:
  """The config a run uses: DP-SGD's batch and steps derived from the data's size where 0
  (``dpsgd_plan.with_schedule``), a public pool's size 0 replaced by its share of the test
  split (``pool.with_public_size``), ``smoke_schedules``, and ``num_teachers = 0`` replaced by
  the count chosen for the private set's size and the budget (``query_plan.num_teachers_for``,
  public quantities only), the reason
  kept in ``config.num_teachers_chosen`` (no stage reads it, so fingerprints are those of the
  count).
  N is ``config.private_size`` when set, else the data's size: fixed under replace-one
  neighbours; under add/remove-one it must be the public ``private_size``. Idempotent."""
  config = smoke_schedules(pool.with_public_size(dpsgd_plan.with_schedule(config)))
  if config.get("num_teachers", None) != 0:
    return config
  if not config.private_size and "add_or_remove_one" in config_teachers_changed(config):
    # One example more or less must not change the count (and so every shard): N is public.
    raise ConfigError("num_teachers=0 chooses the count from N, the private set's size, which "
                      "add/remove-one neighbours change (teachers.partition='stable'): set "
                      "config.private_size to make N public, or set config.num_teachers.")
  size, budget = config.private_size or private_size(config), query_plan.count_budget(config)
  config = copy.deepcopy(config)
  with config.unlocked():
    config.num_teachers = query_plan.num_teachers_for(size, *budget)
    config.num_teachers_chosen = query_plan.teachers_reason(size, *budget)
  return config


def check_multiprocess(to_run: list[str]) -> None:
  """A multi-process run trains teacher ensembles sharded over every process's devices;
  the other stages run on one process. Refuses a plan that would run one of those."""
  single = [n for n in to_run if not STAGES[n].multiprocess]
  if single and distributed.is_multiprocess():
    raise ConfigError(
        f"Stages {single} run on one process, but this run has {jax.process_count()}. Run "
        f"--stages={','.join(n for n in to_run if STAGES[n].multiprocess) or 'teachers'} "
        "across processes, then the same command on one process with the same --workdir: "
        "it reuses the finished teacher stages.")


def checked_plan(config: Config, stages: tuple[str, ...] | None = None
                 ) -> tuple[Config, list[str]]:
  """The run's config (``run_config``) and its planned stages, after every check that needs
  nothing trained: the config's values, each stage's precheck and the budget guard."""
  config = run_config(config)
  check_config(config)
  names = methods.plan_stages(config, stages)
  for name in names:  # config checks no stage can run with
    if STAGES[name].precheck:
      STAGES[name].precheck(config)
  if methods.method(config).privacy_stage in names:  # before anything is trained or queried
    methods.budget_guard(config)
  return config, names


def check_data(config: Config, data) -> None:
  """Refuses, before any stage runs, data the config's plan cannot serve: an automatic query
  plan made for another class count than the labels have."""
  if "queries" in config and config.queries.plan == "auto" and (
      config.queries.num_classes != data.num_classes):
    raise ConfigError(f"{config.dataset}: its labels have {data.num_classes} classes, but the "
                      f"automatic query plan is made for config.queries.num_classes="
                      f"{config.queries.num_classes}: set --config.queries.num_classes="
                      f"{data.num_classes}.")


def large_delta(config: Config, size: int) -> str | None:
  """None, or report.md's warning for a run whose delta is at least 1/N (N = ``size``, the
  private set's, as ``load_private`` gives it), which ``privacy.allow_large_delta`` accepts and
  otherwise a ConfigError refuses. Only methods with a DP release are checked."""
  if methods.method(config).privacy_stage is None:
    return None
  p = config.privacy
  privacy_checks.delta_for_size(p.delta, size, allowed=p.allow_large_delta)
  if p.delta < 1.0 / size:
    return None
  return (f"delta = {p.delta:g} is at least 1/N = 1/{size} (allowed by "
          "config.privacy.allow_large_delta): such a guarantee permits publishing a private "
          "example outright.")


def weak_signal(config: Config) -> str | None:
  """None, or report.md's warning where the planned ensemble's votes are too few for the
  budget (``query_plan.weak_signal``): a run with an automatic query plan only."""
  budget = query_plan.count_budget(config)
  if not budget[0] or not config.get("num_teachers"):
    return None
  return query_plan.weak_signal(config.num_teachers, *budget, dataset=config.dataset)


def run(config: Config, workdir: str, stages: tuple[str, ...] | None = None) -> dict:
  """Runs ``stages`` (default: the method's default stages) and every stage they need, and
  returns the report dict."""
  config, names = checked_plan(config, stages)
  data = load_private(config)  # its errors come before anything is written
  check_data(config, data)
  warnings = [w for w in (large_delta(config, len(data.x_train)), weak_signal(config)) if w]
  for w in warnings:  # said before anything trains; report.md repeats them
    logging.warning("%s", w)
  wd = Workdir(workdir, writer=distributed.is_writer())
  wd.check_format()
  planned = _planned_stages(config, wd, names)
  check_multiprocess([s.name for s in planned if not s.done()])
  with wd.lock():  # one writer per workdir
    for stage in planned:  # again: another run may have written before we took the lock
      stage.check()
      if stage.done():
        stage.result()  # a damaged result.json is refused before anything is written
    wd.bind_data(config.dataset, data.fingerprint() + backbone.fingerprint(config))
    begun = [s.name for s in planned
             if methods.draws_noise(s.name, config) and os.path.exists(s.meta_path)]
    noise = wd.noise_source(config.noise_seed, begun)
    return _run_stages(config, wd, planned, noise, warnings, data)


def stage_programs(config: Config, stages: tuple[str, ...] | None = None
                   ) -> dict[str, dict[str, Program]]:
  """Every jitted program of the run ``run(config, ...)`` would make, by planned stage (each
  stage's ``StageSpec.programs``), at the config's full shapes on the private data's shapes,
  without training, querying or writing anything."""
  config, names = checked_plan(config, stages)
  data = load_private(config)
  return {name: STAGES[name].programs(config, data) if STAGES[name].programs else {}
          for name in names}


def compile_programs(config: Config, stages: tuple[str, ...] | None = None,
                     log: Callable[[str, str, dict], None] = lambda stage, name, m: None
                     ) -> dict[str, dict[str, dict]]:
  """Compiles ahead of time every program of ``stage_programs``: what proves a preset on this
  host's backend (a GPU/TPU preset's shapes, compiled on the CPU here, or on the accelerator
  it is for). Returns {stage: {program: XLA's memory analysis in bytes (argument, output,
  temp, alias; ``budget`` where the stage's memory plan allows the program a total)}}; a
  program over its budget raises ConfigError. ``log(stage, program, bytes)`` after each."""
  out = {}
  for name, programs in stage_programs(config, stages).items():
    out[name] = {}
    for program_name, program in programs.items():
      sizes = memory(program.compile())
      if program.budget is not None:
        used = sizes and sizes["argument"] + sizes["output"] + sizes["temp"] - sizes["alias"]
        sizes["budget"] = program.budget
        if used and used > program.budget:
          raise ConfigError(
              f"{name}.{program_name} needs {used / 2**30:.3g} GiB at this config's shapes, "
              f"over its memory plan's {program.budget / 2**30:.3g} GiB: the plan "
              "underestimates it.")
      out[name][program_name] = sizes
      log(name, program_name, sizes)
  return out


def _planned_stages(config: Config, wd: Workdir, names) -> list[Stage]:
  """The stages ``names`` in ``wd``, each refused if its folder holds another config's work."""
  planned = [wd.stage(n, config, methods.config_keys(n, config)) for n in names]
  for stage in planned:  # refuse conflicts before writing anything
    stage.check()
  return planned


def check_workdir(config: Config, workdir: str) -> None:
  """WorkdirConflictError unless every stage ``run(config, workdir)`` would use is this
  config's (or not there yet). Reads stage.json files only; writes nothing."""
  config = run_config(config)
  wd = Workdir(workdir, writer=False)
  wd.check_format()
  _planned_stages(config, wd, methods.plan_stages(config))


def open_run(workdir: str, stage: str) -> Context:
  """A read-only Context of ``stage`` in the finished run ``workdir``, under the config the run
  recorded (its config.json): how a research script (experiments/) reads a run's artefacts
  (``artefacts.load_*``, ``pool.load``) without running anything. ``results`` holds the run's
  finished stages; nothing is written to the workdir (its metrics, lock and report included).
  Refused if the workdir is not a run or its stages were made by another config."""
  wd = Workdir(workdir, writer=False)
  config = wd.read_config()  # refused if there is none, or of another workdir format
  planned = _planned_stages(config, wd, methods.plan_stages(config))
  results = {s.name: s.result() for s in planned if s.done()}
  target = next((s for s in planned if s.name == stage), None)
  if target is None:
    raise WorkdirConflictError(f"{workdir} is a {config.method} run, which has no stage "
                               f"{stage!r}; its stages: {[s.name for s in planned]}.")
  return Context(config, wd, target, functools.cache(lambda: load_private(config)), results)


def _run_stages(config: Config, wd: Workdir, planned: list[Stage], noise: NoiseSource,
                warnings: list[str], data) -> dict:
  """Runs the planned stages, reusing finished ones, with secret draws from ``noise``, and
  writes the report and the release (under the lock)."""
  wd.record_config(config)
  dataset = lambda: data
  results = {}
  for stage in planned:
    if stage.done():
      logging.info("%s: reusing the finished stage in %s", stage.name, stage.path)
    else:
      stage.begin()
      t0 = time.perf_counter()
      try:
        result = STAGES[stage.name].run(Context(config, wd, stage, dataset, dict(results),
                                                noise))
      except UserInputError:
        stage.abandon_if_empty()  # e.g. too many teachers: let a fixed config use the dir
        raise
      stage.finish({**result, "stage_seconds": time.perf_counter() - t0})
      distributed.barrier(f"{stage.name} finished")  # its result.json is written
    results[stage.name] = stage.result()
  report = report_lib.build(config, results, noise.describe(), warnings)
  if wd.writer:
    report_lib.write(wd.path, report)
    tensorboard.summary(wd.path, report)
    release_lib.write(config, wd, report,
                      Context(config, wd, planned[-1], dataset, dict(results), noise))
  failed = {n: c for n, c in report["audit_check"].items() if not c["passed"]}
  if failed:  # written first: report.md says it too
    raise PrivacyAuditError(
        "; ".join(f"the {n}'s empirical epsilon lower bound {c['epsilon_lower_bound']:.4g} "
                  f"exceeds {c['allowed']:.4g}, {c['against']}"
                  for n, c in failed.items())
        + f". This is a privacy bug: do not release anything from {wd.path}.")
  return report
