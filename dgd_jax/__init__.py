"""dgd_jax: privacy-preserving teacher-student learning in JAX (README.md).

The public API (``dgd_jax.api``; loaded on first use, so that ``import dgd_jax.privacy`` and
the command-line tools start without it):

  train_teachers  an ensemble of any Flax classifier on disjoint shards of your arrays
  teacher_votes   their (private) vote histograms on query images
  noisy_labels    LNMax / GNMax / Confident-GNMax labels or Gaussian histograms (``Answers``:
                  labels, answered, noisy histograms, the release's ledger record)
  epsilon         the (epsilon, delta) of one or several releases under an accountant (pld by
                  default); data-dependent analyses of their votes on request
  smooth_sensitivity_epsilon  PATE 2018's DP release of GNMax answers' data-dependent epsilon
  noise_for       the least noise for a number of answers within a budget
  dpsgd_noise_for DP-SGD's noise multiplier for a budget
  plan_queries    the aggregator, noise and query count for a budget, before any vote
  train_dpsgd     any Flax classifier trained with DP-SGD (jax-privacy) for a budget, with
                  the steps' ledger record
  dgd, pate, dpdfd  a whole method on your arrays and your module: a ``Result`` holding the
                  released model's parameters, the model and the report
  run             a whole method from a config, in a workdir
  load_release    the model a run's release/ folder publishes: (module, variables, prepare)
  open_run        a finished run, read-only (``Run``: its config, data, teachers, baseline,
                  pool, VAE, and the student stage's fit, for research on a run)
  read_idx        the four IDX files of a folder as uint8 arrays (e.g. Fashion-MNIST)
  Answers, Teachers, images, labels: the answers' and the ensemble's types and the array
                  checks the functions use
  privacy         the ledger, release records and accountants (PRIVACY.md)
"""
import importlib

from dgd_jax.runtime import host

host.keep_freed_memory()  # before XLA allocates: faster CPU steps (host.py)

__all__ = ["Answers", "Result", "Run", "Teachers", "dgd", "dpdfd", "dpsgd_noise_for", "epsilon",
           "images", "labels", "load_release", "noise_for", "noisy_labels", "open_run", "pate",
           "plan_queries", "privacy", "read_idx", "run", "smooth_sensitivity_epsilon",
           "teacher_votes", "train_dpsgd", "train_teachers"]


def __getattr__(name: str):
  if name == "privacy":
    return importlib.import_module("dgd_jax.privacy")
  if name in __all__:
    return getattr(importlib.import_module("dgd_jax.api"), name)
  raise AttributeError(f"module 'dgd_jax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
