r"""dgd_jax command line.

  python -m dgd_jax.main --config=dgd_jax/configs/baseline.py:fashion_mnist[,cpu] \
      --workdir=/tmp/run [--stages=baseline] [--config.seed=1 ...]

Parses flags and calls ``pipeline.run``; the library never reads FLAGS.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags
from ml_collections import config_flags

from dgd_jax import pipeline, progress
from dgd_jax.errors import UserInputError

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file and argument, e.g. dgd_jax/configs/baseline.py:fashion_mnist,cpu",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, report.")
_STAGES = flags.DEFINE_list("stages", None, "Run only these stages (default: all of the method).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  progress.setup_cli_logging()
  try:
    report = pipeline.run(_CONFIG.value, _WORKDIR.value, _STAGES.value)
  except UserInputError as e:
    sys.exit(f"error: {e}")
  summary = {k: report[k] for k in ("method", "dataset", "preset", "test_accuracy")}
  print(json.dumps(summary))


if __name__ == "__main__":
  app.run(main)
