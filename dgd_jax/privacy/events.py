"""dp-accounting events for dgd_jax's releases, and their per-order RDP curves.

Neighbouring relations of the teacher-vote mechanisms (LNMax, GNMax, Confident-GNMax) and of
DPDFD's disjoint-teacher steps. Each record states its relation (``neighbours``: 'replace_one',
one private example substituted, the size fixed; or 'add_or_remove_one') and how many teachers'
shards one such change can move, k = ``teachers_changed``. k is a property of the partition
(``dgd_jax.data.partitions.TEACHERS_CHANGED``): the default 'shuffle' partition deals equal shards
of a seeded permutation of the positions, so replacing the example at position p changes one
shard (k = 1) while adding or removing one re-deals them all (not covered); the 'stable'
partition keys each example's teacher on a hash of its content, so adding or removing one
changes one shard (k = 1) and replacing x by x' changes the shards of H(x) and H(x') (k = 2).
k changed votes move the histogram by at most 2k in L1 and k sqrt(2) in L2, and its maximum by k:
each mechanism module scales its sensitivity by k (``pate2017``, ``pate2018``, ``dpdfd``).
A run accounts one ledger per relation its partition covers (``ledger.relations_json``).

The sensitivity of each release between neighbours is folded into the event's noise multiplier:

    LaplaceDpEvent(noise_multiplier = laplace_scale / L1_sensitivity)
    GaussianDpEvent(noise_multiplier = gaussian_std / L2_sensitivity)

How dp-accounting 0.6 treats the relation for these non-subsampled events (checked in the tests):

* ``RdpAccountant`` accepts REPLACE_ONE for Laplace and Gaussian events and ignores the relation for
  them (the RDP of a shift by the sensitivity): it is built with the records' relation and gives
  the same numbers under either.
* ``PLDAccountant`` refuses LaplaceDpEvent under REPLACE_ONE, and for GaussianDpEvent under
  REPLACE_ONE it reads the noise multiplier per example contribution and doubles the shift (remove
  one contribution, add another). Our multipliers already carry the full shift between replace-one
  neighbours, so that would count it twice. The PLD of "outputs shift by at most the sensitivity, in
  either direction" is dp-accounting's ADD_OR_REMOVE_ONE PLD of the same event (without subsampling
  adding and removing give the same shift): ``PLD_RELATION``.

For these non-subsampled additive mechanisms the privacy loss depends only on the size of the shift
between neighbouring outputs: what matters is the sensitivity stated by each mechanism module (see
``pate2017``, ``pate2018``, ``dpdfd``) for the record's k.

``rdp_curve`` gives the same RDP curves as ``dp_accounting.rdp.RdpAccountant`` (tests check
agreement) so that the classic conversion and the data-dependent bounds, which dp-accounting does
not provide, can use them.
"""
from __future__ import annotations

import functools
import math

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp_accountant
import numpy as np

from dgd_jax.privacy import checks

# The neighbouring relations a record can be stated under (module docstring), by name.
NEIGHBOURS = {"replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
              "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE}
# dp-accounting's PLD parametrisation of a shift by the sensitivity (module docstring).
PLD_RELATION = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
# PLD discretisation: 1e-4 unless a Laplace event's loss range needs more than this many buckets.
PLD_INTERVAL = 1e-4
PLD_MAX_BUCKETS = 200_000


def pld_interval(evs) -> float:
  """Value discretisation for the PLD of ``evs``: 1e-4, coarser for Laplace events of huge pure
  epsilon (range [-1/m, 1/m]) so one event has at most ``PLD_MAX_BUCKETS`` buckets. Pessimistic
  discretisation is an upper bound at any interval; the coarser one only costs tightness."""
  laplace = [e.noise_multiplier for ev in evs for e, _ in flatten(ev)
             if isinstance(e, dp_accounting.LaplaceDpEvent)]
  if not laplace:
    return PLD_INTERVAL
  return max(PLD_INTERVAL, 2.0 / (min(laplace) * PLD_MAX_BUCKETS))


def laplace_event(scale: float, l1_sensitivity: float, count: int = 1) -> dp_accounting.DpEvent:
  """``count`` Laplace releases of scale ``scale`` on a query of L1 sensitivity
  ``l1_sensitivity``."""
  scale = checks.positive("Laplace scale", scale)
  event = dp_accounting.LaplaceDpEvent(noise_multiplier=scale / l1_sensitivity)
  return event if count == 1 else dp_accounting.SelfComposedDpEvent(event, count)


def gaussian_event(std: float, l2_sensitivity: float, count: int = 1) -> dp_accounting.DpEvent:
  """``count`` Gaussian releases of absolute std ``std`` on a query of L2 sensitivity
  ``l2_sensitivity``."""
  std = checks.positive("Gaussian std", std)
  event = dp_accounting.GaussianDpEvent(noise_multiplier=std / l2_sensitivity)
  return event if count == 1 else dp_accounting.SelfComposedDpEvent(event, count)


def laplace_rdp(pure_eps: float, orders) -> np.ndarray:
  """Exact RDP of a Laplace mechanism with pure epsilon ``pure_eps`` (= sensitivity / scale):
  eps + log(1 + (lam-1)/(2lam-1) * (exp((1-2lam) eps) - 1)) / (lam-1)  (Mironov 2017 Prop. 6)."""
  lam = checks.orders("orders", orders, minimum=1.0)
  return pure_eps + np.log1p((lam - 1.0) / (2.0 * lam - 1.0)
                             * np.expm1((1.0 - 2.0 * lam) * pure_eps)) / (lam - 1.0)


def gaussian_rdp(noise_multiplier: float, orders) -> np.ndarray:
  """RDP of a Gaussian mechanism with std / L2 sensitivity = ``noise_multiplier``:
  lam / (2 m^2)  (Mironov 2017 Prop. 7)."""
  lam = checks.orders("orders", orders, minimum=1.0)
  return lam / (2.0 * noise_multiplier ** 2)


# Orders at which subsampled events are evaluated: dp-accounting's sampling-without-replacement
# RDP costs O(order^2) per integer order up to 256, seconds on the full grid. A subset of the
# grid gives a valid (at most larger) epsilon.
SUBSAMPLED_ORDERS_MAX = 64
SUBSAMPLED_ORDERS_EXTRA = (96.0, 128.0, 256.0, 512.0, 1024.0)


def subsampled(evs) -> bool:
  """Whether any leaf of ``evs`` is a subsampled event."""
  return any(isinstance(e, dp_accounting.SampledWithoutReplacementDpEvent)
             for ev in evs for e, _ in flatten(ev))


def orders_for(evs, orders) -> np.ndarray:
  """``orders``, restricted to ``SUBSAMPLED_ORDERS_*`` when ``evs`` hold a subsampled event."""
  orders = np.asarray(orders, dtype=np.float64)
  if not subsampled(evs):
    return orders
  return orders[(orders <= SUBSAMPLED_ORDERS_MAX) | np.isin(orders, SUBSAMPLED_ORDERS_EXTRA)]


@functools.lru_cache(maxsize=100_000)
def _sampled_wor_gaussian_cgf(q: float, noise_multiplier: float, order: int) -> float:
  """(order - 1) x RDP at an integer order: dp-accounting's own function, cached."""
  return float(dp_rdp_accountant._compute_rdp_sample_wor_gaussian_int(  # pylint: disable=protected-access
      q, noise_multiplier, order))


def _sampled_wor_gaussian_rdp(q: float, noise_multiplier: float, order: float) -> float:
  """dp-accounting's ``_compute_rdp_sample_wor_gaussian_scalar``, with the integer orders' CGF
  cached: a fractional order interpolates the CGFs of its floor and ceiling (WBK19 Cor. 10),
  which the grid's neighbouring orders share, so each integer order is computed once per noise."""
  if q in (0.0, 1.0) or math.isinf(order):  # the library's closed forms
    return float(dp_rdp_accountant._compute_rdp_sample_wor_gaussian_scalar(  # pylint: disable=protected-access
        q, noise_multiplier, order))
  low, high = math.floor(order), math.ceil(order)
  if low == high:
    return _sampled_wor_gaussian_cgf(q, noise_multiplier, low) / (order - 1)
  t = order - low
  return ((1 - t) * _sampled_wor_gaussian_cgf(q, noise_multiplier, low)
          + t * _sampled_wor_gaussian_cgf(q, noise_multiplier, high)) / (order - 1)


def sampled_wor_gaussian_rdp(event: dp_accounting.SampledWithoutReplacementDpEvent,
                             orders) -> np.ndarray:
  """RDP of a Gaussian on a uniform sample of ``sample_size`` of ``source_dataset_size`` drawn
  without replacement, replace-one (Wang, Balle & Kasiviswanathan 2019, Thm. 27), by the same
  dp-accounting function its ``RdpAccountant`` uses (cached per order)."""
  if not isinstance(event.event, dp_accounting.GaussianDpEvent):
    raise ValueError(f"no RDP curve for {event!r}")
  q = event.sample_size / event.source_dataset_size
  lam = checks.orders("orders", orders, minimum=1.0)
  return np.array([_sampled_wor_gaussian_rdp(q, event.event.noise_multiplier, float(o))
                   for o in lam])


def poisson_gaussian_rdp(event: dp_accounting.PoissonSampledDpEvent, orders) -> np.ndarray:
  """RDP of a Gaussian on a Poisson sample with probability q, add/remove-one (Mironov, Talwar &
  Zhang 2019), by the function dp-accounting's ``RdpAccountant`` uses."""
  if not isinstance(event.event, dp_accounting.GaussianDpEvent):
    raise ValueError(f"no RDP curve for {event!r}")
  lam = checks.orders("orders", orders, minimum=1.0)
  return np.asarray(dp_rdp_accountant._compute_rdp_poisson_subsampled_gaussian(  # pylint: disable=protected-access
      event.sampling_probability, event.event.noise_multiplier, lam), dtype=np.float64)


def rdp_curve(event: dp_accounting.DpEvent, orders) -> np.ndarray:
  """Per-order RDP of a (composed) Laplace/Gaussian/sampled-Gaussian event, summed over its
  compositions."""
  if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
    return sampled_wor_gaussian_rdp(event, orders)
  if isinstance(event, dp_accounting.PoissonSampledDpEvent):
    return poisson_gaussian_rdp(event, orders)
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.count * rdp_curve(event.event, orders)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return sum((rdp_curve(e, orders) for e in event.events),
               np.zeros_like(np.asarray(orders, dtype=np.float64)))
  if isinstance(event, dp_accounting.LaplaceDpEvent):
    return laplace_rdp(1.0 / event.noise_multiplier, orders)
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return gaussian_rdp(event.noise_multiplier, orders)
  raise ValueError(f"no RDP curve for {event!r}")


def flatten(event: dp_accounting.DpEvent,
            count: int = 1) -> list[tuple[dp_accounting.DpEvent, int]]:
  """(leaf event, total count) pairs of a composed event."""
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return flatten(event.event, count * event.count)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return [pair for e in event.events for pair in flatten(e, count)]
  return [(event, count)]


def gaussian_equivalent(events) -> float | None:
  """If every leaf is Gaussian, the noise multiplier of the single Gaussian mechanism equal to
  their composition, (sum_i count_i / m_i^2)^(-1/2); otherwise None."""
  leaves = [pair for e in events for pair in flatten(e)]
  if not leaves or not all(isinstance(e, dp_accounting.GaussianDpEvent) for e, _ in leaves):
    return None
  return 1.0 / math.sqrt(sum(c / e.noise_multiplier ** 2 for e, c in leaves))


def laplace_pure_epsilon(evs) -> float | None:
  """If every leaf is Laplace, their basic composition sum_i count_i / m_i (pure DP, valid at any
  delta); otherwise None."""
  leaves = [pair for e in evs for pair in flatten(e)]
  if not leaves or not all(isinstance(e, dp_accounting.LaplaceDpEvent) for e, _ in leaves):
    return None
  return sum(c / e.noise_multiplier for e, c in leaves)
