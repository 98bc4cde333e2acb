r"""dgd_jax command line.

  python -m dgd_jax.main --config=dgd_jax/configs/baseline.py:fashion_mnist[,cpu] \
      --workdir=/tmp/run [--stages=baseline] [--config.seed=1 ...]
  python -m dgd_jax.main --config=dgd_jax/configs/dgd.py:fashion_mnist --compile_only

``--compile_only`` compiles every jitted program the run would make at the config's full
shapes on this host's backend (``pipeline.compile_programs``) and prints each one's memory
(XLA's analysis, the teachers' step held to their memory plan): nothing is trained, queried or
written, so no --workdir is needed. It proves a GPU or TPU preset's programs on that machine
in minutes, or its shapes on a CPU.

Multi-process (``distributed.py``): under SLURM with several tasks or on a multi-host
Cloud TPU slice the processes find each other; elsewhere give every process
``--coordinator_address=HOST:PORT --num_processes=N --process_id=I`` (process 0 hosts the
coordinator). See ``launch/`` and BUILD.md.

Parses flags and calls ``pipeline.run``; the library never reads FLAGS.
"""
from __future__ import annotations

import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from dgd_jax.configs import common
from dgd_jax.runtime import distributed
from dgd_jax.runtime import progress
from dgd_jax.runtime.errors import PrivacyAuditError, UserInputError

__doc__ += "\n" + common.catalog()  # --help lists every config file's presets and flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file and argument, e.g. dgd_jax/configs/baseline.py:fashion_mnist,cpu",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, report.")
_STAGES = flags.DEFINE_list("stages", None, "Run only these stages (default: all of the method).")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", "", "HOST:PORT of process 0 for a multi-process run (not needed "
    "under SLURM or on a Cloud TPU slice, where JAX finds it).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 0, "Processes in the run (with "
                                      "--coordinator_address).")
_PROCESS_ID = flags.DEFINE_integer("process_id", -1, "This process's index, 0..N-1 (with "
                                   "--coordinator_address).")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Join a multi-process run JAX detects by itself (SLURM, Cloud TPU); "
    "set by launch/slurm.sh and launch/tpu_vm.sh.")
_TIMEOUT = flags.DEFINE_integer("distributed_timeout", 300, "Seconds to wait for the "
                                "coordinator and every process to join.")
_COMPILE_ONLY = flags.DEFINE_bool(
    "compile_only", False, "Compile every jitted program of the run at the config's full "
    "shapes and print their memory; train and write nothing (no --workdir needed).")
_ALLOW_NOISE_REDRAW = flags.DEFINE_bool(
    "allow_noise_redraw", False, "Resume or recompute a noisy stage on another backend or JAX "
    "version than it first drew on: its noise is drawn anew, a second release of the same "
    "private data that spends the budget again.")
flags.mark_flags_as_required(["config"])


def _print_program(stage: str, program: str, sizes: dict) -> None:
  """One JSON line per compiled program: its stage, name and memory in MiB."""
  if distributed.is_writer():
    print(json.dumps({"stage": stage, "program": program,
                      **{f"{k}_mib": round(v / 2**20, 3) for k, v in sizes.items()}}),
          flush=True)


def main(argv):
  del argv
  progress.setup_cli_logging()
  try:
    distributed.from_environment(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                                 _DISTRIBUTED.value, _TIMEOUT.value)  # before any device use
    from dgd_jax.runner import pipeline  # pylint: disable=g-import-not-at-top
    if _COMPILE_ONLY.value:
      pipeline.compile_programs(_CONFIG.value, _STAGES.value, log=_print_program)
      return
    if not _WORKDIR.value:
      raise UserInputError("pass --workdir=<folder> (its checkpoints, metrics and report), or "
                           "--compile_only to compile the run's programs without training.")
    report = pipeline.run(_CONFIG.value, _WORKDIR.value, _STAGES.value,
                          allow_noise_redraw=_ALLOW_NOISE_REDRAW.value)
  except UserInputError as e:
    sys.exit(f"error: {e}")
  except KeyboardInterrupt:  # every artefact is written whole: a rerun resumes
    print("interrupted: rerun the same command to resume from the last checkpoint.",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    # Orbax's writer threads, cut off by an interrupt mid-save, print tracebacks while the
    # interpreter shuts down: the workdir's files are closed and its lock released by now
    os._exit(130)
  except PrivacyAuditError as e:
    sys.exit(f"AUDIT FAILED: {e}")
  summary = {k: report[k] for k in ("method", "dataset", "preset", "test_accuracy")}
  if distributed.is_writer():
    print(json.dumps(summary))


if __name__ == "__main__":
  app.run(main, flags_parser=common.parse_flags)
