"""From per-order Renyi bounds to (epsilon, delta): the classic tail bound and dp-accounting's
improved conversion, each returning the optimal order.

Two vocabularies describe the same curve:

* Renyi DP of order ``lam > 1``: ``rdp(lam) = D_lam(M(d) || M(d'))`` (Mironov 2017).
* PATE 2017's log-moment of order ``l > 0``: ``alpha(l) = log E[exp(l * C)]``, with C the privacy
  loss, so ``alpha(l) = l * rdp(l + 1)`` (PATE 2017 Definition 3).

The classic conversion (Mironov 2017 Proposition 3) and the moments-accountant tail bound
(PATE 2017 Theorem 2.2, from Abadi et al. 2016) are the same inequality in these two vocabularies:

    eps = min_lam rdp(lam) + ln(1/delta) / (lam - 1)        # classic RDP -> DP
        = min_l (alpha(l) + ln(1/delta)) / l  with l = lam - 1   # moments accountant

so one function, ``classic_epsilon``, serves both (``moments_epsilon`` maps log-moments onto it).
The improved conversion (Balle et al. 2020 Theorem 21 / Canonne-Kamath-Steinke 2020 Proposition 12,
``dp_accounting.rdp.compute_epsilon``) is never larger:

    eps = min_lam rdp(lam) + ln((lam - 1) / lam) - (ln delta + ln lam) / (lam - 1)

Every order is a valid bound, so minimising over a finite grid only gives a larger (safe) epsilon
than the infimum over all orders.
"""
from __future__ import annotations

import numpy as np
from dp_accounting import rdp as dp_rdp

from dgd_jax.privacy import checks

# Renyi orders used by every RDP accountant unless told otherwise: the union of dp-accounting's
# defaults (1.1 .. 10.9 by 0.1, 11 .. 63, 128 .. 1024) and the PATE 2018 analysis grid
# (2 .. 100 by 0.5, then 100 log-spaced orders up to 500). More orders never hurt: each is valid.
DEFAULT_RDP_ORDERS = tuple(float(o) for o in np.unique(np.concatenate([
    1.0 + np.arange(1, 100) / 10.0, np.arange(11, 64), [128, 256, 512, 1024],
    np.arange(2, 100.5, 0.5), np.logspace(2, np.log10(500), num=100)])))

# PATE 2017 Appendix B: "we compute these moments for a few values of lambda (integers up to 8)".
DEFAULT_MOMENT_ORDERS = tuple(float(l) for l in range(1, 9))


def classic_epsilon(orders, rdp, delta: float) -> tuple[float, float]:
  """(epsilon, optimal order) by the classic bound eps = min rdp(lam) + ln(1/delta)/(lam - 1)
  (Mironov 2017 Prop. 3). ``rdp`` may contain +inf where no bound applies."""
  delta = checks.delta(delta)
  orders = checks.orders("orders", orders, minimum=1.0)
  rdp = np.asarray(rdp, dtype=np.float64)
  if rdp.shape != orders.shape:
    raise ValueError(f"rdp has shape {rdp.shape}, orders {orders.shape}")
  eps = rdp + np.log(1.0 / delta) / (orders - 1.0)  # Mironov 2017 Prop. 3
  best = int(np.argmin(eps))
  return float(eps[best]), float(orders[best])


def improved_epsilon(orders, rdp, delta: float) -> tuple[float, float]:
  """(epsilon, optimal order) by dp-accounting's improved conversion
  (``dp_accounting.rdp.compute_epsilon``; Balle et al. 2020 Thm. 21)."""
  delta = checks.delta(delta)
  orders = checks.orders("orders", orders, minimum=1.0)
  rdp = np.asarray(rdp, dtype=np.float64)
  if rdp.shape != orders.shape:
    raise ValueError(f"rdp has shape {rdp.shape}, orders {orders.shape}")
  eps, order = dp_rdp.compute_epsilon(orders.tolist(), rdp.tolist(), delta)
  return float(eps), float(order)


def moments_to_rdp(moment_orders, log_moments) -> tuple[np.ndarray, np.ndarray]:
  """Log-moments alpha(l) -> (Renyi orders l + 1, rdp = alpha(l) / l)  (PATE 2017 Def. 3)."""
  moment_orders = checks.orders("moment_orders", moment_orders, minimum=0.0)
  return moment_orders + 1.0, np.asarray(log_moments, dtype=np.float64) / moment_orders


def moments_epsilon(moment_orders, log_moments, delta: float) -> tuple[float, float]:
  """(epsilon, optimal moment order l) of the moments accountant:
  eps = min_l (alpha(l) + ln(1/delta)) / l  (PATE 2017 Thm. 2.2), via ``classic_epsilon``."""
  eps, order = classic_epsilon(*moments_to_rdp(moment_orders, log_moments), delta)
  return eps, order - 1.0
