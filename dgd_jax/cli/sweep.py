r"""Sweep command line (see ``dgd_jax.runner.sweep``):

  python -m dgd_jax.sweep --config=dgd_jax/configs/dgd.py:fashion_mnist,cpu \
      --workdir=workdirs/fig3 --set=queries.num_queries=27,750,1000,3000 \
      --config.privacy.max_epsilon=inf [--reuse=workdirs/dgd_cpu] [--accounting_only]

Parses flags and calls ``dgd_jax.runner.sweep.run``; the library never reads FLAGS.
"""
from __future__ import annotations

import sys

from absl import app, flags
from ml_collections import config_flags

from dgd_jax.configs import common
from dgd_jax.runner import sweep
from dgd_jax.runtime import host
from dgd_jax.runtime import progress
from dgd_jax.runtime.errors import UserInputError

__doc__ += "\n" + common.catalog()  # --help lists every config file's presets and flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file and argument, e.g. dgd_jax/configs/dgd.py:fashion_mnist,cpu",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep directory: CSV, plots, one folder per "
                               "grid point, shared stage folders.")
_SET = flags.DEFINE_multi_string("set", None, "name=v1,v2 or a,b=v1:w1,v2:w2; repeat for a "
                                 "grid (the first is the plots' x axis).")
_REUSE = flags.DEFINE_multi_string("reuse", [], "Finished workdirs whose matching stages "
                                   "the sweep reuses (read only).")
_ACCOUNTING_ONLY = flags.DEFINE_bool("accounting_only", False, "Train nothing: tabulate the "
                                     "planned epsilon of the queries under every accountant.")
_COLUMNS = flags.DEFINE_list("columns", [], "Extra report.json fields (dotted paths, e.g. "
                             "generator.synthetic_student_accuracy) for the CSV and plot.")
flags.mark_flags_as_required(["config", "workdir", "set"])


def main(argv):
  del argv
  progress.setup_cli_logging()
  try:
    host.use_every_core()  # before the first device use (host.py)
    axes = [sweep.parse_axis(s, _CONFIG.value) for s in _SET.value]
    sweep.run(_CONFIG.value, _WORKDIR.value, axes, _REUSE.value, _ACCOUNTING_ONLY.value,
              _COLUMNS.value)
  except UserInputError as e:
    sys.exit(f"error: {e}")
  print(f"sweep: {_WORKDIR.value}/sweep.md")


if __name__ == "__main__":
  app.run(main, flags_parser=common.parse_flags)
