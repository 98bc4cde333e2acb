"""Audit stage (``python -m dgd_jax.audit --workdir=<run>``): membership inference against
the baseline, single teachers and the student, and model inversion against the baseline
and the student (``dgd_jax.audit.attacks``). Writes ``audit/inversion.png``; its result is
report.json's ``audit``.

Members are each model's private training examples (the student's "members" are the
private training set, which it never saw directly); non-members are held-out examples no
model trained on: the test split (PATE: the part outside the student's public pool). Each
model's membership scores also give an empirical lower bound on epsilon (jax-privacy's
auditor, ``attacks.membership``); the report holds it against the replace-one epsilon of the
run's releases for the models that epsilon covers whole (``Method.audited``,
``report.audit_check``). DP-SGD's model is attacked by membership
only (inversion would need gradients through its ScatterNet features).

``audit.canaries`` = M adds the one-run canary audits (``canary_audits``): of the run's DP-SGD
steps (gradient canaries, one more run of them), else its label release (vote canaries),
else a DPDFD conversion's steps (model canaries), and of an LDP client (feature canaries);
each is held against the claim for what it audits, and none reaches ``release/``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import privacy
from dgd_jax.audit import attacks
from dgd_jax.audit import canaries
from dgd_jax.data import config_shards
from dgd_jax.labelling import aggregation
from dgd_jax.models import backbone
from dgd_jax.plan import artefacts
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import pool
from dgd_jax.plan.artefacts import load_classifier
from dgd_jax.plan.context import Context, Program, abstract
from dgd_jax.privacy.releases import build_release
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.synthesis import dpdfd
from dgd_jax.training import dpsgd
from dgd_jax.training import ldp
from dgd_jax.training import train

CONFIG_KEYS = ("audit",)
DELTA = 1e-5  # of the epsilon lower bound, for a method without a privacy block
INVERSION_PNG = "inversion.png"
CANARY_ROWS = 2 ** 21  # vote canary rows the aggregator answers at once
# The one-run canary audits' keys in the result (``canary_audits``): the central release's, a
# private baseline's label release, the LDP client's.
CANARIES, LABEL_CANARIES, CLIENT_CANARIES = CANARY_AUDITS = (
    "canaries", "label_canaries", "client_canaries")


def requires(planned: tuple[str, ...]) -> tuple[str, ...]:
  """Of the stages a method's run has (``planned``), the models it trains, its generator
  where it trains one (the inversion prior) and DPDFD's steps (their canary audit's record)."""
  return tuple(s for s in ("baseline", "teachers", "generator", "student", "dpsgd", "dpdfd")
               if s in planned)


def check(config, planned: tuple[str, ...]) -> None:
  """Refuses a method with no model to attack, an unknown prior and a released parameter
  average (the checkpoint's parameters are the last iterate)."""
  if not set(requires(planned)) & {"baseline", "teachers", "student", "dpsgd"}:
    raise ConfigError(f"method {config.method!r} has no baseline, teachers, student or "
                      "DP-SGD model to audit.")
  if "dpsgd" in requires(planned) and config.dpsgd.ema:
    raise ConfigError("config.dpsgd.ema > 0 releases a parameter average the audit does not "
                      "read yet; audit a run with ema 0.")
  count = config_canaries(config)
  if count and (not isinstance(count, int) or count < 10):
    raise ConfigError(f"config.audit.canaries={count!r}: give a whole number of canaries "
                      ">= 10 (e.g. 1000), or 0 for no canary audit.")
  if count and not canary_audits(config, planned):
    raise ConfigError(f"config.audit.canaries={count}: the one-run canary audit runs for "
                      "DP-SGD steps (dpsgd.py, dgd.py's private_baseline), label releases, "
                      "DPDFD's steps and the LDP client, none of which this "
                      f"{config.method!r} run has; set --canaries=0 to audit it by "
                      "membership inference.")
  if config.audit.prior not in ("auto", "generator", "pixel"):
    raise ConfigError(f"config.audit.prior={config.audit.prior!r}; use auto, generator or "
                      "pixel.")
  if config.audit.prior == "generator" and not trains_generator(config, requires(planned)):
    raise ConfigError(f"config.audit.prior='generator' but this {config.method!r} run trains "
                      "no generator (none, or generator.synthesis='inversion'); use 'pixel'.")


def has_dpsgd_steps(config, planned: tuple[str, ...]) -> bool:
  """Whether the run trains a model by DP-SGD (the canary audit's mechanism)."""
  return "dpsgd" in planned or ("baseline" in planned and "dpsgd" in config.baseline)


def prior_of(config, have: tuple[str, ...]) -> str:
  """The inversion's prior: ``audit.prior``, or where 'auto' the generator's when the run
  trains one (``trains_generator``), else the pixels'."""
  p = config.audit.prior
  return p if p != "auto" else ("generator" if trains_generator(config, have) else "pixel")


def programs(config, data, planned: tuple[str, ...]) -> dict[str, Program]:
  """The attacks' programs at the config's shapes, for the models a run of the stages
  ``planned`` trains: each one's logits on one evaluation batch (the membership scores,
  ``attacks.loss_scores``) and, for the baseline and the student, model inversion of every
  class (``attacks.inversion_program``, through the generator's decoder where that is the
  prior)."""
  a, k, shape = config.audit, data.num_classes, data.image_shape
  have = requires(planned)
  batch = abstract((train.EVAL_BATCH,) + shape)
  one = jnp.zeros((1,) + shape)
  models = {name: artefacts.classifier(config, k, name) for name in ("baseline", "student")
            if name in have}
  if "teachers" in have:
    models["teacher"] = artefacts.teacher_model(config, k)
  params = {name: jax.eval_shape(m.init, jax.random.key(0), one) for name, m in models.items()}
  out = {f"{name}_scores": Program(m.apply, (params[name], batch))
         for name, m in models.items()}
  if "dpsgd" in have:  # on what its model reads (dpsgd_plan.inputs), of one image here
    model = dpsgd_plan.model_of(config, k)
    x = dpsgd_plan.inputs(config, model, np.zeros((1,) + shape, np.float32))
    init = backbone.init_shape(model, x.shape[1:], shape)
    p = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1,) + init))
    out["dpsgd_scores"] = Program(model.apply, (p, abstract((train.EVAL_BATCH,) + x.shape[1:])))
  # the generator prior decodes latents with the generator stage's variables, else pixels
  if prior_of(config, have) == "generator":
    generator = artefacts.dgd_generator(config, shape)
    variables = artefacts.generator_shape(generator, config.generator.latent_dim)
    decoder = lambda v: lambda z: generator.apply(v, z, train=True, mutable=["batch_stats"])[0]
    start = (config.generator.latent_dim,)
  else:
    variables, decoder, start = None, lambda v: None, shape
  starts = abstract((k, a.inversion_batch) + tuple(start))
  for name in ("baseline", "student"):
    if name in models:
      fn = lambda p, v, t, z, m=models[name]: attacks.inversion_program(
          m.apply, a.inversion_steps, decoder(v))(p, t, z)
      out[f"{name}_inversion"] = Program(fn, (params[name], variables,
                                              abstract((k,), "int32"), starts))
  return out


def trains_generator(config, stages: tuple[str, ...]) -> bool:
  """Whether ``stages`` train a generator the inversion prior can decode: DGD's generator
  stage, unless it synthesises by DeepInversion (no generator then)."""
  return "generator" in stages and config.generator.synthesis == "generator"


def membership(ctx: Context, models: dict) -> dict:
  """Loss-threshold membership inference on each model the run has, name -> result;
  ``models``: the restored baseline and student, name -> (model, params)."""
  config, data, a = ctx.config, ctx.dataset, ctx.config.audit
  x_out, y_out = pool.evaluation(ctx) if "pool" in config else (data.x_test, data.y_test)
  delta = _delta(config)
  attack = lambda scores, splits: attacks.membership(scores, splits, a.examples, config.seed,
                                                   delta)
  out = {}
  for name, (model, params) in models.items():
    split = (attacks.loss_scores(model.apply, params, data.x_train, data.y_train),
             attacks.loss_scores(model.apply, params, x_out, y_out))
    out[name] = attack(lambda r, s=split: s, a.splits)
  if "dpsgd" in ctx.results:
    model, params, inputs = artefacts.load_dpsgd(ctx)
    split = (attacks.loss_scores(model.apply, params, inputs(data.x_train), data.y_train),
             attacks.loss_scores(model.apply, params, inputs(x_out), y_out))
    out["dpsgd"] = attack(lambda r, s=split: s, a.splits)
  if "teachers" in ctx.results:  # split r attacks teacher r on its own partition
    params, *_ = artefacts.load_teachers(ctx)
    apply_fn = artefacts.teacher_model(config, data.num_classes).apply
    rows = config_shards(config, data.x_train, data.y_train)

    def teacher_split(r):
      p = jax.tree.map(lambda leaf: leaf[r], params)
      return (attacks.loss_scores(apply_fn, p, data.x_train[rows[r]], data.y_train[rows[r]]),
              attacks.loss_scores(apply_fn, p, x_out, y_out))
    out["teacher"] = attack(teacher_split, min(a.splits, config.num_teachers))
  return out


def inversion(ctx: Context, models: dict) -> tuple[dict, np.ndarray, list[str]]:
  """Model inversion of every class against each of ``models``; returns the similarity to
  the private class means per model, the picture rows and their labels."""
  config, data, a = ctx.config, ctx.dataset, ctx.config.audit
  prior = prior_of(config, requires(tuple(ctx.results)))
  decode, latent_dim = None, 0
  if prior == "generator":
    generator, variables = artefacts.load_generator(ctx)
    latent_dim = config.generator.latent_dim
    decode = lambda z: generator.apply(variables, z, train=True, mutable=["batch_stats"])[0]
  classes = range(data.num_classes)
  means = np.stack([data.x_train[data.y_train == k].mean(0) for k in classes])
  rows, labels, out = [means], ["private class mean"], {"prior": prior}
  for name, (model, params) in models.items():
    recon = attacks.invert_classes(model.apply, params, classes, data.image_shape,
                                 ctx.key("audit_inversion"), a.inversion_steps,
                                 a.inversion_batch, decode, latent_dim).mean(1)
    out[name] = attacks.similarity(recon, means)
    rows.append(recon)
    labels.append(f"{name} inversion")
  return out, np.stack(rows), labels


def _delta(config) -> float:
  """The delta of the audit's epsilon lower bounds: the run's, or ``DELTA`` without one."""
  return config.privacy.delta if "privacy" in config else DELTA


def _coins(ctx: Context, num_canaries: int, name: str = "canary_inclusion") -> np.ndarray:
  """The canaries' secret inclusion coins (the noise source ``name``); refused (not redrawn) if
  all fell on one side."""
  included = canaries.inclusion(num_canaries, ctx.noise_rng(name))
  if included.all() or not included.any():  # probability 2^(1 - M)
    raise ConfigError(f"all {num_canaries} canaries fell on one side of their coins: audit "
                      "again with more canaries (config.audit.canaries, e.g. 1000).")
  return included


def _bounds(scores: np.ndarray, simulated: np.ndarray, included: np.ndarray,
            delta: float, gaussian: bool) -> dict:
  """The one-run bounds of the run's canary ``scores`` and, under ``simulated``, of the exact
  mechanism's. ``epsilon_lower_bound``, the one held against the claim: Steinke et al.'s,
  valid for every (epsilon, delta) mechanism, or where the mechanism's trade-off curve is a
  Gaussian's (``gaussian``: Gaussian releases composed, and their post-processing) the larger
  of it and the f-DP one, which jax-privacy computes for that curve (each at 95%)."""
  top = lambda b: max(b["one_run"], b["one_run_fdp"]) if gaussian else b["one_run"]
  ideal = canaries.one_run_bound(simulated, included, delta)
  bound = canaries.one_run_bound(scores, included, delta)
  return {**bound, "epsilon_lower_bound": top(bound), "gaussian_tradeoff": gaussian,
          "simulated": {"epsilon_lower_bound": top(ideal),
                        **{k: ideal[k] for k in ("one_run", "one_run_fdp", "auc")}}}


def canary_audit(ctx: Context, num_canaries: int) -> dict:
  """The one-run canary audit (``dgd_jax.audit.canaries``) of the run's DP-SGD steps (DP-SGD's
  model, or DGD's private baseline): one more run of them with ``num_canaries`` gradient
  canaries, each included with probability 1/2, in ``<audit>/canary_checkpoints``; its epsilon
  lower bounds beside the add/remove-one epsilon claimed for those steps, and the bounds the
  exact mechanism gives, simulated on the same coins."""
  config, data = ctx.config, ctx.dataset
  delta = config.privacy.delta
  if "dpsgd" in ctx.results:
    what = "DP-SGD's model"
    record, ledger = dpsgd_plan.planned(ctx)
    claimed = ledger.epsilon(delta, config.privacy.accountant, data_dependent=False)
    run = lambda c, folder: dpsgd_plan.train_dpsgd(ctx, record, folder, "canary_dpsgd", c)[1]
  else:  # DGD's private baseline: its steps alone, the canaries reach nothing else
    what = "DGD's private baseline, its DP-SGD steps alone"
    [record] = dpsgd_plan.baseline_releases(config, dataset_size=len(data.x_train))
    claimed = privacy.PrivacyLedger([dataclasses.replace(
        record, neighbours="add_or_remove_one")]).epsilon(delta, "pld", data_dependent=False)
    run = lambda c, folder: dpsgd_plan.train_baseline(
        ctx, artefacts.classifier(config, data.num_classes),
        artefacts.fit_config(config, "baseline"), record, folder, "canary_baseline", c)
  included = _coins(ctx, num_canaries)
  q, sigma = record.sampling_probability, record.noise_multiplier
  score = functools.partial(canaries.dirac_llr, sampling_probability=q, noise_multiplier=sigma)
  slots = np.flatnonzero(included).astype(np.int32)
  state = run(dpsgd.Canaries(len(data.x_train), slots, num_canaries, score),
              os.path.join(ctx.stage.path, "canary_checkpoints"))
  simulated = canaries.simulated_dirac_scores(included, record.steps, q, sigma,
                                              np.random.default_rng(ctx.config.seed))  # public
  return {**_bounds(np.asarray(state.canary_scores), simulated, included, delta, False),
          "audited": what, "kind": "gradient (Dirac) canaries, white-box: every step's noisy sum",
          "claimed_epsilon": claimed.epsilon, "accountant": claimed.accountant,
          "neighbours": "add_or_remove_one", "against": "the epsilon of those steps",
          "cost": f"one more run of the {record.steps} DP-SGD steps with {num_canaries} canaries"}


def _claim(record, p) -> tuple[float, str]:
  """The data-independent epsilon of ``record`` alone at the run's delta: under the run's
  accountant where it accounts such a record, else ``rdp`` (a filter's or a data-dependent
  accountant states the run's own queries, not the canaries')."""
  ledger = privacy.PrivacyLedger([record])
  for accountant in (p.accountant, "rdp"):
    try:
      return ledger.epsilon(p.delta, accountant, data_dependent=False).epsilon, accountant
    except ConfigError:
      continue
  raise ConfigError(f"no data-independent accountant states {record.mechanism}'s epsilon.")


def vote_canary_audit(ctx: Context, num_canaries: int, coins: str = "canary_inclusion"
                      ) -> dict:
  """The one-run canary audit of a label release (``canaries.vote_rows``): ``num_canaries``
  vote canaries, each included with probability 1/2, each moving one teacher's vote between
  two tied classes on every one of the run's Q queries. The run's aggregator, at its noise
  (and Confident-GNMax's threshold), answers every canary query with a key of its own; each
  canary is scored on its answers (``canaries.vote_scores``). The claim: the data-independent
  epsilon of Q such answers for one moved vote (a data-dependent epsilon states the run's own
  votes, not the canaries'); the exact mechanism is simulated beside it. A Confident-GNMax
  canary's top count is the same in and out: its threshold step only thins the answers."""
  config, result, p = ctx.config, ctx.results["queries"], ctx.config.privacy
  name = result["aggregator"]
  row = aggregation.AGGREGATORS[name]
  q, scale = result["num_queries"], result["noise_scale"]
  confident = name == privacy.ConfidentGNMaxQueries.mechanism
  threshold, sigma1 = ((config.queries.threshold, config.queries.sigma1) if confident
                       else (0.0, 0.0))
  record = build_release(name, queries=q, noise_scale=scale,
                         **({"threshold": threshold, "sigma1": sigma1} if confident else {}))
  claimed, accountant = _claim(record, p)
  included = _coins(ctx, num_canaries, coins)
  teachers = ctx.results.get("teachers", {}).get("num_teachers", config.num_teachers)
  rows = canaries.vote_rows(included, teachers, ctx.dataset.num_classes)
  key, rng = ctx.noise_key("canary_queries"), np.random.default_rng(config.seed)  # rng public
  scores, simulated = np.zeros(num_canaries), np.zeros(num_canaries)
  per_chunk = max(1, CANARY_ROWS // num_canaries)
  for start in range(0, q, per_chunk):  # the queries in chunks of about CANARY_ROWS rows
    n = min(per_chunk, q - start)
    votes = jnp.asarray(np.broadcast_to(rows, (n,) + rows.shape).reshape(-1, rows.shape[1]))
    out = row(jax.random.fold_in(key, start), votes, scale, jnp.ones(len(votes), jnp.int32),
              threshold, sigma1)
    values = (None if out.released is None else  # [n, m] counts or [n, m, K] histograms
              np.asarray(out.released, np.float64).reshape((n, num_canaries)
                                                           + out.released.shape[1:]))
    scores += canaries.vote_scores(row.released, np.asarray(out.labels).reshape(n, -1), values)
    simulated += canaries.vote_scores(row.released, *canaries.simulated_vote_answers(
        name, rows, n, scale, threshold, sigma1, rng))
  laplace = name == privacy.LNMaxQueries.mechanism  # else Gaussian noise, post-processed
  return {**_bounds(scores, simulated, included, p.delta, not laplace),
          "audited": f"the label release ({q} {name} answers)",
          "kind": f"vote canaries: one vote moved on every query, scored on the {row.released}",
          "claimed_epsilon": claimed, "accountant": accountant, "neighbours": "replace_one",
          "against": "the data-independent epsilon of the release's answers for one moved vote",
          "cost": f"{q} x {num_canaries} noisy canary queries through the release's aggregator"}


def dpdfd_canary_audit(ctx: Context, num_canaries: int) -> dict:
  """The one-run canary audit of DPDFD's releases, the noisy rows of A_{C,sigma} (Eq. 4):
  ``num_canaries`` sensitive models, each included with probability 1/2, whose output
  gradient on every row of every one of the T steps points at +e_0 (in) or -e_0 (out),
  bounded by the run's own operation (``synthesis.dpdfd.bound``; times the teachers one change
  moves) and released by the run's mechanism at its noise (``synthesis.dpdfd.mechanism``, a
  key per canary and step), scored by the sum of their noisy rows. The claim: the run's
  replace-one epsilon of its steps; the exact Gaussian is simulated beside it."""
  config, result, p, d = ctx.config, ctx.results["dpdfd"], ctx.config.privacy, ctx.config.dpdfd
  by = result["privacy"]["by_neighbours"]["replace_one"]
  claimed = by["epsilons"][p.accountant]
  changed = by.get("teachers_changed") or 1  # None or 0: one teacher, nothing assumed
  included = _coins(ctx, num_canaries)
  sigma, steps, b = result["noise_multiplier"], result["num_steps"], d.batch_size
  sign = np.where(included, 1.0, -1.0)[:, None, None]
  block = changed * dpdfd.bound(jnp.asarray(sign * np.ones((1, b, 1))), d.norm_bound,
                                d.operation)  # [m, B, 1], one teacher's rows moved c times
  release = jax.vmap(lambda k, g: dpdfd.mechanism(k, g, sigma, d.norm_bound))  # in the scan
  key = ctx.noise_key("canary_dpdfd")

  def step(total, t):
    keys = jax.random.split(jax.random.fold_in(key, t), num_canaries)
    return total + release(keys, block).sum((1, 2)) * b / d.norm_bound, None
  scores, _ = jax.lax.scan(step, jnp.zeros(num_canaries), jnp.arange(steps))
  # public: the same sums drawn exactly, in units of C: in and out means T sum|g_bar| / C
  shift = steps * float(jnp.abs(block[0]).sum()) / d.norm_bound
  simulated = canaries.simulated_gaussian_sums(included, shift, sigma * math.sqrt(steps * b),
                                               np.random.default_rng(config.seed))
  return {**_bounds(np.asarray(scores, np.float64), simulated, included, p.delta, True),
          "audited": f"DPDFD's released rows ({steps} steps of {b})",
          "kind": "model canaries: every row's bounded gradient at +-e_0, scored on the noisy "
                  "rows' sum",
          "claimed_epsilon": claimed, "accountant": p.accountant, "neighbours": "replace_one",
          "against": "the run's epsilon of its DPDFD steps",
          "cost": f"{steps} x {num_canaries} noisy canary batches of A_(C,sigma)"}


def client_canary_audit(ctx: Context, num_canaries: int) -> dict:
  """The one-run canary audit of the LDP client (``training.ldp.transform``, Algorithm 1):
  ``num_canaries`` features at -B or +B (``canaries.client_canaries``), each included (+B) with
  probability 1/2, sent once through the client at the run's (sigma, mu, B) with its own
  secret key, scored by the value sent. The claim: the client's pure local epsilon per
  feature, the one its integer noise table realises (pure, so it holds at the bound's delta,
  the run's); the exact sampler is simulated beside it."""
  config, c = ctx.config, ctx.config.ldp
  shape = ctx.dataset.image_shape
  size = int(np.prod(shape))
  claimed = privacy.ldp_local_epsilon(c.sigma, size, c.mu, relation="feature")
  included = _coins(ctx, num_canaries, "client_canary_inclusion")
  sent = ldp.transform(ctx.noise_key("canary_client"),
                       jnp.asarray(canaries.client_canaries(included, shape, c.bound)),
                       c.sigma, c.mu, c.bound)
  scores = np.asarray(sent, np.float64).reshape(-1)[:num_canaries]
  simulated = canaries.simulated_client_scores(included, c.sigma, c.mu, size,
                                               np.random.default_rng(config.seed))
  return {**_bounds(scores, simulated, included, _delta(config), False),  # pure: any delta
          "audited": f"the LDP client (sigma {c.sigma:g}, mask rate {c.mu:g}, B {c.bound:g})",
          "kind": "feature canaries at -B or +B, one client sample's features each, scored on "
                  "the value sent",
          "claimed_epsilon": claimed, "accountant": "pure (the integer noise table)",
          "neighbours": "one feature changed",
          "against": "the client's local epsilon per feature",
          "cost": f"{-(-num_canaries // size)} client samples through the client"}


def config_canaries(config) -> int:
  """How many canaries the audit's one-run canary audits use (0: none)."""
  return config.audit.get("canaries", 0)


def canary_audits(config, planned: tuple[str, ...]) -> dict:
  """The one-run canary audits a run of the stages ``planned`` gets, report key -> audit:
  ``canaries`` its central release's (DP-SGD steps, else the label release, else a DPDFD
  conversion's steps), ``label_canaries`` the label release of a run whose DP-SGD steps have
  ``canaries`` (DGD's private baseline), ``client_canaries`` its LDP client's."""
  out = {}
  if has_dpsgd_steps(config, planned):
    out[CANARIES] = canary_audit
  if "queries" in planned:
    out[LABEL_CANARIES if out else CANARIES] = functools.partial(
        vote_canary_audit, coins="label_canary_inclusion" if out else "canary_inclusion")
  if not out and "dpdfd" in planned and config.dpdfd.teacher != "private_data":
    out[CANARIES] = dpdfd_canary_audit  # direct training (label DP): no canary design yet
  if "ldp" in config:
    out[CLIENT_CANARIES] = client_canary_audit
  return out


def run(ctx: Context) -> dict:
  out = {}
  if config_canaries(ctx.config):  # first: a release without a canary audit is refused
    for name, audit in canary_audits(ctx.config, tuple(ctx.results)).items():
      out[name] = audit(ctx, ctx.config.audit.canaries)
  models = {name: load_classifier(ctx, name) for name in ("baseline", "student")
            if name in ctx.results}  # restored once, attacked twice
  mi = membership(ctx, models)
  inv, rows, labels = inversion(ctx, models)
  png = os.path.join(ctx.stage.path, INVERSION_PNG)
  plots.image_grid(png, rows, row_labels=labels,
                   title=f"Model inversion ({inv['prior']} prior), one column per class")
  return {**out, "membership_auc": {k: v["auc"] for k, v in mi.items()},
          "epsilon_lower_bound": {k: v["epsilon_lower_bound"] for k, v in mi.items()},
          "membership_auc_interval": {k: v["auc_interval"] for k, v in mi.items()},
          "tpr_at_1pct_fpr": {k: v["tpr_at_1pct_fpr"] for k, v in mi.items()},
          "membership": mi,
          "inversion": inv,
          "inversion_similarity": {k: v["correlation_with_own_class_mean"]
                                   for k, v in inv.items() if k != "prior"},
          "inversion_png": f"audit/{INVERSION_PNG}"}
