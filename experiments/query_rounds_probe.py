r"""Which samples should the second half of the noisy histograms be about?

Question: the presets release the noisy vote histograms of 4,000 random samples of the
8,000-sample pool. Split into two rounds of 2,000 at the same sigma (so the same epsilon), the
second round can be chosen from public information: the pool and a first student trained on
the first round's released vote shares. Does a second round of the samples that student is
most (or least) sure about, or one balanced over the classes it predicts, teach more than a
random one?
Answer: no. With 50 teachers of 160 images at eps 10 (sigma 44.71, 2 x 2,000 histograms),
the samples the first student is least sure about gave 70.93 / 67.47 / 66.08% on the three
8,000-image runs against 67.58 / 67.45 / 67.23% for a random second round (mean 68.16 against
67.42%, one draw each); the surest ones 63.10% and a class-balanced round 65.96% (first run
only). In the pipeline (``queries.selection=least_confident``, ``first_round=2000``, with a
selector trained on the first round's shares, commit e668548; three seeds) least-confident
rounds gave 66.85% against 67.86% for random queries.
Feeds: RESULTS.md, DGD on a small private set, "Levers on the histogram release".

A development diagnostic, not a release: it reads the teachers' votes without noise. For each
strategy it draws round 1 (seed ``--seed``), trains the run's student on its noisy shares
(Brier), picks round 2 from the rest, draws its noise, trains a fresh student on both rounds
and prints its real test accuracy:

  random:    round 2 drawn at random (the presets' plan, in two rounds)
  confident: the samples whose largest predicted share is largest
  uncertain: ... smallest
  balanced:  the same number of samples for every class the first student predicts, at random

  python experiments/query_rounds_probe.py --workdir=workdirs/s8k50_h0 \
      --strategies=random,confident,uncertain,balanced --sigma=44.7114 --seed=0
"""
from __future__ import annotations

import os
import tempfile

from absl import app, flags
import jax
import numpy as np

from dgd_jax.plan import artefacts
from dgd_jax.plan import pool
from dgd_jax.plan import student_fit
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.training import ensemble
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
_STRATEGIES = flags.DEFINE_list("strategies", ["random", "confident", "uncertain", "balanced"],
                                "Round-2 selections.")
_SIGMA = flags.DEFINE_float("sigma", None, "The Gaussian noise of every histogram.")
_ROUND = flags.DEFINE_integer("round", 2000, "Histograms per round (two rounds).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the draws and the noise.")
flags.mark_flags_as_required(["workdir", "sigma"])


def second_round(strategy: str, probs: np.ndarray, rest: np.ndarray, k: int,
                 rng: np.random.Generator) -> np.ndarray:
  """k indices of ``rest`` (pool indices not yet asked) chosen by ``strategy`` from the first
  student's predicted distributions ``probs`` over the pool."""
  top = probs[rest].max(1)
  if strategy == "random":
    return rng.choice(rest, k, replace=False)
  if strategy == "confident":
    return rest[np.argsort(-top, kind="stable")[:k]]
  if strategy == "uncertain":
    return rest[np.argsort(top, kind="stable")[:k]]
  if strategy == "balanced":
    predicted = probs[rest].argmax(1)
    classes = probs.shape[1]
    chosen = []
    for c in range(classes):  # k / K per class, the shortfall filled at random
      members = rest[predicted == c]
      chosen.extend(rng.choice(members, min(len(members), k // classes), replace=False))
    left = np.setdiff1d(rest, chosen)
    chosen.extend(rng.choice(left, k - len(chosen), replace=False))
    return np.asarray(chosen)
  raise ValueError(f"unknown strategy {strategy!r}")


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  data, k = ctx.dataset, _ROUND.value
  x = pool.load(ctx)
  teachers, predict, _ = artefacts.load_teachers(ctx)
  votes = ensemble.vote_histograms(predict, teachers, x, data.num_classes)  # PRIVATE
  n = int(votes[0].sum())
  folder = tempfile.mkdtemp()

  def student(indices, noisy, name):
    rest = np.delete(x, indices, axis=0)
    model, rounds, _ = student_fit.train_student(
        ctx, (None, None), x[indices], student_fit.shares(noisy, n), rest, name,
        os.path.join(folder, name), brier=True)
    return model, rounds[-1]

  for strategy in _STRATEGIES.value:
    rng = np.random.default_rng(_SEED.value)
    first = np.sort(rng.choice(len(x), k, replace=False))
    noisy1 = votes[first] + _SIGMA.value * rng.standard_normal((k, data.num_classes))
    model, params = student(first, noisy1, f"{strategy}_1")
    one = train.accuracy(model.apply, params, data.x_test, data.y_test)
    probs = np.asarray(jax.nn.softmax(train.logits(model.apply, params, x)))
    second = second_round(strategy, probs, np.setdiff1d(np.arange(len(x)), first), k, rng)
    noisy2 = votes[second] + _SIGMA.value * rng.standard_normal((k, data.num_classes))
    both = np.concatenate([first, second])
    model, params = student(both, np.concatenate([noisy1, noisy2]), f"{strategy}_2")
    top = votes[second].max(1) / n
    both_accuracy = train.accuracy(model.apply, params, data.x_test, data.y_test)
    print(f"{strategy:9s} round 1 {one:.2%}, both rounds {both_accuracy:.2%}, "
          f"round 2's mean top vote share {top.mean():.3f}", flush=True)


if __name__ == "__main__":
  app.run(main)
