"""Runs a method's stages in a workdir, reusing finished stages, and writes the report.

A method is a sequence of stage names; each stage is a pure-ish function of the config
slice it declares (``CONFIG_KEYS``), the dataset and a key derived from ``config.seed``.
Its outputs are cached under ``<workdir>/<stage>/`` and reused by any later run whose slice
matches; a mismatching slice is refused before anything is written.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
import zlib
from typing import Any, Callable

import jax
import ml_collections
from absl import logging

from dgd_jax import distributed
from dgd_jax import report as report_lib
from dgd_jax.data import Dataset, load_dataset
from dgd_jax.errors import ConfigError, UserInputError
from dgd_jax.stages import (audit, baseline, dpdfd, dpsgd, generator, ldp, pool, queries,
                             student, teacher_sweep, teachers, vae)
from dgd_jax.workdir import Stage, Workdir


@dataclasses.dataclass(frozen=True)
class StageSpec:
  config_keys: tuple[str, ...]
  run: Callable[["Context"], dict]
  # Stages whose artefacts this one reads (a function of the config where that varies).
  requires: tuple[str, ...] | Callable[[ml_collections.ConfigDict], tuple[str, ...]] = ()
  precheck: Callable[[ml_collections.ConfigDict], Any] | None = None  # before anything runs


STAGES: dict[str, StageSpec] = {
    "baseline": StageSpec(baseline.CONFIG_KEYS, baseline.run),
    "teachers": StageSpec(teachers.CONFIG_KEYS, teachers.run),
    "teacher_sweep": StageSpec(teacher_sweep.CONFIG_KEYS, teacher_sweep.run),
    "generator": StageSpec(generator.CONFIG_KEYS, generator.run, requires=("baseline",)),
    "vae": StageSpec(vae.CONFIG_KEYS, vae.run, requires=pool.requires),
    "queries": StageSpec(queries.CONFIG_KEYS, queries.run,
                         requires=lambda c: ("teachers",) + pool.requires(c),
                         precheck=queries.plan),
    "student": StageSpec(student.CONFIG_KEYS, student.run, requires=("queries", "vae")),
    "dpdfd": StageSpec(dpdfd.CONFIG_KEYS, dpdfd.run, requires=dpdfd.requires,
                       precheck=dpdfd.plan),
    "dpdfd_samples": StageSpec(dpdfd.SAMPLES_KEYS, dpdfd.run_samples, requires=("dpdfd",)),
    "ldp": StageSpec(ldp.CONFIG_KEYS, ldp.run, requires=("baseline",)),
    "dpsgd": StageSpec(dpsgd.CONFIG_KEYS, dpsgd.run, precheck=dpsgd.plan),
    "audit": StageSpec(audit.CONFIG_KEYS, audit.run, requires=audit.requires,
                       precheck=audit.plan),
}
METHODS: dict[str, tuple[str, ...]] = {
    "baseline": ("baseline",),
    "teachers": ("teachers",),
    "teacher_sweep": ("teacher_sweep",),
    "dgd": ("baseline", "teachers", "generator", "vae", "queries", "student"),
    "pate": ("teachers", "vae", "queries", "student"),
    "dpdfd": ("baseline", "teachers", "dpdfd", "dpdfd_samples"),
    "ldp": ("baseline", "ldp"),
    "dpsgd": ("dpsgd",),
}
# Stages any method can run after its own when asked (``--stages``); never by default.
OPTIONAL_STAGES = ("audit",)
# Stages that run sharded over the devices of every process (distributed.py); the others
# run on one process.
MULTIPROCESS_STAGES = ("teachers", "teacher_sweep")
# What a method runs by default where that is not its last stage.
DEFAULT_STAGES: dict[str, Callable[[ml_collections.ConfigDict], tuple[str, ...]]] = {
    "dpdfd": lambda c: ("dpdfd",) if c.dpdfd.teacher == "private_data" else ("dpdfd_samples",),
}


@dataclasses.dataclass
class Context:
  """What a stage gets: the config, its folder, the data (loaded on first use), keys."""

  config: ml_collections.ConfigDict
  workdir: Workdir
  stage: Stage
  load_dataset: Callable[[], Dataset]
  results: dict[str, dict]  # results of the stages run or reused before this one

  @property
  def dataset(self) -> Dataset:
    return self.load_dataset()

  def key(self, purpose: str) -> jax.Array:
    """A key for one purpose, derived from the root key ``config.seed`` by ``fold_in``."""
    return jax.random.fold_in(jax.random.key(self.config.seed),
                              zlib.crc32(purpose.encode()) & 0x7FFFFFFF)

  @property
  def writer(self) -> bool:
    """Whether this process writes files (process 0 of a multi-process run)."""
    return self.workdir.writer

  def log(self, metrics: dict) -> None:
    self.workdir.log_metrics(self.stage.name, metrics)

  def stage_path(self, name: str) -> str:
    """The folder of an earlier stage (one of this stage's ``requires``)."""
    return os.path.join(self.workdir.path, name)


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the field and the fix for values no stage can use."""
  if config.method not in METHODS:
    raise ConfigError(f"config.method={config.method!r}; known methods: {sorted(METHODS)}.")
  if not config.model.width > 0:
    raise ConfigError(f"config.model.width={config.model.width}; it must be > 0.")
  for block in ("baseline", "teachers", "vae", "student", "dpdfd", "ldp"):  # training blocks
    if block not in config:
      continue
    for name in ("num_steps", "batch_size"):
      if config[block][name] < 1:
        raise ConfigError(f"config.{block}.{name}={config[block][name]}; it must be >= 1.")
    if not config[block].learning_rate > 0:
      raise ConfigError(f"config.{block}.learning_rate={config[block].learning_rate}; "
                        "it must be > 0.")
  if "num_teachers" in config and config.num_teachers < 1:
    raise ConfigError(f"config.num_teachers={config.num_teachers}; it must be >= 1.")
  for block in ("teachers", "sweep"):
    if block in config and not all(b > 0 for b in config[block].noise_scales):
      raise ConfigError(f"config.{block}.noise_scales={config[block].noise_scales}: Laplace "
                        "scales must be > 0 (the plurality vote is reported separately).")
  if "pool" in config:
    pool.check(config)
  if "sweep" in config and not all(n >= 1 for n in config.sweep.sizes):
    raise ConfigError(f"config.sweep.sizes={config.sweep.sizes}: teacher counts must be >= 1.")


def check_multiprocess(to_run: list[str]) -> None:
  """A multi-process run trains teacher ensembles sharded over every process's devices;
  the other stages run on one process. Refuses a plan that would run one of those."""
  single = [n for n in to_run if n not in MULTIPROCESS_STAGES]
  if single and distributed.is_multiprocess():
    raise ConfigError(
        f"Stages {single} run on one process, but this run has {jax.process_count()}. Run "
        f"--stages={','.join(n for n in to_run if n in MULTIPROCESS_STAGES) or 'teachers'} "
        "across processes, then the same command on one process with the same --workdir: "
        "it reuses the finished teacher stages.")


def requirements(name: str, config: ml_collections.ConfigDict) -> tuple[str, ...]:
  requires = STAGES[name].requires
  return requires(config) if callable(requires) else requires


def with_prerequisites(config: ml_collections.ConfigDict, stages: tuple[str, ...] | None
                       ) -> tuple[str, ...]:
  """The requested stages (default: the method's last stage, or ``DEFAULT_STAGES``) and every
  stage they need, in the method's order (e.g. DGD with ``pool.source='train'`` needs no
  generator)."""
  method = config.method
  order = METHODS[method]
  stages = stages or DEFAULT_STAGES.get(method, lambda c: order[-1:])(config)
  order += OPTIONAL_STAGES
  unknown = [n for n in stages if n not in order]
  if unknown:
    raise ConfigError(f"Unknown stages {unknown} for method {method!r}; it has {list(order)}.")
  needed, todo = set(), list(stages)
  while todo:
    name = todo.pop()
    if name not in needed:
      needed.add(name)
      todo.extend(requirements(name, config))
  return tuple(n for n in order if n in needed)


def run(config: ml_collections.ConfigDict, workdir: str,
        stages: tuple[str, ...] | None = None) -> dict:
  """Runs ``stages`` (default: what the method's last stage needs) and returns the report
  dict."""
  check_config(config)
  names = with_prerequisites(config, stages)
  for name in names:  # e.g. the privacy budget guard: before anything is trained or queried
    if STAGES[name].precheck:
      STAGES[name].precheck(config)
  wd = Workdir(workdir, writer=distributed.is_writer())
  planned = [wd.stage(n, config, STAGES[n].config_keys) for n in names]
  for stage in planned:  # refuse conflicts before writing anything
    stage.check()
  check_multiprocess([s.name for s in planned if not s.done()])
  with wd.lock():  # one writer per workdir
    for stage in planned:  # again: another run may have written before we took the lock
      stage.check()
      if stage.done():
        stage.result()  # a damaged result.json is refused before anything is written
    return _run_stages(config, wd, planned)


def _run_stages(config: ml_collections.ConfigDict, wd: Workdir, planned: list[Stage]) -> dict:
  """Runs the planned stages, reusing finished ones, and writes the report (under the lock)."""
  wd.record_config(config)
  dataset = functools.cache(lambda: load_dataset(  # loaded once, by the first stage that runs
      config.dataset, data_dir=config.data_dir or None, manual_dir=config.manual_dir or None,
      download=config.download).with_private_size(config.get("private_size", 0)))
  results = {}
  for stage in planned:
    if stage.done():
      logging.info("%s: reusing the finished stage in %s", stage.name, stage.path)
    else:
      stage.begin()
      t0 = time.perf_counter()
      try:
        result = STAGES[stage.name].run(Context(config, wd, stage, dataset, dict(results)))
      except UserInputError:
        stage.abandon_if_empty()  # e.g. too many teachers: let a fixed config use the dir
        raise
      stage.finish({**result, "stage_seconds": time.perf_counter() - t0})
      distributed.barrier(f"{stage.name} finished")  # its result.json is written
    results[stage.name] = stage.result()
  report = report_lib.build(config, results)
  if wd.writer:
    report_lib.write(wd.path, report)
  return report
