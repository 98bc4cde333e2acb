"""The unlabelled pool a student learns from, and the set it is evaluated on.

* ``synthetic`` (DGD): the generator stage's synthetic set; the student is evaluated on the
  whole test split.
* ``public`` (PATE): the first ``config.pool.size`` test examples stand in for public,
  unlabelled data (their labels are never read); the student is evaluated on the rest of
  the test split (PATE 2017 Sec. 4: 9,000 + 1,000 on MNIST).
* ``train`` (DGD Fig. 4 "RAW", Fig. 7): the private training images themselves (labels never
  read) stand in for public data; evaluated on the whole test split. Nothing protects
  them: the report says so.
"""
from __future__ import annotations

import copy

import numpy as np

from dgd_jax.data import load_private
from dgd_jax.labelling import aggregation
from dgd_jax.plan import artefacts
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan.context import Context
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.synthesis import generative

SOURCES = ("synthetic", "public", "train")
# pool.size = 0: the public pool is this share of the test split's head (PATE 2017 Sec. 4:
# 9,000 of 10,000), the rest evaluates the student.
PUBLIC_SHARE = 0.9


def with_public_size(config):
  """``config`` with a public pool's ``size`` = 0 replaced by ``PUBLIC_SHARE`` of the test
  split (public: its size, read from the data only here); ``config`` itself otherwise."""
  if config.get("pool", {}).get("source") != "public" or config.pool.size:
    return config
  num_test = len(load_private(config).x_test)
  config = copy.deepcopy(config)
  config.pool.size = max(1, int(PUBLIC_SHARE * num_test))
  return config


def requires(config) -> tuple[str, ...]:
  """The stage that produces the pool: the generator, or none for the public pool."""
  return ("generator",) if config.pool.source == "synthetic" else ()


def check(config, num_test: int | None = None) -> None:
  p = config.pool
  if p.source not in SOURCES:
    raise ConfigError(f"config.pool.source={p.source!r}; it must be one of {SOURCES}.")
  if p.source == "public" and num_test is not None and not 0 < p.size < num_test:
    raise ConfigError(f"config.pool.size={p.size}: the public pool is the head of the "
                      f"{num_test}-example test split and the rest evaluates the student; "
                      f"choose 0 < size < {num_test}.")


def load(ctx: Context) -> np.ndarray:
  """The unlabelled pool's images (never its labels)."""
  config = ctx.config
  if config.pool.source == "synthetic":
    return artefacts.load_synthetic(ctx)
  if config.pool.source == "train":
    return ctx.dataset.x_train
  check(config, len(ctx.dataset.x_test))
  return ctx.dataset.x_test[:config.pool.size]


def size_of(config, dataset) -> int:
  """The pool's size for the private data ``dataset`` before anything is synthesised: as
  many synthetic samples as ``generator.num_synthetic`` asks (0: as the private set), the
  public pool's ``size``, or the private training set."""
  if config.pool.source == "synthetic":
    return config.generator.num_synthetic or len(dataset.x_train)
  if config.pool.source == "train":
    return len(dataset.x_train)
  return config.pool.size


def check_classes(config) -> None:
  """Refuses a pool whose samples have no class fixed before synthesis (``classes``)."""
  g = config.get("generator", {})
  if not query_plan.has_synthesis_classes(config):
    raise ConfigError(
        f"the class counts (queries.aggregator={aggregation.CLASS_COUNTS!r}) ask each "
        "sample's count for the class it was synthesised for, which only a DeepInversion pool kept "
        "whole has (pool.source='synthetic', generator.synthesis='inversion', "
        "generator.oversample=1: the baseline picks the samples oversampling keeps); use "
        f"aggregator {aggregation.HISTOGRAMS!r} (pool.source={config.pool.source!r}, "
        f"generator.synthesis={g.get('synthesis')!r}, generator.oversample={g.get('oversample')}).")


def classes(config, size: int, num_classes: int) -> np.ndarray:
  """[size] the class each of the pool's ``size`` samples was synthesised for
  (``check_classes``): DeepInversion's targets (``generative.invert``), a function of the
  sample's index alone."""
  check_classes(config)
  return generative.inversion_classes(size, config.generator.inversion_batch_size, num_classes)


def evaluation(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
  """The labelled images the student is evaluated on (disjoint from the pool)."""
  test = ctx.dataset
  if ctx.config.pool.source != "public":
    return test.x_test, test.y_test
  check(ctx.config, len(test.x_test))
  return test.x_test[ctx.config.pool.size:], test.y_test[ctx.config.pool.size:]
