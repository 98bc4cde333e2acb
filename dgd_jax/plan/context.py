"""The types every layer shares: what a stage gets (``Context``), what the registry knows of a
stage (``StageSpec``) and of a method (``Method``). No stage, method or pipeline code here:
``methods.py`` fills the registry, ``pipeline.py`` runs it (docs/ARCHITECTURE.md)."""
from __future__ import annotations

import dataclasses
import math
import os
import zlib
from typing import Any, Callable, Union

import jax
import jax.numpy as jnp
import ml_collections

from dgd_jax.data import Dataset, load_private
from dgd_jax.data.partitions import PARTITIONS, TEACHERS_CHANGED
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.privacy.noise import SECRET_BYTES, NoiseSource
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import plain
from dgd_jax.runtime.workdir import Stage, Workdir

Config = ml_collections.ConfigDict
# Config fields every stage's artefacts depend on (the data, the seed, the classifier).
BASE_KEYS = ("seed", "dataset", "private_size", "test_size", "model")  # test_size: smoke only
# The config field of the secret noise (privacy.noise): in the keys of every stage that draws
# noise (its own ``config_keys``), so a workdir's releases belong to one noise source.
NOISE_KEY = "noise_seed"


def config_slice(config: Config, keys: tuple[str, ...]) -> dict:
  """The part of ``config`` named by top-level ``keys`` (what a stage depends on, recorded in
  its stage.json); keys the config lacks (e.g. no generator block in PATE) are left out."""
  return {k: plain(config[k]) for k in keys if k in config}


def noise_source(wd: Workdir, noise_seed: int, drawn: list[str]) -> NoiseSource:
  """The run's noise (``privacy.noise``): reproducible from a public ``noise_seed`` >= 0, else
  the workdir's secret (``Workdir.secret``: drawn at its first run, read back on every later
  one). ``drawn``: the stages already begun in ``wd`` that drew noise (a missing key is then
  refused)."""
  if noise_seed != -1:
    return NoiseSource.reproducible(noise_seed)
  return NoiseSource(wd.secret(drawn, SECRET_BYTES))


@dataclasses.dataclass
class Context:
  """What a stage gets: the config, its folder, the data (loaded on first use), keys: public
  ones (``key``, from ``config.seed``) and secret ones (``noise_key``, ``noise_rng``, from the
  run's ``NoiseSource``)."""

  config: Config
  workdir: Workdir
  stage: Stage
  load_dataset: Callable[[], Dataset]
  results: dict[str, dict]  # results of the stages run or reused before this one
  noise: NoiseSource | None = None  # the run's secret noise (None: a read-only context)

  @property
  def dataset(self) -> Dataset:
    return self.load_dataset()

  def key(self, purpose: str) -> jax.Array:
    """A public key for one purpose, derived from the root key ``config.seed`` by ``fold_in``:
    initialisation, partitions, synthesis, minibatches, evaluation. Never for noise a DP
    guarantee assumes secret (``noise_key``)."""
    return jax.random.fold_in(jax.random.key(self.config.seed),
                              zlib.crc32(purpose.encode()) & 0x7FFFFFFF)

  def _noise(self) -> NoiseSource:
    if self.noise is None:
      raise RuntimeError(f"stage {self.stage.name} asked for secret noise in a read-only "
                         "context (pipeline.open_run): only a run draws noise.")
    return self.noise

  def noise_key(self, purpose: str) -> jax.Array:
    """A secret key for one purpose of this stage (``privacy.noise.NoiseSource.key``): the
    noise, sampling and other draws a DP guarantee assumes secret."""
    return self._noise().key(self.stage.purpose(purpose))

  def noise_rng(self, purpose: str):
    """A secret NumPy generator for one purpose of this stage (``NoiseSource.rng``)."""
    return self._noise().rng(self.stage.purpose(purpose))

  @property
  def writer(self) -> bool:
    """Whether this process writes files (process 0 of a multi-process run)."""
    return self.workdir.writer

  def log(self, metrics: dict) -> None:
    self.workdir.log_metrics(self.stage.name, metrics)

  def stage_path(self, name: str) -> str:
    """The folder of an earlier stage (one of this stage's ``requires``)."""
    return os.path.join(self.workdir.path, name)


def private_size(config: Config) -> int:
  """N, the private training set's size, read from the data (a stage's ``ctx.dataset`` has
  it; this is for planning before any stage runs)."""
  return len(load_private(config).x_train)


def teachers_changed(partition: str) -> dict[str, int]:
  """{neighbouring relation: teachers one change moves} for the relations ``partition``
  covers (``data.partitions.TEACHERS_CHANGED``)."""
  if partition not in TEACHERS_CHANGED:
    raise ConfigError(f"teachers.partition={partition!r}; use one of {PARTITIONS}.")
  return dict(TEACHERS_CHANGED[partition])


def config_teachers_changed(config) -> dict[str, int]:
  """``teachers_changed`` of the run's ``teachers.partition``."""
  return teachers_changed(config.teachers.partition)


def planned_noise(block: str, noise: float, max_epsilon: float,
                  calibrate: Callable[[], float]) -> float:
  """``config.<block>.noise`` where it is set (> 0), else ``calibrate()``: the least noise whose
  plan fits ``config.privacy.max_epsilon``, refused when there is no budget to fit."""
  if noise > 0:
    return noise
  if not privacy_checks.has_budget(max_epsilon):
    raise ConfigError(f"config.{block}.noise=0 asks for the least noise within "
                      "config.privacy.max_epsilon, which is inf (no budget): set one of them.")
  return calibrate()


Requires = Union[tuple[str, ...], Callable[[Config], tuple[str, ...]]]


@dataclasses.dataclass(frozen=True)
class Program:
  """A jitted program a stage runs, as a pure function of arrays, with the abstract values
  (``jax.ShapeDtypeStruct``, ``abstract``) it runs on at the config's shapes. ``compile``
  builds it ahead of time (``jax.jit(fn).lower(*args).compile()``): the program proven at a
  preset's full shapes without running it or reading the data. Arrays a stage closes over
  (the training set, a frozen model's parameters) are arguments here, so ``fn`` is the stage's
  own step builder applied inside the trace. ``budget``: the bytes the stage's memory plan
  allows the program, where it plans them (the teachers); None where it plans none."""

  fn: Callable
  args: tuple
  budget: int | None = None

  def compile(self):
    return jax.jit(self.fn).lower(*self.args).compile()

  def sample_args(self) -> tuple:
    """Concrete arguments of the program's shapes (``_sample``): small positive floats, zero
    integers, keys where it takes keys."""
    return tuple(jax.tree.map(_sample, self.args))

  def execute(self):
    """The program run once on ``sample_args``: proof that it runs at its shapes, not only
    compiles."""
    return jax.block_until_ready(self.compile()(*self.sample_args()))


def _key_impl(dtype):
  """The PRNG implementation whose keys have ``dtype`` (the default one, or the noise's)."""
  for impl in (None, "rbg", "threefry2x32"):
    if jax.eval_shape(lambda impl=impl: jax.random.key(0, impl=impl)).dtype == dtype:
      return impl
  raise ValueError(f"no PRNG implementation makes keys of dtype {dtype}")


def _sample(leaf):
  """A concrete value of an abstract one, on its sharding: keys for a key dtype, zeros for
  integers (valid counters and indices), and floats uniform in [0, 0.01), which keep a
  batch's variance above zero and an optimizer's second moments non-negative."""
  if not isinstance(leaf, jax.ShapeDtypeStruct):
    return leaf
  if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    count = math.prod(leaf.shape)
    value = jax.random.split(jax.random.key(0, impl=_key_impl(leaf.dtype)), max(count, 1))
    value = value[:count].reshape(leaf.shape) if leaf.shape else value[0]
  elif jnp.issubdtype(leaf.dtype, jnp.floating):
    value = jax.random.uniform(jax.random.key(0), leaf.shape, leaf.dtype, 0.0, 0.01)
  else:
    value = jnp.zeros(leaf.shape, leaf.dtype)
  return jax.device_put(value, leaf.sharding) if leaf.sharding is not None else value


def memory(compiled) -> dict[str, int]:
  """XLA's memory analysis of a compiled program in bytes: argument, output, temp, alias
  ({} where the backend gives none)."""
  analysis = compiled.memory_analysis()
  return {f: int(getattr(analysis, f"{f}_size_in_bytes"))
          for f in ("argument", "output", "temp", "alias")} if analysis else {}


def abstract(x, dtype=None, sharding=None) -> jax.ShapeDtypeStruct:
  """A ``jax.ShapeDtypeStruct`` of an array's (or a shape's) shape and dtype."""
  shape = tuple(x) if isinstance(x, (tuple, list)) else x.shape
  return jax.ShapeDtypeStruct(shape, dtype or getattr(x, "dtype", "float32"), sharding=sharding)


def abstract_key() -> jax.ShapeDtypeStruct:
  """A typed PRNG key, abstract."""
  return jax.eval_shape(lambda: jax.random.key(0))


@dataclasses.dataclass(frozen=True)
class StageSpec:
  """A stage as the registry knows it. Its artefacts depend on ``BASE_KEYS``, its own
  ``config_keys`` and, transitively, the config slices of the stages it ``requires``."""

  run: Callable[[Context], dict]
  # The config blocks the stage itself reads (a function of the config where that varies).
  config_keys: tuple[str, ...] | Callable[[Config], tuple[str, ...]] = ()
  # Stages whose artefacts this one reads (a function of the config where that varies).
  requires: Requires = ()
  precheck: Callable[[Config], Any] | None = None  # config checks before anything runs
  multiprocess: bool = False  # runs sharded over the devices of every process
  # The jitted programs the stage runs, at the config's shapes for the private data
  # ``dataset`` (only its shapes are read): ``programs(config, dataset) -> {name: Program}``.
  programs: Callable[[Config, Dataset], dict[str, Program]] | None = None


@dataclasses.dataclass(frozen=True)
class Method:
  """A method: its stages in run order and what the report and the planners need of it."""

  name: str
  stages: tuple[str, ...]
  # What the method's epsilon covers and what it does not (report.json's privacy note), or
  # a function of the config where that depends on it (DGD's private baseline).
  privacy_note: str | Callable[[Config], str]
  # The releases the epsilon covers, in one line: a format string over the privacy stage's
  # result, e.g. "{num_steps} DPDFD steps" (a result's own "covered" line takes precedence).
  covers: str = ""

  # What else the epsilon does not cover in this run, from its config and stage results:
  # report.json's further "not_covered" notes (e.g. a pool of private images).
  uncovered: Callable[[Config, dict], list[str]] = lambda config, results: []

  def note(self, config: Config) -> str:
    return self.privacy_note(config) if callable(self.privacy_note) else self.privacy_note
  # The stage whose ``test_accuracy`` is the method's headline (None: no headline).
  headline_stage: str | None = None
  # The stage whose result holds the method's privacy ledger (None: no DP release).
  privacy_stage: str | None = None
  # The parameters of the model the epsilon covers (the headline stage's), read from a run's
  # context: what ``<workdir>/release/`` publishes (None: no model to publish).
  released_model: Callable[[Context], Any] | None = None
  # The module those parameters are applied with, from the run's config and its number of
  # classes: (module, transform, what the module reads), ``transform`` (None: the images
  # themselves) mapping the scaled images to the module's input; ``logits =
  # module.apply(params, transform(x))``.
  released_module: Callable[[Config, int], tuple[Any, Callable | None, str]] | None = None
  # Why the epsilon does not cover everything the headline model learnt from, and the
  # configuration that would, in one sentence; "" where it covers it all: only then does
  # ``<workdir>/release/`` publish the model, its accuracy and its curves (``runner.release``).
  model_withheld: Callable[[Config], str] = lambda config: ""
  # The planned releases (``privacy.Release``) stated under a neighbouring relation: the budget
  # guard and ``sweep --accounting_only`` account these before anything is trained.
  releases: Callable[[Config, str], list] | None = None
  # The neighbouring relations the method's epsilon is claimed for (one ledger each; the
  # headline is the largest): e.g. the teacher partition's (``data.partitions``).
  neighbours: Callable[[Config], tuple[str, ...]] = lambda config: ("replace_one",)
  # What runs by default (default: the last stage and what it needs).
  default_stages: Callable[[Config], tuple[str, ...]] | None = None
  # The audited models (audit names) whose every input the epsilon covers. The audit's
  # members-against-held-out test is a replace-one test, so each model's empirical lower
  # bound is held against the replace-one epsilon of the same releases; one above it is a
  # privacy bug (report.audit_check).
  audited: Callable[[Config], tuple[str, ...]] = lambda config: ()
