r"""Teacher ensemble: n teachers on disjoint partitions, evaluated alone and aggregated.

COMMAND (quick CPU preset: 250 teachers of 16/32 channels, 300 steps of 32; minutes):
  python -m dgd_jax.main --config=dgd_jax/configs/teachers.py:fashion_mnist,cpu \
      --workdir=workdirs/teachers_cpu
COMMAND (paper preset: 64/128 channels, 3000 steps of 128 per teacher; a GPU job):
  python -m dgd_jax.main --config=dgd_jax/configs/teachers.py:fashion_mnist \
      --workdir=workdirs/teachers_paper [--config.num_teachers=100]
"""
from dgd_jax.configs import common


GRAMMAR = common.Grammar("teachers.py")


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  config = common.base_config(arg.dataset, arg.preset, arg.smoke)
  config.method = "teachers"
  config.num_teachers = 250
  config.teachers = common.teachers_config(arg.preset)
  config.teachers.eval_size = 0  # evaluating the ensemble is this method's point: all the test set
  return config
