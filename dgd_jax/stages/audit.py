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
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import dpsgd
from dgd_jax.training import train

CONFIG_KEYS = ("audit",)
DELTA = 1e-5  # of the epsilon lower bound, for a method without a privacy block
INVERSION_PNG = "inversion.png"


def requires(planned: tuple[str, ...]) -> tuple[str, ...]:
  """Of the stages a method's run has (``planned``), the models it trains and its generator
  where it trains one (the inversion prior)."""
  return tuple(s for s in ("baseline", "teachers", "generator", "student", "dpsgd")
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
  if count and not (has_dpsgd_steps(config, planned) or "queries" in planned):
    raise ConfigError(f"config.audit.canaries={count}: the one-run canary audit runs for "
                      "DP-SGD steps (dpsgd.py, dgd.py's private_baseline) and label releases "
                      f"of noisy counts so far, not for this {config.method!r} run; set "
                      "--canaries=0 to audit it by membership inference.")
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
  delta = config.privacy.delta if "privacy" in config else DELTA
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


def _coins(ctx: Context, num_canaries: int) -> np.ndarray:
  """The canaries' secret inclusion coins; refused (not redrawn) if all fell on one side."""
  included = canaries.inclusion(num_canaries, ctx.noise_rng("canary_inclusion"))
  if included.all() or not included.any():  # probability 2^(1 - M)
    raise ConfigError(f"all {num_canaries} canaries fell on one side of their coins: audit "
                      "again with more canaries (config.audit.canaries, e.g. 1000).")
  return included


def _bounds(scores: np.ndarray, simulated: np.ndarray, included: np.ndarray,
            delta: float) -> dict:
  """The one-run bounds of the run's canary ``scores`` and, under ``simulated``, of the exact
  mechanism's; ``epsilon_lower_bound`` the larger of the run's two (each at 95%)."""
  ideal = canaries.one_run_bound(simulated, included, delta)
  bound = canaries.one_run_bound(scores, included, delta)
  top = lambda b: max(b["one_run"], b["one_run_fdp"])
  return {**bound, "epsilon_lower_bound": top(bound),
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
  return {**_bounds(np.asarray(state.canary_scores), simulated, included, delta),
          "audited": what, "kind": "gradient (Dirac) canaries, white-box: every step's noisy sum",
          "claimed_epsilon": claimed.epsilon, "accountant": claimed.accountant,
          "neighbours": "add_or_remove_one",
          "cost": f"one more run of the {record.steps} DP-SGD steps with {num_canaries} canaries"}


def vote_canary_audit(ctx: Context, num_canaries: int) -> dict:
  """The one-run canary audit of a label release of noisy counts (the histograms whole, or
  one class's count: DGD's CPU presets): ``num_canaries`` vote canaries, each included with
  probability 1/2. Canary i, when in, moves one teacher's vote between two classes of its own
  on every one of the run's Q queries (the replace-one worst case the release's sensitivity
  allows); the run's aggregator, at its noise, releases every canary row with a fresh secret
  key, and each canary is scored by the Gaussian likelihood ratio, the sum over queries of
  its noisy counts' difference (a count release: its one count). The claim: the release's
  replace-one epsilon; the exact Gaussian mechanism is simulated beside it."""
  result, p = ctx.results["queries"], ctx.config.privacy
  row = aggregation.AGGREGATORS[result["aggregator"]]
  by = result["privacy"]["by_neighbours"]
  if row.released not in ("histograms", "counts") or "replace_one" not in by:
    raise ConfigError(f"config.audit.canaries: the run's {result['aggregator']} release "
                      "(labels) has no canary audit yet; the counts releases "
                      f"({aggregation.HISTOGRAMS}, {aggregation.CLASS_COUNTS}) have one.")
  claimed = by["replace_one"]["epsilons"][p.accountant]
  included = _coins(ctx, num_canaries)
  q, sigma, b = result["num_queries"], result["noise_scale"], included.astype(np.float32)
  votes = np.broadcast_to(np.stack([1.0 - b, b], -1), (q, num_canaries, 2)).reshape(-1, 2)
  released = np.asarray(row(ctx.noise_key("canary_queries"), jnp.asarray(votes), sigma,
                            jnp.ones(len(votes), jnp.int32)).released, np.float64)
  released = released.reshape(q, num_canaries, -1)
  scores = (released[..., 1] - released[..., 0] if row.released == "histograms"
            else released[..., 0]).sum(0)
  # public: the same release drawn exactly (a difference of two counts has std sigma sqrt 2)
  spread = sigma * math.sqrt(q * (2 if row.released == "histograms" else 1))
  shift = (2 * b - 1 if row.released == "histograms" else b) * q
  simulated = shift + spread * np.random.default_rng(ctx.config.seed).normal(size=num_canaries)
  return {**_bounds(scores, simulated, included, p.delta),
          "audited": f"the label release ({q} {result['aggregator']} answers)",
          "kind": "vote canaries: one vote moved on every query, scored on the noisy counts",
          "claimed_epsilon": claimed, "accountant": p.accountant, "neighbours": "replace_one",
          "cost": f"{q} x {num_canaries} noisy canary rows from the release's aggregator"}


def config_canaries(config) -> int:
  """How many canaries the audit's one-run canary audit uses (0: none)."""
  return config.audit.get("canaries", 0)


def run(ctx: Context) -> dict:
  out = {}
  if config_canaries(ctx.config):  # first: a release without a canary audit is refused
    audit = (canary_audit if has_dpsgd_steps(ctx.config, tuple(ctx.results))
             else vote_canary_audit)
    out["canaries"] = audit(ctx, ctx.config.audit.canaries)
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
