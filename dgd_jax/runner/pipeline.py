"""Runs a method's stages in a workdir, reusing finished stages, and writes the report.

A method is a sequence of stages (``methods.METHODS``); each stage is a pure-ish function of
its config slice (``methods.config_keys``), the dataset, a public key derived from
``config.seed`` and, where it releases under DP, the run's secret noise
(``plan.context.noise_source``). Its outputs are cached under ``<workdir>/<stage>/`` and
reused by any later run whose slice matches; a mismatching slice is refused before anything
is written.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

from absl import logging

from dgd_jax.data import load_private
from dgd_jax.plan import backbone
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan.context import (Config, Context, Method, Program, config_slice, memory,
                                  noise_source)
from dgd_jax.runner import methods
from dgd_jax.runner import release as release_lib
from dgd_jax.runner import report as report_lib
from dgd_jax.runner.methods import STAGES
from dgd_jax.runtime import distributed
from dgd_jax.runtime import host
from dgd_jax.runtime import tensorboard
from dgd_jax.runtime.errors import ConfigError, PrivacyAuditError, WorkdirConflictError
from dgd_jax.runtime.files import plain
from dgd_jax.runtime.workdir import Stage, Workdir, write_report


@dataclasses.dataclass(frozen=True)
class RunPlan:
  """A run as ``checked_plan`` fixes it before anything is trained or written: the method, its
  config as the run uses it (``plan.checks.run_config``), the stages in order, the config keys
  each stage's artefacts depend on, the stages that draw secret noise, and report.md's
  warnings so far."""
  method: Method
  config: Config
  stages: tuple[str, ...]
  keys: dict[str, tuple[str, ...]]
  noisy: frozenset[str]
  warnings: tuple[str, ...]


def checked_plan(config: Config, stages: tuple[str, ...] | None = None) -> RunPlan:
  """The run's plan, after every check that needs nothing trained: the method and its stages
  (chosen by the config's settings, never by the values ``run_config`` resolves), the
  config's values, each stage's precheck and the budget guard."""
  stage_plan = _stage_plan(config, stages)
  config = plan_checks.run_config(config)
  plan_checks.check_config(config)
  for name in stage_plan.stages:  # config checks no stage can run with
    if STAGES[name].precheck:
      STAGES[name].precheck(config)
  if stage_plan.method.privacy_stage in stage_plan.stages:  # before anything is trained
    plan_checks.budget_guard(config, stage_plan.method)
  weak = plan_checks.weak_signal(config)
  return dataclasses.replace(stage_plan, config=config, warnings=(weak,) if weak else ())


def run(config: Config, workdir: str, stages: tuple[str, ...] | None = None,
        allow_noise_redraw: bool = False) -> dict:
  """Runs ``stages`` (default: the method's default stages) and every stage they need, and
  returns the report dict. A noisy stage is resumed or recomputed only on the platform it
  first drew its noise on (``Workdir.check_noise_platform``) unless ``allow_noise_redraw``."""
  plan = checked_plan(config, stages)
  config = plan.config
  data = load_private(config)  # its errors come before anything is written
  plan_checks.check_data(config, data)
  fingerprint = data.fingerprint() + backbone.fingerprint(config)
  large = plan.method.privacy_stage and plan_checks.large_delta(config, len(data.x_train))
  warnings = ([large] if large else []) + list(plan.warnings)
  for w in warnings:  # said before anything trains; report.md repeats them
    logging.warning("%s", w)
  wd = Workdir(workdir, writer=distributed.is_writer())
  wd.check_format()
  planned = _planned_stages(plan, wd)
  to_run = [s.name for s in planned if not s.done()]
  distributed.check_multiprocess(to_run, [n for n in to_run if STAGES[n].multiprocess])
  with wd.lock():  # one writer per workdir
    for stage in planned:  # again: another run may have written before we took the lock
      stage.check()
      if stage.done():
        stage.result()  # a damaged result.json is refused before anything is written
    if config.noise_seed == -1:  # a secret key: which platform drew it matters (Workdir)
      wd.check_noise_platform([n for n in to_run if n in plan.noisy], host.noise_platform(),
                              allow_noise_redraw)
    for stage in planned:  # each stage's own record of its data, also where data.json is gone
      stage.check_data(fingerprint)
    wd.bind_data(config.dataset, fingerprint)
    begun = [s.name for s in planned if s.name in plan.noisy and os.path.exists(s.meta_path)]
    begun += [n for n in wd.noise_platforms() if n not in begun]  # drew, even if since removed
    return _run_stages(plan, wd, planned, begun, warnings, data, fingerprint)


def stage_programs(config: Config, stages: tuple[str, ...] | None = None
                   ) -> dict[str, dict[str, Program]]:
  """Every jitted program of the run ``run(config, ...)`` would make, by planned stage (each
  stage's ``StageSpec.programs``), at the config's full shapes on the private data's shapes,
  without training, querying or writing anything."""
  plan = checked_plan(config, stages)
  data = load_private(plan.config)
  return {name: STAGES[name].programs(plan.config, data) if STAGES[name].programs else {}
          for name in plan.stages}


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


def _planned_stages(plan: RunPlan, wd: Workdir) -> list[Stage]:
  """The plan's stages in ``wd``, each refused if its folder holds another config's work."""
  planned = [Stage(wd, n, config_slice(plan.config, plan.keys[n])) for n in plan.stages]
  for stage in planned:  # refuse conflicts before writing anything
    stage.check()
  return planned


def _stage_plan(config: Config, stages: tuple[str, ...] | None = None) -> RunPlan:
  """The plan of ``config`` as it is: its method, the stages ``stages`` need in order, their
  config keys and the stages that draw noise; no check beyond the method's and the stages'
  names (a run resolved and checked before, a workdir's config.json, or ``checked_plan``'s
  start)."""
  names = methods.plan_stages(config, stages)
  return RunPlan(methods.method(config), config, names,
                 {n: methods.config_keys(n, config) for n in names},
                 frozenset(n for n in names if methods.draws_noise(n, config)), ())


def check_workdir(config: Config, workdir: str) -> None:
  """WorkdirConflictError unless every stage ``run(config, workdir)`` would use is this
  config's (or not there yet). Reads stage.json files only; writes nothing."""
  wd = Workdir(workdir, writer=False)
  wd.check_format()
  _planned_stages(_stage_plan(plan_checks.run_config(config)), wd)


def open_run(workdir: str, stage: str) -> Context:
  """A read-only Context of ``stage`` in the finished run ``workdir``, under the config the run
  recorded (its config.json): how a research script (experiments/) reads a run's artefacts
  (``artefacts.load_*``, ``pool.load``) without running anything. ``results`` holds the run's
  finished stages; nothing is written to the workdir (its metrics, lock and report included).
  Refused if the workdir is not a run or its stages were made by another config."""
  wd = Workdir(workdir, writer=False)
  config = Config(wd.read_config())  # refused if there is none, or of another format
  planned = _planned_stages(_stage_plan(config), wd)
  results = {s.name: s.result() for s in planned if s.done()}
  target = next((s for s in planned if s.name == stage), None)
  if target is None:
    raise WorkdirConflictError(f"{workdir} is a {config.method} run, which has no stage "
                               f"{stage!r}; its stages: {[s.name for s in planned]}.")
  return Context(config, wd, target, functools.cache(lambda: load_private(config)), results)


def _run_stages(plan: RunPlan, wd: Workdir, planned: list[Stage], begun: list[str],
                warnings: list[str], data, fingerprint: str) -> dict:
  """Runs the planned stages, reusing finished ones made from the results the workdir holds
  now (``Stage.check_inputs``), with the run's noise (``begun``: the stages begun before that
  drew it), and writes the release and the report (under the lock). ``fingerprint``: the
  data's, which each stage records."""
  config = plan.config
  noise = noise_source(wd, config.noise_seed, begun)
  wd.record_config(plain(config))
  dataset = lambda: data
  results = {}
  identity = {}
  for stage in planned:
    inputs = {n: identity.get(n) for n in methods.requirements(stage.name, config)}
    stage.check_inputs(inputs)  # a finished or begun stage read these results
    if stage.done():
      logging.info("%s: reusing the finished stage in %s", stage.name, stage.path)
    else:
      if stage.name in plan.noisy and noise.is_secret:
        wd.record_noise_platform(stage.name, host.noise_platform())
      ctx = Context(config, wd, stage, dataset, dict(results), noise)
      stage.run(functools.partial(STAGES[stage.name].run, ctx), inputs, fingerprint)
    results[stage.name] = stage.result()
    identity[stage.name] = stage.identity
    if noise.is_secret:
      wd.keep_secret(noise.secret)  # removed mid-run: later reruns must resume these draws
  drawn_on = {n: p for n, p in wd.noise_platforms().items() if n in plan.noisy}
  report = report_lib.build(config, results, {**noise.describe(), "drawn_on": drawn_on},
                            warnings)
  if wd.writer:  # report.md composed, then the release, report.json and report.md written
    text = report_lib.markdown(wd.path, report)
    release_lib.write(config, wd, report,
                      Context(config, wd, planned[-1], dataset, dict(results), noise))
    write_report(wd.path, report, text)
    tensorboard.summary(wd.path, report)
  failed = {n: c for n, c in report["audit_check"].items() if not c["passed"]}
  if failed:  # written first: report.md says it too
    raise PrivacyAuditError(
        "; ".join(f"the {n}'s empirical epsilon lower bound {c['epsilon_lower_bound']:.4g} "
                  f"exceeds {c['allowed']:.4g}, {c['against']}"
                  for n, c in failed.items())
        + f". This is a privacy bug: do not release anything from {wd.path}.")
  return report
