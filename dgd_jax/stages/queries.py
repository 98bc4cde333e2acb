"""Queries stage (DGD Eq. 3, PATE): a small subset D_s of the unlabelled pool (DGD: the
synthetic set; PATE: the public pool) is labelled by the teacher ensemble through noisy
aggregation (LNMax with Laplace scale 2/eps0, or GNMax / Confident-GNMax for DGD+/PATE+);
every query and its vote histogram go into the privacy ledger. The rest, D_u, stays
unlabelled. ``gaussian_histogram`` releases GNMax's noisy histogram whole instead of its
argmax (at GNMax's data-independent epsilon): the student learns the noisy vote shares.
The class-count release (``aggregation.CLASS_COUNTS``) releases one count of each histogram,
that of the class the synthetic sample was made for (``pool.classes``, fixed before any
vote): sensitivity 1 instead of sqrt 2, so at the same epsilon the count carries sigma /
sqrt 2 of noise (``training.student.class_count_targets`` makes the student's targets of it).

``config.queries.refits`` = R > 0 (``gaussian_histogram``, random selection) asks the
histograms in R + 1 rounds of random pool samples, ``num_queries`` in all at the planned
sigma. Before each later round a student learns the histograms released so far
(``student_fit.train_student``, as the student stage trains it, Eq. 6 off), and teacher i
becomes that student with its last layer refit on teacher i's partition of the private
training set (``ensemble.refit_heads``): teachers sharing a backbone that already fits the
pool agree more on it, so the same noise hides less of their votes. The student is
post-processing of earlier releases and teacher i still reads only partition i, so each
histogram keeps its sensitivity and the rounds compose adaptively: the plan's epsilon, of
``num_queries`` histograms at sigma, covers them all.

The budget guard (``plan.checks.budget_guard`` on ``plan/dgd.py``'s ``releases``) runs before
anything is trained or queried: a plan whose data-independent epsilon exceeds
``config.privacy.max_epsilon`` is refused.

``config.queries.filter`` (GNMax, Confident-GNMax): the queries run under a Renyi filter whose
budget is ``config.privacy.max_epsilon`` (Feldman & Zrnic 2021, ``privacy.renyi_filter``): each
query's threshold step is charged, its GNMax step only when answered, and querying stops before
the budget could be exceeded; the ledger's ``renyi_filter`` epsilon is then a DP guarantee and the
result says where and why the filter stopped. ``config.queries.smooth_sensitivity``
(Confident-)GNMax, one changed vote per neighbour): the data-dependent epsilon of the answered
queries is also released with noise scaled to its smooth sensitivity (PATE 2018 Sec. 4,
``privacy.smooth_sensitivity``) at an order, beta and sigma_ss fixed before any vote
(``ss_plan``), and the release's (lam, c)-RDP (Thm. 23) is composed into the ledger (the
``smooth_sensitivity`` accountant); PATE 2018's vote-chosen parameters give a diagnostic beside
it, not a release.
"""
from __future__ import annotations

import os
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import privacy
from dgd_jax.data import config_shards
from dgd_jax.labelling import aggregation
from dgd_jax.labelling import propagation
from dgd_jax.plan import artefacts
from dgd_jax.plan import dgd as dgd_plan
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import pool
from dgd_jax.plan import query_checks
from dgd_jax.plan import student_fit
from dgd_jax.plan.artefacts import QUERIES, VOTES, classifier, fit_config
from dgd_jax.plan.context import NOISE_KEY, Context
from dgd_jax.plan.queries import release, settings
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.privacy import smooth_sensitivity
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import save_array, save_arrays
from dgd_jax.training import ensemble
from dgd_jax.training import ldp
from dgd_jax.training import student
from dgd_jax.training import train

CONFIG_KEYS = ("pool", "queries", "privacy", NOISE_KEY)


def programs(config, data) -> dict:
  """The teachers' votes on one query chunk (``ensemble.vote_histograms``' program) at the
  config's shapes. A run with ``queries.refits`` also trains round students and refit heads,
  which are not compiled here (no preset refits; tests/test_pipeline.py runs a refit at small
  shapes)."""
  rows = config_shards(config, data.x_train, data.y_train)
  return {"votes": artefacts.teacher_programs(config, data, rows)["votes"]}


def aggregate(config, key: jax.Array, votes: np.ndarray, classes: np.ndarray | None = None
              ) -> aggregation.Aggregate:
  """The config's aggregator (``aggregation.AGGREGATORS``) on ``votes`` [Q, K]; ``classes``
  [Q]: the class whose count the class-count release releases for each query."""
  q = settings(config)
  return aggregation.AGGREGATORS[q.aggregator](key, jnp.asarray(votes), q.noise_scale, classes,
                                               q.threshold, q.sigma1)


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


def apply_filter(config, plans: dict, indices, votes, labels, answered):
  """Runs each relation's Renyi filter over the threshold bits ``answered`` in query order and
  keeps the queries before the earliest stop: ((indices, votes, labels, answered) of the asked
  queries, the realised record per relation, the filter's JSON). Dropping the later queries
  equals never asking them: they release nothing."""
  runs = {r: plans[r].run_filter(answered) for r in plans}
  binding = min(runs, key=lambda r: runs[r].asked)
  asked, stop = runs[binding].asked, runs[binding].stop_reason
  kept = tuple(a[:asked] for a in (indices, votes, labels, answered))
  records = {r: plans[r].realise(asked, kept[3], stop, kept[1]) for r in plans}
  return kept, records, {**runs[binding].to_json(), "queries": len(indices),
                         "neighbours": binding, "epsilon": config.privacy.max_epsilon}


def release_smooth_sensitivity(config, rng: Callable[[], np.random.Generator], votes,
                               answered) -> dict:
  """PATE 2018 Sec. 4: the answered queries' data-dependent epsilon released with noise scaled
  to its smooth sensitivity (``privacy.smooth_sensitivity``) at the parameters ``ss_plan``
  fixed before the votes (the release the headline composes), its noise drawn from ``rng()``
  (a secret generator; the diagnostic draws the same z from a second one);
  and, under ``diagnostic``, PATE 2018's own analysis choosing them from the votes (not a DP
  release)."""
  q = settings(config)
  confident = q.aggregator == "confident_gnmax"
  terms = (votes, q.threshold if confident else None, q.sigma1 if confident else None,
           q.noise_scale, config.privacy.delta)
  released = smooth_sensitivity.release_confident_gnmax(
      *terms, dgd_plan.ss_plan(config), answered=answered, rng=rng())
  chosen = smooth_sensitivity.choose_from_votes(*terms, answered=answered)
  diagnostic = smooth_sensitivity.release_confident_gnmax(
      *terms, chosen, answered=answered, rng=rng())
  return {**released.to_json(), "diagnostic": diagnostic.to_json()}


def round_student(ctx: Context, x_pool: np.ndarray, asked: np.ndarray, released: np.ndarray,
                  round_index: int, noise_scale: float):
  """The student of the histograms ``released`` (at ``noise_scale``) for ``x_pool[asked]`` so
  far, trained as the student stage trains its own (Eq. 6 off; ``query_checks.check``): post-
  processing of the release. Returns (model, parameters)."""
  config = ctx.config
  name = f"refit_student_{round_index}"
  model, fits, _ = student_fit.train_student(
      ctx, (None, None), x_pool[asked],
      student.shares(released, config.num_teachers), np.delete(x_pool, asked, axis=0),
      name, os.path.join(ctx.stage.checkpoint_dir, name), brier=True,
      k=student_fit.members(config, noise_scale), key=name)
  return model, fits[-1]


def refit_teachers(ctx: Context, model, params, round_index: int):
  """Round ``round_index``'s teachers (``queries.refits``): the student ``params`` of
  ``model`` with its last layer refit on each teacher's partition of the private training set
  (``ensemble.refit_heads``, the teachers' fit settings). Returns (the stacked heads, the
  student's backbone features ``features(x) -> [Q, d]``), whose labels are
  ``ensemble.head_labels``."""
  config, data = ctx.config, ctx.dataset
  backbone = lambda p, x: model.apply(p, x, with_features=True)[1]
  features = lambda x: train.logits(backbone, params, x)  # batched like the logits
  parts = ensemble.Partitions.stack(config_shards(config, data.x_train, data.y_train))
  heads = ensemble.refit_heads(params["params"]["head"], features(data.x_train), data.y_train,
                               parts, fit_config(config, "teachers"),
                               ctx.key(f"refit_teachers_{round_index}"))
  return heads, features


def ask_teachers(ctx: Context, x_pool: np.ndarray):
  """The queries in their rounds: (indices into the pool, vote histograms, noisy labels,
  answered mask, the released noisy histograms or counts, or None where the labels are the
  release), in the order they were asked.
  Selection reads public information only (the pool, and for least-confident selection a
  student of the first round's answers); ``queries.refits`` rounds draw their samples at
  random, each from a key of its own, and ask teachers refit from a student of the released
  histograms (``round_student``, ``refit_teachers``)."""
  config = ctx.config
  q = settings(config)
  num = q.num_queries
  select_key = ctx.key("queries")  # public: which pool samples are asked
  noise_key = ctx.noise_key("queries")  # secret: the aggregator's noise
  params, predict, _ = artefacts.load_teachers(ctx)
  client_key = ctx.noise_key("ldp_client")  # the client's own (secret) noise
  classes = (pool.classes(config, len(x_pool), ctx.dataset.num_classes)
             if aggregation.AGGREGATORS[q.aggregator].released == "counts" else None)

  def ask(indices, key, round_index, vote=None):  # the votes on x_pool[indices], answers
    sent = x_pool[indices]
    if config.queries.client == "ldp":  # the client masks and perturbs (LDP Algorithm 1)
      c = config.ldp
      sent = np.asarray(ldp.transform(jax.random.fold_in(client_key, round_index),
                                      jnp.asarray(sent), c.sigma, c.mu, c.bound))
    votes = (vote(sent) if vote else
             ensemble.vote_histograms(predict, params, sent, ctx.dataset.num_classes))
    agg = aggregate(config, key, votes, None if classes is None else classes[indices])
    released = None if agg.released is None else np.asarray(agg.released, np.float32)
    return votes, np.asarray(agg.labels), np.asarray(agg.answered), released

  def random_round(size, round_index):  # the first round from the stage's own key
    key = jax.random.fold_in(select_key, round_index) if round_index else select_key
    return np.sort(np.asarray(jax.random.choice(key, len(x_pool), (size,), replace=False)))

  def joined(a, b):  # two rounds' (indices, votes, labels, answered, released)
    return tuple(None if u is None else np.concatenate([u, v]) for u, v in zip(a, b))

  sizes = query_checks.round_sizes(config, num)
  first = q.first_round if q.selection == "least_confident" else sizes[0]
  if q.selection == "representative":  # public information only: the pool's features
    indices = propagation.representative(propagation.features(x_pool), num, select_key)
  else:
    indices = random_round(first, 0)
  asked = (indices, *ask(indices, noise_key, 0))
  for r, size in enumerate(sizes[1:], start=1):  # queries.refits
    heads, features = refit_teachers(
        ctx, *round_student(ctx, x_pool, asked[0], asked[4], r, q.noise_scale), r)
    vote = lambda x: ensemble.vote_histograms(ensemble.head_labels, heads, features(x),
                                              ctx.dataset.num_classes)
    indices = random_round(size, r)
    asked = joined(asked, (indices, *ask(indices, jax.random.fold_in(noise_key, r), r, vote)))
  if q.selection != "least_confident":
    return asked
  _, votes, labels, answered, released = asked
  if not answered.any():  # PATE App. C.2: a student picks the second round
    raise ConfigError("no first-round query was answered, so no student can pick the "
                      "rest: raise config.queries.first_round or lower the threshold.")
  probs = selector_probabilities(ctx, x_pool[indices[answered]], labels[answered], x_pool)
  probs[indices] = np.inf  # never ask twice
  second = least_confident(probs, num - first)
  return joined(asked, (second, *ask(second, jax.random.fold_in(noise_key, 1), 1)))


def diagnostics(ctx: Context, x_pool, indices, labels, answered, steps) -> dict:
  """What the result says beside the ledgers: the client's local epsilon, what the
  epsilon covers, the labels' agreement with the baseline's, why this plan."""
  config = ctx.config
  q = settings(config)
  local = {}
  if config.queries.client == "ldp":  # the client side's own guarantee, per sample it sends
    local = {"ldp_local_epsilon": privacy.ldp_local_epsilon(
        config.ldp.sigma, int(np.prod(x_pool.shape[1:])), config.ldp.mu)}
  if steps:
    local["covered"] = (f"the private baseline's {steps[0].steps} DP-SGD steps and the "
                        f"{q.aggregator} answers to {len(indices)} label queries, composed "
                        "(everything the student saw derives from these)")
  # the baseline's labels of the queried samples (the class counts release no label)
  if (config.pool.source == "synthetic"
      and aggregation.AGGREGATORS[q.aggregator].released != "counts"):
    named = artefacts.load_synthetic_labels(ctx)[indices]
    local["label_accuracy_vs_baseline"] = float(np.mean(labels[answered] == named[answered]))
  if q.chosen:  # why this plan: every candidate's expected label accuracy and epsilon
    local["plan"] = {"chosen": q.chosen[0], "candidates": q.chosen[1],
                     "assumed_consensus": config.queries.assumed_consensus}
  return local


def run(ctx: Context) -> dict:
  config = ctx.config
  p = config.privacy
  # A private baseline's DP-SGD steps, as they ran (the stage may be reused), compose with
  # the queries in one ledger per relation.
  baseline = {r: dpsgd_plan.recorded_baseline(ctx.results, r) for r in dgd_plan.neighbours(config)}
  steps = dpsgd_plan.recorded_baseline(ctx.results)
  plans = {r: dgd_plan.planned(config, r, baseline[r]) for r in dgd_plan.neighbours(config)}
  if steps and privacy_checks.has_budget(p.max_epsilon):
    for r in dgd_plan.neighbours(config):
      privacy.PrivacyLedger([*baseline[r], plans[r]]).check_budget(
          p.max_epsilon, p.delta, p.accountant)
  x_pool = pool.load(ctx)
  q = settings(config)
  query_checks.check_pool(config, q.num_queries, len(x_pool))
  indices, votes, labels, answered, released = ask_teachers(ctx, x_pool)
  pate2018 = {}  # where the filter stopped; the smooth-sensitivity release
  if dgd_plan.filtered(config):
    (indices, votes, labels, answered), records, pate2018["filter"] = apply_filter(
        config, plans, indices, votes, labels, answered)
  else:
    records = {r: release(config, votes, answered, r) for r in plans}
  # the release where it is not the labels: "histograms", or "counts" (``labels``: the
  # class counted)
  released_as = aggregation.AGGREGATORS[q.aggregator].released
  kept = {} if released is None else {released_as: released}
  save_arrays(os.path.join(ctx.stage.path, QUERIES), indices=indices, labels=labels,
              answered=answered, **kept)
  save_array(os.path.join(ctx.stage.path, VOTES), votes)
  # the smooth-sensitivity release, its parameters fixed before the votes, composes with them
  ss = ({r: [dgd_plan.ss_cost(config, r)] for r in plans}
        if config.queries.smooth_sensitivity else {})
  ledgers = {r: privacy.PrivacyLedger([*baseline[r], records[r], *ss.get(r, [])])
             for r in plans}
  if config.queries.smooth_sensitivity:
    pate2018["smooth_sensitivity"] = release_smooth_sensitivity(
        config, lambda: ctx.noise_rng("smooth_sensitivity"), votes, answered)
  plurality = np.argmax(votes, -1)
  # how often the released label (class counts: the class asked about) is the plurality
  agreement = ("asked_class_is_plurality" if released_as == "counts"
               else "noisy_label_agreement_with_plurality")
  # query_checks.round_sizes' rounds; a diagnostic
  rounds = np.array_split(votes, config.queries.refits + 1)
  return {
      "refits": config.queries.refits,
      "top_vote_share_by_round": [float(v.max(-1).mean() / config.num_teachers)
                                  for v in rounds if len(v)],  # a filter may ask none
      **diagnostics(ctx, x_pool, indices, labels, answered, steps),
      **pate2018,
      "aggregator": q.aggregator,
      "noise_scale": q.noise_scale,
      "num_queries": len(indices),
      "answered": int(answered.sum()),
      agreement: float(np.mean(labels[answered] == plurality[answered])),
      "privacy": privacy.relations_json(ledgers, p.delta, p.accountant),
  }
