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
import os
import time

import jax
import numpy as np

from dgd_jax import augment, generative, plots, train
from dgd_jax.artefacts import (SYNTHETIC, SYNTHETIC_LABELS, classifier, fit_config,
                               load_classifier, new_generator)
from dgd_jax.core import Context
from dgd_jax.workdir import save_array

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


def run(ctx: Context) -> dict:
  config, data = ctx.config, ctx.dataset
  g = config.generator
  synthesis = g.synthesis
  # DeepInversion differentiates the baseline at batch 250, where lax.conv is the faster
  # lowering (models/classifier.py); the generator path keeps the default.
  baseline, baseline_params = load_classifier(
      ctx, "baseline", lowering="conv" if synthesis == "inversion" else "im2col")
  init_key, train_key, sample_key, student_key = jax.random.split(ctx.key("generator"), 4)
  priors = generative.Priors(w_stats=g.w_stats, w_tv=g.w_tv, jitter=g.jitter, mirror=g.mirror)
  targets = None
  if priors.w_stats > 0:  # private-set statistics: the generator path, not covered by epsilon
    targets = generative.layer_statistics(baseline.apply, baseline_params, data.x_train)
  num = g.num_synthetic or len(data.x_train)  # DGD IV-A: as many as the private set
  t0 = time.perf_counter()
  if synthesis == "inversion":  # DeepInversion: each sample's pixels optimised directly
    x_syn, _ = generative.invert(
        sample_key, int(num * g.oversample), g.inversion_batch_size, g.inversion_steps,
        g.inversion_learning_rate, data.num_classes, data.image_shape, baseline.apply,
        baseline_params, priors, targets)
  else:  # DGD's data-free generator (Eq. 2 + priors), then fresh latent draws
    state = new_generator(config, data.image_shape, init_key)
    step = jax.jit(lambda s, k: generative.generator_step(
        s, k, baseline.apply, baseline_params, g.batch_size, g.latent_dim, g.alpha, g.beta,
        priors, targets), donate_argnums=0)
    cfg = train.FitConfig(num_steps=g.rounds * g.iterations_per_round,
                          batch_size=g.batch_size, checkpoint_every=config.checkpoint_every,
                          log_every=config.log_every)
    state = train.run_steps(state, step, train_key, cfg, ctx.stage.checkpoint_dir, "generator",
                            ctx.log)
    x_syn = generative.generate(state.apply_fn, generative.generator_variables(state),
                                sample_key, int(num * g.oversample), g.batch_size, g.latent_dim)
  seconds = time.perf_counter() - t0
  logits = train.logits(baseline.apply, baseline_params, x_syn)
  if g.oversample > 1:  # keep the samples the baseline labels confidently and stably
    shifted = np.asarray(augment.translate(jax.random.fold_in(sample_key, 1), x_syn, 2))
    keep = select_stable(logits, train.logits(baseline.apply, baseline_params, shifted), num,
                         data.num_classes)
    x_syn, logits = x_syn[keep], logits[keep]
  labels = logits.argmax(-1).astype(np.int32)
  save_array(os.path.join(ctx.stage.path, SYNTHETIC), x_syn)
  save_array(os.path.join(ctx.stage.path, SYNTHETIC_LABELS), labels)
  histogram = np.bincount(labels, minlength=data.num_classes)
  p = histogram[histogram > 0] / num
  entropy = float(-(p * np.log(p)).sum())

  plots.class_grid(os.path.join(ctx.stage.path, "samples.png"), x_syn, labels,
                   data.num_classes, "Synthetic samples by the baseline's predicted class")

  # DGD Fig. 4 "data-free" bar: the baseline's architecture and schedule (or
  # generator.synthetic_student_steps of it) on synthetic data.
  student = classifier(config, data.num_classes)
  student_cfg = fit_config(config, "baseline")
  if g.synthetic_student_steps:
    student_cfg = dataclasses.replace(student_cfg, num_steps=g.synthetic_student_steps)
  s_init, s_train = jax.random.split(student_key)
  s_state = train.create_train_state(student, train.optimizer(student_cfg), s_init,
                                     data.image_shape)
  s_state = train.fit(s_state, x_syn, labels, s_train, student_cfg,
                      os.path.join(ctx.stage.path, "student_checkpoints"), "synthetic_student",
                      ctx.log)
  return {
      "synthesis": synthesis,
      "num_synthetic": num,
      "class_histogram": histogram.tolist(),
      "label_entropy": entropy,  # nats
      "label_entropy_fraction_of_max": entropy / float(np.log(data.num_classes)),
      "synthetic_student_accuracy": train.accuracy(student.apply, s_state.params, data.x_test,
                                                   data.y_test),
      "raw_student_accuracy": ctx.results["baseline"]["test_accuracy"],
      "synthetic_range": [float(x_syn.min()), float(x_syn.max())],
      "train_seconds": seconds,
      "samples_png": "generator/samples.png",
  }
