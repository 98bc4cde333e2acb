"""The query settings no run can use, refused before anything is trained (the queries
stage's precheck), and the rounds the queries are asked in (``queries.refits``)."""
from __future__ import annotations

import numpy as np

from dgd_jax.labelling import aggregation
from dgd_jax.plan import pool
from dgd_jax.plan.context import config_teachers_changed
from dgd_jax.plan.dgd import filtered
from dgd_jax.plan.queries import settings
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import student

SELECTIONS = ("random", "least_confident", "representative")


def check(config) -> None:
  """Refuses query settings no run can use, before anything is trained."""
  if filtered(config) and config.queries.plan == "auto":
    raise ConfigError("config.queries.filter spends privacy.max_epsilon itself and stops when it "
                      "is spent: use queries.plan='fixed' with num_queries as the most to ask.")
  # the registered aggregators, and 'auto_counts' (plan 'auto'): the class counts or the
  # histograms, as query_plan.CLASS_COUNT_NOISE_PER_VOTE chooses
  choices = (*aggregation.AGGREGATORS, "auto_counts")
  if config.queries.aggregator not in choices:
    raise ConfigError(f"config.queries.aggregator={config.queries.aggregator!r}; use one of "
                      f"{choices}.")
  if config.queries.aggregator == "auto_counts" and config.queries.plan != "auto":
    raise ConfigError("config.queries.aggregator='auto_counts' is chosen by the automatic plan: "
                      "set queries.plan='auto', or name the aggregator "
                      f"({aggregation.CLASS_COUNTS} or {aggregation.HISTOGRAMS}).")
  refits = config.queries.refits
  if isinstance(refits, bool) or not isinstance(refits, int) or refits < 0:
    raise ConfigError(f"config.queries.refits={refits!r}: it must be a whole number of at least "
                      "0 (--config.queries.refits=0: one round of the run's teachers).")
  if refits and config.model.module:
    raise ConfigError(f"config.queries.refits={refits} refits the paper classifier's head "
                      f"layer; config.model.module={config.model.module!r} has no head of that "
                      "name: set --config.queries.refits=0.")
  q = settings(config)
  if q.aggregator == "confident_gnmax" and q.threshold > config.num_teachers:
    raise ConfigError(  # the top vote count is at most n: only the noise could pass T
        f"config.queries.threshold={q.threshold:g} is above the {config.num_teachers} "
        "teachers' largest vote count, so the noise alone would decide which queries are "
        "answered: scale T and sigma1 with the ensemble (PATE 2018 Table 2's 200 and 150 are "
        f"for 250 teachers: --config.queries.threshold={0.8 * config.num_teachers:g} "
        f"--config.queries.sigma1={0.6 * config.num_teachers:g}), or keep 250 teachers.")
  synthetic = (config.pool.source == "synthetic"
               and config.get("generator", {}).get("num_synthetic", 0))
  counted = config.queries.plan == "fixed" or aggregation.releases_counts(q.aggregator)
  if counted and synthetic and per_round(config, q.num_queries) > synthetic:  # as check_pool
    raise too_many(config, q.num_queries, f"{synthetic} synthetic samples the generator will "
                   "make", "raise generator.num_synthetic")
  if q.selection not in SELECTIONS:
    raise ConfigError(f"config.queries.selection={q.selection!r}; use one of {SELECTIONS}.")
  client = config.queries.client
  if client not in ("", "ldp") or (client == "ldp" and "ldp" not in config):
    raise ConfigError(f"config.queries.client={client!r}: use '' (the pool as is) or 'ldp' "
                      "(with an ldp block, e.g. the pate.py argument ldp1 or ldp5).")
  if filtered(config) and config.privacy.accountant != "renyi_filter":
    raise ConfigError("config.queries.filter charges the queries against the Renyi filter's "
                      "budget: set config.privacy.accountant='renyi_filter' (the other "
                      "accountants charge every planned query).")
  if filtered(config) and q.selection == "least_confident":
    raise ConfigError("config.queries.filter with least_confident selection: the selecting "
                      "student would learn from first-round answers the filter may not let "
                      "through; use selection 'random' or 'representative'.")
  if config.queries.smooth_sensitivity:
    if q.aggregator not in ("gnmax", "confident_gnmax"):
      raise ConfigError("config.queries.smooth_sensitivity releases PATE 2018's data-dependent "
                        f"GNMax epsilon: use aggregator gnmax or confident_gnmax, not "
                        f"{q.aggregator}.")
    if filtered(config) or "dpsgd" in config.get("baseline", {}):
      raise ConfigError("config.queries.smooth_sensitivity releases the queries' epsilon alone: "
                        "it cannot be combined with queries.filter or a private baseline.")
    if max(config_teachers_changed(config).values()) != 1:
      raise ConfigError("config.queries.smooth_sensitivity assumes one changed example moves "
                        "one teacher's vote (k = 1): use the default 'shuffle' partition.")
    if config.privacy.accountant != "smooth_sensitivity":
      raise ConfigError("config.queries.smooth_sensitivity composes its release with the "
                        "queries at its order: set config.privacy.accountant="
                        "'smooth_sensitivity' (the other accountants cannot hold it).")
  elif config.privacy.accountant == "smooth_sensitivity":
    raise ConfigError("config.privacy.accountant='smooth_sensitivity' composes a smooth-"
                      "sensitivity release, which this run makes none of: set "
                      "config.queries.smooth_sensitivity=True, or another accountant.")
  if q.selection == "least_confident" and aggregation.releases_counts(q.aggregator):
    raise ConfigError("config.queries.selection='least_confident' trains its selector on the "
                      f"first round's labels, which {q.aggregator} does not release (a "
                      "histogram's argmax is mostly noise at the presets' sigma): use "
                      "selection 'random' or 'representative'.")
  if aggregation.AGGREGATORS[q.aggregator].released == "counts":
    pool.check_classes(config)
  if refits and (q.aggregator != aggregation.HISTOGRAMS or q.selection != "random"
                 or client or filtered(config)):
    raise ConfigError("config.queries.refits rounds' students learn released vote histograms "
                      "of random samples: use aggregator 'gaussian_histogram', selection "
                      "'random', no client and no filter, or set queries.refits=0.")
  if refits and student.uses_vae(config.student):
    raise ConfigError("config.queries.refits trains students in the queries stage, before the "
                      "VAE of Eq. 6 exists: set student.w_normal, w_tangent and w_entropy to 0, "
                      "or queries.refits=0.")
  if refits and q.num_queries < refits + 1:
    raise ConfigError(f"config.queries.num_queries={q.num_queries} cannot fill {refits + 1} "
                      "rounds (queries.refits + 1): raise num_queries or lower refits.")
  if q.selection == "least_confident" and not 0 < q.first_round < q.num_queries:
    raise ConfigError(f"config.queries.first_round={q.first_round}: least-confident selection "
                      "needs a first round of random queries, 0 < first_round < num_queries="
                      f"{q.num_queries}.")


def round_sizes(config, num: int) -> list[int]:
  """How many of ``num`` queries each of the ``queries.refits`` + 1 rounds asks
  (``np.array_split``'s sizes: the first round the largest)."""
  return [len(r) for r in np.array_split(np.arange(num), config.queries.refits + 1)]


def per_round(config, num: int) -> int:
  """The most samples one round asks about."""
  return round_sizes(config, num)[0]


def too_many(config, num: int, available: str, enlarge: str) -> ConfigError:
  """The error for ``num`` queries that ask more samples a round than ``available`` holds."""
  refits = config.queries.refits
  rounds = (f" asks {per_round(config, num)} samples in each of its {refits + 1} rounds, which"
            if refits else "")
  return ConfigError(f"config.queries.num_queries={num}{rounds} exceeds the {available}; lower "
                     f"it, {enlarge} or ask in more rounds (queries.refits, with "
                     "gaussian_histogram).")


def check_pool(config, num: int, pool_size: int) -> None:
  """Refuses more queries than the pool holds (the class count the plan assumes is checked
  before any stage runs, ``plan.checks.check_data``)."""
  if per_round(config, num) > pool_size:
    raise too_many(config, num, f"{pool_size} samples of the unlabelled pool",
                   "enlarge the pool (generator.num_synthetic or pool.size)")
