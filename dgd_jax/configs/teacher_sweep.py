r"""Teacher-count sweep: ensembles of 10, 25, 50, 100 and 250 teachers trained as one
program, aggregated accuracy against teacher count and Laplace scale (DGD Fig. 8 top left).

COMMAND (quick CPU preset; 435 teachers of 16/32 channels in one program):
  python -m dgd_jax.main --config=dgd_jax/configs/teacher_sweep.py:fashion_mnist,cpu \
      --workdir=workdirs/teacher_sweep_cpu
OUTPUT: <workdir>/teacher_sweep/sweep.csv and sweep.png.
"""
from dgd_jax.configs import common


def get_config(arg: str | None = None):
  dataset, preset, smoke = common.parse_arg(arg)
  config = common.base_config(dataset, preset, smoke)
  config.method = "teacher_sweep"
  config.teachers = common.teachers_config(preset)
  config.sweep = dict(sizes=(10, 25, 50, 100, 250), noise_scales=(5.0, 10.0, 20.0, 40.0))
  return config
