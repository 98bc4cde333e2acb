r"""Do teachers that also learn the unlabelled synthetic pool teach the student more?

Question: the standard preset's student learns the teachers' vote shares on the synthetic
pool, and reaches about 80.8% on real images where the teachers' plurality reaches 85%: what
binds is how far the teachers' votes on the pool carry to real images. Each teacher sees its
~240 private images only, so its function on the (off-manifold) synthetic samples is
extrapolation. Does a teacher that also fits the pool, unlabelled, by confident pseudo-labels
(FixMatch's unsupervised term, Sohn et al. 2020 Eq. 4: cross-entropy of the prediction on a
shifted view against the argmax of the unshifted sample's prediction where its probability
is at least ``--threshold``), vote so that the student learns more?
Answer: no. The standard preset's seed-2 teachers trained 400 more steps with the term
(weight 1, threshold 0.9, 1-pixel shift; 45% of the pool kept at the end) rise in plurality
(85.10 -> 85.80% on 2,000 test images) but each fits its own pseudo-labels, so they agree
less on the pool (top vote share 0.577 -> 0.528), and the student loses 1.8 points on the
same draw of 4,000 histograms at sigma 44.71 (eps 10, `pld`): 78.11% against 79.93%,
noiseless 78.99% against the run's 80.80%; the same 400 steps without the term (``--weight=0``)
give 80.00% (noiseless 80.84%, top vote share 0.571): the loss is the term's.
Feeds: RESULTS.md, DGD, "The presets".

Privacy: the pool is public to the teachers as it is to the student (the run's epsilon is
already conditional on the synthetic inputs), and each teacher reads its own shard and the
pool only, so one changed private example still moves one teacher: the histograms'
sensitivity, and so the release's epsilon, is unchanged.

Method: the run's teachers (``artefacts.load_teachers``) are trained ``--steps`` more steps on
their own shards (the stage's minibatches and mixup) with, per step, ``--pool_batch`` pool
samples under the term above weighted ``--weight`` (0: the control, the extra steps alone),
from a fresh Adam at ``--lr`` decaying linearly to 0. Then, for the run's teachers and the
new ones, the vote histograms on the pool, each plan 'eps:Q:sigma' drawn as
``histogram_probe`` draws it (seed ``--seed``: the same queries and noise for both) and the
run's student trained on the targets (raw: h~ / n under the Brier score, as the student stage
learns a gaussian_histogram release; clean: the noiseless shares, the ceiling).

A development diagnostic: it reads the teachers' votes without noise; nothing here is a
release.

  python experiments/pool_teachers_probe.py --workdir=workdirs/std_s2 --steps=400 \
      --weight=1.0 --plans='10:4000:44.71' --seed=2

The numbers above were measured at commit 67714dc, whose loop drew each teacher's minibatch and
mixup from other splits of the step key than ``ensemble.member_step`` and the stage's update
now do: a rerun gives another draw of the same experiment.
"""
from __future__ import annotations

import functools
import os
import tempfile
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dgd_jax.data import config_shards
from dgd_jax.plan import artefacts
from dgd_jax.plan import pool
from dgd_jax.plan import student_fit
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.stages import teachers as teachers_stage
from dgd_jax.training import augment
from dgd_jax.training import ensemble
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
_STEPS = flags.DEFINE_integer("steps", 400, "More teacher steps, from the run's teachers.")
_LR = flags.DEFINE_float("lr", 3e-4, "Their Adam's learning rate (linear decay to 0).")
_WEIGHT = flags.DEFINE_float("weight", 1.0, "Weight of the pool term; 0: extra steps alone.")
_THRESHOLD = flags.DEFINE_float("threshold", 0.9, "Confidence of a kept pseudo-label.")
_SHIFT = flags.DEFINE_integer("shift", 1, "Pixels of the pool view's random shift.")
_POOL_BATCH = flags.DEFINE_integer("pool_batch", 32, "Pool samples per teacher step.")
_PLANS = flags.DEFINE_string("plans", "10:4000:44.71", "'eps:Q:sigma' items, ';'-separated.")
_TARGETS = flags.DEFINE_list("targets", ["raw", "clean"], "raw and/or clean.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the query draw and of the noise.")
_OLD = flags.DEFINE_bool("old", True, "Also probe the run's own teachers (raw targets).")


def pool_update(state, key, xb, yb, u_all, alpha: float, num_classes: int):
  """The stage's mixup update (``teachers_stage.mixup_update``'s mixed pairs) of the shard
  minibatch, its loss plus ``--weight`` times FixMatch's unsupervised term on ``--pool_batch``
  pool samples (their shifted view against the confident argmax of the unshifted sample,
  without gradient through the target)."""
  k_mix, k_u, k_view = jax.random.split(key, 3)
  xm, tm = xb, jax.nn.one_hot(yb, num_classes)
  if alpha > 0:  # the stage's teachers.mixup
    xm, tm = augment.mixup(k_mix, xm, tm, alpha)
  u = u_all[jax.random.randint(k_u, (_POOL_BATCH.value,), 0, u_all.shape[0])]
  view = augment.translate(k_view, u, _SHIFT.value)

  def loss_fn(params):
    supervised = train.cross_entropy(state.apply_fn(params, xm), tm)
    p = jax.nn.softmax(jax.lax.stop_gradient(state.apply_fn(params, u)))
    keep = (p.max(-1) >= _THRESHOLD.value).astype(jnp.float32)
    unsup = jnp.mean(keep * optax.softmax_cross_entropy_with_integer_labels(
        state.apply_fn(params, view), p.argmax(-1)))
    return supervised + _WEIGHT.value * unsup, keep.mean()

  (loss, kept), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  return state.apply_gradients(grads=grads), {"loss": loss, "kept": kept}


def fine_tune(ctx, params, chunk: int, x_pool: np.ndarray):
  """The run's teachers trained ``--steps`` more steps on their shards (``ensemble.member_step``
  draws each minibatch as the stage does) and, with ``--weight`` > 0, the pool; with
  ``--weight=0`` each step is the stage's own member update (the control)."""
  config, data = ctx.config, ctx.dataset
  parts = ensemble.Partitions.stack(config_shards(config, data.x_train, data.y_train))
  model = artefacts.teacher_model(config, data.num_classes)
  cfg = train.FitConfig(num_steps=_STEPS.value, batch_size=config.teachers.batch_size,
                        learning_rate=_LR.value)
  tx = train.optimizer(cfg)
  state = jax.jit(jax.vmap(lambda p: train.TrainState.create(
      apply_fn=model.apply, params=p, tx=tx)))(params)
  stage_update = teachers_stage.member_update(config, data.num_classes)
  n = len(parts.sizes)

  @functools.partial(jax.jit, donate_argnums=0)
  def step(state, key, x, y, indices, sizes, u_all):
    rule = (functools.partial(pool_update, u_all=u_all, alpha=config.teachers.mixup,
                              num_classes=data.num_classes) if _WEIGHT.value else stage_update)
    one = lambda args: ensemble.member_step(*args[:2], x, y, *args[2:], cfg.batch_size, rule)
    return ensemble.lift(one, chunk)((state, jax.random.split(key, n), indices, sizes))

  args = (jnp.asarray(data.x_train), jnp.asarray(data.y_train), jnp.asarray(parts.indices),
          jnp.asarray(parts.sizes), jnp.asarray(x_pool))
  key, t0 = jax.random.key(1234), time.time()
  for i in range(_STEPS.value):
    state, metrics = step(state, jax.random.fold_in(key, i), *args)
    if (i + 1) % 50 == 0 or i + 1 == _STEPS.value:
      kept = f", pool kept {float(np.mean(metrics['kept'])):.3f}" if "kept" in metrics else ""
      print(f"  step {i + 1}: loss {float(np.mean(metrics['loss'])):.3f}{kept} "
            f"({time.time() - t0:.0f} s)", flush=True)
  return state.params


def probe(ctx, name: str, params, predict, x: np.ndarray, kinds: list[str], folder: str):
  """Teacher accuracies on the test head, the vote histograms on the pool, and for each plan
  and target kind the run's student on them."""
  config, data = ctx.config, ctx.dataset
  num_eval = config.teachers.eval_size or len(data.x_test)
  labels = ensemble.teacher_predictions(predict, params, data.x_test[:num_eval])
  acc, _ = teachers_stage.ensemble_accuracies(labels, data.y_test[:num_eval],
                                              data.num_classes, (), jax.random.key(0))
  votes_all = ensemble.vote_histograms(predict, params, x, data.num_classes)
  n = int(votes_all[0].sum())
  print(f"{name}: plurality {acc['plurality_accuracy']:.2%}, mean teacher "
        f"{acc['teacher_accuracy_mean']:.2%}, top vote share on the pool "
        f"{np.mean(votes_all.max(1)) / n:.3f}", flush=True)
  for plan in _PLANS.value.split(";"):
    _, q, sigma = plan.split(":")
    q, sigma = min(int(q), len(x)), float(sigma)
    rng = np.random.default_rng(_SEED.value)  # histogram_probe's draw
    idx = np.sort(rng.choice(len(x), q, replace=False))
    votes = votes_all[idx].astype(np.float64)
    noisy = votes + sigma * rng.standard_normal(votes.shape)
    for kind in kinds:
      t0 = time.time()
      t = student_fit.shares(noisy if kind == "raw" else votes, n)
      model, rounds, _ = student_fit.train_student(
          ctx, (None, None), x[idx], t, np.delete(x, idx, axis=0), f"{name}_{kind}",
          os.path.join(folder, f"{name}_{kind}"), brier=True)
      a = train.accuracy(model.apply, rounds[-1], data.x_test, data.y_test)
      print(f"  {name} {plan} {kind}: student {a:.2%} ({time.time() - t0:.0f} s)", flush=True)


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  if student_fit.uses_vae(ctx.config.student):
    raise app.UsageError("The probe trains the student without the VAE term.")
  others = set(teachers_stage.update_rules(ctx.config)) - {"teachers.mixup"}
  if others and _WEIGHT.value:  # pool_update adds its term to the stage's mixup update only
    raise app.UsageError(f"The run's teachers train with {sorted(others)}; the pool term is "
                         "written for plain or mixup teachers.")
  x = pool.load(ctx)
  params, predict, chunk = artefacts.load_teachers(ctx)
  folder = tempfile.mkdtemp()
  if _OLD.value:
    probe(ctx, "run", params, predict, x, ["raw"], folder)
  new = fine_tune(ctx, params, chunk, x)
  probe(ctx, f"pool_w{_WEIGHT.value:g}", new, predict, x, _TARGETS.value, folder)


if __name__ == "__main__":
  app.run(main)
