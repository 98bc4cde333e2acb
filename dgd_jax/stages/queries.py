"""Queries stage (DGD Eq. 3, PATE): a small subset D_s of the unlabelled pool (DGD: the
synthetic set; PATE: the public pool) is labelled by the teacher ensemble through noisy
aggregation (LNMax with Laplace scale 2/eps0, or GNMax / Confident-GNMax for DGD+/PATE+);
every query and its vote histogram go into the privacy ledger. The rest, D_u, stays
unlabelled.

The budget guard (``plan``) runs before anything is trained or queried: a plan whose
data-independent epsilon exceeds ``config.privacy.max_epsilon`` is refused.
"""
from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import aggregation, ensemble, ldp, privacy, query_plan, train
from dgd_jax.errors import ConfigError
from dgd_jax.stages import classifier, dpsgd, fit_config, pool, teachers
from dgd_jax.stages.generator import SYNTHETIC_LABELS
from dgd_jax.workdir import load_array, save_array, save_arrays

CONFIG_KEYS = tuple(dict.fromkeys(teachers.CONFIG_KEYS + pool.CONFIG_KEYS +
                                  ("queries", "privacy")))
QUERIES = "queries.npz"  # indices into the synthetic set, noisy labels, answered mask
VOTES = "votes.npy"  # the teachers' vote histograms: PRIVATE, used only for accounting


@dataclasses.dataclass(frozen=True)
class Settings:
  """The query plan a run makes: from the config (``queries.plan='fixed'``) or chosen by
  ``query_plan.choose`` for the target epsilon (``'auto'``)."""

  aggregator: str
  noise_scale: float
  num_queries: int
  threshold: float = 0.0
  sigma1: float = 0.0
  selection: str = "random"
  first_round: int = 0
  chosen: tuple = ()  # 'auto': (best, candidates) as JSON-able dicts


@functools.lru_cache(maxsize=32)
def _choose(n, k, eps, delta, consensus, cap, accountant):
  best, found = query_plan.choose(n, k, eps, delta, consensus, cap, accountant)
  return best, tuple(found)


def settings(config) -> Settings:
  q, p = config.queries, config.privacy
  fixed = Settings(q.aggregator, q.noise_scale, q.num_queries, q.threshold, q.sigma1,
                   q.selection, q.first_round)
  if q.get("plan", "fixed") == "fixed":
    return fixed
  if q.plan != "auto":
    raise ConfigError(f"config.queries.plan={q.plan!r}; use 'fixed' (the config's aggregator, "
                      "noise and count) or 'auto' (chosen for privacy.max_epsilon).")
  if not p.max_epsilon > 0:
    raise ConfigError("config.queries.plan='auto' chooses the plan for a target epsilon: set "
                      "config.privacy.max_epsilon > 0.")
  accountant = "rdp" if p.accountant in privacy.DATA_DEPENDENT_ONLY else p.accountant
  best, found = _choose(config.num_teachers, q.num_classes, p.max_epsilon, p.delta,
                        q.assumed_consensus, q.num_queries, accountant)
  return dataclasses.replace(
      fixed, aggregator=best.aggregator, noise_scale=best.noise_scale,
      num_queries=best.num_queries, chosen=(best.to_json(), [c.to_json() for c in found]))


def release(config, votes=None, answered=None) -> privacy.Release:
  """The ledger record of the planned (or, with votes, the made) label queries."""
  q = settings(config)
  if q.aggregator == "lnmax":
    return privacy.LNMaxQueries(q.noise_scale, q.num_queries, votes)
  if q.aggregator == "gnmax":
    return privacy.GNMaxQueries(q.noise_scale, q.num_queries, votes)
  return privacy.ConfidentGNMaxQueries(q.threshold, q.sigma1, q.noise_scale, q.num_queries,
                                       answered, votes)


def plan(config) -> privacy.EpsilonReport:
  """The budget guard: the data-independent epsilon of the planned queries under
  ``config.privacy.accountant``; ConfigError when it exceeds ``max_epsilon``."""
  q = settings(config)
  if q.selection not in ("random", "least_confident"):
    raise ConfigError(f"config.queries.selection={q.selection!r}; use 'random' or "
                      "'least_confident'.")
  client = config.queries.get("client", "")
  if client not in ("", "ldp") or (client == "ldp" and "ldp" not in config):
    raise ConfigError(f"config.queries.client={client!r}: use '' (the pool as is) or 'ldp' "
                      "(with an ldp block, e.g. the pate.py argument ldp1 or ldp5).")
  if q.selection == "least_confident" and not 0 < q.first_round < q.num_queries:
    raise ConfigError(f"config.queries.first_round={q.first_round}: least-confident selection "
                      "needs a first round of random queries, 0 < first_round < num_queries="
                      f"{q.num_queries}.")
  ledger = privacy.PrivacyLedger([*dpsgd.baseline_releases(config), release(config)])
  p = config.privacy
  # A data-dependent headline (PATE) is guarded by its data-independent counterpart.
  accountant = "rdp" if p.accountant in privacy.DATA_DEPENDENT_ONLY else p.accountant
  if p.max_epsilon > 0:
    return ledger.check_budget(p.max_epsilon, p.delta, accountant)
  return ledger.epsilon(p.delta, accountant, data_dependent=False)


def aggregate(config, key: jax.Array, votes: np.ndarray) -> aggregation.Aggregate:
  q = settings(config)
  votes = jnp.asarray(votes)
  if q.aggregator == "lnmax":
    return aggregation.lnmax(key, votes, q.noise_scale)  # DGD Eq. 3
  if q.aggregator == "gnmax":
    return aggregation.gnmax(key, votes, q.noise_scale)
  return aggregation.confident_gnmax(key, votes, q.threshold, q.sigma1, q.noise_scale)


def least_confident(probs: np.ndarray, k: int) -> np.ndarray:
  """Indices of the ``k`` rows whose largest probability is smallest (PATE App. C.2)."""
  return np.argsort(np.max(probs, axis=-1), kind="stable")[:k]


def selector_probabilities(ctx, x: np.ndarray, y: np.ndarray, x_pool: np.ndarray
                           ) -> np.ndarray:
  """Softmax outputs on the pool of a student trained (student schedule) on the first
  round's answers (x, y): public data and released labels only."""
  model = classifier(ctx.config, ctx.dataset.num_classes)
  cfg = fit_config(ctx.config, "student")
  init_key, train_key = jax.random.split(ctx.key("query_selector"))
  state = train.create_train_state(model, train.optimizer(cfg), init_key, x.shape[1:])
  state = train.fit(state, x, y.astype(np.int32), train_key, cfg,
                    os.path.join(ctx.stage.path, "selector_checkpoints"), "query_selector",
                    ctx.log)
  return np.asarray(jax.nn.softmax(train.logits(model.apply, state.params, x_pool)),
                    np.float64)


def load_teachers(ctx):
  """The finished teachers stage's stacked parameters on the teacher mesh, and its
  prediction function."""
  template, predict, *_ = teachers.new_teachers(ctx.config, ctx.dataset,
                                                ctx.config.num_teachers, jax.random.key(0))
  params = train.restore_params(os.path.join(ctx.stage_path("teachers"), "checkpoints"),
                                template)
  return params, predict


def run(ctx) -> dict:
  config = ctx.config
  plan(config)  # again here: a stage run on its own is guarded too
  baseline = dpsgd.recorded_baseline(ctx.results)
  if baseline and config.privacy.max_epsilon > 0:  # the baseline that ran (it may be reused)
    privacy.PrivacyLedger([*baseline, release(config)]).check_budget(
        config.privacy.max_epsilon, config.privacy.delta, config.privacy.accountant)
  x_pool = pool.load(ctx)
  plan_made = settings(config)
  num = plan_made.num_queries
  if config.queries.get("plan", "fixed") == "auto" and (
      config.queries.num_classes != ctx.dataset.num_classes):
    raise ConfigError(f"config.queries.num_classes={config.queries.num_classes} but the dataset "
                      f"has {ctx.dataset.num_classes} classes: the automatic plan assumes the "
                      "dataset's number; set it to match.")
  if num > len(x_pool):
    raise ConfigError(f"config.queries.num_queries={num} exceeds the {len(x_pool)} "
                      "samples of the unlabelled pool; lower it or enlarge the pool "
                      "(generator.num_synthetic or pool.size).")
  select_key, noise_key = jax.random.split(ctx.key("queries"))
  params, predict = load_teachers(ctx)
  q = plan_made
  client = config.queries.get("client", "")

  client_key = ctx.key("ldp_client")

  def ask(indices, key, round_index):  # the teachers' votes on x_pool[indices], answers
    sent = x_pool[indices]
    if client == "ldp":  # the client masks and perturbs what it sends (LDP Algorithm 1)
      c = config.ldp
      sent = np.asarray(ldp.transform(jax.random.fold_in(client_key, round_index),
                                      jnp.asarray(sent), c.sigma, c.mu, c.bound))
    votes = ensemble.vote_histograms(predict, params, sent, ctx.dataset.num_classes)
    agg = aggregate(config, key, votes)
    return votes, np.asarray(agg.labels), np.asarray(agg.answered)

  first = num if q.selection == "random" else q.first_round
  indices = np.sort(np.asarray(jax.random.choice(select_key, len(x_pool), (first,),
                                                 replace=False)))
  votes, labels, answered = ask(indices, noise_key, 0)
  if q.selection == "least_confident":  # PATE App. C.2: a student picks the second round
    if not answered.any():
      raise ConfigError("no first-round query was answered, so no student can pick the "
                        "rest: raise config.queries.first_round or lower the threshold.")
    probs = selector_probabilities(ctx, x_pool[indices[answered]], labels[answered], x_pool)
    probs[indices] = np.inf  # never ask twice
    second = least_confident(probs, num - first)
    more = ask(second, jax.random.fold_in(noise_key, 1), 1)
    indices = np.concatenate([indices, second])
    votes, labels, answered = (np.concatenate([a, b]) for a, b in
                               zip((votes, labels, answered), more))
  save_arrays(os.path.join(ctx.stage.path, QUERIES), indices=indices, labels=labels,
              answered=answered)
  save_array(os.path.join(ctx.stage.path, VOTES), votes)
  local = {}
  # With a private baseline, the DP-SGD steps that actually ran compose with the queries.
  ledger = privacy.PrivacyLedger([*baseline, release(config, votes, answered)])
  if baseline:
    local["covered"] = (f"the private baseline's {baseline[0].steps} DP-SGD steps and the "
                        f"{q.aggregator} answers to {num} label queries, composed (everything "
                        "the student saw derives from these)")
  plurality = np.argmax(votes, -1)
  if client == "ldp":  # the client side's own guarantee, per sample it sends
    local = {"ldp_local_epsilon": privacy.ldp_local_epsilon(
        config.ldp.sigma, int(np.prod(x_pool.shape[1:])), config.ldp.mu)}
  if config.pool.source == "synthetic":  # the baseline's labels of the queried samples
    baseline = load_array(os.path.join(ctx.stage_path("generator"), SYNTHETIC_LABELS))[indices]
    local["label_accuracy_vs_baseline"] = float(np.mean(labels[answered] == baseline[answered]))
  if q.chosen:  # why this plan: every candidate's expected label accuracy and epsilon
    local["plan"] = {"chosen": q.chosen[0], "candidates": q.chosen[1],
                     "assumed_consensus": config.queries.assumed_consensus}
  return {
      **local,
      "aggregator": q.aggregator,
      "noise_scale": q.noise_scale,
      "num_queries": num,
      "answered": int(answered.sum()),
      "noisy_label_agreement_with_plurality": float(
          np.mean(labels[answered] == plurality[answered])),
      "privacy": ledger.to_json(config.privacy.delta),
  }
