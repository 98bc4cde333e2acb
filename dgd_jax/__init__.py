"""dgd_jax: privacy-preserving teacher-student learning in JAX (README.md).

The public API (``dgd_jax.api``; loaded on first use, so that ``import dgd_jax.privacy`` and
the command-line tools start without it):

  train_teachers  an ensemble of any Flax classifier on disjoint shards of your arrays
  teacher_votes   their (private) vote histograms on query images
  noisy_labels    LNMax / GNMax / Confident-GNMax labels or Gaussian histograms, with the
                  release's ledger record
  epsilon         the (epsilon, delta) of release records under a named accountant
  plan_queries    the aggregator, noise and query count for a budget, before any vote
  train_dpsgd     any Flax classifier trained with DP-SGD (jax-privacy) for a budget, with
                  the steps' ledger record
  run             a whole method from a config, in a workdir
  Teachers, images, labels: the ensemble's type and the array checks the functions use
  privacy         the ledger, release records and accountants (PRIVACY.md)
"""
import importlib

from dgd_jax.runtime import host

host.keep_freed_memory()  # before XLA allocates: faster CPU steps (host.py)

__all__ = ["Teachers", "epsilon", "images", "labels", "noisy_labels", "plan_queries", "privacy",
           "run", "teacher_votes", "train_dpsgd", "train_teachers"]


def __getattr__(name: str):
  if name == "privacy":
    return importlib.import_module("dgd_jax.privacy")
  if name in __all__:
    return getattr(importlib.import_module("dgd_jax.api"), name)
  raise AttributeError(f"module 'dgd_jax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
