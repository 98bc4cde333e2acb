"""Privacy accounting for dgd_jax: every epsilon the project reports comes from here.

Record each release of private information in a ``PrivacyLedger`` and ask it for (epsilon, delta)
under every applicable accountant::

  from dgd_jax import privacy
  ledger = privacy.PrivacyLedger([privacy.LNMaxQueries(noise_scale=40.0, queries=27)])
  ledger.epsilons(1e-5)["rdp"].epsilon   # 0.977543 (dp-accounting, improved conversion)
  ledger.check_budget(max_epsilon=1.0, delta=1e-5)   # ConfigError when the plan exceeds it

Conventions (details in PRIVACY.md and each module's docstring): every record states its
neighbouring relation ('replace_one' or 'add_or_remove_one') and, for the teacher releases, how
many teachers' shards one such change moves, k (``data.partitions.TEACHERS_CHANGED``: 1 for the
default partition under replace-one, which does not cover add/remove-one; for the 'stable'
partition 1 under add/remove-one and 2 under replace-one). k changed votes move two histogram
counts by k each at worst (L1 sensitivity 2k, L2 k sqrt(2)). LNMax with Laplace scale b is
(2k/b)-DP per query and ``LaplaceDpEvent(b / 2k)``; GNMax with std sigma has RDP k^2 lam / sigma^2
and is ``GaussianDpEvent(sigma / (k sqrt(2)))``. DPDFD is accounted for the per-row noise its code
adds (``privacy.dpdfd``: one teacher B T releases of 2C; disjoint-shard teachers 2kC per row, 2nC
for overlapping ones; direct training subsampled without replacement, label DP only); its Theorem 3
is available as the paper's claim. Queries under a Renyi filter (``FilteredQueries``,
``renyi_filter``) are charged their GNMax step only when answered, a DP guarantee; PATE 2018's
smooth-sensitivity release of a data-dependent epsilon is ``smooth_sensitivity``. Data-dependent and realised values (votes,
Confident-GNMax's answered queries) are flagged and never used for budgets. Everything here is
host-side NumPy: nothing runs on a device.
CLI planner: ``python -m dgd_jax.privacy --help``.
"""
from dgd_jax.privacy.calibrate import dpsgd_noise_multiplier, epsilon_of, max_queries, min_noise
from dgd_jax.privacy.conversion import (DEFAULT_MOMENT_ORDERS, DEFAULT_RDP_ORDERS,
                                        classic_epsilon, improved_epsilon, moments_epsilon)
from dgd_jax.privacy.ledger import (ACCOUNTANTS, DATA_DEPENDENT_ONLY, DATA_DEPENDENT_WARNING,
                                    FIXED_INPUTS_NOTE, EpsilonReport, PrivacyLedger,
                                    relations_json)
from dgd_jax.privacy.local import ldp_local_epsilon, vae_latent_epsilon, vae_latent_noise_scale
from dgd_jax.privacy.releases import (MECHANISMS, ClassCountQueries, ConfidentGNMaxQueries,
                                      DpdfdSteps, DpsgdSteps,
                                      FilteredQueries, GNMaxQueries, HistogramQueries,
                                      LNMaxQueries, PureDpRelease, Release,
                                      SmoothSensitivityCost, TEACHER_EXCLUSIONS)

__all__ = [
    "ACCOUNTANTS", "DATA_DEPENDENT_ONLY", "DATA_DEPENDENT_WARNING", "DEFAULT_MOMENT_ORDERS",
    "FIXED_INPUTS_NOTE",
    "DEFAULT_RDP_ORDERS", "MECHANISMS", "ClassCountQueries", "ConfidentGNMaxQueries",
    "DpdfdSteps", "DpsgdSteps",
    "EpsilonReport", "FilteredQueries",
    "GNMaxQueries", "HistogramQueries", "LNMaxQueries", "PrivacyLedger", "PureDpRelease",
    "Release", "SmoothSensitivityCost", "TEACHER_EXCLUSIONS", "classic_epsilon",
    "dpsgd_noise_multiplier", "epsilon_of", "improved_epsilon", "ldp_local_epsilon", "max_queries", "min_noise",
    "moments_epsilon", "relations_json", "vae_latent_epsilon", "vae_latent_noise_scale",
]
