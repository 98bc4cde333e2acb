"""DP-SGD stage (Abadi et al. 2016, Algorithm 1) on jax-privacy (``dgd_jax.training.dpsgd``): the
model (ScatterNet features + a linear or small head, the end-to-end tanh CNN, or a public
backbone's head on its frozen features, computed once) trained on
the private set, accounted by the ledger's ``DpsgdSteps`` record, the reference every method
is compared with at equal epsilon."""
from __future__ import annotations

import time

import jax

from dgd_jax import privacy
from dgd_jax.models import backbone, dpsgd as dpsgd_models, scattering
from dgd_jax.plan import artefacts
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan.context import NOISE_KEY, Context, Program, abstract
from dgd_jax.training import dpsgd
from dgd_jax.training import train

CONFIG_KEYS = ("dpsgd", "privacy", NOISE_KEY)


def check(config) -> None:
  """Config values DP-SGD cannot use, refused before anything runs."""
  dpsgd_plan.check(config)


def programs(config, data) -> dict[str, Program]:
  """DP-SGD's step on the private set's inputs (ScatterNet features of one chunk too, where
  the model reads them), at the config's shapes."""
  d = config.dpsgd
  n = dpsgd_plan.public_size(config, len(data.x_train))
  record = dpsgd_plan.release(config, dpsgd_plan.noise_multiplier(config, n), n)
  x = abstract(data.x_train)
  out = {}
  model = dpsgd_plan.model_of(config, data.num_classes)
  if d.model in dpsgd_models.SCATTERING:  # scattering.features' chunk program
    scatter = lambda xb: scattering.scatter(xb, d.scattering_scales, d.scattering_orientations)
    out["scattering"] = Program(scatter, (abstract((scattering.CHUNK,) + data.image_shape),))
    one = jax.eval_shape(scatter, abstract((1,) + data.image_shape))
    x = abstract((len(data.x_train),) + one.shape[1:])
  features, x_shape = artefacts.feature_programs(model, data.image_shape)
  if features:  # a head-only backbone: its features' program, and the head on them
    out.update(features)
    x = abstract((len(data.x_train),) + x_shape)
  init = backbone.init_shape(model, x.shape[1:], data.image_shape)
  state = jax.eval_shape(lambda: dpsgd_plan.fresh_state(config, model, init, jax.random.key(0)))
  out["dpsgd_step"] = Program(*dpsgd.step_program(state, model, x, abstract(data.y_train),
                                                  record, d.microbatch_size))
  return out


def run(ctx: Context) -> dict:
  """Trains (or resumes) the DP-SGD model; returns its test accuracy, the noise and the ledger."""
  config, data = ctx.config, ctx.dataset
  d, p = config.dpsgd, config.privacy
  n = dpsgd_plan.public_size(config, len(data.x_train))
  record, ledger = dpsgd_plan.planned(ctx)
  t0 = time.perf_counter()
  model, state, x_test, feature_seconds = dpsgd_plan.train_dpsgd(
      ctx, record, ctx.stage.checkpoint_dir, "dpsgd")
  train_seconds = time.perf_counter() - t0 - feature_seconds
  ema = d.ema
  final = state.opt_state[1].average if ema else state.params  # the released parameters
  covered = (f"{d.num_steps} DP-SGD steps (noisy sums of clipped per-example gradients on "
             f"Poisson samples, q = {record.sampling_probability:.4g})")
  return {
      "test_accuracy": train.accuracy(model.apply, final, x_test, data.y_test),
      **({"test_accuracy_last_iterate": train.accuracy(model.apply, state.params, x_test,
                                                       data.y_test)} if ema else {}),
      "model": d.model,
      "num_steps": d.num_steps,
      "epochs": d.num_steps * d.batch_size / n,
      "noise_multiplier": record.noise_multiplier,
      "noise_std": record.noise_std,
      "norm_bound": d.norm_bound,
      "expected_batch_size": d.batch_size,
      "sampling_probability": record.sampling_probability,
      "num_params": sum(x.size for x in jax.tree.leaves(state.params)),
      "feature_seconds": feature_seconds,
      "train_seconds": train_seconds,
      "privacy_unit": "example",
      "covered": covered,
      "privacy": privacy.relations_json({record.neighbours: ledger}, p.delta, p.accountant),
  }
