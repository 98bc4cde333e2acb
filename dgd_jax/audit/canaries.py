"""One-run privacy audit with canaries (Steinke, Nasr and Jagielski 2023, "Privacy auditing
with one (1) training run"; Mahloujifar et al. 2024 for its f-DP variant).

m canaries, each included in the private set with probability 1/2 (``inclusion``, drawn from
the audit's own secret generator), one run of the mechanism, one score per canary from what
the run releases (higher: more likely included). A guesser that calls the top-scored canaries
"in" and is right too often refutes every (epsilon, delta) below a bound:
``one_run_bound`` is jax-privacy's ``auditing.CanaryScoreAuditor.epsilon_one_run`` and
``epsilon_one_run_fdp`` over all thresholds (Bonferroni), each holding with probability
1 - significance. The bound compares with the run's claim under add/remove-one neighbours:
including or not including a canary adds or removes one example.

DP-SGD's canaries are gradient (Dirac) canaries: canary i, when its slot is Poisson-sampled
into a step's batch, contributes the clipped gradient C e_i on a coordinate of its own that no
model parameter uses, so that coordinate of every step's released noisy sum is
C b_t + N(0, sigma^2 C^2), b_t ~ Bernoulli(q) for an included canary and 0 otherwise. The
score is the Neyman-Pearson statistic of the whole sequence, the sum over steps of the
subsampled Gaussian's log-likelihood ratio (``dirac_llr``): the white-box audit of every
noisy step the accountant composes.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax_privacy import auditing

SIGNIFICANCE = 0.05  # the bound holds with probability 1 - SIGNIFICANCE


def inclusion(num_canaries: int, rng: np.random.Generator) -> np.ndarray:
  """Which canaries are in the private set: independent fair coins (bool [m])."""
  return rng.random(num_canaries) < 0.5


def dirac_llr(z: jnp.ndarray, sampling_probability: float, noise_multiplier: float
              ) -> jnp.ndarray:
  """log [(1 - q) N(z; 0, s^2) + q N(z; 1, s^2)] / N(z; 0, s^2) of one step's noisy canary
  coordinates ``z`` in units of the clip norm C (s the noise multiplier): the log-likelihood
  ratio of "included" against "not included" for one Poisson-sampled Gaussian step."""
  q, s2 = sampling_probability, noise_multiplier ** 2
  return jnp.logaddexp(math.log1p(-q), math.log(q) + (2.0 * z - 1.0) / (2.0 * s2))


def simulated_dirac_scores(included: np.ndarray, steps: int, sampling_probability: float,
                           noise_multiplier: float, rng: np.random.Generator) -> np.ndarray:
  """The Dirac canaries' scores the exact mechanism gives (public randomness ``rng``): per
  step, z = b + N(0, s^2) with b ~ Bernoulli(q) for an included canary, 0 otherwise, scored
  by ``dirac_llr``. What a correct implementation's audit should reach."""
  scores = np.zeros(len(included))
  for _ in range(steps):
    sampled = included & (rng.random(len(included)) < sampling_probability)
    z = sampled + rng.normal(0.0, noise_multiplier, len(included))
    scores += np.asarray(dirac_llr(jnp.asarray(z), sampling_probability, noise_multiplier))
  return scores


def one_run_bound(scores: np.ndarray, included: np.ndarray, delta: float,
                  significance: float = SIGNIFICANCE) -> dict:
  """The one-run epsilon lower bounds at ``delta`` from the canaries' ``scores`` and their
  ``included`` coins: Steinke et al.'s (``one_run``) and Mahloujifar et al.'s f-DP one
  (``one_run_fdp``), each holding with probability 1 - ``significance``; with the attack's
  AUC and how many canaries were in."""
  scores, included = np.asarray(scores, np.float64), np.asarray(included, bool)
  if scores.shape != included.shape or included.all() or not included.any():
    raise ValueError("one_run_bound needs one score per canary and canaries both in and out.")
  auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
  return {"one_run": float(auditor.epsilon_one_run(significance, delta)),
          "one_run_fdp": float(auditor.epsilon_one_run_fdp(significance, delta)),
          "auc": float(auditor.attack_auroc()), "canaries": int(len(scores)),
          "included": int(included.sum()), "significance": significance, "delta": delta}
