r"""Teacher-count sweep: ensembles of 10, 25, 50, 100 and 250 teachers trained as one
program, aggregated accuracy against teacher count and Laplace scale (DGD Fig. 8 top left).

COMMAND (quick CPU preset; 435 teachers of 16/32 channels in one program):
  python -m dgd_jax.main --config=dgd_jax/configs/teacher_sweep.py:fashion_mnist,cpu \
      --workdir=workdirs/teacher_sweep_cpu
OUTPUT: <workdir>/teacher_sweep/sweep.csv and sweep.png.
"""
from dgd_jax.configs import common


GRAMMAR = common.Grammar("teacher_sweep.py")


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  config = common.base_config(arg.dataset, arg.preset, arg.smoke)
  config.method = "teacher_sweep"
  config.teachers = common.teachers_config(arg.preset)
  config.sweep = dict(sizes=(10, 25, 50, 100, 250), noise_scales=(5.0, 10.0, 20.0, 40.0))
  return config
