"""Noisy aggregation of teacher votes: LNMax, GNMax, Confident-GNMax, the Gaussian
histogram (GNMax's noisy histogram released whole) and the Gaussian class count (one count
of each histogram, its class fixed before the query).

All functions are pure, keyed and jittable; the key must be secret (``privacy.noise``), and
the Gaussian noise is ``noise.normal``'s hardened sampler. They take vote histograms ``votes`` [Q, K]
(``ensemble.vote_histograms``: how many teachers chose each of K classes for each of Q
queries) and return an ``Aggregate`` with the released labels, which queries were
answered, and the histograms the privacy accountant needs (data-dependent analyses use
them; they are private data themselves and must not be released).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from dgd_jax.privacy import noise
from dgd_jax.privacy import releases
from dgd_jax.runtime.errors import ConfigError


class Aggregate(NamedTuple):
  labels: jnp.ndarray  # [Q] int32; -1 where the query was not answered
  answered: jnp.ndarray  # [Q] bool
  votes: jnp.ndarray  # [Q, K] the histograms the labels came from (private)
  # the release where it is not the labels (``Aggregator.released``): the noisy histograms
  # [Q, K] or counts [Q]; else None
  released: jnp.ndarray | None = None


def _require_positive(name: str, value: float) -> None:
  if isinstance(value, jax.core.Tracer):  # traced under jit: checked by the caller
    return
  if not value > 0:  # also catches NaN
    raise ConfigError(
        f"{name}={value}: noisy aggregation needs noise > 0 (zero noise releases the "
        "plurality vote with no differential-privacy guarantee; use plurality() for a "
        "non-private vote).")


def _require_histograms(votes: jnp.ndarray) -> None:
  if votes.ndim != 2 or votes.shape[1] < 2:
    raise ConfigError(f"votes must be histograms [queries, classes >= 2]; got shape "
                      f"{votes.shape}. Pass ensemble.vote_histograms(...) output.")


def plurality(votes: jnp.ndarray) -> Aggregate:
  """The non-private plurality vote: argmax of each histogram."""
  _require_histograms(votes)
  labels = jnp.argmax(votes, axis=-1).astype(jnp.int32)
  return Aggregate(labels, jnp.ones(labels.shape, bool), votes)


def lnmax(key: jax.Array, votes: jnp.ndarray, scale: float) -> Aggregate:
  """Laplacian noisy max: argmax_j (n_j + Lap(scale)) (PATE Eq. 1; DGD Eq. 3 with
  scale = 2 / eps0). ``scale`` = b = 1 / gamma."""
  _require_positive("scale", scale)
  _require_histograms(votes)
  noisy = votes + scale * noise.laplace(key, votes.shape)  # only the argmax leaves
  return plurality(noisy)._replace(votes=votes)


def gaussian_histogram(key: jax.Array, votes: jnp.ndarray, sigma: float) -> Aggregate:
  """The noisy histogram n + N(0, sigma^2 I) released whole, labels its argmax: the Gaussian
  mechanism whose data-independent RDP bounds GNMax (PATE 2018 Prop. 8), so it costs what a
  GNMax answer costs; its entries, unbiased for the vote counts, are the student's targets."""
  _require_positive("sigma", sigma)
  _require_histograms(votes)
  noisy = votes + sigma * noise.normal(key, votes.shape)
  return plurality(noisy)._replace(votes=votes, released=noisy)


def gaussian_class_count(key: jax.Array, votes: jnp.ndarray, classes: jnp.ndarray,
                         sigma: float) -> Aggregate:
  """The count n_c + N(0, sigma^2) of one class c per query, c fixed before the query (the
  class a synthetic sample was made for, ``classes`` [Q]): the Gaussian mechanism of L2
  sensitivity 1 per changed vote (sqrt 2 for the whole histogram), so sigma / sqrt 2 buys
  the histogram's epsilon. Labels are the classes asked about; ``released`` is [Q]."""
  _require_positive("sigma", sigma)
  _require_histograms(votes)
  classes = jnp.asarray(classes, jnp.int32)
  count = jnp.take_along_axis(votes, classes[:, None], axis=-1)[:, 0]
  noisy = count + sigma * noise.normal(key, count.shape)
  return Aggregate(classes, jnp.ones(classes.shape, bool), votes, noisy)


def gnmax(key: jax.Array, votes: jnp.ndarray, sigma: float) -> Aggregate:
  """Gaussian noisy max: argmax_j (n_j + N(0, sigma^2)) (PATE 2018 Section 4.1), the argmax of
  ``gaussian_histogram`` with the histogram itself kept back."""
  return gaussian_histogram(key, votes, sigma)._replace(released=None)


def confident_gnmax(key: jax.Array, votes: jnp.ndarray, threshold: float, sigma1: float,
                    sigma2: float) -> Aggregate:
  """Confident-GNMax (PATE 2018 Algorithm 1): answer only if max_j n_j + N(0, sigma1^2)
  >= threshold, then release GNMax with sigma2; unanswered queries get label -1."""
  _require_positive("sigma1", sigma1)
  _require_positive("sigma2", sigma2)
  _require_histograms(votes)
  check_key, label_key = jax.random.split(key)
  noisy_max = votes.max(axis=-1) + sigma1 * noise.normal(check_key, votes.shape[:-1])
  answered = noisy_max >= threshold
  labels = gnmax(label_key, votes, sigma2).labels
  return Aggregate(jnp.where(answered, labels, -1), answered, votes)


@dataclasses.dataclass(frozen=True)
class Aggregator:
  """One aggregator of the table below: its function, its release record (whose
  ``mechanism`` names it and whose ``covers`` says what its epsilon covers and leaves out),
  what it releases and how a plan sets it."""

  record: type[releases.Release]
  apply: Callable[..., Aggregate]  # (key, votes [Q, K], noise_scale, classes, threshold, sigma1)
  released: str  # per query: "labels", "histograms" (noisy, whole) or "counts" (one class's)
  # queries.plan='auto': "candidate" (noise and count traded against label accuracy),
  # "least_noise" (num_queries releases at the least noise that fits) or "fixed" (by hand)
  planning: str
  noiseless: str  # what the noiseless diagnostic student learns instead of the release
  plan_text: str = ""  # report.md's words for {} releases of a least-noise plan

  @property
  def name(self) -> str:
    return self.record.mechanism

  def __call__(self, key: jax.Array, votes: jnp.ndarray, noise_scale: float,
               classes: jnp.ndarray | None = None, threshold: float = 0.0,
               sigma1: float = 0.0) -> Aggregate:
    return self.apply(key, votes, noise_scale, classes, threshold, sigma1)


# The aggregators a run or the API can name: name -> its row, filled by ``register``.
AGGREGATORS: dict[str, Aggregator] = {}


def register(aggregator: Aggregator) -> Aggregator:
  """Makes ``aggregator`` (its vote function and its release record, with the record's
  sensitivity, accountant events and summary) known to the run, the planner, the report, the
  API and the privacy command: its row here and its record in ``releases.MECHANISMS``."""
  known = AGGREGATORS.get(aggregator.name)
  if known is not None and known is not aggregator:
    raise ConfigError(f"aggregator {aggregator.name!r} is already registered; choose another "
                      "name for its record's mechanism.")
  releases.register(aggregator.record)
  AGGREGATORS[aggregator.name] = aggregator
  return aggregator


def planned_by(planning: str) -> tuple[str, ...]:
  """The aggregators whose ``planning`` is ``planning``, in registration order."""
  return tuple(n for n, a in AGGREGATORS.items() if a.planning == planning)


def releases_counts(name: str) -> bool:
  """Whether aggregator ``name`` releases every query's noisy counts (the histograms, or one
  class's count) at the least noise that fits: no labels to trade against their accuracy."""
  return AGGREGATORS[name].planning == "least_noise"


for _row in (
    Aggregator(releases.LNMaxQueries, lambda k, v, b, *_: lnmax(k, v, b),  # DGD Eq. 3
               "labels", "candidate", "plurality"),
    Aggregator(releases.GNMaxQueries, lambda k, v, s, *_: gnmax(k, v, s),
               "labels", "candidate", "plurality"),
    Aggregator(releases.HistogramQueries, lambda k, v, s, *_: gaussian_histogram(k, v, s),
               "histograms", "least_noise", "vote shares",
               "the noisy vote histograms of {} queries, released whole"),
    Aggregator(releases.ClassCountQueries,
               lambda k, v, s, c, *_: gaussian_class_count(k, v, c, s),
               "counts", "least_noise", "counts",
               "the noisy count of {} queries' votes for the class each sample was synthesised "
               "for"),
    Aggregator(releases.ConfidentGNMaxQueries,
               lambda k, v, s2, _, t, s1: confident_gnmax(k, v, t, s1, s2),
               "labels", "fixed", "plurality"),
):
  register(_row)
HISTOGRAMS = releases.HistogramQueries.mechanism  # the noisy histograms, released whole
CLASS_COUNTS = releases.ClassCountQueries.mechanism  # one noisy count per query
