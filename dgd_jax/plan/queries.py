"""Choosing the label-query plan (aggregator, noise, number of queries) for a target epsilon.

A fixed plan ("b = 40, 1300 queries") fits 250 teachers; with 50 teachers the same noise
drowns the votes. The chooser uses only what is not private: the ensemble size n, the number
of classes K, the target (epsilon, delta) and accountant, and an *assumed* vote histogram
that the user sets (``consensus``: the share of teachers voting for the top class; the
runner-up gets half of the rest, the others share the remainder evenly). It never reads
votes, so choosing costs no epsilon.

For each candidate (LNMax with Laplace b, or GNMax with Gaussian sigma) the most queries Q
that fit the target (``privacy.max_queries``, data-independent) and the expected label
accuracy a = P(noisy argmax = plurality) on the assumed histogram (Monte Carlo, fixed seed)
are computed. The chosen candidate maximises the *clean-equivalent* labels Q * kappa^4,
kappa = (K a - 1) / (K - 1) (the signal left in a label flipped uniformly with probability
1 - a), with Q capped by ``max_queries`` (the pool, or what the user allows). The exponent is
empirical: it is the exponent whose choice agrees with the ranking of students trained on the
quick DGD preset's real votes across GNMax noise levels, where Q * kappa^2 favours many noisy
labels that teach less.

The aggregators that release noisy counts (``aggregation.AGGREGATORS``' "least_noise" rows)
have no trade-off of label accuracy against count. The histogram release gives each query's
noisy histogram whole (the same data-independent epsilon as a GNMax label), and the student
learns the noisy vote shares, an unbiased estimate whose noise averages out over many samples;
the class-count release gives one count per query, of the class its synthetic sample was made
for, whose sensitivity 1 (not sqrt 2) buys sigma / sqrt 2. Their plan is ``num_queries``
releases with the least sigma that fits the budget (the config says how many of the pool to
ask).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from dgd_jax import privacy
from dgd_jax.labelling import aggregation
from dgd_jax.plan.context import config_teachers_changed
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.privacy.releases import build_release
from dgd_jax.runtime.errors import ConfigError

# Noise candidates as multiples of the ensemble size n (b or sigma = fraction * n): the
# noise that matters is relative to the vote gaps, which scale with n.
NOISE_FRACTIONS = (0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.2, 0.24)
KAPPA_EXPONENT = 4  # module docstring: ranks plans as the students trained on them rank

# The ensemble a run chooses when config.num_teachers = 0 (``num_teachers_for``): shards of
# about IMAGES_PER_TEACHER private images, at most MAX_TEACHERS (DGD IV-A's 250) and at least
# MIN_TEACHERS; and where the budget's noise would drown so few teachers' votes, more and
# smaller shards (down to MIN_IMAGES_PER_TEACHER images each): enough teachers that a noisy
# vote histogram's noise per teacher, sigma / n, at REFERENCE_QUERIES answers within the
# budget is at most NOISE_PER_TEACHER. The noise is fixed by the budget while the votes grow
# with n, so more, smaller shards win until each teacher learns too little.
IMAGES_PER_TEACHER = 80
MIN_IMAGES_PER_TEACHER = 15
MAX_TEACHERS = 250
MIN_TEACHERS = 10
REFERENCE_QUERIES = 1000
NOISE_PER_TEACHER = 0.45
# Below this many clean-equivalent labels ((n / sigma_1)^2, ``label_signal``) no release of
# the ensemble's votes teaches a student much: report.md says so before training and names
# DP-SGD's preset for the same data.
SIGNAL_FLOOR = 1000


def unit_noise(epsilon: float, delta: float, accountant: str = "pld",
               teachers_changed: int = 1) -> float:
  """sigma_1: the least noise of one noisy vote histogram within (epsilon, delta); Q of them
  need sigma_1 sqrt(Q) (Gaussian composition). Public: no vote is read."""
  one = build_release(aggregation.HISTOGRAMS, queries=1, noise_scale=1.0,
                      teachers_changed=teachers_changed)
  return privacy.min_noise(one, epsilon, delta, accountant)


def label_signal(num_teachers: int, epsilon: float, delta: float, accountant: str = "pld",
                 teachers_changed: int = 1) -> float:
  """(n / sigma_1)^2: about the most clean labels' worth the ensemble's noisy votes can carry
  within the budget, however many queries share it (Q queries at sigma_1 sqrt(Q) each carry
  a signal-to-noise (n / sigma)^2 = (n / sigma_1)^2 / Q apiece)."""
  return (num_teachers / unit_noise(epsilon, delta, accountant, teachers_changed)) ** 2


def num_teachers_for(num_private: int, epsilon: float = 0.0, delta: float = 1e-5,
                     accountant: str = "pld", teachers_changed: int = 1) -> int:
  """The teacher count for ``num_private`` private examples and, where ``epsilon`` > 0, the
  budget (module constants above): public quantities only. N must not differ between
  neighbouring datasets (``plan.checks.run_config``), or the count and so every shard could."""
  if num_private < MIN_TEACHERS:
    raise ConfigError(f"{num_private} private examples cannot be split among "
                      f"{MIN_TEACHERS} teachers; give a larger private set.")
  n = num_private // IMAGES_PER_TEACHER
  if epsilon > 0:
    sigma = unit_noise(epsilon, delta, accountant, teachers_changed) * REFERENCE_QUERIES ** 0.5
    n = max(n, min(math.ceil(sigma / NOISE_PER_TEACHER),
                   num_private // MIN_IMAGES_PER_TEACHER))
  return int(min(MAX_TEACHERS, max(MIN_TEACHERS, n)))


def teachers_reason(num_private: int, epsilon: float = 0.0, delta: float = 1e-5,
                    accountant: str = "pld", teachers_changed: int = 1) -> str:
  """Why the run chose ``num_teachers_for`` teachers, for the report."""
  args = (epsilon, delta, accountant, teachers_changed)
  n = num_teachers_for(num_private, *args)
  why = (f"{n} teachers chosen for {num_private:,} private examples (about "
         f"{num_private // n:,} each: N // {IMAGES_PER_TEACHER}")
  if epsilon > 0:
    why += (f", or where the budget's noise needs more, enough that a vote histogram's noise "
            f"per teacher at {REFERENCE_QUERIES:,} answers is at most {NOISE_PER_TEACHER} "
            f"(shards of at least {MIN_IMAGES_PER_TEACHER})")
  return why + (f", within [{MIN_TEACHERS}, {MAX_TEACHERS}]); set --config.num_teachers to "
                "choose another count")


def count_budget(config) -> tuple:
  """The budget arguments of ``num_teachers_for`` and ``weak_signal`` for a config: its
  target (epsilon, delta), its planning accountant and the most teachers one neighbouring
  change moves; (0,), no budget, where the queries' plan is fixed or there is no target."""
  q, p = config.get("queries"), config.get("privacy")
  if not q or q.plan != "auto" or not p or not privacy_checks.has_budget(p.max_epsilon):
    return (0.0,)
  accountant = "rdp" if p.accountant in privacy.DATA_DEPENDENT_ONLY else p.accountant
  return (p.max_epsilon, p.delta, accountant, max(config_teachers_changed(config).values()))


def weak_signal(num_teachers: int, epsilon: float, delta: float, accountant: str = "pld",
                teachers_changed: int = 1, dataset: str = "<data>") -> str | None:
  """None, or report.md's warning where the ensemble's votes can carry fewer than
  ``SIGNAL_FLOOR`` clean labels' worth within the budget (``label_signal``), naming DP-SGD's
  preset for ``dataset`` at the same epsilon."""
  signal = label_signal(num_teachers, epsilon, delta, accountant, teachers_changed)
  if signal >= SIGNAL_FLOOR:
    return None
  return (f"{num_teachers} teachers' noisy votes can carry at most about {signal:,.0f} clean "
          f"labels' worth at epsilon {epsilon:g} ((n / sigma_1)^2, below {SIGNAL_FLOOR:,}): "
          "too little for a student to learn from. DP-SGD on the same data, whose epsilon "
          "covers the whole model, is the better choice here: python -m dgd_jax.main "
          f"--config=dgd_jax/configs/dpsgd.py:{dataset} --config.privacy.max_epsilon="
          f"{epsilon:g}; or raise the budget, or give more private examples.")


@dataclasses.dataclass(frozen=True)
class Candidate:
  aggregator: str
  noise_scale: float
  num_queries: int
  label_accuracy: float  # expected, on the assumed histogram
  epsilon: float  # data-independent, at num_queries
  num_classes: int

  @property
  def kappa(self) -> float:
    """(K a - 1) / (K - 1): the signal left in a label flipped uniformly w.p. 1 - a."""
    k = self.num_classes
    return max(0.0, (k * self.label_accuracy - 1) / (k - 1))

  @property
  def clean_equivalent(self) -> float:
    return self.num_queries * self.kappa ** KAPPA_EXPONENT

  def to_json(self) -> dict:
    return {"aggregator": self.aggregator, "noise_scale": self.noise_scale,
            "num_queries": self.num_queries, "expected_label_accuracy": self.label_accuracy,
            "epsilon": self.epsilon, "clean_equivalent_labels": self.clean_equivalent}


def assumed_histogram(num_teachers: int, num_classes: int, consensus: float) -> np.ndarray:
  """The vote histogram the chooser plans for: top = consensus * n, runner-up = half of the
  rest, the remaining classes share the other half evenly."""
  if not 1.0 / num_classes < consensus <= 1.0:
    raise ConfigError(f"queries.assumed_consensus={consensus}: it is the share of teachers "
                      f"voting for the top class, so 1/K = {1 / num_classes:.3g} < it <= 1.")
  top = consensus * num_teachers
  rest = num_teachers - top
  votes = np.full(num_classes, rest / 2 / max(num_classes - 2, 1))
  votes[0], votes[1] = top, rest / 2 if num_classes > 2 else rest
  return votes


def expected_label_accuracy(aggregator: str, noise_scale: float, votes: np.ndarray,
                            draws: int = 20000, seed: int = 0) -> float:
  """P(argmax(votes + noise) = argmax(votes)), Monte Carlo with a fixed seed."""
  rng = np.random.default_rng(seed)
  shape = (draws, len(votes))
  noise = (rng.laplace(size=shape) if aggregator == "lnmax" else rng.normal(size=shape))
  return float(np.mean(np.argmax(votes + noise_scale * noise, -1) == np.argmax(votes)))


def candidates(num_teachers: int, num_classes: int, target_epsilon: float, delta: float,
               consensus: float, max_queries: int, accountant: str = "rdp",
               teachers_changed: int = 1) -> list[Candidate]:
  """Every (aggregator, noise) candidate with its most queries and expected accuracy, when one
  neighbouring change moves ``teachers_changed`` teachers."""
  if num_teachers < 2:
    raise ConfigError(f"num_teachers={num_teachers}: noisy voting needs at least 2 teachers.")
  votes = assumed_histogram(num_teachers, num_classes, consensus)
  out = []
  for aggregator in aggregation.planned_by("candidate"):  # noise and count traded
    for fraction in NOISE_FRACTIONS:
      noise = round(fraction * num_teachers, 3)
      one = build_release(aggregator, queries=1, noise_scale=noise,
                          teachers_changed=teachers_changed)
      q = min(privacy.max_queries(one, target_epsilon, delta, accountant), max_queries)
      if q < 1:
        continue
      eps = privacy.epsilon_of(one.with_count(q), delta, accountant)
      out.append(Candidate(aggregator, noise, q,
                           expected_label_accuracy(aggregator, noise, votes), eps,
                           num_classes))
  return out


def choose(num_teachers: int, num_classes: int, target_epsilon: float, delta: float,
           consensus: float, max_queries: int, accountant: str = "rdp",
           teachers_changed: int = 1) -> tuple[Candidate, list[Candidate]]:
  """The candidate with the most clean-equivalent labels (module docstring), and all of
  them; ConfigError when no candidate answers a single query within the target."""
  found = candidates(num_teachers, num_classes, target_epsilon, delta, consensus, max_queries,
                     accountant, teachers_changed)
  if not found:
    raise ConfigError(f"no query plan fits epsilon {target_epsilon:g} (delta {delta:g}) with "
                      f"{num_teachers} teachers: even one query at the largest noise exceeds "
                      "it; raise privacy.max_epsilon or use more teachers.")
  return max(found, key=lambda c: (c.clean_equivalent, -c.num_queries)), found


# The plan a config makes, and its ledger record.

@dataclasses.dataclass(frozen=True)
class Settings:
  """The query plan a run makes: from the config (``queries.plan='fixed'``) or chosen by
  ``choose`` for the target epsilon (``'auto'``)."""

  aggregator: str
  noise_scale: float
  num_queries: int
  threshold: float = 0.0
  sigma1: float = 0.0
  selection: str = "random"
  first_round: int = 0
  chosen: tuple = ()  # 'auto': (best, candidates) as JSON-able dicts


@functools.lru_cache(maxsize=32)
def _choose(n, k, eps, delta, consensus, cap, accountant, teachers_changed):
  best, found = choose(n, k, eps, delta, consensus, cap, accountant, teachers_changed)
  return best, tuple(found)




# 'auto_counts' releases class counts where the histograms' noise per teacher, sigma / n, is
# at least this, else the histograms: a count has one noisy coordinate at sigma / sqrt 2
# where a histogram has K at sigma, so under large noise the count keeps more of the signal;
# under small noise the histogram's other classes (how near each boundary a sample lies)
# teach more.
CLASS_COUNT_NOISE_PER_VOTE = 0.5


def _counts(aggregator: str, sigma: float, queries: int, teachers_changed: int
            ) -> privacy.Release:
  return aggregation.AGGREGATORS[aggregator].record(sigma, queries,
                                                    teachers_changed=teachers_changed)


def has_synthesis_classes(config) -> bool:
  """Whether each pool sample has a class fixed before any data is read, the class
  DeepInversion made it for (``generative.inversion_classes``): a synthetic DeepInversion pool
  kept whole (``generator.oversample`` > 1 lets the baseline pick the samples kept)."""
  g = config.get("generator", {})
  return (config.pool.source == "synthetic" and g.get("synthesis") == "inversion"
          and g.get("oversample", 1.0) == 1.0)


def _count_release(config, num_queries: int, epsilon: float, delta: float, accountant: str,
                   teachers_changed: int) -> tuple[str, str]:
  """'auto_counts': (the aggregator, why): class counts where the pool has synthesis classes
  and the histograms would carry at least ``CLASS_COUNT_NOISE_PER_VOTE`` noise per teacher."""
  if config.num_teachers < 1:
    raise ConfigError("queries.aggregator='auto_counts' chooses by the noise per teacher: "
                      "resolve num_teachers first (plan.checks.run_config) or set it.")
  sigma = privacy.min_noise(_counts(aggregation.HISTOGRAMS, 1.0, num_queries, teachers_changed),
                            epsilon, delta, accountant)
  noise = sigma / config.num_teachers
  if not has_synthesis_classes(config):
    return aggregation.HISTOGRAMS, "the pool's samples have no class fixed before synthesis"
  if noise < CLASS_COUNT_NOISE_PER_VOTE:
    return aggregation.HISTOGRAMS, (f"histogram noise per teacher {noise:.2f} < "
                                  f"{CLASS_COUNT_NOISE_PER_VOTE}: the other classes' counts "
                                  "still carry signal")
  return aggregation.CLASS_COUNTS, (f"histogram noise per teacher {noise:.2f} >= "
                                  f"{CLASS_COUNT_NOISE_PER_VOTE}: one count at sigma / sqrt 2 "
                                  "carries more")


def settings(config) -> Settings:
  q, p = config.queries, config.privacy
  fixed = Settings(q.aggregator, q.noise_scale, q.num_queries, q.threshold, q.sigma1,
                   q.selection, q.first_round)
  if q.plan == "fixed":
    return fixed
  if q.plan != "auto":
    raise ConfigError(f"config.queries.plan={q.plan!r}; use 'fixed' (the config's aggregator, "
                      "noise and count) or 'auto' (chosen for privacy.max_epsilon).")
  if not privacy_checks.has_budget(p.max_epsilon):
    raise ConfigError("config.queries.plan='auto' chooses the plan for a target epsilon: set "
                      "config.privacy.max_epsilon to a finite epsilon, not inf.")
  accountant = "rdp" if p.accountant in privacy.DATA_DEPENDENT_ONLY else p.accountant
  # Planned for the claimed relation whose change moves the most teachers (the largest epsilon).
  worst = max(config_teachers_changed(config).values())
  aggregator, why = q.aggregator, {}
  if aggregator == "auto_counts":
    aggregator, reason = _count_release(config, q.num_queries, p.max_epsilon, p.delta,
                                        accountant, worst)
    why = {"why": reason}
  if aggregation.releases_counts(aggregator):  # num_queries releases at the least noise
    sigma = privacy.min_noise(_counts(aggregator, 1.0, q.num_queries, worst), p.max_epsilon,
                              p.delta, accountant)
    chosen = {"aggregator": aggregator, "noise_scale": sigma, "num_queries": q.num_queries,
              "epsilon": privacy.epsilon_of(_counts(aggregator, sigma, q.num_queries, worst),
                                            p.delta, accountant), **why}
    return dataclasses.replace(fixed, aggregator=aggregator, noise_scale=sigma,
                               chosen=(chosen, []))
  best, found = _choose(config.num_teachers, q.num_classes, p.max_epsilon, p.delta,
                        q.assumed_consensus, q.num_queries, accountant, worst)
  return dataclasses.replace(
      fixed, aggregator=best.aggregator, noise_scale=best.noise_scale,
      num_queries=best.num_queries, chosen=(best.to_json(), [c.to_json() for c in found]))


def release(config, votes=None, answered=None, neighbours: str = "replace_one"
            ) -> privacy.Release:
  """The ledger record of the planned (or, with votes, the made) label queries, stated under
  the relation ``neighbours`` (one the partition covers: ``config_teachers_changed``)."""
  q = settings(config)
  covered = config_teachers_changed(config)
  if neighbours not in covered:
    raise ConfigError(f"teachers.partition={config.teachers.partition!r} "
                      f"does not cover {neighbours} neighbours; it covers {sorted(covered)}.")
  teacher = dict(teachers_changed=covered[neighbours], neighbours=neighbours)
  record = aggregation.AGGREGATORS[q.aggregator].record
  if aggregation.releases_counts(q.aggregator):  # no data-dependent analysis: no votes
    return record(q.noise_scale, q.num_queries, **teacher)
  if record is privacy.ConfidentGNMaxQueries:
    return record(q.threshold, q.sigma1, q.noise_scale, q.num_queries, answered, votes,
                  **teacher)
  return record(q.noise_scale, q.num_queries, votes, **teacher)  # LNMax, GNMax
