r"""LDP (Sun et al., "Not Just Cloud Privacy"): the client masks and perturbs its samples with
local Laplace noise (Algorithm 1); the teacher is trained to answer them (Algorithm 2, Eq. 3).
BASE is the baseline classifier; the robust teacher has the same architecture.

Argument: '<dataset>[,cpu][,ldp1|ldp5]': the paper's (sigma, mu) = (1, 1%) (``ldp1``,
default) or (5, 10%) (``ldp5``). B = 1 (the data range, data-independent).

COMMAND:
  python -m dgd_jax.main --config=dgd_jax/configs/ldp.py:fashion_mnist,cpu \
      --workdir=workdirs/ldp_cpu
"""
import ml_collections

from dgd_jax import ldp
from dgd_jax.configs import baseline as baseline_config


def get_config(arg: str | None = None):
  items = [s.strip() for s in (arg or "").split(",") if s.strip()]
  preset = next((s for s in items if s in ldp.PRESETS), "ldp1")
  config = baseline_config.get_config(",".join(s for s in items if s not in ldp.PRESETS))
  sigma, mu = ldp.PRESETS[preset]
  config.method = "ldp"
  config.ldp = ml_collections.ConfigDict(dict(
      sigma=sigma,  # Laplace scale B / sigma (Algorithm 1 line 3)
      mu=mu,  # masking rate: ceil(N mu) zeros (Algorithm 1 line 1)
      bound=ldp.DEFAULT_BOUND,  # B
      lam=0.2,  # Eq. 3 mix of perturbed samples (LDP: 0.2 for MNIST-like data, 0.5 CIFAR-10)
      eta=1.0,  # ||r||_2 <= eta, the worst-case perturbation (Eq. 3)
      pgd_steps=3,  # projected gradient ascent steps for r
      num_steps=config.baseline.num_steps,  # the robust teacher's schedule = BASE's
      batch_size=128,
      learning_rate=1e-3,
      end_learning_rate=0.0,
  ))
  return config
