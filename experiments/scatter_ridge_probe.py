r"""Can a linear student on data-independent features average the histogram noise better?

Question: the CNN student learns the noisy vote shares h~ / n of the released histograms; a
ridge regression on fixed features averages zero-mean noise with a known bias-variance
trade-off, and its ridge can be chosen from the release alone (cross-validation on the noisy
targets estimates the clean error up to the noise variance). Do ScatterNet features (no
training, nothing private) of the synthetic samples serve as that student?
Answer: no. On the 8,000-image, 50-teacher run 0 (4,000 histograms at sigma 44.71, eps 10)
the ridge on the pool's 64 / 256 / 1024 leading principal components of ScatterNet
coefficients reaches 46.7 / 42.7 / 29.3% on real test images, and 59.6 / 64.5 / 66.5% on the
noiseless shares, where the run's CNN student reaches 70.5% and 77.4%: the features of the
synthetic samples do not transfer to real images.
Feeds: RESULTS.md, DGD on a small private set, "Levers on the histogram release".

A development diagnostic, not a release: it reads the teachers' votes without noise.

  python experiments/scatter_ridge_probe.py --workdir=workdirs/s8k50_h0 --sigma=44.7114
"""
from __future__ import annotations

from absl import app, flags
import numpy as np

from dgd_jax.labels import propagation
from dgd_jax.models import scattering
from dgd_jax.plan import artefacts
from dgd_jax.plan import pool
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.training import ensemble

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
_SIGMA = flags.DEFINE_float("sigma", None, "The Gaussian noise of every histogram.")
_QUERIES = flags.DEFINE_integer("queries", 4000, "Histograms released.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the query draw and of the noise.")
_DIMS = flags.DEFINE_list("dims", ["64", "256", "1024"], "Principal components kept.")
_RIDGES = (1e1, 1e2, 1e3, 1e4, 3e4, 1e5, 3e5)
flags.mark_flags_as_required(["workdir", "sigma"])


def coefficients(images: np.ndarray, chunk: int = 2000) -> np.ndarray:
  return np.concatenate([np.asarray(scattering.features(images[i:i + chunk], 2, 8),
                                    np.float64).reshape(len(images[i:i + chunk]), -1)
                         for i in range(0, len(images), chunk)])


def ridge(a: np.ndarray, t: np.ndarray, lam: float) -> np.ndarray:
  return np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ t)


def cross_validated(a: np.ndarray, t: np.ndarray, folds: int = 5) -> float:
  """The ridge of ``_RIDGES`` whose held-out squared error on the targets ``t`` is least."""
  fold = np.arange(len(a)) % folds

  def error(lam):
    return sum(np.sum((a[fold == k] @ ridge(a[fold != k], t[fold != k], lam)
                       - t[fold == k]) ** 2) for k in range(folds))
  return min(_RIDGES, key=error)


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  data = ctx.dataset
  x = pool.load(ctx)
  teachers, predict, _ = artefacts.load_teachers(ctx)
  votes_all = ensemble.vote_histograms(predict, teachers, x, data.num_classes)  # PRIVATE
  n = int(votes_all[0].sum())
  rng = np.random.default_rng(_SEED.value)
  idx = np.sort(rng.choice(len(x), _QUERIES.value, replace=False))
  votes = votes_all[idx].astype(np.float64)
  noisy = votes + _SIGMA.value * rng.standard_normal(votes.shape)
  f_pool, f_test = coefficients(x), coefficients(data.x_test)
  mean = f_pool.mean(0)
  f_pool, f_test = f_pool - mean, f_test - mean
  for d in map(int, _DIMS.value):  # the pool's own statistics, unit variance per component
    w = propagation.principal_axes(f_pool, d) * np.sqrt(len(f_pool))
    z_pool, z_test = (np.c_[f @ w, np.ones(len(f))] for f in (f_pool, f_test))
    for name, t in (("noisy", noisy / n), ("noiseless", votes / n)):
      lam = cross_validated(z_pool[idx], t)
      acc = np.mean((z_test @ ridge(z_pool[idx], t, lam)).argmax(1) == data.y_test)
      print(f"{d} components, {name} shares: ridge {lam:g}, real test {acc:.2%}", flush=True)


if __name__ == "__main__":
  app.run(main)
