"""The analytic Gaussian mechanism's exact epsilon (Balle & Wang 2018, Thm. 8), computed here
independently of dp-accounting to check the accountants and the planner against."""
from __future__ import annotations

import math

from scipy import optimize, stats


def epsilon(r: float, delta: float) -> float:
  """The least epsilon of the Gaussian mechanism whose L2 sensitivity over its noise std is
  r: delta(eps) = Phi(r/2 - eps/r) - e^eps Phi(-r/2 - eps/r) solved for ``delta``."""
  delta_of = lambda e: stats.norm.cdf(r / 2 - e / r) - math.exp(e) * stats.norm.cdf(-r / 2 - e / r)
  return optimize.brentq(lambda e: delta_of(e) - delta, 1e-3, 100.0)
