"""DP-SGD stage (Abadi et al. 2016, Algorithm 1) on jax-privacy (``dgd_jax.training.dpsgd``): the
model (ScatterNet features + a linear or small head, the end-to-end tanh CNN, or a public
backbone's head on its frozen features, computed once) trained on
the private set, accounted by the ledger's ``DpsgdSteps`` record, the reference every method
is compared with at equal epsilon."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from dgd_jax import privacy
from dgd_jax.models import backbone, dpsgd as dpsgd_models, scattering
from dgd_jax.plan import artefacts
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan.context import NOISE_KEY, Context, Program, abstract
from dgd_jax.privacy import checks as privacy_checks
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
  state = jax.eval_shape(lambda: _state(config, model, init, jax.random.key(0)))
  out["dpsgd_step"] = Program(*dpsgd.step_program(state, model, x, abstract(data.y_train),
                                                  record, d.microbatch_size))
  return out


def _state(config, model, input_shape, key: jax.Array, **fields) -> train_state.TrainState:
  """A fresh model for ``input_shape`` with DP-SGD's optimizer (SGD, momentum, the
  parameters' moving average); ``fields``: a ``CanaryState``'s."""
  d = config.dpsgd
  params = model.init(key, jnp.zeros((1,) + tuple(input_shape), jnp.float32))
  tx = optax.sgd(d.learning_rate, momentum=d.momentum or None)
  cls = dpsgd.CanaryState if fields else train_state.TrainState
  return cls.create(apply_fn=model.apply, params=params,
                    tx=optax.chain(tx, dpsgd.parameter_average(d.ema)) if d.ema else tx, **fields)


def planned(ctx: Context) -> tuple[privacy.DpsgdSteps, privacy.PrivacyLedger]:
  """The stage's DP-SGD record (its noise calibrated) and ledger, the budget checked."""
  config, p = ctx.config, ctx.config.privacy
  n = dpsgd_plan.public_size(config, len(ctx.dataset.x_train))
  record = dpsgd_plan.release(config, dpsgd_plan.noise_multiplier(config, n), n)
  ledger = privacy.PrivacyLedger([record])
  if privacy_checks.has_budget(p.max_epsilon):
    ledger.check_budget(p.max_epsilon, p.delta, p.accountant)
  return record, ledger


def train_model(ctx: Context, record: privacy.DpsgdSteps, checkpoint_dir: str, purpose: str,
                canaries: dpsgd.Canaries | None = None):
  """(model, trained state, the model's training and test inputs, feature seconds): the
  record's DP-SGD run of ``ctx``'s config from the public initialisation, its noise and
  batches drawn for ``purpose``, with an audit's ``canaries``."""
  config, data, d = ctx.config, ctx.dataset, ctx.config.dpsgd
  model = dpsgd_plan.model_of(config, data.num_classes)
  t0 = time.perf_counter()
  x_train = dpsgd_plan.inputs(config, model, data.x_train)
  x_test = dpsgd_plan.inputs(config, model, data.x_test)
  feature_seconds = time.perf_counter() - t0
  init_key = ctx.key("dpsgd")  # public: the initialisation
  noise_key, batches = ctx.noise_key(purpose), ctx.noise_rng(f"{purpose}_batches")  # secret
  init = backbone.init_shape(model, x_train.shape[1:], data.image_shape)
  fields = ({"canary_scores": jnp.zeros(canaries.num_canaries)} if canaries is not None
            else {})
  state = _state(config, model, init, init_key, **fields)
  fit = train.FitConfig(num_steps=d.num_steps, batch_size=d.batch_size,
                        learning_rate=d.learning_rate, checkpoint_every=config.checkpoint_every,
                        log_every=config.log_every)
  state = dpsgd.train_private(state, model, x_train, data.y_train, record, d.microbatch_size,
                              fit, noise_key, batches, checkpoint_dir, purpose, ctx.log,
                              canaries=canaries)
  return model, state, x_test, feature_seconds


def run(ctx: Context) -> dict:
  """Trains (or resumes) the DP-SGD model; returns its test accuracy, the noise and the ledger."""
  config, data = ctx.config, ctx.dataset
  d, p = config.dpsgd, config.privacy
  n = dpsgd_plan.public_size(config, len(data.x_train))
  record, ledger = planned(ctx)
  t0 = time.perf_counter()
  model, state, x_test, feature_seconds = train_model(ctx, record, ctx.stage.checkpoint_dir,
                                                      "dpsgd")
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


def canary_plan(ctx: Context):
  """(the DP-SGD record a canary audit repeats, the add/remove-one epsilon the run claims)."""
  p = ctx.config.privacy
  record, ledger = planned(ctx)
  return record, ledger.epsilon(p.delta, p.accountant, data_dependent=False)


def train_canaries(ctx: Context, record: privacy.DpsgdSteps, canaries: dpsgd.Canaries,
                   checkpoint_dir: str) -> dpsgd.CanaryState:
  """One more run of the stage's DP-SGD with an audit's ``canaries``: its final state."""
  return train_model(ctx, record, checkpoint_dir, "canary_dpsgd", canaries)[1]
