"""Baseline stage: the paper classifier trained on the whole private training set, evaluated
on the test set (DGD Section III-B: the frozen baseline phi_b that the generator is trained
against)."""
from __future__ import annotations

import time

import jax

from dgd_jax import train
from dgd_jax.stages import classifier, dpsgd, fit_config

CONFIG_KEYS = ("seed", "dataset", "private_size", "model", "baseline")


def run(ctx) -> dict:
  """Trains (or resumes) the baseline; returns its test accuracy and timing."""
  if "dpsgd" in ctx.config.baseline:  # DGD's private baseline: DP-SGD, accounted
    return dpsgd.run_baseline(ctx)
  config, data = ctx.config, ctx.dataset
  model = classifier(config, data.num_classes)
  init_key, train_key = jax.random.split(ctx.key("baseline"))
  cfg = fit_config(config, "baseline")
  state = train.create_train_state(model, train.optimizer(cfg), init_key, data.image_shape)
  t0 = time.perf_counter()
  state = train.fit(state, data.x_train, data.y_train, train_key, cfg,
                    ctx.stage.checkpoint_dir, "baseline", ctx.log)
  seconds = time.perf_counter() - t0
  return {
      "test_accuracy": train.accuracy(model.apply, state.params, data.x_test, data.y_test),
      "train_accuracy": train.accuracy(model.apply, state.params, data.x_train, data.y_train),
      "num_params": sum(x.size for x in jax.tree.leaves(state.params)),
      "train_seconds": seconds,
      "num_steps": cfg.num_steps,
  }
