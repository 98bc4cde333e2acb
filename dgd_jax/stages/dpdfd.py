"""DPDFD stages (Liu et al., IJCAI 2023): ``dpdfd`` converts the sensitive model(s) into a DP
student by Algorithm 1, a generator training alongside; ``dpdfd_samples`` writes a synthetic
set from that generator (DP by post-processing, so it may be released). With
``dpdfd.teacher='private_data'`` the same mechanism trains a model directly on the labelled
private data instead (Sec. 4.4, a DP-SGD alternative; no generator, no samples stage).

In conversion, training never reads the private training examples: its inputs are the
generator's samples, the sensitive model's logits on them (through A_{C,sigma} only) and,
for evaluation, the test set. The plan, its checks and its ledger record are
``plan/dpdfd.py``'s.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from dgd_jax import privacy
from dgd_jax.plan import artefacts
from dgd_jax.plan import dpdfd as dpdfd_plan
from dgd_jax.plan.artefacts import SYNTHETIC, classifier
from dgd_jax.plan.context import NOISE_KEY, Context, Program, abstract, abstract_key
from dgd_jax.privacy import noise
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import save_array
from dgd_jax.synthesis import dpdfd
from dgd_jax.synthesis import generative
from dgd_jax.training import ensemble
from dgd_jax.training import train

# The steps' accounting reads the teacher partition (num_teachers) whichever model is taught.
CONFIG_KEYS = ("baseline", "num_teachers", "teachers", "dpdfd", "privacy", NOISE_KEY)


def requires(config) -> tuple[str, ...]:
  sensitive = {"ensemble": ("teachers",), "baseline": ("baseline",)}.get(config.dpdfd.teacher, ())
  return sensitive + (("generator",) if dpdfd_plan.uses_synthetic(config) else ())


def sensitive_logits(config, num_classes: int, chunk: int = 1):
  """The sensitive model(s) as ``logits(params, x)``: [B, K] for the baseline, [n, B, K] for
  the teacher ensemble (its stacked parameters, ``chunk`` teachers at a time)."""
  if config.dpdfd.teacher == "ensemble":
    model = artefacts.teacher_model(config, num_classes)
    return lambda params, x: ensemble.lift(lambda p: model.apply(p, x), chunk)(params)
  return classifier(config, num_classes, "baseline").apply


def _teacher_logits(ctx: Context):
  """The sensitive model(s) as ``x -> logits`` (``sensitive_logits``) and their accuracy."""
  k = ctx.dataset.num_classes
  if ctx.config.dpdfd.teacher == "ensemble":
    params, _, chunk = artefacts.load_teachers(ctx)  # chunk: planned for the device memory
    logits = sensitive_logits(ctx.config, k, chunk)
    return (lambda x: logits(params, x), ctx.results["teachers"]["plurality_accuracy"])
  _, params = artefacts.load_classifier(ctx, "baseline")
  logits = sensitive_logits(ctx.config, k)
  return lambda x: logits(params, x), ctx.results["baseline"]["test_accuracy"]


def new_state(config, num_classes: int, image_shape, key: jax.Array) -> dpdfd.DpdfdState:
  """A fresh student with Algorithm 1's generator (and, with replay, room for the B T rows
  it releases)."""
  d = config.dpdfd
  student = classifier(config, num_classes)
  s_key, g_key = jax.random.split(key)
  generator = generative.create_generator_state(
      artefacts.dpdfd_generator(config, image_shape), optax.adam(d.generator_learning_rate),
      g_key, d.latent_dim)
  rows = d.batch_size * d.num_steps if d.replay_epochs else 0  # B T rows kept for replay
  return dpdfd.DpdfdState.create(
      apply_fn=student.apply, params=student.init(s_key, jnp.zeros((1,) + image_shape)),
      tx=optax.adam(d.learning_rate), generator=generator,
      released_x=jnp.zeros((rows,) + image_shape) if rows else None,
      released_y=jnp.zeros((rows, num_classes)) if rows else None)


def _states(ctx: Context, sigma: float):
  config, k = ctx.config, ctx.dataset.num_classes
  state = new_state(config, k, ctx.dataset.image_shape, ctx.key("dpdfd_init"))
  return classifier(config, k), state, dpdfd_plan.step_settings(config.dpdfd, sigma)


def programs(config, data) -> dict[str, Program]:
  """Algorithm 1's step for the configured inputs (generator, synthetic set or direct
  training) with the sensitive model's parameters as arguments, and, with replay, the replay
  and self-training steps, at the config's shapes. The noise multiplier is the run's (it is a
  constant of the program and changes no shape)."""
  d, k, shape = config.dpdfd, data.num_classes, data.image_shape
  size = len(data.x_train) if dpdfd_plan.reads_size(config) else None
  cfg = dpdfd_plan.step_settings(d, dpdfd_plan.noise_multiplier(config, size))
  student = classifier(config, k)
  state = jax.eval_shape(lambda: new_state(config, k, shape, jax.random.key(0)))
  key, rows = noise.abstract_key(), d.batch_size * d.num_steps  # run_steps' secret key
  if d.teacher == "private_data":
    out = {"direct_step": Program(
        lambda s, key, x, y: dpdfd.direct_step(s, key, x, y, student.apply, cfg),
        (state.replace(generator=None), key, abstract(data.x_train), abstract(data.y_train)))}
  else:
    if d.teacher == "ensemble":
      _, _, _, _, plan = artefacts.teacher_memory(config, data, config.num_teachers)
      model, chunk = artefacts.teacher_model(config, k), plan.chunk
      params = jax.eval_shape(jax.vmap(lambda key: model.init(key, jnp.zeros((1,) + shape))),
                              jax.random.split(jax.random.key(0), config.num_teachers))
    else:
      chunk, baseline = 1, classifier(config, k, "baseline")
      params = jax.eval_shape(baseline.init, jax.random.key(0), jnp.zeros((1,) + shape))
    logits = sensitive_logits(config, k, chunk)
    if dpdfd_plan.uses_synthetic(config):
      out = {"synthetic_step": Program(
          lambda s, key, x, p: dpdfd.synthetic_step(
              s, key, x, lambda xb: logits(p, xb), student.apply, cfg),
          (state.replace(generator=None), key, abstract((rows,) + shape), params))}
    else:
      out = {"step": Program(
          lambda s, key, p: dpdfd.step(s, key, lambda xb: logits(p, xb), student.apply, cfg),
          (state, key, params))}
  if d.replay_epochs:
    fresh = jax.eval_shape(lambda p: train_state.TrainState.create(  # as _replay's
        apply_fn=student.apply, params=p, tx=optax.adam(d.learning_rate)), state.params)
    replay = lambda s, key, x, y: dpdfd.replay_step(s, key, x, y, d.batch_size, d.mixup)
    out["replay_step"] = Program(replay, (fresh, abstract_key(), abstract((rows,) + shape),
                                          abstract((rows, k))))
    if d.self_training:
      num = ((config.generator.num_synthetic or len(data.x_train))
             if dpdfd_plan.uses_synthetic(config) else rows)  # the synthetic set, or the rows
      out["self_training_step"] = Program(replay, (fresh, abstract_key(), abstract((num,) + shape),
                                                   abstract((num, k))))
  return out


def _fit_targets(ctx: Context, state: train_state.TrainState, x: jnp.ndarray, y: jnp.ndarray,
                 rounds: int) -> train_state.TrainState:
  """``dpdfd.replay_epochs`` epochs of ``replay_step`` on the rows (x, y)."""
  d = ctx.config.dpdfd
  batch_size, mixup = d.batch_size, d.mixup  # static under jit
  step = jax.jit(lambda s, k: dpdfd.replay_step(s, k, x, y, batch_size, mixup),
                 donate_argnums=0)
  fit = train.FitConfig(num_steps=int(np.ceil(d.replay_epochs * len(x) / d.batch_size)),
                        batch_size=d.batch_size, checkpoint_every=ctx.config.checkpoint_every,
                        log_every=ctx.config.log_every)
  name = f"dpdfd_self_training_{rounds}" if rounds else "dpdfd_replay"
  return train.run_steps(state, step, ctx.key(name), fit,
                         artefacts.replay_checkpoints(ctx, rounds), name, ctx.log)


def _replay(ctx: Context, student, state: dpdfd.DpdfdState, x_self: np.ndarray) -> list:
  """The student trained ``dpdfd.replay_epochs`` more epochs on the B T rows its run released
  (the targets are reused, not queried again, so no extra epsilon); then
  ``dpdfd.self_training`` rounds (``train.self_training``) on ``x_self``, each a fresh
  student trained as long. Returns the parameters of the replayed and each self-trained one."""
  d = ctx.config.dpdfd
  start = train_state.TrainState.create(apply_fn=state.apply_fn, params=state.params,
                                        tx=optax.adam(d.learning_rate))  # a fresh Adam
  replayed = _fit_targets(ctx, start, state.released_x, state.released_y, 0)
  x = jnp.asarray(x_self)

  def fit_round(logits, rounds):  # replay_step reads targets as logits, as the released rows
    fresh = train_state.TrainState.create(
        apply_fn=student.apply, tx=optax.adam(d.learning_rate),
        params=student.init(ctx.key(f"dpdfd_self_training_init_{rounds}"),
                            jnp.zeros((1,) + x.shape[1:])))
    return _fit_targets(ctx, fresh, x, jnp.asarray(logits), rounds).params

  return train.self_training(fit_round, student.apply, replayed.params, x,
                             d.self_training)


def _step(ctx: Context, student, state: dpdfd.DpdfdState, cfg: dpdfd.StepSettings,
          teacher_logits):
  """Algorithm 1's jitted step for the configured inputs, the state it starts from (no
  generator but Algorithm 1's), and the synthetic set self-training reads (None: the
  released rows)."""
  d = ctx.config.dpdfd
  if d.teacher == "private_data":  # Sec. 4.4: no teacher, no generator
    x, y = jnp.asarray(ctx.dataset.x_train), jnp.asarray(ctx.dataset.y_train)
    return jax.jit(lambda s, k: dpdfd.direct_step(s, k, x, y, student.apply, cfg),
                   donate_argnums=0), state.replace(generator=None), None
  if dpdfd_plan.uses_synthetic(ctx.config):  # a fixed synthetic set, each B T sample asked once
    synthetic = artefacts.load_synthetic(ctx)
    if len(synthetic) < d.batch_size * d.num_steps:
      raise ConfigError(
          f"config.dpdfd.num_steps={d.num_steps} x batch_size={d.batch_size} asks for "
          f"{d.num_steps * d.batch_size} synthetic samples; the generator stage made "
          f"{len(synthetic)}. Lower num_steps to {len(synthetic) // d.batch_size} or raise "
          "generator.num_synthetic.")
    queried = jnp.asarray(synthetic[:d.batch_size * d.num_steps])
    step = jax.jit(lambda s, k: dpdfd.synthetic_step(s, k, queried, teacher_logits,
                                                     student.apply, cfg), donate_argnums=0)
    return step, state.replace(generator=None), synthetic  # all of it, queried or not
  return jax.jit(lambda s, k: dpdfd.step(s, k, teacher_logits, student.apply, cfg),
                 donate_argnums=0), state, None


def run(ctx: Context) -> dict:
  config = ctx.config
  size = len(ctx.dataset.x_train) if dpdfd_plan.reads_size(config) else None
  sigma = dpdfd_plan.noise_multiplier(config, size)
  student, state, cfg = _states(ctx, sigma)
  d = config.dpdfd
  teacher_logits, teacher_accuracy = None, None  # direct training has no teacher
  if d.teacher != "private_data":
    teacher_logits, teacher_accuracy = _teacher_logits(ctx)
  step, state, self_training_inputs = _step(ctx, student, state, cfg, teacher_logits)
  fit = train.FitConfig(num_steps=d.num_steps, batch_size=cfg.batch_size,
                        checkpoint_every=config.checkpoint_every, log_every=config.log_every)
  # secret: each step's key draws A_{C,sigma}'s noise (and the step's latent codes)
  state = train.run_steps(state, step, ctx.noise_key("dpdfd"), fit, ctx.stage.checkpoint_dir,
                          "dpdfd", ctx.log)
  ledgers = {r: privacy.PrivacyLedger([dpdfd_plan.release(config, sigma, size, r)])
             for r in dpdfd_plan.neighbours(config)}
  test = ctx.dataset
  accuracy = lambda params: train.accuracy(student.apply, params, test.x_test, test.y_test)
  replayed = {}
  if d.replay_epochs:
    replayed = {"test_accuracy_before_replay": accuracy(state.params),
                "replay_epochs": d.replay_epochs}
    rounds = _replay(ctx, student, state, state.released_x if self_training_inputs is None
                     else self_training_inputs)  # the replayed, then each self-trained
    if len(rounds) > 1:
      replayed["test_accuracy_by_self_training_round"] = [accuracy(p) for p in rounds]
    state = state.replace(params=rounds[-1])
  return {
      # label: direct training protects the labels only (privacy.dpdfd.DIRECT_LABEL_DP).
      "privacy_unit": "label" if d.teacher == "private_data" else "example",
      "test_accuracy": accuracy(state.params),
      **replayed,
      "teacher_accuracy": teacher_accuracy,
      "noise_multiplier": sigma,
      "noise_std": sigma * cfg.norm_bound,
      "num_steps": d.num_steps,
      "privacy": privacy.relations_json(ledgers, config.privacy.delta, config.privacy.accountant),
  }


def sample_programs(config, data) -> dict[str, Program]:
  """The dpdfd_samples stage's programs at the config's shapes: one batch of Algorithm 1's
  generator (``generative.sample_batch``) and the DP student's logits on one evaluation
  batch (its labels of the samples)."""
  d, shape = config.dpdfd, data.image_shape
  generator = artefacts.dpdfd_generator(config, shape)
  student = classifier(config, data.num_classes)
  params = jax.eval_shape(student.init, jax.random.key(0), jnp.zeros((1,) + shape))
  sample = lambda v, key: generative.sample_batch(generator.apply, v, key, d.batch_size,
                                                  d.latent_dim)
  return {"samples": Program(sample, (artefacts.generator_shape(generator, d.latent_dim),
                                      abstract_key())),
          "labels": Program(student.apply, (params, abstract((train.EVAL_BATCH,) + shape)))}


def run_samples(ctx: Context) -> dict:
  """Writes ``dpdfd.num_synthetic`` samples of the finished DPDFD generator and a grid."""
  config = ctx.config
  if dpdfd_plan.uses_synthetic(config):
    raise ConfigError("The dpdfd_samples stage samples Algorithm 1's generator; with "
                      "dpdfd.inputs='synthetic' there is none (the inputs are "
                      "generator/synthetic.npy). Run --stages=dpdfd.")
  d, k = config.dpdfd, ctx.dataset.num_classes
  # The student the stage reports (replayed and self-trained where it was) and the generator.
  student, params, generator, variables = artefacts.load_dpdfd(ctx, d.self_training)
  num = d.num_synthetic
  x = generative.generate(generator.apply, variables, ctx.key("dpdfd_samples"), num,
                          d.batch_size, d.latent_dim)
  labels = train.predict(student.apply, params, x)  # the DP student's labels
  save_array(os.path.join(ctx.stage.path, SYNTHETIC), x)
  plots.class_grid(os.path.join(ctx.stage.path, "samples.png"), x, labels, k,
                   "DPDFD generator samples by the DP student's class")
  return {"num_synthetic": num, "class_histogram": np.bincount(labels, minlength=k).tolist(),
          "samples_png": "dpdfd_samples/samples.png"}
