r"""Do teachers that also learn from the unlabelled synthetic pool agree more on it?

Question: on a small private set (8,000 images, 50 teachers of 160) the GNMax noise binds
(RESULTS.md, DGD on a small private set): the teachers' top vote share on the synthetic pool is
0.56, so at sigma 8 a released label equals the plurality 71-82% of the time. Each teacher may
use the pool without labels (FixMatch on its own pseudo-labels) and all may start from one
initialisation: either keeps the replace-one sensitivity of the votes (teacher i still reads
only shard i of the private data, and the pool is what the votes are conditional on already).
Does either raise the vote margin, and what does the student then learn from the GNMax labels?
Answer: no. One initialisation moves the top vote share from 0.565 to 0.578 and the students
by -6 to +0 points; FixMatch on the pool (tau 0.9, lambda 1, the run's 300 steps) raises it to
0.621 but the teachers drift together onto wrong pseudo-labels: their plurality labels teach
15-22%. The lever that worked is the release, not the teachers (``gaussian_histogram``).
Feeds: RESULTS.md, "DGD on a small private set: 8,000 images, 50 teachers (ablation)".

A development diagnostic, not a release: it reads the teachers' votes without noise and prints
nothing a run publishes. For each variant it trains the run's CNN teachers on the run's shards
(``data.config_shards``; the run's steps, batch, learning rate), prints the mean teacher and
the plurality accuracy on the real test set, the mean top vote share on the pool and the mean
margin (top minus second count), then for ``--draws`` query draws of the run's plan (Q queries,
GNMax sigma) trains the run's student (``student_training.train_student`` with propagation, as
the student stage does) on the noisy labels and on the noiseless plurality of the same samples.

  plain:        what the run trains (independent initialisations)
  shared_init:  every teacher from the same initialisation
  fixmatch:     + lambda * FixMatch on pool minibatches (weak-view pseudo-label with
                confidence >= tau, cross-entropy on a strong view; Sohn et al. 2020, Eq. 4)

  python experiments/teacher_agreement_probe.py --workdir=workdirs/s8k50_f2 \
      --variants=plain,shared_init,fixmatch --draws=2
"""
from __future__ import annotations

import json
import os
import tempfile
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dgd_jax.data import config_shards
from dgd_jax.labels import propagation
from dgd_jax.plan import artefacts
from dgd_jax.plan import pool
from dgd_jax.plan import student_fit
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.training import augment
from dgd_jax.training import ensemble
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
flags.mark_flag_as_required("workdir")
_VARIANTS = flags.DEFINE_list("variants", ["plain", "shared_init", "fixmatch"],
                              "plain, shared_init, fixmatch, shared_fixmatch.")
_STEPS = flags.DEFINE_integer("steps", 0, "Teacher steps (0: the run's).")
_TAU = flags.DEFINE_float("tau", 0.9, "FixMatch confidence threshold.")
_LAM = flags.DEFINE_float("lam", 1.0, "FixMatch weight.")
_UNLABELLED = flags.DEFINE_integer("unlabelled_batch", 64, "Pool samples per teacher step.")
_DRAWS = flags.DEFINE_integer("draws", 2, "Query draws (seeds 0..draws-1).")
_SIGMA = flags.DEFINE_float("sigma", 0.0, "GNMax sigma (0: the run's).")
_QUERIES = flags.DEFINE_integer("queries", 0, "Queries (0: the run's).")


def fixmatch_loss(apply_fn, params, key, xb, yb, x_pool, tau, lam, unlabelled):
  """Cross-entropy on the labelled minibatch + lam * FixMatch on a pool minibatch."""
  k_idx, k_weak, k_strong = jax.random.split(key, 3)
  xu = x_pool[jax.random.randint(k_idx, (unlabelled,), 0, x_pool.shape[0])]
  p = jax.nn.softmax(jax.lax.stop_gradient(apply_fn(params, augment.weak(k_weak, xu))))
  mask = (p.max(-1) >= tau).astype(jnp.float32)
  ce_u = optax.softmax_cross_entropy_with_integer_labels(
      apply_fn(params, augment.strong(k_strong, xu)), p.argmax(-1))
  return train.cross_entropy(apply_fn(params, xb), yb) + lam * jnp.mean(mask * ce_u), mask.mean()


def train_teachers(ctx, variant: str, shards, x_pool, steps: int):
  config, data = ctx.config, ctx.dataset
  model, cfg, mesh, chunk = artefacts.teacher_plan(config, data, len(shards))
  tx = train.optimizer(cfg)
  init_key, train_key = jax.random.split(ctx.key("teachers"))
  n = len(shards)
  keys = (jnp.stack([init_key] * n) if "shared" in variant else jax.random.split(init_key, n))
  state = jax.vmap(lambda k: train.create_train_state(model, tx, k, data.image_shape))(keys)
  x_sh = jnp.asarray(data.x_train[np.stack(shards)])
  y_sh = jnp.asarray(data.y_train[np.stack(shards)])
  semi = "fixmatch" in variant

  @jax.jit
  def step(state, key, pool_x):
    def one(args):
      s, xs, ys, k = args
      k_b, k_u = jax.random.split(k)
      rows = jax.random.randint(k_b, (cfg.batch_size,), 0, xs.shape[0])
      xb, yb = xs[rows], ys[rows]
      if not semi:
        return train.update(s, xb, yb)[0]
      grads = jax.grad(lambda p: fixmatch_loss(s.apply_fn, p, k_u, xb, yb, pool_x, _TAU.value,
                                               _LAM.value, _UNLABELLED.value)[0])(s.params)
      return s.apply_gradients(grads=grads)
    return ensemble.lift(one, chunk)((state, x_sh, y_sh, jax.random.split(key, n)))

  pool_x = jnp.asarray(x_pool)
  t0 = time.time()
  for i in range(steps):
    state = step(state, jax.random.fold_in(train_key, i), pool_x)
  jax.block_until_ready(state)
  return state.params, ensemble.make_predict_fn(mesh, model.apply, chunk), time.time() - t0


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  config, data = ctx.config, ctx.dataset
  k = data.num_classes
  x = pool.load(ctx)
  shards = config_shards(config, data.x_train, data.y_train)
  q = _QUERIES.value or ctx.results["queries"]["num_queries"]
  sigma = _SIGMA.value or ctx.results["queries"]["noise_scale"]
  steps = _STEPS.value or config.teachers.num_steps
  vae = (artefacts.load_vae(ctx, x.shape[1:]) if student_fit.uses_vae(config.student)
         else (None, None))
  folder = tempfile.mkdtemp()
  print(f"{len(shards)} teachers, {q} queries at sigma {sigma:g}, {steps} teacher steps",
        flush=True)
  draws = []  # the same queries, noise and pool features for every variant
  for d in range(_DRAWS.value):
    rng = np.random.default_rng(d)
    idx = rng.choice(len(x), q, replace=False)
    rest = np.delete(np.arange(len(x)), idx)
    noise = sigma * rng.standard_normal((q, k))
    draws.append((idx, rest, noise, propagation.features(np.concatenate([x[idx], x[rest]]))))
  for variant in _VARIANTS.value:
    if variant == "plain" and steps == config.teachers.num_steps:
      params, predict, _ = artefacts.load_teachers(ctx)
      seconds = 0.0
    else:
      params, predict, seconds = train_teachers(ctx, variant, shards, x, steps)
    labels = ensemble.teacher_predictions(predict, params, data.x_test)
    votes = ensemble.vote_histograms(predict, params, x, k).astype(np.float64)
    top2 = np.sort(votes, 1)[:, -2:]
    out = dict(variant=variant, train_seconds=round(seconds),
               mean_teacher_test=round(float((labels == data.y_test).mean()), 4),
               plurality_test=round(float(np.mean(
                   np.asarray(ensemble.histogram(labels, k)).argmax(1) == data.y_test)), 4),
               pool_top_share=round(float(top2[:, 1].mean() / len(shards)), 3),
               pool_margin=round(float((top2[:, 1] - top2[:, 0]).mean()), 2))
    for d, (idx, rest, noise, feats) in enumerate(draws):
      noisy = (votes[idx] + noise).argmax(1)
      for kind, y in (("noisy", noisy), ("clean", votes[idx].argmax(1))):
        name = f"{variant}_{d}_{kind}"
        model, rounds, _ = student_fit.train_student(
            ctx, vae, x[idx], y.astype(np.int32), x[rest], name, os.path.join(folder, name),
            feats)
        out[f"{kind}_{d}"] = round(train.accuracy(model.apply, rounds[-1], data.x_test,
                                                  data.y_test), 4)
      out[f"agree_{d}"] = round(float(np.mean(noisy == votes[idx].argmax(1))), 3)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
  app.run(main)
