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

A label release's canaries are vote canaries (``vote_rows``): canary i is a query on which
the other T - 1 teachers tie between classes 0 and 1 and canary i's teacher votes 1 when
included, 0 otherwise: one moved vote, the replace-one change, on each of the release's Q
queries, where a noisy argmax is most sensitive to it. Scored on what each answer releases
(``vote_scores``). The LDP client's canaries (``client_canaries``) are features at -B or +B
(out or in), each sent through the client once, scored by the value sent; DPDFD's are
sensitive models whose output gradient on each of a step's B rows points at +e_0 (in) or
-e_0 (out) on every step, scored by the noisy rows' sum (``simulated_gaussian_sums``, its
exact law). Each comes with its
exact mechanism simulated on public randomness beside it: what a correct implementation's
audit should reach.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax_privacy import auditing

from dgd_jax.privacy import local
from dgd_jax.privacy import releases

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


def vote_rows(included: np.ndarray, num_teachers: int, num_classes: int) -> np.ndarray:
  """Each canary's vote histogram [m, K]: the other T - 1 teachers split evenly between
  classes 0 and 1 (an odd one out on class 2, or 0 with two classes), canary i's teacher on
  class 1 when included, else on class 0."""
  rest = num_teachers - 1
  rows = np.zeros((len(included), num_classes), np.float32)
  rows[:, 0], rows[:, 1] = rest // 2 + ~included, rest // 2 + included
  rows[:, 2 if num_classes > 2 else 0] += rest % 2
  return rows


def vote_scores(released: str, labels: np.ndarray, values: np.ndarray | None) -> np.ndarray:
  """Each canary's score from its queries' answers [q, m] (``released``: what the aggregator
  releases, ``aggregation.Aggregator.released``): the noisy histograms' class-1 minus class-0
  count, the noisy class-1 count, or the labels 1 minus the labels 0, summed over queries."""
  if released == "histograms":
    return (values[..., 1] - values[..., 0]).sum(0)
  if released == "counts":
    return values.sum(0)
  return ((labels == 1).astype(np.float64) - (labels == 0)).sum(0)


def simulated_vote_answers(mechanism: str, rows: np.ndarray, queries: int, noise_scale: float,
                           threshold: float, sigma1: float, rng: np.random.Generator
                           ) -> tuple[np.ndarray, np.ndarray | None]:
  """The exact aggregator ``mechanism`` (a ``releases`` mechanism name) on ``queries`` copies
  of the canaries' ``rows``, drawn from public ``rng``: (labels [q, m], -1 unanswered; the
  released histograms [q, m, K] or class-1 counts [q, m], or None)."""
  votes = np.broadcast_to(rows, (queries,) + rows.shape).astype(np.float64)
  draw = rng.laplace if mechanism == releases.LNMaxQueries.mechanism else rng.normal
  noisy = votes + draw(0.0, noise_scale, votes.shape)
  labels = np.argmax(noisy, -1)
  if mechanism == releases.ConfidentGNMaxQueries.mechanism:
    answered = votes.max(-1) + rng.normal(0.0, sigma1, votes.shape[:-1]) >= threshold
    return np.where(answered, labels, -1), None
  if mechanism == releases.HistogramQueries.mechanism:
    return labels, noisy
  if mechanism == releases.ClassCountQueries.mechanism:
    return np.ones(labels.shape, int), noisy[..., 1]
  return labels, None


def client_canaries(included: np.ndarray, image_shape: tuple[int, ...], bound: float
                    ) -> np.ndarray:
  """The LDP client's canaries as client samples [n, *image_shape]: feature j of the flattened
  samples is canary j, +B when included, -B otherwise (the two ends of a feature's range);
  features past the last canary are 0."""
  size = int(np.prod(image_shape))
  flat = np.zeros(-(-len(included) // size) * size, np.float32)
  flat[:len(included)] = np.where(included, bound, -bound)
  return flat.reshape((-1,) + tuple(image_shape))


def simulated_client_scores(included: np.ndarray, sigma: float, mask_rate: float,
                            num_features: int, rng: np.random.Generator) -> np.ndarray:
  """The exact client (``training.ldp.transform``) on the canaries, in grid units, from public
  ``rng``: a feature masked (probability ceil(N mu) / N) sends 0, else clip(+-K + k, -R, R), k
  drawn from the discrete Laplace table ``local.ldp_noise_counts(sigma)``."""
  counts = local.ldp_noise_counts(sigma).astype(np.float64)
  support, r = (len(counts) - 1) // 2, local.ldp_output_range(sigma)
  k = rng.choice(np.arange(-support, support + 1), len(included), p=counts / counts.sum())
  sent = np.clip(np.where(included, local.LDP_GRID, -local.LDP_GRID) + k, -r, r)
  zeros = math.ceil(round(num_features * mask_rate, 9))  # as ``training.ldp.mask``
  masked = rng.random(len(included)) < zeros / num_features
  return np.where(masked, 0, sent).astype(np.float64)


def simulated_gaussian_sums(included: np.ndarray, shift: float, spread: float,
                            rng: np.random.Generator) -> np.ndarray:
  """Scores that are +shift (included) or -shift plus N(0, spread^2), from public ``rng``: a
  Gaussian mechanism's canary sums whose in and out means are 2 shift apart."""
  return np.where(included, shift, -shift) + spread * rng.normal(size=len(included))
