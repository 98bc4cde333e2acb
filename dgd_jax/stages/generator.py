"""Generator stage (DGD Section III-B): a data-free generator trained against the frozen
baseline with Eq. 2 (or, ``synthesis='inversion'``, DeepInversion's per-sample pixel
optimisation against it: ``generative.invert``), a synthetic set as large as the private
training set (or ``num_synthetic``), its class histogram under the baseline, a picture grid,
and the synthetic data's quality measure (DGD Fig. 4): a fresh classifier trained only on the
synthetic set labelled by the baseline, evaluated on the real test set, beside the baseline
trained on real data (RAW).

A *round* is ``iterations_per_round`` generator steps (the paper's 200 rounds with the
learning rate divided by 10 every 80 rounds; DAFL's epoch is 120 iterations).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time

import jax
import numpy as np
import optax

from dgd_jax.plan import backbone
from dgd_jax.plan.artefacts import (SYNTHETIC, SYNTHETIC_LABELS, classifier, fit_config,
                                     generator_settings, load_classifier, new_generator)
from dgd_jax.plan.context import Context, Program, abstract, abstract_key
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import save_array
from dgd_jax.synthesis import generative
from dgd_jax.training import augment
from dgd_jax.training import train

CONFIG_KEYS = ("generator",)


def select_stable(logits: np.ndarray, shifted_logits: np.ndarray, num: int,
                  num_classes: int) -> np.ndarray:
  """Indices of ``num`` samples, as equal a share per class (the baseline's label) as the
  candidates allow, with the highest stability score min(p_y(x), p_y(shifted x)), y the
  baseline's label on x: samples the baseline names confidently and the same way after a
  small shift."""
  labels = logits.argmax(-1)
  p = jax.nn.softmax(logits, -1)
  p_shifted = jax.nn.softmax(shifted_logits, -1)
  rows = np.arange(len(logits))
  score = np.minimum(np.asarray(p)[rows, labels], np.asarray(p_shifted)[rows, labels])
  order = np.argsort(-score, kind="stable")
  quota = num // num_classes  # a quota per class, then the best of the rest
  taken = np.concatenate([order[labels[order] == k][:quota] for k in range(num_classes)])
  rest = order[~np.isin(order, taken)][:num - len(taken)]
  return np.sort(np.concatenate([taken, rest]))


def stable_samples(baseline, baseline_params, x: np.ndarray, logits: np.ndarray, num: int,
                   num_classes: int, key: jax.Array) -> np.ndarray:
  """``select_stable`` on the baseline's ``logits`` of ``x`` and of ``x`` shifted by up to 2
  pixels (``key``): the indices of the ``num`` most stable samples."""
  shifted = np.asarray(augment.translate(key, x, 2))
  return select_stable(logits, train.logits(baseline.apply, baseline_params, shifted), num,
                       num_classes)


def synthesise(ctx: Context, baseline, baseline_params, targets, num: int, init_key: jax.Array,
               train_key: jax.Array, sample_key: jax.Array) -> np.ndarray:
  """``num`` synthetic images against the baseline: DeepInversion's per-sample optimisation,
  or DGD's generator trained (Eq. 2 + priors) and then sampled on fresh latents; either
  resumes from the stage's checkpoints."""
  config, data, g = ctx.config, ctx.dataset, ctx.config.generator
  settings = generator_settings(g)
  if g.synthesis == "inversion":  # DeepInversion: each sample's pixels optimised directly
    return generative.invert(
        sample_key, num, g.inversion_batch_size, g.inversion_steps, g.inversion_learning_rate,
        data.num_classes, data.image_shape, baseline.apply, baseline_params, settings.priors,
        targets, ctx.stage.checkpoint_dir, ctx.log, config.checkpoint_every,
        config.log_every, g.target_mix)[0]
  state = new_generator(config, data.image_shape, init_key)
  step = jax.jit(lambda s, k: generative.generator_step(
      s, k, baseline.apply, baseline_params, settings, targets), donate_argnums=0)
  cfg = train.FitConfig(num_steps=g.rounds * g.iterations_per_round, batch_size=g.batch_size,
                        checkpoint_every=config.checkpoint_every, log_every=config.log_every)
  state = train.run_steps(state, step, train_key, cfg, ctx.stage.checkpoint_dir, "generator",
                          ctx.log)
  return generative.generate(state.apply_fn, generative.generator_variables(state), sample_key,
                             num, g.batch_size, g.latent_dim)


def synthetic_student_accuracy(ctx: Context, x_syn: np.ndarray, labels: np.ndarray,
                               key: jax.Array) -> float:
  """DGD Fig. 4's "data-free" bar: the baseline's architecture and schedule (or
  ``generator.synthetic_student_steps`` of it) trained on the synthetic set with the
  baseline's labels, its accuracy on the real test set."""
  config, data = ctx.config, ctx.dataset
  student = classifier(config, data.num_classes)
  cfg = fit_config(config, "baseline")
  if config.generator.synthetic_student_steps:
    cfg = dataclasses.replace(cfg, num_steps=config.generator.synthetic_student_steps)
  s_init, s_train = jax.random.split(key)
  state = train.create_train_state(student, train.optimizer(cfg), s_init, data.image_shape)
  state = train.fit(state, x_syn, labels, s_train, cfg,
                    os.path.join(ctx.stage.path, "student_checkpoints"), "synthetic_student",
                    ctx.log)
  return train.accuracy(student.apply, state.params, data.x_test, data.y_test)


def check_layers(config, targets: list) -> None:
  """Refuses statistics matching for a baseline with no convolution to match."""
  if not targets:
    model = (f"the ViT backbone (config.model.backbone={config.model.backbone!r})"
             if backbone.takes(config, "baseline") else
             f"config.model.module={config.model.module!r}")
    raise ConfigError(f"config.generator.w_stats={config.generator.w_stats} matches the "
                      f"statistics of the baseline's convolution outputs, and {model} has no "
                      "nn.Conv layer: set --config.generator.w_stats=0, or use a "
                      "convolutional baseline.")


def programs(config, data) -> dict[str, Program]:
  """The generator stage's programs at the config's shapes: the private set's layer
  statistics (one chunk, where statistics matching is on), the generator's step or
  DeepInversion's, and the synthetic set's student step."""
  g, shape = config.generator, data.image_shape
  baseline = classifier(config, data.num_classes, "baseline",
                        "conv" if g.synthesis == "inversion" else "im2col")
  params = jax.eval_shape(baseline.init, jax.random.key(0), abstract((1,) + shape))
  settings = generator_settings(g)
  out, targets = {}, None
  if g.w_stats > 0:
    chunk = abstract((min(train.EVAL_BATCH, len(data.x_train)),) + shape)
    moments = lambda p, xb: generative.layer_moments(baseline.apply, p, xb)
    out["layer_statistics"] = Program(moments, (params, chunk))
    targets = jax.eval_shape(moments, params, chunk)  # shaped as (mu_l, var_l) per layer
    check_layers(config, targets)
  if g.synthesis == "inversion":
    batch = abstract((g.inversion_batch_size,) + shape)
    tx = optax.adam(g.inversion_learning_rate)
    labels = generative.inversion_labels(g.inversion_batch_size, data.num_classes, g.target_mix)
    out["inversion_step"] = Program(
        lambda v, opt, k, p, t: generative.inversion_update(
            tx, labels, baseline.apply, p, settings.priors, t)(v, opt, k),
        (batch, jax.eval_shape(tx.init, batch), abstract_key(), params, targets))
  else:
    state = jax.eval_shape(lambda: new_generator(config, shape, jax.random.key(0)))
    out["generator_step"] = Program(
        lambda s, k, p, t: generative.generator_step(s, k, baseline.apply, p, settings, t),
        (state, abstract_key(), params, targets))
  student = classifier(config, data.num_classes)
  cfg = fit_config(config, "baseline")
  num = g.num_synthetic or len(data.x_train)
  student_state = jax.eval_shape(lambda: train.create_train_state(
      student, train.optimizer(cfg), jax.random.key(0), shape))
  out["synthetic_student_step"] = Program(
      functools.partial(train.train_step, batch_size=cfg.batch_size),
      (student_state, abstract_key(), abstract((num,) + shape), abstract((num,), "int32")))
  return out


def run(ctx: Context) -> dict:
  config, data = ctx.config, ctx.dataset
  g = config.generator
  # DeepInversion differentiates the baseline at batch 250, where lax.conv is the faster
  # lowering (models/classifier.py); the generator path keeps the default.
  baseline, baseline_params = load_classifier(
      ctx, "baseline", lowering="conv" if g.synthesis == "inversion" else "im2col")
  init_key, train_key, sample_key, student_key = jax.random.split(ctx.key("generator"), 4)
  targets = None
  if g.w_stats > 0:  # private-set statistics: the generator path, not covered by epsilon
    targets = generative.layer_statistics(baseline.apply, baseline_params, data.x_train)
    check_layers(config, targets)
  num = g.num_synthetic or len(data.x_train)  # DGD IV-A: as many as the private set
  t0 = time.perf_counter()
  x_syn = synthesise(ctx, baseline, baseline_params, targets, int(num * g.oversample),
                     init_key, train_key, sample_key)
  seconds = time.perf_counter() - t0
  logits = train.logits(baseline.apply, baseline_params, x_syn)
  if g.oversample > 1:  # keep the samples the baseline labels confidently and stably
    keep = stable_samples(baseline, baseline_params, x_syn, logits, num, data.num_classes,
                          jax.random.fold_in(sample_key, 1))
    x_syn, logits = x_syn[keep], logits[keep]
  labels = logits.argmax(-1).astype(np.int32)
  save_array(os.path.join(ctx.stage.path, SYNTHETIC), x_syn)
  save_array(os.path.join(ctx.stage.path, SYNTHETIC_LABELS), labels)
  histogram = np.bincount(labels, minlength=data.num_classes)
  p = histogram[histogram > 0] / num
  entropy = float(-(p * np.log(p)).sum())
  plots.class_grid(os.path.join(ctx.stage.path, "samples.png"), x_syn, labels,
                   data.num_classes, "Synthetic samples by the baseline's predicted class")
  return {
      "synthesis": g.synthesis,
      "num_synthetic": num,
      "class_histogram": histogram.tolist(),
      "label_entropy": entropy,  # nats
      "label_entropy_fraction_of_max": entropy / float(np.log(data.num_classes)),
      "synthetic_student_accuracy": synthetic_student_accuracy(ctx, x_syn, labels,
                                                               student_key),
      "raw_student_accuracy": ctx.results["baseline"]["test_accuracy"],
      "synthetic_range": [float(x_syn.min()), float(x_syn.max())],
      "train_seconds": seconds,
      "samples_png": "generator/samples.png",
  }
