"""Baseline stage: the paper classifier trained on the whole private training set, evaluated
on the test set (DGD Section III-B: the frozen baseline phi_b that the generator is trained
against). With ``config.baseline.dpsgd`` (dgd.py's ``private_baseline``) it is trained with
DP-SGD instead, and the queries stage composes its steps with the label queries."""
from __future__ import annotations

import functools
import time

import jax

from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan.artefacts import classifier, fit_config
from dgd_jax.plan.context import NOISE_KEY, Context, Program, abstract, abstract_key
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import dpsgd
from dgd_jax.training import train


def config_keys(config) -> tuple[str, ...]:
  """The config blocks the baseline depends on. A private baseline whose noise is calibrated
  (``dpsgd.noise=0``) takes the noise that fits the budget beside the label queries, so it
  depends on both: a run at another epsilon or query plan must not reuse it."""
  b = config.baseline
  if "dpsgd" in b and not b.dpsgd.noise:
    # A 'stable' partition adds add/remove-one to the relations the noise must fit.
    stable = config.get("teachers", {}).get("partition") == "stable"
    return ("baseline", "privacy", "queries", NOISE_KEY) + (("teachers",) if stable else ())
  return ("baseline", NOISE_KEY) if "dpsgd" in b else ("baseline",)


# What reads the private data without noise and would reach a private baseline's student.
_NOT_PRIVATE = (
    (lambda c: c.get("generator", {}).get("w_stats", 0) > 0,
     "config.generator.w_stats > 0 matches the private set's activation statistics, computed "
     "without noise", "set --config.generator.w_stats=0"),
    (lambda c: c.get("pool", {}).get("source") == "train",
     "config.pool.source='train' trains the student on the raw private images",
     "use the generator's pool, --config.pool.source=synthetic"),
)


def check(config) -> None:
  """A private baseline (``config.baseline.dpsgd``) promises an epsilon that covers everything
  the student saw: refuses, before anything trains, every setting that lets private data reach
  the student without noise, naming it and the fix."""
  if "dpsgd" not in config.get("baseline", {}):
    return
  for reads_private, what, fix in _NOT_PRIVATE:
    if reads_private(config):
      raise ConfigError(f"a private baseline (config.baseline.dpsgd, end-to-end DGD) is "
                        f"accounted end to end, but {what}, which no epsilon covers: {fix}, or "
                        "drop private_baseline.")


def programs(config, data) -> dict[str, Program]:
  """The baseline's training step (Adam, or DP-SGD for a private baseline) on the private
  set and its evaluation on a chunk of test images, at the config's shapes."""
  model = classifier(config, data.num_classes)
  cfg = fit_config(config, "baseline")
  state = jax.eval_shape(lambda: train.create_train_state(
      model, train.optimizer(cfg), jax.random.key(0), data.image_shape))
  x, y = abstract(data.x_train), abstract(data.y_train)
  evaluation = {"logits": Program(model.apply, (state.params, abstract(
      (min(train.EVAL_BATCH, len(data.x_test)),) + data.image_shape)))}
  if "dpsgd" in config.baseline:
    [record] = dpsgd_plan.baseline_releases(config, dataset_size=len(data.x_train))
    return {"dpsgd_step": Program(*dpsgd.step_program(
        state, model, x, y, record, config.baseline.dpsgd.microbatch_size)), **evaluation}
  step = functools.partial(train.train_step, batch_size=cfg.batch_size)  # as train.fit's
  return {"train_step": Program(step, (state, abstract_key(), x, y)), **evaluation}


def run(ctx: Context) -> dict:
  """Trains (or resumes) the baseline; returns its test accuracy and timing."""
  if "dpsgd" in ctx.config.baseline:  # DGD's private baseline: DP-SGD, accounted
    return run_private(ctx)
  config, data = ctx.config, ctx.dataset
  model = classifier(config, data.num_classes)
  init_key, train_key = jax.random.split(ctx.key("baseline"))
  cfg = fit_config(config, "baseline")
  state = train.create_train_state(model, train.optimizer(cfg), init_key, data.image_shape)
  t0 = time.perf_counter()
  state = train.fit(state, data.x_train, data.y_train, train_key, cfg,
                    ctx.stage.checkpoint_dir, "baseline", ctx.log)
  seconds = time.perf_counter() - t0
  # the training accuracy is estimated on as many training images as the test accuracy's
  seen = min(len(data.x_test), len(data.x_train))
  return {
      "test_accuracy": train.accuracy(model.apply, state.params, data.x_test, data.y_test),
      "train_accuracy": train.accuracy(model.apply, state.params, data.x_train[:seen],
                                       data.y_train[:seen]),
      "train_accuracy_size": seen,
      "num_params": sum(x.size for x in jax.tree.leaves(state.params)),
      "train_seconds": seconds,
      "num_steps": cfg.num_steps,
  }


def run_private(ctx: Context) -> dict:
  """DGD's baseline trained with DP-SGD on the private set: Poisson batches, clipped
  per-example gradients, Gaussian noise, Adam on the noisy mean (post-processing), the
  baseline block's schedule."""
  data = ctx.dataset
  [record] = dpsgd_plan.baseline_releases(ctx.config, dataset_size=len(data.x_train))
  model, cfg = classifier(ctx.config, data.num_classes), fit_config(ctx.config, "baseline")
  t0 = time.perf_counter()
  state = dpsgd_plan.train_baseline(ctx, model, cfg, record, ctx.stage.checkpoint_dir,
                                    "baseline")
  return {
      "test_accuracy": train.accuracy(model.apply, state.params, data.x_test, data.y_test),
      "num_params": sum(x.size for x in jax.tree.leaves(state.params)),
      "train_seconds": time.perf_counter() - t0,
      "num_steps": cfg.num_steps,
      "noise_multiplier": record.noise_multiplier,
      "privacy_unit": "example",
      "release": record.describe(),  # what ran: the queries stage composes exactly this
  }
