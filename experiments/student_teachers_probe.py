r"""Do teachers that start from a first student agree more, and teach a second student more?

Question: with 50 teachers of 160 images (8,000 private images) the histograms' noise (sigma
44.71 for 4,000 at eps 10) is as large as the votes it hides: the teachers' top vote share on
the pool is ~0.55. Split the budget in two rounds. A first student S1 learns the first
round's noisy vote shares (a release: post-processing of it is public). Each teacher of the
second round is S1 fine-tuned on its own shard only, so the votes keep their sensitivity
(teacher i reads shard i and S1), and the two Gaussian releases compose (adaptive
composition: Q1 / sigma1^2 + Q2 / sigma2^2 = Q / sigma^2 keeps the epsilon of Q histograms
at sigma). Do teachers from a shared, already useful initialisation agree more on the pool,
and does a second student learn more from their histograms than from the run's?
Answer: they agree more (top vote share 0.62-0.71 against 0.51-0.56) but teach no more. One
draw each: 69.37% (fine-tuned whole) and 69.92% (last layer) against 65.45% for one student
on the run's plan, then 61.35% against 60.73% on another run; in the pipeline
(``queries.refits=1``, three seeds) 70.66% against 70.82%. The refit teachers' plurality on
real images is 1.5 points below the run's teachers': the agreement is the first student's
opinion echoed, not information about the private data.
Feeds: RESULTS.md, "Teachers refit from a first student (`queries.refits`, off)".

A development diagnostic, not a release: it reads the teachers' votes without noise to print
their agreement. For the split ``--split`` (the share f of the budget spent in round 1:
sigma1 = sigma / sqrt(f), sigma2 = sigma / sqrt(1 - f)) it prints, for one draw:
  the run's plan (one round of Q histograms at sigma), one student;
  round 1 (Q histograms at sigma1), its student S1;
  the second-round teachers (mean and plurality accuracy on real test images, top vote share
  on the pool) for each of ``--modes`` (full: every layer fine-tuned; head: only the last);
  round 2 (Q fresh random histograms at sigma2 from those teachers), a fresh student on round 2
  alone and one on both rounds' shares.

  python experiments/student_teachers_probe.py --workdir=workdirs/ens_8k_s1/ensemble=5 \
      --split=0.5 --modes=full,head --steps=300 --seed=0

With ``--pipeline`` it instead evaluates the teachers a run with ``queries.refits=1`` asked
in its second round: the queries stage's student (its saved checkpoint) on the real test set,
and its heads refit as the stage refits them (``ensemble.refit_heads``, the teachers' fit
settings and key), mean and plurality accuracy and top vote share on the real test set:

  python experiments/student_teachers_probe.py --pipeline \
      --workdir=workdirs/rf_8k_s1/refits=1_num_queries=8000
"""
from __future__ import annotations

import json
import os
import tempfile

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
from dgd_jax.stages import queries as queries_stage
from dgd_jax.training import ensemble
from dgd_jax.training import placement
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run (histogram release).")
_SPLIT = flags.DEFINE_float("split", 0.5, "Share of the budget (Q / sigma^2) spent in round 1.")
_MODES = flags.DEFINE_list("modes", ["full", "head"], "Second-round teachers: full, head.")
_STEPS = flags.DEFINE_integer("steps", 300, "Fine-tuning steps of each second-round teacher.")
_LR = flags.DEFINE_float("lr", 1e-3, "Their Adam learning rate (decaying linearly to 0).")
_BATCH = flags.DEFINE_integer("batch", 32, "Their minibatch.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the draws and the noise.")
_BASELINE = flags.DEFINE_bool("baseline", True, "Also train one student on the run's plan.")
_PIPELINE = flags.DEFINE_bool("pipeline", False, "Evaluate a queries.refits=1 run's teachers.")
flags.mark_flags_as_required(["workdir"])


def fine_tune(model, params, shards_x, shards_y, steps, lr, batch, mode, key, chunk=10):
  """n copies of ``params`` each fine-tuned on its own shard [n, m, ...] (cross-entropy,
  Adam); ``mode='head'`` trains the last layer only."""
  schedule = optax.linear_schedule(lr, 0.0, steps)
  tx = optax.adam(schedule)
  if mode == "head":
    labels = jax.tree_util.tree_map_with_path(
        lambda path, _: "train" if any(getattr(p, "key", None) == "head" for p in path)
        else "freeze", params)
    tx = optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()}, labels)
  n = shards_x.shape[0]
  state = train.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
  states = jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + jnp.shape(a)), state)
  xs, ys = jnp.asarray(shards_x), jnp.asarray(shards_y)

  @jax.jit
  def step(states, key):
    def one(args):
      s, x, y, k = args
      rows = jax.random.randint(k, (batch,), 0, x.shape[0])
      return train.update(s, x[rows], y[rows])[0]
    return ensemble.lift(one, chunk)((states, xs, ys, jax.random.split(key, n)))

  for i in range(steps):
    states = step(states, jax.random.fold_in(key, i))
  return states.params


def pipeline_refit(ctx) -> dict:
  """The second-round teachers of a run with ``queries.refits=1``, rebuilt from its saved
  student by ``stages.queries.refit_teachers``, on the real test set."""
  config, data = ctx.config, ctx.dataset
  model = artefacts.classifier(config, data.num_classes, "student", lowering="conv")
  k = student_fit.members(config, ctx.results["queries"]["noise_scale"])
  suffix = artefacts.student_fits(k, config.student.self_training)[-1]
  folder = os.path.join(ctx.workdir.path, "queries", "checkpoints", "refit_student_1")
  params = train.load_params(os.path.abspath(folder + suffix), jax.eval_shape(
      model.init, jax.random.key(0), np.zeros((1,) + data.image_shape, np.float32)))
  heads, features = queries_stage.refit_teachers(ctx, model, params, 1)
  labels = ensemble.teacher_predictions(ensemble.head_labels, heads, features(data.x_test))
  votes = np.asarray(ensemble.histogram(jnp.asarray(labels), data.num_classes))
  return dict(student=round(train.accuracy(model.apply, params, data.x_test, data.y_test), 4),
              teacher_mean=round(float((labels == data.y_test).mean()), 4),
              plurality=round(float((votes.argmax(1) == data.y_test).mean()), 4),
              top_share_test=round(float(votes.max(1).mean() / len(labels)), 3))


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  if _PIPELINE.value:
    print(json.dumps(pipeline_refit(ctx)), flush=True)
    return
  config, data = ctx.config, ctx.dataset
  k = data.num_classes
  x = pool.load(ctx)
  q = ctx.results["queries"]["num_queries"]
  sigma = ctx.results["queries"]["noise_scale"]
  f = _SPLIT.value
  sigma1, sigma2 = sigma / np.sqrt(f), sigma / np.sqrt(1 - f)
  teachers, predict, _ = artefacts.load_teachers(ctx)
  votes = ensemble.vote_histograms(predict, teachers, x, k)  # PRIVATE
  n = int(votes[0].sum())
  folder = tempfile.mkdtemp()
  rng = np.random.default_rng(_SEED.value)
  acc = lambda m, p: round(train.accuracy(m.apply, p, data.x_test, data.y_test), 4)
  out = dict(sigma=sigma, sigma1=round(sigma1, 2), sigma2=round(sigma2, 2), queries=q,
             run_top_share=round(float(votes.max(1).mean() / n), 3))

  def student(indices, noisy, name):
    model, rounds, _ = student_fit.train_student(
        ctx, (None, None), x[indices], student_fit.shares(noisy, n),
        np.delete(x, indices, axis=0), name, os.path.join(folder, name), brier=True)
    return model, rounds[-1]

  first = np.sort(rng.choice(len(x), q, replace=False))
  noise = rng.standard_normal((q, k))
  if _BASELINE.value:
    model, params = student(first, votes[first] + sigma * noise, "run_plan")
    out["run_plan_student"] = acc(model, params)
  noisy1 = votes[first] + sigma1 * noise
  model, s1 = student(first, noisy1, "round1")
  out["round1_student"] = acc(model, s1)
  print(json.dumps(out), flush=True)
  shards = config_shards(config, data.x_train, data.y_train)
  size = min(map(len, shards))
  sx = data.x_train[np.stack([s[:size] for s in shards])]
  sy = data.y_train[np.stack([s[:size] for s in shards])]
  tmodel = artefacts.classifier(config, k, "student")  # im2col lowering: vmapped
  second = np.sort(rng.choice(len(x), q, replace=False))
  noise2 = rng.standard_normal((q, k))
  x_eval, y_eval = data.x_test[:2000], data.y_test[:2000]
  for mode in _MODES.value:
    params = fine_tune(tmodel, s1, sx, sy, _STEPS.value, _LR.value, _BATCH.value, mode,
                       jax.random.fold_in(ctx.key("teachers"), 7))
    predict = ensemble.make_predict_fn(placement.teacher_mesh(len(shards)), tmodel.apply, 10)
    votes2 = ensemble.vote_histograms(predict, params, x, k)
    labels = ensemble.teacher_predictions(predict, params, x_eval)
    test_votes = np.asarray(ensemble.histogram(jnp.asarray(labels), k))
    row = dict(mode=mode, steps=_STEPS.value,
               teacher_mean=round(float((labels == y_eval).mean()), 4),
               plurality=round(float((test_votes.argmax(1) == y_eval).mean()), 4),
               top_share=round(float(votes2.max(1).mean() / n), 3))
    noisy2 = votes2[second] + sigma2 * noise2
    model, p2 = student(second, noisy2, f"round2_{mode}")
    row["round2_student"] = acc(model, p2)
    both = np.concatenate([first, second])
    model, pb = student(both, np.concatenate([noisy1, noisy2]), f"both_{mode}")
    row["both_rounds_student"] = acc(model, pb)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
  app.run(main)
