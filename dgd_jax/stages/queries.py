"""Queries stage (DGD Eq. 3): a small random subset D_s of the synthetic set is labelled by
the teacher ensemble through noisy aggregation (LNMax with Laplace scale 2/eps0, or GNMax /
Confident-GNMax for DGD+); every query and its vote histogram go into the privacy ledger.
The rest of the synthetic set, D_u, stays unlabelled.

The budget guard (``plan``) runs before anything is trained or queried: a plan whose
data-independent epsilon exceeds ``config.privacy.max_epsilon`` is refused.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import aggregation, ensemble, privacy, train
from dgd_jax.errors import ConfigError
from dgd_jax.stages import teachers
from dgd_jax.stages.generator import CONFIG_KEYS as GENERATOR_KEYS, SYNTHETIC

CONFIG_KEYS = tuple(dict.fromkeys(teachers.CONFIG_KEYS + GENERATOR_KEYS +
                                  ("queries", "privacy")))
QUERIES = "queries.npz"  # indices into the synthetic set, noisy labels, answered mask
VOTES = "votes.npy"  # the teachers' vote histograms: PRIVATE, used only for accounting


def release(config, votes=None, answered=None) -> privacy.Release:
  """The ledger record of the planned (or, with votes, the made) label queries."""
  q = config.queries
  if q.aggregator == "lnmax":
    return privacy.LNMaxQueries(q.noise_scale, q.num_queries, votes)
  if q.aggregator == "gnmax":
    return privacy.GNMaxQueries(q.noise_scale, q.num_queries, votes)
  return privacy.ConfidentGNMaxQueries(q.threshold, q.sigma1, q.noise_scale, q.num_queries,
                                       answered, votes)


def plan(config) -> privacy.EpsilonReport:
  """The budget guard: the data-independent epsilon of the planned queries under
  ``config.privacy.accountant``; ConfigError when it exceeds ``max_epsilon``."""
  ledger = privacy.PrivacyLedger([release(config)])
  p = config.privacy
  if p.max_epsilon > 0:
    return ledger.check_budget(p.max_epsilon, p.delta, p.accountant)
  return ledger.epsilon(p.delta, p.accountant, data_dependent=False)


def aggregate(config, key: jax.Array, votes: np.ndarray) -> aggregation.Aggregate:
  q = config.queries
  votes = jnp.asarray(votes)
  if q.aggregator == "lnmax":
    return aggregation.lnmax(key, votes, q.noise_scale)  # DGD Eq. 3
  if q.aggregator == "gnmax":
    return aggregation.gnmax(key, votes, q.noise_scale)
  return aggregation.confident_gnmax(key, votes, q.threshold, q.sigma1, q.noise_scale)


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
  x_syn = np.load(os.path.join(ctx.stage_path("generator"), SYNTHETIC))
  num = config.queries.num_queries
  if num > len(x_syn):
    raise ConfigError(f"config.queries.num_queries={num} exceeds the {len(x_syn)} "
                      "synthetic samples; lower it or raise generator.num_synthetic.")
  select_key, noise_key = jax.random.split(ctx.key("queries"))
  indices = np.sort(np.asarray(jax.random.choice(select_key, len(x_syn), (num,),
                                                 replace=False)))
  params, predict = load_teachers(ctx)
  votes = ensemble.vote_histograms(predict, params, x_syn[indices], ctx.dataset.num_classes)
  agg = aggregate(config, noise_key, votes)
  answered = np.asarray(agg.answered)
  np.savez(os.path.join(ctx.stage.path, QUERIES), indices=indices,
           labels=np.asarray(agg.labels), answered=answered)
  np.save(os.path.join(ctx.stage.path, VOTES), votes)
  ledger = privacy.PrivacyLedger([release(config, votes, answered)])
  plurality = np.argmax(votes, -1)
  return {
      "num_queries": num,
      "answered": int(answered.sum()),
      "noisy_label_agreement_with_plurality": float(
          np.mean(np.asarray(agg.labels)[answered] == plurality[answered])),
      "privacy": ledger.to_json(config.privacy.delta),
  }
