"""Soft-label probe on a finished DGD workdir (development diagnostic for issue 16, not a
release: it reads the teachers' votes without noise and prints nothing a run publishes).

GNMax's data-independent guarantee is that of the Gaussian mechanism on the whole vote
histogram (L2 sensitivity sqrt 2; ``privacy.pate2018.gnmax_event``): the noisy argmax is
post-processing of n + N(0, sigma^2 I). Releasing the noisy histogram itself therefore costs
the same data-independent epsilon (not PATE 2018's data-dependent one, which covers only the
argmax). This probe asks whether a student learns more from it.

For each plan 'eps:Q[:sigma]' (sigma omitted: the least that fits eps with Q queries, `rdp`,
delta 1e-5) it draws Q of the workdir's synthetic samples and the noise (seed ``--seed``),
then trains the quick preset's student (width 0.5, mixup 0.4, 500 Adam steps of 128) on
targets made from the noisy histogram h~ and prints its real test accuracy, then after each
of ``--self_training`` rounds:

  hard:    one-hot argmax h~ (GNMax's label, what DGD releases)
  soft:    softmax(h~ / (sigma / 2))
  clip:    max(h~, 0), normalised
  clean:   the noiseless vote shares n / sum n (no privacy: the ceiling)

  python launch/histogram_probe.py --workdir=workdirs/quickstart_cpu --plans='1:48:40;1:4000' \
      --targets=hard,soft,clean
"""
from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import artefacts, ensemble, methods, privacy, progress, train
from dgd_jax.configs import dgd as dgd_config
from dgd_jax.core import Context
from dgd_jax.data import load_private
from dgd_jax.stages import student as student_stage
from dgd_jax.workdir import Workdir, load_array

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD workdir (quick preset).")
_PLANS = flags.DEFINE_string("plans", "1:48:40;1:4000", "'eps:Q[:sigma]' items, ';'-separated.")
_TARGETS = flags.DEFINE_list("targets", ["hard", "soft", "clean"], "hard, soft, clip, clean.")
_SELF = flags.DEFINE_integer("self_training", 0, "Self-training rounds after each student.")
_SEED = flags.DEFINE_integer("seed", 1, "Seed of the query draw and of the noise.")
flags.mark_flag_as_required("workdir")


def targets(kind: str, noisy: np.ndarray, votes: np.ndarray, sigma: float) -> np.ndarray:
  if kind == "hard":
    return np.eye(votes.shape[1])[noisy.argmax(1)]
  if kind == "soft":
    z = noisy / (sigma / 2)
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
  if kind == "clip":
    c = np.maximum(noisy, 0)
    return c / np.maximum(c.sum(1, keepdims=True), 1e-9)
  if kind == "clean":
    return votes / votes.sum(1, keepdims=True)
  raise ValueError(f"unknown target kind {kind!r}")


def main(argv):
  del argv
  progress.setup_cli_logging()
  wd = _WORKDIR.value
  config = dgd_config.get_config("fashion_mnist,cpu")
  data = load_private(config)
  x = load_array(os.path.join(wd, "generator", "synthetic.npy"))
  workdir = Workdir(wd, writer=False)
  stage = workdir.stage("teachers", config, methods.config_keys("teachers", config))
  params, predict, _ = artefacts.load_teachers(Context(config, workdir, stage, lambda: data, {}))
  votes_all = ensemble.vote_histograms(predict, params, x, data.num_classes)  # PRIVATE
  model = artefacts.classifier(config, data.num_classes, "student", lowering="conv")
  cfg = artefacts.fit_config(config, "student")

  def fit(xs, ts):
    state = train.create_train_state(model, train.optimizer(cfg), jax.random.key(7),
                                     xs.shape[1:])
    step = student_stage.make_step(model, None, None, jnp.asarray(xs), jnp.asarray(ts),
                                   jnp.asarray(xs[:1]), config.student)
    return train.run_steps(state, step, jax.random.key(8), cfg, tempfile.mkdtemp(),
                           "probe_student").params

  def accuracy(p):
    return train.accuracy(model.apply, p, data.x_test, data.y_test)

  for plan in _PLANS.value.split(";"):
    eps, q, *rest = plan.split(":")
    eps, q = float(eps), int(q)
    sigma = float(rest[0]) if rest else privacy.min_noise(privacy.GNMaxQueries(1.0, q), eps,
                                                          1e-5, "rdp")
    rng = np.random.default_rng(_SEED.value)
    idx = np.sort(rng.choice(len(x), q, replace=False))
    votes = votes_all[idx].astype(np.float64)
    noisy = votes + sigma * rng.standard_normal(votes.shape)  # GNMax's Gaussian release
    agree = np.mean(noisy.argmax(1) == votes.argmax(1))
    print(f"eps {eps:g}, {q} queries, sigma {sigma:.2f}: noisy argmax = plurality {agree:.3f}",
          flush=True)
    for kind in _TARGETS.value:
      t0 = time.time()
      p = fit(x[idx], targets(kind, noisy, votes, sigma).astype(np.float32))
      accs = [accuracy(p)]
      for _ in range(_SELF.value):  # post-processing: the last student's distributions
        p = fit(x, np.asarray(jax.nn.softmax(train.logits(model.apply, p, x))))
        accs.append(accuracy(p))
      print(f"  {kind:6s} " + " -> ".join(f"{a:.2%}" for a in accs)
            + f"  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
  app.run(main)
