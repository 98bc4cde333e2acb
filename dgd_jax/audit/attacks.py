"""Privacy audit: empirical attacks on the models a run produced.

* Membership inference by loss threshold (Yeom et al. 2018): the score of an example is
  minus the model's cross-entropy on it; members (training examples) tend to score higher.
  ``membership`` draws balanced splits of members and non-members (held-out examples no
  model trained on) and gives the attack's ROC AUC and its TPR at 1% FPR per split.
  It also turns the scores into an empirical lower bound on epsilon (jax-privacy's
  ``auditing.CanaryScoreAuditor``, Clopper-Pearson intervals on the attack's TPR and FPR at
  its best threshold, Jagielski et al. 2020): with probability at least 1 - SIGNIFICANCE no
  mechanism with a smaller epsilon (at the run's delta) lets this attack do as well.
* Model inversion (Fredrikson et al. 2015; DGD Sec. IV-C, Fig. 9): gradient ascent on
  log p(target | x) over the input, either through a generator's latent space (the
  data-free generator as the image prior) or over pixels with a total-variation prior.
  ``similarity`` compares each reconstruction with the private class means.

The attacks are evaluations by the data owner: they read the private training set.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats
from jax_privacy import auditing

from dgd_jax.synthesis.generative import total_variation
from dgd_jax.training import train

SIGNIFICANCE = 0.05  # of the epsilon lower bound, over all of a model's splits (Bonferroni)


def auc(members: np.ndarray, nonmembers: np.ndarray) -> float:
  """ROC AUC of "score > threshold means member": P(member score > non-member score), ties
  counting one half (the Mann-Whitney U statistic over the two sample sizes)."""
  ranks = scipy.stats.rankdata(np.concatenate([members, nonmembers]))  # ties: mean rank
  m, n = len(members), len(nonmembers)
  return float((ranks[:m].sum() - m * (m + 1) / 2) / (m * n))


def tpr_at_fpr(members: np.ndarray, nonmembers: np.ndarray, fpr: float = 0.01) -> float:
  """The fraction of members scoring above the threshold that at most ``fpr`` of the
  non-members exceed (the strictest threshold when ``fpr * n`` < 1)."""
  threshold = np.quantile(nonmembers, 1.0 - fpr, method="higher")
  return float(np.mean(members > threshold))


def loss_scores(apply_fn: Callable, params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Minus the cross-entropy of each example under the model (the attack's score)."""
  return -np.asarray(optax.softmax_cross_entropy_with_integer_labels(
      train.logits(apply_fn, params, x), y))


def epsilon_lower_bound(members: np.ndarray, nonmembers: np.ndarray, significance: float,
                        delta: float) -> float:
  """jax-privacy's Clopper-Pearson lower bound on epsilon at ``delta`` from one attack's
  member and non-member scores (higher = member), holding with 1 - ``significance``."""
  return float(auditing.CanaryScoreAuditor(members, nonmembers).epsilon_clopper_pearson(
      significance, delta=delta))


def membership(scores: Callable[[int], tuple[np.ndarray, np.ndarray]], splits: int,
               examples: int, seed: int, delta: float = 1e-5) -> dict:
  """The attack over ``splits`` balanced splits: ``scores(r)`` gives split r's (member,
  non-member) scores (e.g. a different teacher per split); up to ``examples`` of each are
  drawn without replacement, as many of one as of the other. Returns the mean AUC and TPR
  at 1% FPR, the 2.5-97.5 percentile range of the AUC over the splits, and the largest
  epsilon lower bound of the splits, each at SIGNIFICANCE / splits (so the largest holds at
  SIGNIFICANCE)."""
  rng = np.random.default_rng(seed)
  aucs, tprs, bounds = [], [], []
  for r in range(splits):
    members, nonmembers = scores(r)
    k = min(examples, len(members), len(nonmembers))
    m = rng.choice(members, k, replace=False)
    n = rng.choice(nonmembers, k, replace=False)
    aucs.append(auc(m, n))
    tprs.append(tpr_at_fpr(m, n))
    bounds.append(epsilon_lower_bound(m, n, SIGNIFICANCE / splits, delta))
  return {"auc": float(np.mean(aucs)),
          "auc_interval": [float(np.percentile(aucs, 2.5)), float(np.percentile(aucs, 97.5))],
          "auc_per_split": aucs, "tpr_at_1pct_fpr": float(np.mean(tprs)),
          "epsilon_lower_bound": max(bounds), "epsilon_lower_bound_significance": SIGNIFICANCE,
          "delta": delta, "splits": splits, "examples_per_side": k}


def invert_classes(apply_fn: Callable, params, targets: Sequence[int], shape: tuple[int, ...],
                   key: jax.Array, steps: int, batch: int, decode: Callable | None = None,
                   latent_dim: int = 0, tv_weight: float = 0.05, learning_rate: float = 0.05
                   ) -> np.ndarray:
  """For each target class k, ``batch`` inputs maximising log p(k | x) - prior (restarts
  from ``fold_in(key, k)``): with ``decode`` (z -> images), over latents z with an N(0, I)
  penalty 0.5 ||z||^2 / dim; else over pixels x = tanh(u) with ``tv_weight`` * total
  variation. All targets in one jitted program (``inversion_program``); returns images
  [len(targets), batch, *shape]."""
  targets = jnp.asarray(targets)
  starts = jax.vmap(lambda k: inversion_start(jax.random.fold_in(key, k), shape, batch,
                                              decode is not None, latent_dim))(targets)
  run = inversion_program(apply_fn, steps, decode, tv_weight, learning_rate)
  return np.asarray(jax.jit(run)(params, targets, starts))


def inversion_start(key: jax.Array, shape: tuple[int, ...], batch: int, latent: bool,
                    latent_dim: int = 0) -> jnp.ndarray:
  """One target's starting point: latents N(0, I) [batch, latent_dim] for a generator prior,
  else small pixel logits [batch, *shape]."""
  if latent:
    return jax.random.normal(key, (batch, latent_dim))
  return 0.1 * jax.random.normal(key, (batch,) + tuple(shape))


def inversion_program(apply_fn: Callable, steps: int, decode: Callable | None = None,
                      tv_weight: float = 0.05, learning_rate: float = 0.05) -> Callable:
  """``run(params, targets [T], starts [T, ...]) -> images [T, batch, ...]``: ``steps`` Adam
  steps of ``invert_classes``' objective for every target at once (vmapped)."""
  if decode is not None:
    to_image = decode
    prior = lambda z: 0.5 * jnp.mean(z ** 2)
  else:
    to_image = jnp.tanh
    prior = lambda u: tv_weight * total_variation(jnp.tanh(u))
  tx = optax.adam(learning_rate)

  def run(params, targets, starts):
    def one(target, v):
      def loss(v):
        logp = jax.nn.log_softmax(apply_fn(params, to_image(v)))[:, target]
        return -logp.mean() + prior(v)

      def body(carry, _):
        v, opt = carry
        updates, opt = tx.update(jax.grad(loss)(v), opt)
        return (optax.apply_updates(v, updates), opt), None
      (v, _), _ = jax.lax.scan(body, (v, tx.init(v)), None, length=steps)
      return to_image(v)
    return jax.vmap(one)(targets, starts)
  return run


def similarity(reconstructions: np.ndarray, class_means: np.ndarray) -> dict:
  """Pearson correlation of each class's mean reconstruction [K, ...] with every private
  class mean [K, ...]: the matching class's correlation (mean over classes) and how many
  reconstructions are closest to their own class's mean."""
  flat = lambda a: a.reshape(len(a), -1)
  r = flat(reconstructions) - flat(reconstructions).mean(1, keepdims=True)
  c = flat(class_means) - flat(class_means).mean(1, keepdims=True)
  corr = (r / np.linalg.norm(r, axis=1, keepdims=True)) @ (
      c / np.linalg.norm(c, axis=1, keepdims=True)).T  # [K reconstructions, K means]
  return {"correlation_with_own_class_mean": float(np.mean(np.diag(corr))),
          "correlation_per_class": [float(v) for v in np.diag(corr)],
          "classes_identified": int(np.sum(corr.argmax(1) == np.arange(len(corr)))),
          "num_classes": len(corr)}
