r"""Does a student learn more from GNMax's noisy vote histogram than from its argmax?

Question: GNMax's data-independent epsilon is that of the Gaussian mechanism on the whole vote
histogram (L2 sensitivity sqrt 2; ``privacy.pate2018.gnmax_event``), so releasing the noisy
histogram h~ = n + N(0, sigma^2 I) costs no more than its argmax. Do targets made from h~
teach the student more than GNMax's label?
Answer: yes, as the unbiased vote shares h~ / n under the Brier score (``--loss=brier``), over
many queries. With 50 teachers of 160 images at eps 10, 2,000 such histograms teach 66.2% and
4,000 65.9% (three draws each) against 47.4% for 114 GNMax labels and 52.9% for their softmax
targets; with the quick preset's 250 teachers, 4,000 gave 78.2% at eps 10 and 65.9% at eps 1
(one draw). Cross-entropy targets made from h~ (soft, clip, simplex) were not measurably better
than the argmax (eps 10, 250 teachers: 76.56% hard, 75.80% soft; eps 1 soft 45.8% against
39.3% over three draws, each moving by 10 points). Soft votes (``--vote_temperature``: each
teacher adds its softmax, the same sensitivity) were not better: 65.05% (T 1) and 65.69%
(T 0.5) against 66.11% for one-hot votes (4,000 histograms at sigma 47.37, one draw).
On the standard preset's pool the teachers' noiseless vote shares teach 80.84% (4,000 samples)
and 80.89% (all 8,000), the baseline's own softmax only 77.04% / 76.12% (``baseline``); pools
inverted from other baselines or targets added to it (``--pools``) raise the ceiling by about
a third of a point (81.19-81.25% on 16,000-24,000 samples); 1,500 student steps instead of 500
raise the ceiling to 82.16% (8,000) and 82.27% (24,000), but on the noisy histograms that fit
eps 10 they reach 80.08% (8,000 at sigma 63.23) and 81.13% (24,000 at sigma 109.52). No
regulariser of that student wins back what the noise costs: mixup 1.0 instead of 0.4
(``--student=mixup=1.0``) reaches 80.45% against 80.01% (means of three noise draws, which
alone move one student by 1.6 points); 3,000 steps, mixup 2.0, augmentation, targets
projected onto the simplex and targets shrunk towards held-out fold students' predictions
(``--crossfit``: 80.12%) do no better.
Feeds: RESULTS.md, DGD, "Label propagation, self-training, the noisy histogram", and
"The release: noisy vote histograms instead of GNMax labels (the CPU presets' plan now)" and
"The presets".

A development diagnostic, not a release: it reads the teachers' votes without noise and prints
nothing a run publishes. For each plan 'eps:Q[:sigma]' (sigma omitted: the least that fits eps
with Q queries under `rdp`, delta 1e-5) it draws Q of the run's pool samples and the noise
(seed ``--seed``), trains the run's student (``Run.train_student``, with
``--self_training`` rounds after it) on targets made from h~, and prints the real test
accuracy of each round:

  hard:    one-hot argmax h~ (GNMax's label, what DGD releases)
  soft:    softmax(h~ / (sigma * temperature)), temperature 0.5 by default
  raw:     h~ / n, unclipped (an unbiased estimate of the vote shares: with --loss=brier,
           as the student stage learns a gaussian_histogram release)
  simplex: h~ projected onto the simplex scaled to the teacher count, normalised
  clip:    max(h~, 0), normalised
  clean:   the noiseless vote shares n / sum n (no privacy: the ceiling)
  baseline: the non-private baseline's softmax on the samples (no privacy, and not the
           teachers': what the pool itself can teach a student, a leak kept to this probe)
  own_class: the one count n_c of the class c each sample was inverted for (``Run.pool_classes``),
           plus N(0, sigma^2 / 2): L2 sensitivity 1 instead of sqrt 2, so the same epsilon as
           h~ at sigma; the targets are the student stage's (``class_count_targets``)

  python experiments/histogram_probe.py --workdir=workdirs/quickstart_cpu \
      --plans='1:48:40;1:4000' --targets=hard,soft,clean
  python experiments/histogram_probe.py --workdir=workdirs/s8k50_f2 \
      --plans='10:114:8;10:2000' --targets=raw --loss=brier --seed=0
"""
from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags, logging
import jax
import numpy as np

import dgd_jax
from dgd_jax import privacy
from dgd_jax.labelling import propagation
from dgd_jax.training import ensemble
from dgd_jax.training import student
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
_PLANS = flags.DEFINE_string("plans", "1:48:40;1:4000", "'eps:Q[:sigma]' items, ';'-separated.")
_TARGETS = flags.DEFINE_list("targets", ["hard", "soft", "clean"], "hard, soft, clip, clean.")
_SELF = flags.DEFINE_integer("self_training", 0, "Self-training rounds after each student.")
_STUDENT = flags.DEFINE_list("student", [], "Overrides of config.student, 'field=value'.")
_POOLS = flags.DEFINE_list(
    "pools", [], "Other finished runs whose synthetic pools are appended to --workdir's (the "
    "teachers and baseline stay --workdir's): does a union of pools teach more?")
_SEED = flags.DEFINE_integer("seed", 1, "Seed of the query draw and of the noise.")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.5, "soft: the softmax temperature / sigma.")
_PROPAGATION = flags.DEFINE_integer(
    "propagation", 0, "k > 0: spread the targets over the pool's k-NN graph "
    "(propagation.propagate) and train on the whole pool, the queried samples keeping theirs.")
_PROPAGATED = flags.DEFINE_enum("propagated", "hard", ["hard", "soft"],
                                "The other samples' targets: the likeliest class, or the "
                                "propagated distribution.")
_LOSS = flags.DEFINE_enum("loss", "ce", ["ce", "brier"],
                          "The labelled loss: cross-entropy (Eq. 5), or the Brier score "
                          "(student.brier_score), bounded for negative targets.")
_OWN = flags.DEFINE_enum("own", "released", ["released", "propagated"],
                         "With --propagation, the queried samples' targets: their own, or "
                         "those propagated (as the others').")
_VOTES = flags.DEFINE_float(
    "vote_temperature", 0.0, "0: each teacher votes its argmax (one-hot); T > 0: its softmax "
    "at temperature T, a point of the simplex like a one-hot vote, so the histogram's L2 "
    "sensitivity stays sqrt 2.")
_CROSSFIT = flags.DEFINE_integer(
    "crossfit", 0, "K > 1: before the student, K fold students each learn the other folds' "
    "targets and predict their own fold (p, free of that fold's noise); each target t is "
    "shrunk towards p, p + w (t - p), w = tau^2 / (tau^2 + s^2) per class, s = sigma / n the "
    "release's known noise and tau^2 = mean (t - p)^2 - s^2 the folds' own error "
    "(``shrink``; post-processing of the release).")
_FOLD_STEPS = flags.DEFINE_integer("fold_steps", 0, "The fold students' steps; 0: the student's.")
flags.mark_flag_as_required("workdir")


def shrink(t: np.ndarray, p: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
  """Linear empirical-Bayes shrinkage of unbiased noisy targets t = v + N(0, s^2) towards
  held-out predictions p: per class, the w minimising E (v - p - w (t - p))^2, where p is
  independent of t's noise, is tau^2 / (tau^2 + s^2) with tau^2 = E (v - p)^2 = E (t - p)^2
  - s^2. Returns the shrunk targets and w [K]."""
  tau2 = np.maximum(np.mean((t - p) ** 2, 0) - s ** 2, 1e-6)
  w = tau2 / (tau2 + s ** 2)
  return p + w * (t - p), w


def crossfit(run, x_s: np.ndarray, t: np.ndarray, x_u: np.ndarray, folds: int,
             folder: str, name: str) -> np.ndarray:
  """[Q, K] each labelled sample's prediction by a student that did not learn its target:
  ``folds`` students, each trained on the other folds' (x, t) with the student stage's fit."""
  fold = np.random.default_rng([_SEED.value, 2]).permutation(len(x_s)) % folds
  p = np.zeros_like(t)
  steps = run.config.student.num_steps  # the fold students' schedule, restored after them
  run.config.student.num_steps = _FOLD_STEPS.value or steps
  try:
    for f in range(folds):
      out = fold == f
      model, rounds = run.train_student(
          x_s[~out], t[~out], x_u, f"{name}_fold{f}",
          os.path.join(folder, f"{name}_fold{f}"), brier=_LOSS.value == "brier",
          key=f"crossfit{f}")
      p[out] = np.asarray(jax.nn.softmax(train.logits(model.apply, rounds[-1], x_s[out])))
  finally:
    run.config.student.num_steps = steps
  return p


def soft_votes(teachers: dgd_jax.Teachers, x: np.ndarray, temperature: float) -> np.ndarray:
  """[Q, K] sums over the teachers of softmax(logits / T) on x, the teachers mapped in the
  stage's chunks (``ensemble.lift``) and the queries ``ensemble.QUERY_CHUNK`` at a time
  (``ensemble.in_chunks``), as the votes are."""
  model = teachers.model
  fn = jax.jit(lambda p, xb: ensemble.lift(
      lambda q: jax.nn.softmax(model.apply(q, xb) / temperature), teachers.chunk)(p).sum(0))
  return ensemble.in_chunks(lambda xb: fn(teachers.params, xb), x, ensemble.QUERY_CHUNK,
                            axis=0).astype(np.float64)


def baseline_softmax(run: dgd_jax.Run, x: np.ndarray) -> np.ndarray:
  """[Q, K] the baseline's softmax on x (PRIVATE: the baseline saw every private image)."""
  model, params = run.classifier("baseline")
  return np.asarray(jax.nn.softmax(train.logits(model.apply, params, x)), np.float64)


def targets(kind: str, noisy: np.ndarray, votes: np.ndarray, sigma: float,
            classes: np.ndarray, rng: np.random.Generator, soft: np.ndarray) -> np.ndarray:
  if kind == "baseline":
    return soft
  if kind == "hard":
    return np.eye(votes.shape[1])[noisy.argmax(1)]
  if kind == "soft":
    z = noisy / (sigma * _TEMPERATURE.value)
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
  if kind == "clip":
    c = np.maximum(noisy, 0)
    return c / np.maximum(c.sum(1, keepdims=True), 1e-9)
  if kind == "simplex":  # Euclidean projection of h~ onto {v >= 0, sum v = n}, normalised
    n = votes.sum(1, keepdims=True)
    u = -np.sort(-noisy, 1)
    cum = (np.cumsum(u, 1) - n) / np.arange(1, u.shape[1] + 1)
    rho = np.sum(u > cum, 1, keepdims=True)  # the entries that stay positive
    v = np.maximum(noisy - np.take_along_axis(cum, rho - 1, 1), 0)
    return v / n
  n = int(round(votes[0].sum()))  # every teacher votes once
  if kind == "raw":  # h~ / n itself, negative entries kept: what the student stage learns
    return student.shares(noisy, n)
  if kind == "clean":
    return student.shares(votes, n)
  if kind == "own_class":  # n_c + N(0, (sigma / sqrt 2)^2) of each sample's inversion class c
    counts = votes[np.arange(len(votes)), classes]
    return student.class_count_targets(
        counts + sigma / np.sqrt(2) * rng.standard_normal(len(votes)), classes, n,
        votes.shape[1])
  raise ValueError(f"unknown target kind {kind!r}")


def main(argv):
  del argv
  logging.set_verbosity(logging.INFO)
  if _CROSSFIT.value > 1 and _TARGETS.value != ["raw"]:  # shrink knows raw shares' noise only
    raise app.UsageError("--crossfit shrinks the raw shares h~ / n: pass --targets=raw.")
  if _CROSSFIT.value > 1 and _PROPAGATION.value:  # propagated targets carry no known noise
    raise app.UsageError("--crossfit shrinks the queried samples' own shares: drop "
                         "--propagation.")
  run = dgd_jax.open_run(_WORKDIR.value, "student")
  config, data = run.config, run.data
  config.student.self_training = _SELF.value
  for item in _STUDENT.value:
    field, value = item.split("=")
    config.student[field] = type(config.student[field])(value)
  x = np.concatenate([run.pool()] + [dgd_jax.open_run(w).pool() for w in _POOLS.value])
  classes = (run.pool_classes(len(x))  # own_class: what each counts
             if "own_class" in _TARGETS.value else None)
  teachers = run.teachers()
  votes_all = (soft_votes(teachers, x, _VOTES.value) if _VOTES.value  # PRIVATE
               else run.votes(x))
  soft_all = baseline_softmax(run, x) if "baseline" in _TARGETS.value else None
  folder = tempfile.mkdtemp()

  for plan in _PLANS.value.split(";"):
    eps, q, *rest = plan.split(":")
    eps, q = float(eps), min(int(q), len(x))  # Q past the pool: every sample
    sigma = float(rest[0]) if rest else privacy.min_noise(privacy.GNMaxQueries(1.0, q), eps,
                                                          1e-5, "rdp")
    rng = np.random.default_rng(_SEED.value)
    idx = np.sort(rng.choice(len(x), q, replace=False))
    votes = votes_all[idx].astype(np.float64)
    noisy = votes + sigma * rng.standard_normal(votes.shape)  # GNMax's Gaussian release
    agree = np.mean(noisy.argmax(1) == votes.argmax(1))
    print(f"mean top share {np.mean(votes.max(1) / votes.sum(1)):.3f}", flush=True)
    print(f"eps {eps:g}, {q} queries, sigma {sigma:.2f}: noisy argmax = plurality {agree:.3f}",
          flush=True)
    for kind in _TARGETS.value:
      t0 = time.time()
      name = f"probe_{plan.replace(':', '_')}_{kind}"
      t = targets(kind, noisy, votes, sigma, None if classes is None else classes[idx],
                  np.random.default_rng([_SEED.value, 1]),
                  None if soft_all is None else soft_all[idx]).astype(np.float32)
      x_s, rest = x[idx], np.delete(x, idx, axis=0)
      if _PROPAGATION.value:  # queried samples first, as the student stage orders them
        x_s = np.concatenate([x_s, rest])
        p, _ = propagation.propagate(propagation.features(x_s), np.arange(q), t,
                                     data.num_classes, _PROPAGATION.value)
        if _PROPAGATED.value == "hard":
          p = np.eye(data.num_classes)[p.argmax(1)]
        else:  # raw targets can leave negative entries
          p = np.maximum(p, 0) / np.maximum(np.maximum(p, 0).sum(1, keepdims=True), 1e-12)
        t = (p if _OWN.value == "propagated" else np.concatenate([t, p[q:]])).astype(np.float32)
      if _CROSSFIT.value > 1:
        p = crossfit(run, x_s, t, rest, _CROSSFIT.value, folder, name)
        clean = targets("clean", noisy, votes, sigma, None, None, None)

        def mse(y):  # squared error to the noiseless vote shares, per sample
          return np.mean(np.sum((y - clean) ** 2, 1))

        print(f"  folds: MSE to the noiseless shares {mse(p):.4f}, agreement with the "
              f"plurality {np.mean(p.argmax(1) == votes.argmax(1)):.3f}", flush=True)
        raw = mse(t)
        t, w = shrink(t, p, sigma / votes[0].sum())
        t = t.astype(np.float32)
        print(f"  shrunk: w {np.round(w, 3)}, MSE {mse(t):.4f} (raw {raw:.4f})", flush=True)
      model, rounds = run.train_student(x_s, t, rest, name, os.path.join(folder, name),
                                        brier=_LOSS.value == "brier")
      accuracies = [train.accuracy(model.apply, p, data.x_test, data.y_test) for p in rounds]
      print(f"  {kind:6s} " + " -> ".join(f"{a:.2%}" for a in accuracies)
            + f"  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
  app.run(main)
