"""The checks a run's config passes, and the public values it resolves, before anything is
trained, queried or written: ``run_config`` (the values the data's size and the budget
choose), ``check_config`` (values no stage can use), ``budget_guard`` (a plan above its
epsilon), ``check_data`` (data the plan cannot serve), and report.md's warnings
``large_delta`` and ``weak_signal``. Each is a function of the config and public quantities
(N, the class count), never of the private examples or labels.
"""
from __future__ import annotations

import copy

from absl import logging

from dgd_jax import privacy
from dgd_jax.configs.common import (SCHEDULES, SMOKE_AUDIT_SPLITS, SMOKE_QUERIES, SMOKE_STEPS,
                                    SMOKE_SYNTHETIC, SMOKE_TEST_SIZE)
from dgd_jax.data import partitions
from dgd_jax.plan import artefacts
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import pool
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan.context import Config, Method, config_teachers_changed, private_size
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.synthesis import generative


def check_config(config: Config) -> None:
  """Raises ConfigError naming the field and the fix for values no stage can use (the
  method's name is the registry's to check: ``runner.methods.method``)."""
  check_budget(config)
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


def check_budget(config: Config) -> None:
  """Refuses a ``privacy.max_epsilon`` that is zero, negative or NaN: each would turn the
  budget guard (and the plans calibrated to the budget) off without a word. A finite value > 0
  is the budget; ``inf`` turns the guard off, explicitly."""
  if "privacy" in config and "max_epsilon" in config.privacy:
    privacy_checks.max_epsilon(config.privacy.max_epsilon)


def run_config(config: Config) -> Config:
  """The config a run uses: a public pool's size 0 replaced by its share of the test split
  (``pool.with_public_size``), ``num_teachers = 0`` replaced by the count chosen for the
  private set's size and the budget (``with_teachers``), DP-SGD's batch and steps derived from
  the data's size where 0 (``dpsgd_plan.with_schedule``), then ``smoke_schedules``.
  Idempotent. Refuses a budget no plan can be made for first (``check_budget``): the
  values it resolves read it."""
  check_budget(config)
  config = pool.with_public_size(config)
  config = with_teachers(config)
  config = dpsgd_plan.with_schedule(config)
  return smoke_schedules(config)


def with_teachers(config: Config) -> Config:
  """``config`` with ``num_teachers = 0`` replaced by the count chosen for the private set's
  size and the budget (``query_plan.num_teachers_for``, public quantities only), the reason
  kept in ``config.num_teachers_chosen`` (no stage reads it, so fingerprints are those of the
  count); ``config`` itself otherwise. N is ``config.private_size`` when set, else the data's
  size: fixed under replace-one neighbours; under add/remove-one it must be the public
  ``private_size``."""
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


def smoke_schedules(config: Config) -> Config:
  """The config a run uses: ``config`` itself, or for a smoke run (``,smoke`` or
  ``--config.smoke=True``) a copy with every SCHEDULES field cut to SMOKE_STEPS, the
  generator's learning-rate decay every round, logging every step and one checkpoint (the
  last step), the label queries cut to SMOKE_QUERIES, every synthetic set to SMOKE_SYNTHETIC,
  the audit to SMOKE_AUDIT_SPLITS splits, the teachers' evaluation to SMOKE_TEST_SIZE images,
  PATE's public pool to SMOKE_SYNTHETIC images too, and the test split to SMOKE_TEST_SIZE
  examples after that pool, so that every code path runs at the preset's shapes in minutes.
  Idempotent."""
  if not config.get("smoke", False):
    return config
  config = copy.deepcopy(config)

  def cut(node):
    for name, value in node.items():
      if isinstance(value, Config):
        cut(value)
      elif name in SCHEDULES and isinstance(value, int):
        node[name] = min(value, SMOKE_STEPS)
      elif name == "decay_every":
        node[name] = 1

  cut(config)
  config.log_every, config.checkpoint_every = 1, SMOKE_STEPS
  if "queries" in config:  # 'auto' plans choose at most this many
    q = config.queries
    q.num_queries = min(q.num_queries, SMOKE_QUERIES)
    if q.get("first_round", 0) >= q.num_queries:  # least_confident: two rounds still
      q.first_round = q.num_queries // 2
  for block in ("generator", "dpdfd"):  # 0 = as many as the private set (60,000)
    if block in config and "num_synthetic" in config[block]:
      config[block].num_synthetic = min(config[block].num_synthetic or SMOKE_SYNTHETIC,
                                        SMOKE_SYNTHETIC)
  if "audit" in config:
    config.audit.splits = min(config.audit.splits, SMOKE_AUDIT_SPLITS)
  if "teachers" in config:  # 0 = the whole test split, a public pool's images included
    config.teachers.eval_size = min(config.teachers.eval_size or SMOKE_TEST_SIZE,
                                    SMOKE_TEST_SIZE)
  public = "pool" in config and config.pool.source == "public"
  if public:  # PATE's public pool, as a synthetic one (0, its share of the test split, too)
    config.pool.size = min(config.pool.size or SMOKE_SYNTHETIC, SMOKE_SYNTHETIC)
  with config.unlocked():  # a field only smoke configs have: other fingerprints stay as they were
    config.test_size = SMOKE_TEST_SIZE + (config.pool.size if public else 0)
  return config


def check_data(config: Config, data) -> None:
  """Refuses, before any stage runs, data the config's plan cannot serve: more teachers than
  training examples, an automatic query plan made for another class count than the labels
  have."""
  if config.get("num_teachers"):  # 0: chosen for the data's size (run_config)
    partitions.check_count(len(data.x_train), config.num_teachers)
  if "queries" in config and config.queries.plan == "auto" and (
      config.queries.num_classes != data.num_classes):
    raise ConfigError(f"{config.dataset}: its labels have {data.num_classes} classes, but the "
                      f"automatic query plan is made for config.queries.num_classes="
                      f"{config.queries.num_classes}: set --config.queries.num_classes="
                      f"{data.num_classes}.")


def large_delta(config: Config, size: int) -> str | None:
  """None, or report.md's warning for a run whose delta is at least 1/N (N = ``size``, the
  private set's, as ``load_private`` gives it), which ``privacy.allow_large_delta`` accepts and
  otherwise a ConfigError refuses: for a method with a DP release."""
  p = config.privacy
  privacy_checks.delta_for_size(p.delta, size, allowed=p.allow_large_delta)
  return privacy_checks.large_delta_warning(p.delta, size, "config.privacy.allow_large_delta")


def weak_signal(config: Config) -> str | None:
  """None, or report.md's warning where the planned ensemble's votes are too few for the
  budget (``query_plan.weak_signal``): a run with an automatic query plan only."""
  budget = query_plan.count_budget(config)
  if not budget[0] or not config.get("num_teachers"):
    return None
  return query_plan.weak_signal(config.num_teachers, *budget, dataset=config.dataset)


def planned_ledgers(config: Config, method: Method) -> dict[str, privacy.PrivacyLedger]:
  """The ledger of ``method``'s planned releases under each neighbouring relation it claims;
  {} for a method that releases nothing under differential privacy (its note says what it
  is)."""
  if not method.releases:
    return {}
  return {r: privacy.PrivacyLedger(method.releases(config, r))
          for r in method.neighbours(config)}


def budget_guard(config: Config, method: Method) -> privacy.EpsilonReport | None:
  """The largest data-independent epsilon of the planned releases, over the claimed
  relations, under ``privacy.accountant`` (a data-dependent headline is guarded by its
  data-independent counterpart); ConfigError when any relation's exceeds
  ``privacy.max_epsilon`` (finite; ``inf`` turns the guard off, a zero, negative or NaN value
  is refused: ``check_budget``). Runs before anything is trained."""
  check_budget(config)
  ledgers = planned_ledgers(config, method)
  if not ledgers:
    return None
  p = config.privacy
  accountant = "rdp" if p.accountant in privacy.DATA_DEPENDENT_ONLY else p.accountant
  if privacy_checks.has_budget(p.max_epsilon):
    reports = [ledger.check_budget(p.max_epsilon, p.delta, accountant)
               for ledger in ledgers.values()]
  else:
    reports = [ledger.epsilon(p.delta, accountant, data_dependent=False)
               for ledger in ledgers.values()]
  return max(reports, key=lambda r: r.epsilon)
