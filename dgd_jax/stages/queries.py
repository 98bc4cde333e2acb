"""Queries stage (DGD Eq. 3, PATE): a small subset D_s of the unlabelled pool (DGD: the
synthetic set; PATE: the public pool) is labelled by the teacher ensemble through noisy
aggregation (LNMax with Laplace scale 2/eps0, or GNMax / Confident-GNMax for DGD+/PATE+);
every query and its vote histogram go into the privacy ledger. The rest, D_u, stays
unlabelled.

The budget guard (``methods.budget_guard`` on ``releases``) runs before anything is trained or
queried: a plan whose data-independent epsilon exceeds ``config.privacy.max_epsilon`` is
refused.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import (aggregation, artefacts, dpsgd_plan, ensemble, ldp, pool, privacy, propagation,
                     train)
from dgd_jax.artefacts import QUERIES, VOTES, classifier, fit_config
from dgd_jax.query_plan import release, settings
from dgd_jax.core import Context
from dgd_jax.data import config_teachers_changed
from dgd_jax.errors import ConfigError
from dgd_jax.workdir import save_array, save_arrays

CONFIG_KEYS = ("pool", "queries", "privacy")
SELECTIONS = ("random", "least_confident", "representative")


def neighbours(config) -> tuple[str, ...]:
  """The neighbouring relations the run's teacher partition covers (each has its ledger)."""
  return tuple(config_teachers_changed(config))


def releases(config, neighbours: str = "replace_one") -> list[privacy.Release]:
  """The planned label queries, and the DP-SGD steps of DGD's private baseline where it has
  one, under the relation ``neighbours``: what the budget guard and ``sweep
  --accounting_only`` account before anything is trained."""
  return [*dpsgd_plan.baseline_releases(config, neighbours), release(config, neighbours=neighbours)]


def check(config) -> None:
  """Refuses query settings no run can use, before anything is trained."""
  q = settings(config)
  if q.selection not in SELECTIONS:
    raise ConfigError(f"config.queries.selection={q.selection!r}; use one of {SELECTIONS}.")
  client = config.queries.get("client", "")
  if client not in ("", "ldp") or (client == "ldp" and "ldp" not in config):
    raise ConfigError(f"config.queries.client={client!r}: use '' (the pool as is) or 'ldp' "
                      "(with an ldp block, e.g. the pate.py argument ldp1 or ldp5).")
  if q.selection == "least_confident" and not 0 < q.first_round < q.num_queries:
    raise ConfigError(f"config.queries.first_round={q.first_round}: least-confident selection "
                      "needs a first round of random queries, 0 < first_round < num_queries="
                      f"{q.num_queries}.")


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


def selector_probabilities(ctx: Context, x: np.ndarray, y: np.ndarray, x_pool: np.ndarray
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


def run(ctx: Context) -> dict:
  config = ctx.config
  p = config.privacy
  # A private baseline's DP-SGD steps, as they ran (the stage may be reused), compose with
  # the queries in one ledger per relation.
  baseline = {r: dpsgd_plan.recorded_baseline(ctx.results, r) for r in neighbours(config)}
  steps = dpsgd_plan.recorded_baseline(ctx.results)
  if steps and p.max_epsilon > 0:
    for r in neighbours(config):
      privacy.PrivacyLedger([*baseline[r], release(config, neighbours=r)]).check_budget(
          p.max_epsilon, p.delta, p.accountant)
  x_pool = pool.load(ctx)
  q = settings(config)
  num = q.num_queries
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
  params, predict, _ = artefacts.load_teachers(ctx)
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

  first = q.first_round if q.selection == "least_confident" else num
  if q.selection == "representative":  # public information only: the pool's features
    indices = propagation.representative(propagation.features(x_pool), num, select_key)
  else:
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
  ledgers = {r: privacy.PrivacyLedger([*baseline[r], release(config, votes, answered, r)])
             for r in neighbours(config)}
  plurality = np.argmax(votes, -1)
  local = {}
  if client == "ldp":  # the client side's own guarantee, per sample it sends
    local = {"ldp_local_epsilon": privacy.ldp_local_epsilon(
        config.ldp.sigma, int(np.prod(x_pool.shape[1:])), config.ldp.mu)}
  if steps:
    local["covered"] = (f"the private baseline's {steps[0].steps} DP-SGD steps and the "
                        f"{q.aggregator} answers to {num} label queries, composed (everything "
                        "the student saw derives from these)")
  if config.pool.source == "synthetic":  # the baseline's labels of the queried samples
    named = artefacts.load_synthetic_labels(ctx)[indices]
    local["label_accuracy_vs_baseline"] = float(np.mean(labels[answered] == named[answered]))
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
      "privacy": privacy.relations_json(ledgers, p.delta, p.accountant),
  }
