"""LDP's plan (Sun et al., "Not Just Cloud Privacy"): the client transform's and the robust
teacher's settings from the ``ldp`` config block."""
from __future__ import annotations

import dataclasses

from dgd_jax.training import ldp


def robust_settings(block) -> ldp.RobustSettings:
  """Algorithm 1's transform and Eq. 3's robust training, as the ``ldp`` block sets them."""
  return ldp.RobustSettings(**{f.name: block[f.name]
                               for f in dataclasses.fields(ldp.RobustSettings)})
