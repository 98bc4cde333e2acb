"""Calibration: the most releases, or the least noise, that keep a planned release within a target
(epsilon, delta) under a chosen accountant. Data-independent (a plan precedes the votes); found by
monotone search, so the answer meets the target and one more release (or slightly less noise)
does not.

The release is given as a template record (``releases.*``): ``max_queries`` varies its count
(queries, or steps for DPDFD), ``min_noise`` its noise parameter (``noise_scale``: b for LNMax, sigma for GNMax,
sigma2 for Confident-GNMax with sigma1 and the threshold fixed, sigma for DPDFD in the record's
noise convention; DP-SGD's ``noise_multiplier``). ``others`` are the fixed releases recorded with it (e.g. DGD's eps1 as a
``PureDpRelease``): the whole ledger, template plus others, must meet the target.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Iterable

import numpy as np
from absl import logging
from scipy import optimize

from dgd_jax.privacy import checks
from dgd_jax.privacy.ledger import PrivacyLedger
from dgd_jax.privacy.releases import DpsgdSteps, PureDpRelease, Release
from dgd_jax.runtime.errors import ConfigError

MAX_COUNT = 10 ** 9


def _key(value):
  """A hashable stand-in for a calibration argument: a record by its type and fields, an
  array by its bytes."""
  if isinstance(value, Release):
    return (type(value).__name__,) + tuple(_key(getattr(value, f.name))
                                           for f in dataclasses.fields(value))
  if isinstance(value, np.ndarray):
    return ("ndarray", value.dtype.str, value.shape, value.tobytes())
  if isinstance(value, (list, tuple)):
    return tuple(_key(v) for v in value)
  return value


def _remembered(fn):
  """``fn`` computed once per process for equal arguments: a calibration is a pure function of
  its records and numbers, and a run asks for the same one several times (the budget guard,
  the stage, each point of a sweep)."""
  cache = {}

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    key = (_key(args), tuple(sorted((k, _key(v)) for k, v in kwargs.items())))
    if key not in cache:
      cache[key] = fn(*args, **kwargs)
    return cache[key]
  return wrapper


def epsilon_of(release: Release, delta: float, accountant: str, others: Iterable[Release] = (),
               **ledger_kwargs) -> float:
  """Data-independent epsilon of one release record, with the fixed releases ``others``, under
  ``accountant``."""
  return PrivacyLedger([release, *others], **ledger_kwargs).epsilon(
      delta, accountant, data_dependent=False).epsilon


def _template(release: Release) -> Release:
  if not isinstance(release, Release) or isinstance(release, PureDpRelease):
    raise ConfigError(f"calibration needs a release record with a count and noise; got {release!r}")
  if release.has_votes:
    raise ConfigError("calibration plans releases before any votes exist, so it is "
                      "data-independent: pass the release without votes.")
  if release.realised:
    raise ConfigError("calibration plans releases before the run, charging every query; the "
                      "answered count or mask is the realised outcome of a finished run: pass "
                      "the release without answered (drop --answered/--answered_mask).")
  return release


def _others(others: Iterable[Release]) -> tuple[Release, ...]:
  others = tuple(others)
  for r in others:
    if not isinstance(r, Release) or r.data_dependent:
      raise ConfigError(f"calibration's fixed releases must be data-independent release records; "
                        f"got {r!r}.")
  return others


@_remembered
def max_queries(release: Release, target_epsilon: float, delta: float, accountant: str = "rdp",
                others: Iterable[Release] = (), **ledger_kwargs) -> int:
  """The largest count n with epsilon(n), ``others`` included, <= target_epsilon (0 when even one
  release exceeds it)."""
  release = _template(release)
  others = _others(others)
  target = checks.epsilon("target_epsilon", target_epsilon)
  delta = checks.delta(delta)

  def fits(n: int) -> bool:
    return epsilon_of(release.with_count(n), delta, accountant, others, **ledger_kwargs) <= target

  if not fits(1):
    return 0
  low, high = 1, 2
  while fits(high):  # exponential search for a count that does not fit
    low, high = high, 2 * high
    if high > MAX_COUNT:
      raise ConfigError(f"more than {MAX_COUNT} releases fit in epsilon {target:g}: the target is "
                        "too loose to calibrate; lower it or the noise.")
  while high - low > 1:  # fits(low) and not fits(high)
    mid = (low + high) // 2
    low, high = (mid, high) if fits(mid) else (low, mid)
  return low


@_remembered
def min_noise(release: Release, target_epsilon: float, delta: float, accountant: str = "rdp",
              rtol: float = 1e-9, others: Iterable[Release] = (), **ledger_kwargs) -> float:
  """The smallest noise parameter (to relative tolerance ``rtol``) with epsilon, ``others``
  included, <= target."""
  return _min_noise(_template(release), target_epsilon, delta, accountant, rtol,
                    _others(others), ledger_kwargs)


def _min_noise(release: Release, target_epsilon: float, delta: float, accountant: str,
               rtol: float, others: tuple[Release, ...], ledger_kwargs: dict) -> float:
  target = checks.epsilon("target_epsilon", target_epsilon)
  delta = checks.delta(delta)
  pure = [r for r in others if isinstance(r, PureDpRelease)]
  if pure and sum(r.epsilon for r in pure) >= target:
    raise ConfigError(f"the pure-DP terms alone ({', '.join(r.label for r in pure)}: epsilon "
                      f"{sum(r.epsilon for r in pure):g}) use up the target epsilon {target:g}: "
                      "no noise meets it; raise the target or lower those terms.")

  def epsilon(noise: float) -> float:
    return epsilon_of(release.with_noise(noise), delta, accountant, others, **ledger_kwargs)

  def fits(noise: float) -> bool:
    return epsilon(noise) <= target

  high = release.noise_parameter
  while not fits(high):  # grow until the target is met
    high *= 2.0
    if high > 1e12:
      raise ConfigError(f"no noise up to 1e12 meets epsilon {target:g} for {release.count} "
                        f"{release.mechanism} releases (e.g. Confident-GNMax's threshold step "
                        "alone may exceed it): raise the target or change the fixed parameters.")
  low = high / 2.0
  while fits(low):  # shrink until it is not
    low, high = low / 2.0, low
    if low < 1e-12:
      return high
  bracket = [low, high]

  def excess(log_noise: float) -> float:  # log(epsilon / target): its root is the answer
    noise = math.exp(log_noise)
    eps = epsilon(noise)
    if eps <= target:  # every evaluation narrows [not fits, fits] (epsilon falls with noise)
      bracket[1] = min(bracket[1], noise)
    else:
      bracket[0] = max(bracket[0], noise)
    return math.log(min(max(eps, 1e-300), 1e300) / target)

  if high / low - 1.0 > rtol:  # Brent's method: a few accountings instead of ~30 bisections
    optimize.brentq(excess, math.log(low), math.log(high), xtol=rtol / 4)
  low, high = bracket
  while high / low - 1.0 > rtol:  # bisection in log space: fits(high), not fits(low)
    mid = math.sqrt(low * high)
    low, high = (low, mid) if fits(mid) else (mid, high)
  return high


@_remembered
def dpsgd_noise_multiplier(release: "DpsgdSteps", target_epsilon: float, delta: float,
                           accountant: str = "rdp") -> float:
  """DP-SGD's noise multiplier for ``target_epsilon``: jax-privacy's calibration
  (``accounting.calibrate_noise_multiplier`` with its DP-SGD accountant on the same Poisson
  events, RDP on the ledger's orders or PLD), then raised by 1e-6 relative steps until the ledger's
  ``accountant`` confirms epsilon <= target, so the budget guard accepts the result. A PLD
  evaluation takes seconds at small noise (targets are capped at ``checks.MAX_EPSILON``): each
  is logged."""
  from jax_privacy import accounting as jp_accounting  # pylint: disable=g-import-not-at-top
  from dgd_jax.privacy import events  # pylint: disable=g-import-not-at-top
  release = _template(release)
  target = checks.epsilon("target_epsilon", target_epsilon)
  delta = checks.delta(delta)
  configs = {"rdp": lambda: jp_accounting.RdpAccountantConfig(
                 orders=list(PrivacyLedger().orders)),
             "pld": lambda: jp_accounting.PldAccountantConfig(
                 value_discretization_interval=events.PLD_INTERVAL)}
  if accountant not in configs:
    raise ConfigError(f"accountant={accountant!r}: DP-SGD is calibrated under {tuple(configs)}; "
                      "set config.privacy.accountant (or --accountant) to one of them.")
  dpsgd = jp_accounting.DpsgdTrainingAccountant(configs[accountant]())
  if accountant == "pld":  # a PLD calibration takes seconds to a minute: each step logged
    dpsgd = _Logged(dpsgd, target, release.steps)
  noise = jp_accounting.calibrate_noise_multiplier(
      target_epsilon=target, accountant=dpsgd, batch_sizes=release.batch_size,
      num_updates=release.steps, num_samples=release.dataset_size, target_delta=delta,
      tol=1e-6)
  for _ in range(10_000):
    if epsilon_of(release.with_noise(noise), delta, accountant) <= target:
      return float(noise)
    noise *= 1.0 + 1e-6
  raise ConfigError(f"jax-privacy's calibration gave noise {noise:g}, above epsilon {target:g} "
                    f"under the ledger's {accountant}: the two accountants disagree; report it.")


class _Logged:
  """A jax-privacy training accountant that logs each epsilon it computes (a calibration's
  progress)."""

  def __init__(self, accountant, target: float, steps: int):
    self._accountant, self._target, self._steps = accountant, target, steps
    self._count, self._start = 0, time.monotonic()

  def can_calibrate_noise_multipliers(self) -> bool:
    return self._accountant.can_calibrate_noise_multipliers()

  def compute_epsilon(self, num_updates, dp_params):
    epsilon = self._accountant.compute_epsilon(num_updates, dp_params)
    self._count += 1
    logging.info("DP-SGD calibration (pld, %d steps, target epsilon %g): noise %.6g gives "
                 "epsilon %.6g; %d evaluations, %.0f s", self._steps, self._target,
                 dp_params.noise_multipliers, epsilon, self._count,
                 time.monotonic() - self._start)
    return epsilon
