r"""Baseline classifier: the paper CNN trained on the whole private training set.

COMMAND (paper preset; minutes on 2 CPU cores):
  python -m dgd_jax.main --config=dgd_jax/configs/baseline.py:fashion_mnist \
      --workdir=/tmp/dgd_baseline
EXPECTED: test_accuracy >= 0.91 (the baseline of DGD Table I on Fashion-MNIST).

COMMAND (quick CPU preset; 16/32 channels, 1500 steps; a minute or two):
  python -m dgd_jax.main --config=dgd_jax/configs/baseline.py:fashion_mnist,cpu \
      --workdir=/tmp/dgd_baseline_cpu
"""
from dgd_jax.configs import common


GRAMMAR = common.Grammar("baseline.py")


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  return make(arg.dataset, arg.preset, arg.smoke)


def make(dataset: str, preset: str, smoke: bool = False):
  """The baseline's config, which DGD, DPDFD and LDP build on."""
  config = common.base_config(dataset, preset, smoke)
  config.method = "baseline"
  config.baseline = dict(
      num_steps=3000 if preset == "paper" else 1500,
      batch_size=128,
      learning_rate=1e-3,  # Adam, decaying linearly to 0 (DGD IV-A)
      end_learning_rate=0.0,
  )
  return config
