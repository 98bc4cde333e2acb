"""Noisy aggregation: LNMax, GNMax, the Gaussian histogram, Confident-GNMax."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.labelling import aggregation
from dgd_jax.privacy import noise
from dgd_jax.runtime.errors import ConfigError

rng = np.random.default_rng(0)
# 2000 queries, 250 teachers, 10 classes, a clear plurality in most rows.
VOTES = jnp.asarray(np.stack([rng.multinomial(250, rng.dirichlet(np.full(10, 0.3)))
                              for _ in range(2000)]), jnp.int32)


def test_plurality():
  agg = aggregation.plurality(VOTES)
  np.testing.assert_array_equal(agg.labels, np.argmax(VOTES, -1))
  assert bool(agg.answered.all())


@pytest.mark.parametrize("fn, arg", [(aggregation.lnmax, 1e-6), (aggregation.gnmax, 1e-6)])
def test_vanishing_noise_is_plurality(fn, arg):
  agg = fn(jax.random.key(0), VOTES, arg)
  # Ties in a histogram can be broken either way by vanishing noise; compare off-tie rows.
  top2 = np.sort(np.asarray(VOTES), -1)[:, -2:]
  clear = top2[:, 1] > top2[:, 0]
  np.testing.assert_array_equal(np.asarray(agg.labels)[clear], np.argmax(VOTES, -1)[clear])
  np.testing.assert_array_equal(agg.votes, VOTES)


@pytest.mark.parametrize("fn", [aggregation.lnmax, aggregation.gnmax])
def test_huge_noise_is_close_to_uniform(fn):
  agg = fn(jax.random.key(1), VOTES, 1e6)
  counts = np.bincount(np.asarray(agg.labels), minlength=10)
  assert counts.min() > 140 and counts.max() < 260, counts  # 200 expected per class
  agreement = np.mean(np.asarray(agg.labels) == np.argmax(VOTES, -1))
  assert agreement < 0.15, agreement


def test_moderate_laplace_noise_keeps_clear_winners():
  strong = jnp.zeros((500, 10), jnp.int32).at[:, 3].set(200).at[:, 5].set(50)
  agg = aggregation.lnmax(jax.random.key(2), strong, 20.0)  # gap 150 >> scale 20
  assert np.mean(np.asarray(agg.labels) == 3) > 0.99


def test_lnmax_is_jittable_and_keyed():
  f = jax.jit(aggregation.lnmax)
  a = f(jax.random.key(3), VOTES, 40.0)
  b = f(jax.random.key(3), VOTES, 40.0)
  c = f(jax.random.key(4), VOTES, 40.0)
  np.testing.assert_array_equal(a.labels, b.labels)
  assert not np.array_equal(a.labels, c.labels)


def test_confident_gnmax():
  nothing = aggregation.confident_gnmax(jax.random.key(0), VOTES, threshold=1e9, sigma1=1.0,
                                        sigma2=1.0)
  assert not bool(nothing.answered.any()) and bool((nothing.labels == -1).all())
  everything = aggregation.confident_gnmax(jax.random.key(0), VOTES, threshold=-1e9,
                                           sigma1=1.0, sigma2=1e-6)
  assert bool(everything.answered.all())
  # A threshold between integers, with tiny sigma1, answers exactly the rows above it.
  some = aggregation.confident_gnmax(jax.random.key(0), VOTES, threshold=199.5, sigma1=1e-3,
                                     sigma2=1.0)
  np.testing.assert_array_equal(some.answered, np.max(VOTES, -1) >= 200)
  assert bool((some.labels[~some.answered] == -1).all())


def test_gaussian_histogram_releases_gnmax_noisy_histogram_whole():
  """The released histograms are the votes plus N(0, sigma^2) per count, the labels their
  argmax, and the same key gives GNMax's label: GNMax releases this histogram's argmax."""
  agg = aggregation.gaussian_histogram(jax.random.key(3), VOTES, 20.0)
  noise = np.asarray(agg.released) - np.asarray(VOTES)
  assert abs(noise.mean()) < 4 * 20.0 / np.sqrt(noise.size)  # 4 standard errors
  assert noise.std() == pytest.approx(20.0, rel=0.02)
  np.testing.assert_array_equal(agg.labels, np.argmax(agg.released, -1))
  gnmax = aggregation.gnmax(jax.random.key(3), VOTES, 20.0)
  np.testing.assert_array_equal(agg.labels, gnmax.labels)
  assert bool(agg.answered.all()) and agg.votes is VOTES
  assert gnmax.released is None  # GNMax releases the argmax only


def test_gaussian_class_count_releases_one_noisy_count_per_query():
  """Each query releases the votes for its given class plus N(0, sigma^2), the same draw
  for the same key; the labels are the classes asked about, every query answered."""
  classes = np.arange(VOTES.shape[0]) % 10
  agg = aggregation.gaussian_class_count(jax.random.key(3), VOTES, classes, 20.0)
  counts = np.asarray(VOTES)[np.arange(len(classes)), classes]
  assert agg.released.shape == (VOTES.shape[0],)
  expected = counts + 20.0 * np.asarray(noise.normal(jax.random.key(3), counts.shape))
  np.testing.assert_allclose(agg.released, expected, rtol=1e-6)
  np.testing.assert_array_equal(agg.labels, classes)
  assert bool(agg.answered.all()) and agg.votes is VOTES
  other = aggregation.gaussian_class_count(jax.random.key(3), VOTES, (classes + 1) % 10, 20.0)
  assert not np.allclose(other.released, agg.released)  # another class, another count


@pytest.mark.parametrize("call", [
    lambda: aggregation.gaussian_class_count(jax.random.key(0), VOTES,
                                             np.zeros(VOTES.shape[0], int), 0.0),
    lambda: aggregation.gaussian_histogram(jax.random.key(0), VOTES, 0.0),
    lambda: aggregation.lnmax(jax.random.key(0), VOTES, 0.0),
    lambda: aggregation.lnmax(jax.random.key(0), VOTES, -1.0),
    lambda: aggregation.gnmax(jax.random.key(0), VOTES, 0.0),
    lambda: aggregation.gnmax(jax.random.key(0), VOTES, float("nan")),
    lambda: aggregation.confident_gnmax(jax.random.key(0), VOTES, 100, 0.0, 1.0),
    lambda: aggregation.confident_gnmax(jax.random.key(0), VOTES, 100, 1.0, -2.0),
])
def test_zero_or_negative_noise_is_refused(call):
  with pytest.raises(ConfigError, match="needs noise > 0"):
    call()


@pytest.mark.parametrize("votes", [jnp.zeros((5,)), jnp.zeros((5, 1)), jnp.zeros((2, 3, 4))])
def test_mismatched_vote_shapes_are_refused(votes):
  with pytest.raises(ConfigError, match=r"histograms \[queries, classes >= 2\]"):
    aggregation.lnmax(jax.random.key(0), votes, 20.0)
