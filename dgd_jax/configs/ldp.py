r"""LDP (Sun et al., "Not Just Cloud Privacy"): the client masks and perturbs its samples with
local Laplace noise (Algorithm 1); the teacher is trained to answer them (Algorithm 2, Eq. 3).
BASE is the baseline classifier; the robust teacher has the same architecture.

Argument: '<dataset>[,cpu][,ldp1|ldp5]': the paper's (sigma, mu) = (1, 1%) (``ldp1``,
default) or (5, 10%) (``ldp5``). B = 1 (the data range, data-independent).

COMMAND:
  python -m dgd_jax.main --config=dgd_jax/configs/ldp.py:fashion_mnist,cpu \
      --workdir=workdirs/ldp_cpu
"""
from dgd_jax.configs import baseline as baseline_config
from dgd_jax.configs import common
from dgd_jax.training import ldp


GRAMMAR = common.Grammar("ldp.py", choices=(common.Choice("client", tuple(ldp.PRESETS), "ldp1"),))


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  client = arg["client"]
  config = baseline_config.make(arg.dataset, arg.preset, arg.smoke)
  config.method = "ldp"
  config.ldp = common.ldp_config(client)
  config.ldp.num_steps = config.baseline.num_steps  # the robust teacher's schedule: BASE's
  return config
