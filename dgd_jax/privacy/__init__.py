"""Privacy accounting for dgd_jax: every epsilon the project reports comes from here.

Record each release of private information in a ``PrivacyLedger`` and ask it for (epsilon, delta)
under every applicable accountant::

  from dgd_jax import privacy
  ledger = privacy.PrivacyLedger([privacy.LNMaxQueries(noise_scale=40.0, queries=27)])
  ledger.epsilons(1e-5)["rdp"].epsilon   # 0.977543 (dp-accounting, improved conversion)
  ledger.check_budget(max_epsilon=1.0, delta=1e-5)   # ConfigError when the plan exceeds it

Conventions (details in PRIVACY.md and each module's docstring): for the teacher-vote mechanisms,
neighbouring datasets have the same size and differ in one substituted private example
(replace-one; dgd_jax's shard-by-position partitioner does not support add/remove-one); it
changes one teacher's vote, i.e. two histogram counts by 1 each (L1 sensitivity 2, L2 sensitivity
sqrt(2)). LNMax with Laplace scale b is (2/b)-DP per query and
``LaplaceDpEvent(b / 2)``; GNMax with std sigma has RDP lam / sigma^2 and is
``GaussianDpEvent(sigma / sqrt(2))``. DPDFD is accounted for the per-row noise its code adds
(``privacy.dpdfd``: one teacher B T releases of 2C; disjoint-shard teachers 2C per row, 2nC for
overlapping ones; direct training subsampled without replacement, label DP only); its Theorem 3
is available as the paper's claim. Data-dependent and realised values (votes,
Confident-GNMax's answered queries) are flagged and never used for budgets. Everything here is
host-side NumPy: nothing runs on a device.
CLI planner: ``python -m dgd_jax.privacy --help``.
"""
from dgd_jax.privacy.calibrate import dpsgd_noise_multiplier, epsilon_of, max_queries, min_noise
from dgd_jax.privacy.conversion import (DEFAULT_MOMENT_ORDERS, DEFAULT_RDP_ORDERS,
                                        classic_epsilon, improved_epsilon, moments_epsilon)
from dgd_jax.privacy.ledger import (ACCOUNTANTS, DATA_DEPENDENT_ONLY, DATA_DEPENDENT_WARNING,
                                    EpsilonReport, PrivacyLedger)
from dgd_jax.privacy.local import ldp_local_epsilon, vae_latent_epsilon, vae_latent_noise_scale
from dgd_jax.privacy.releases import (MECHANISMS, ConfidentGNMaxQueries, DpdfdSteps, DpsgdSteps,
                                      GNMaxQueries, LNMaxQueries, PureDpRelease, Release)

__all__ = [
    "ACCOUNTANTS", "DATA_DEPENDENT_ONLY", "DATA_DEPENDENT_WARNING", "DEFAULT_MOMENT_ORDERS",
    "DEFAULT_RDP_ORDERS", "MECHANISMS", "ConfidentGNMaxQueries", "DpdfdSteps", "DpsgdSteps",
    "EpsilonReport",
    "GNMaxQueries", "LNMaxQueries", "PrivacyLedger", "PureDpRelease", "Release", "classic_epsilon",
    "dpsgd_noise_multiplier", "epsilon_of", "improved_epsilon", "ldp_local_epsilon", "max_queries", "min_noise",
    "moments_epsilon", "vae_latent_epsilon", "vae_latent_noise_scale",
]
