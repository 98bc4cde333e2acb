"""Exact integer noise: tables of integer counts that a sampler maps uniform bits through, and
the pure epsilon those tables realise (host-side NumPy; ``privacy.noise.from_counts`` samples).

A float sampler's output set depends on the input (Mironov 2012: most float32 outputs of
x + Laplace are impossible for x' = x + g), so its epsilon is not the real-valued mechanism's.
Here the noise is an integer k with P(k) = c_k / 2^TABLE_BITS exactly, c_k integers summing to
2^TABLE_BITS: the sampler draws TABLE_BITS uniform bits u and returns the k with
C_{k-1} <= u < C_k (C the cumulative counts; an inverse CDF on integers, no float on the
way). The pmf the user's output follows is then the table itself, and the epsilon is computed
from the table, not from the ideal distribution it approximates.

TABLE_BITS = 64 (two uint32 words): the clipped mechanism's smallest reachable probability is
about exp(-(R + K) / t) / 2t (``local``'s LDP grid), near 1e-10 at the LDP presets, which 2^32
counts would round to a handful (a large epsilon excess) and 2^64 counts hold to ~1e-9
relative.
"""
from __future__ import annotations

import fractions
import functools
import math

import numpy as np

from dgd_jax.privacy import checks
from dgd_jax.runtime.errors import ConfigError

TABLE_BITS = 64  # the counts sum to 2^64: two uint32 words of uniform bits per draw
TOTAL = 1 << TABLE_BITS
EPSILON_ROUND_UP = 1e-12  # > the float64 log's error on a ratio of two integers < 2^64


@functools.lru_cache(maxsize=64)
def discrete_laplace_counts(scale: float, support: int) -> np.ndarray:
  """Counts c_k, k = -support..support (uint64, index k + support), summing to 2^64, each >= 1:
  2^64 times the discrete Laplace pmf (1 - q) / (1 + q) q^|k|, q = exp(-1 / scale) (the
  two-sided geometric mechanism, Ghosh, Roughgarden & Sundararajan 2009), rounded to the
  nearest integer, with the mass beyond +-support folded into the end entries (q^support / (1 +
  q) each) and the rounding residual put on c_0. Read-only (cached)."""
  scale = checks.positive("discrete Laplace scale", scale)
  support = checks.count("support", support)
  k = np.arange(-support, support + 1)
  q = math.exp(-1.0 / scale)
  pmf = -math.expm1(-1.0 / scale) / (1.0 + q) * np.exp(-np.abs(k) / scale)
  pmf[[0, -1]] = math.exp(-support / scale) / (1.0 + q)  # P(k <= -support), P(k >= support)
  counts = [max(1, round(p * TOTAL)) for p in pmf.tolist()]
  counts[support] += TOTAL - sum(counts)
  if not 1 <= counts[support] < TOTAL:
    raise ConfigError(f"discrete Laplace scale={scale} support={support}: no table of "
                      f"{TABLE_BITS}-bit counts >= 1 fits; use a larger scale or support.")
  table = np.array(counts, np.uint64)
  table.setflags(write=False)
  return table


def cdf_words(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The cumulative counts C_i = c_0 + ... + c_i, i < len(counts) - 1 (the last is 2^64), as
  (high, low) uint32 words: what ``noise.from_counts`` searches."""
  counts = np.asarray(counts, np.uint64)
  if int(counts.astype(object).sum()) != TOTAL:
    raise ConfigError(f"a noise table's counts must sum to 2^{TABLE_BITS}.")
  cdf = np.cumsum(counts[:-1], dtype=np.uint64)
  return (cdf >> np.uint64(32)).astype(np.uint32), (cdf & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def clipped_shift_epsilon(counts: np.ndarray, inputs: tuple[int, int], out_range: int) -> float:
  """Pure epsilon of y = clip(j + k, -R, R), k ~ counts / 2^64 (index k + support), over inputs
  j in [lo, hi] and R = ``out_range``: max over j, j', y of log P(y | j) / P(y | j'), with
  P(-R | j) = P(k <= -R - j), P(R | j) = P(k >= R - j), P(y | j) = c_{y - j} between. The
  ratio is exact (integers); its log is rounded up by EPSILON_ROUND_UP. inf where some y is
  impossible for some j (a zero count, or a support too short to reach every y)."""
  counts = np.asarray(counts, np.uint64)
  support = (len(counts) - 1) // 2
  lo, hi = (int(v) for v in inputs)
  if not lo <= hi or len(counts) != 2 * support + 1:
    raise ConfigError(f"inputs {inputs} must be an interval and the table odd-sized.")
  if support < out_range + max(abs(lo), abs(hi)) or not (counts > 0).all():
    return math.inf
  at = lambda y, j: y - j + support  # table index of the noise that moves j to y
  lower = np.cumsum(counts, dtype=np.uint64)  # P(k <= index) * 2^64; the last wraps, unread
  upper = np.cumsum(counts[::-1], dtype=np.uint64)[::-1]  # P(k >= index); the first unread
  js = np.arange(lo, hi + 1)
  columns = [lower[at(-out_range, js)], upper[at(out_range, js)]]  # the clipped ends
  # between the ends P(y | j) = c_{y - j}: for y the window of counts c[at(y, hi) .. at(y, lo)]
  windows = np.lib.stride_tricks.sliding_window_view(counts, hi - lo + 1)
  inner = windows[at(-out_range + 1, hi):at(out_range - 1, hi) + 1]
  highs = [int(c.max()) for c in columns] + inner.max(axis=1).tolist()
  lows = [int(c.min()) for c in columns] + inner.min(axis=1).tolist()
  worst = max(fractions.Fraction(int(a), int(b)) for a, b in zip(highs, lows))
  return math.log(worst) + EPSILON_ROUND_UP
