r"""The prepared device check: one command on a lent accelerator, its figures as JSON.

  bash launch/device_check.sh                      # on the device machine ($OUT set)
  python -m dgd_jax.cli.device_check --out=/tmp/check --data=<IDX folder> [--dry_run]

Measures, in this order so that the first minutes already pay, and rewrites
``<out>/device_check.json`` after each figure (a run cut short keeps what it measured):

1. the machine: jax's version, backend and devices; the float32 matmul rate at full precision
   and at the backend's default precision (TF32 on recent NVIDIA GPUs);
2. the teacher engine: 250 teachers x 32 examples at 16/32 and 64/128 channels (examples/s and
   the fraction of each peak), with the backend's chunk (all teachers on GPU/TPU: one plain
   vmap), and the PyTorch per-teacher loop beside it where ``--torch_peer`` names the peer
   script (``shared/bench/torch_teachers.py``; it runs on the CPU);
3. every jitted program of the paper presets compiled at its full shapes
   (``pipeline.compile_programs``) with XLA's memory for it;
4. the paper presets' stages in their real schedules, one stage per process under what is left
   of ``--budget`` seconds: DGD's paper preset at eps 10 (its student's accuracy where it
   finishes), then DP-SGD ScatterNet + linear at eps 3; a stage the budget cuts is recorded
   with its last logged step and, where its schedule is one step count, the time extrapolated
   to the whole schedule.

``--dry_run`` runs the same code at tiny shapes (4 teachers, one-step schedules, few queries)
on any backend: the test suite runs it, so the check cannot rot before a device comes.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time

import jax
from absl import app, flags

from dgd_jax.cli import bench
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.files import read_json, write_json

_OUT = flags.DEFINE_string("out", None, "Folder for device_check.json and the runs' workdirs.")
_DATA = flags.DEFINE_string("data", "", "Folder of Fashion-MNIST's four IDX files (empty: the "
                            "dataset's default, the Debian package's folder).")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Tiny shapes: the same code path in seconds.")
_BUDGET = flags.DEFINE_float("budget", 420.0, "Seconds for the whole check; the stage runs "
                             "stop when it is spent.")
_TORCH_PEER = flags.DEFINE_string("torch_peer", "", "The PyTorch peer script "
                                  "(torch_teachers.py); empty: no PyTorch figure.")
# The presets whose stages run in their real schedules, in order (config file:argument).
RUNS = ("dgd:eps10", "dpsgd:eps3")
# The presets whose programs are compiled at their full shapes.
COMPILED = ("baseline:", "teachers:", "dgd:eps10", "pate:plus", "dpdfd:", "ldp:ldp1",
            "dpsgd:eps3")
_RUNS = flags.DEFINE_list("runs", list(RUNS), "Presets (config:argument) whose stages run.")
_COMPILED = flags.DEFINE_list("compiled", list(COMPILED), "Presets whose programs compile.")
flags.mark_flags_as_required(["out"])
# What a dry run changes: the fewest teachers, steps and samples that still run every stage.
DRY_RUN = {"smoke": True, "num_teachers": 4, "queries.num_queries": 8,
           "generator.num_synthetic": 32, "pool.size": 16, "dpsgd.batch_size": 16}
WIDTHS = ((16, 32), (64, 128))


class Check:
  """The figures so far, written to ``<out>/device_check.json`` after each one."""

  def __init__(self, out: str, dry_run: bool, budget: float):
    self.out, self.start, self.budget = out, time.perf_counter(), budget
    self.path = os.path.join(out, "device_check.json")
    self.figures = {"dry_run": dry_run, "budget_seconds": budget}

  def left(self) -> float:
    return self.budget - (time.perf_counter() - self.start)

  def record(self, key: str, value) -> None:
    self.figures[key] = value
    self.figures["elapsed_seconds"] = time.perf_counter() - self.start
    write_json(self.path, self.figures)
    print(json.dumps({key: value}), flush=True)


def argument(config: str, arg: str, data: str, dry_run: bool) -> str:
  """A config argument on the dataset ``data`` (idx folder) or Fashion-MNIST."""
  dataset = f"idx:{data}" if data else "fashion_mnist"
  return ",".join(p for p in (dataset, arg, "cpu" if dry_run and config == "dgd" else "") if p)


def config_of(config: str, arg: str, data: str, dry_run: bool):
  """The preset's config (with the dry run's changes where they apply)."""
  out = importlib.import_module(f"dgd_jax.configs.{config}").get_config(argument(config, arg, data, dry_run))
  for field, value in dry_run_fields(out, dry_run).items():
    block, _, name = field.rpartition(".")
    (out[block] if block else out)[name] = value
  return out


def dry_run_fields(config, dry_run: bool) -> dict:
  """The dry run's changes to the fields this config has (none for a real run)."""
  return {f: v for f, v in DRY_RUN.items() if dry_run and f.split(".")[0] in config}


def overrides(config, dry_run: bool) -> list[str]:
  """The dry run's changes as command-line flags for ``dgd_jax.main``."""
  return [f"--config.{f}={v}" for f, v in dry_run_fields(config, dry_run).items()]


def matmul_rates() -> dict:
  """The float32 matmul rate (GFLOP/s) at full precision and at the backend's default."""
  with jax.default_matmul_precision("highest"):
    highest = bench.matmul_peak_flops()
  return {"float32_highest_gflops": highest / 1e9,
          "float32_default_gflops": bench.matmul_peak_flops() / 1e9}


def teacher_engine(dry_run: bool, peak: float, torch_peer: str) -> list[dict]:
  """The ensemble step at both widths (and the PyTorch loop where the peer is given)."""
  n, steps = (4, 1) if dry_run else (250, 5)
  rows = []
  for conv1, conv2 in WIDTHS:
    rows.append(bench.teachers(n, 32, conv1, conv2, steps, peak=peak,
                               per_teacher=32 if dry_run else 240))
    if torch_peer:
      run = subprocess.run([sys.executable, torch_peer, "--teachers", str(n), "--batch", "32",
                            "--steps", str(steps), "--conv1", str(conv1), "--conv2", str(conv2)],
                           capture_output=True, text=True, check=False)
      rows.append(json.loads(run.stdout) if run.returncode == 0
                  else {"impl": "torch-loop", "error": run.stderr[-500:]})
  return rows


def compiled(presets, data: str, dry_run: bool) -> dict:
  """Every program of the ``presets`` (``COMPILED``) at their shapes: {preset: {stage:
  {program: bytes}}}."""
  out = {}
  for config, arg in (p.split(":") for p in presets):
    name = f"{config}.py:{arg}" if arg else f"{config}.py"
    try:
      out[name] = pipeline.compile_programs(config_of(config, arg, data, dry_run))
    except Exception as e:  # pylint: disable=broad-except  # recorded, the check goes on
      out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
  return out


def stage_times(check: Check, config: str, arg: str, data: str, dry_run: bool) -> dict:
  """Each stage of the preset run alone in a process under the budget left: its seconds, or
  where it was cut and the time extrapolated from its logged steps."""
  cfg = pipeline.run_config(config_of(config, arg, data, dry_run))
  workdir = os.path.join(check.out, f"{config}_{arg}")
  spec = (importlib.import_module(f"dgd_jax.configs.{config}").__file__ + ":"
          + argument(config, arg, data, dry_run))
  out = {}
  for stage in methods.plan_stages(cfg):
    left = check.left()
    if left < 10:
      out[stage] = {"skipped": "the budget is spent"}
      continue
    command = [sys.executable, "-m", "dgd_jax.main", f"--config={spec}", f"--workdir={workdir}",
               f"--stages={stage}", *overrides(cfg, dry_run)]
    t0 = time.perf_counter()
    try:
      run = subprocess.run(command, capture_output=True, text=True, timeout=left, check=False)
    except subprocess.TimeoutExpired:
      out[stage] = cut(workdir, stage, cfg, time.perf_counter() - t0)
      break
    result = os.path.join(workdir, stage, "result.json")
    if run.returncode != 0 or not os.path.exists(result):
      out[stage] = {"error": run.stderr[-800:]}
      break
    done = read_json(result)
    out[stage] = {"seconds": time.perf_counter() - t0, "stage_seconds": done["stage_seconds"],
                  **{k: done[k] for k in ("test_accuracy", "train_seconds") if k in done}}
  report = os.path.join(workdir, "report.json")
  if os.path.exists(report):
    r = read_json(report)
    out["report"] = {k: r.get(k) for k in ("test_accuracy", "epsilon", "accountant", "delta")}
  return out


def cut(workdir: str, stage: str, config, seconds: float) -> dict:
  """Where a stage the budget stopped had got to, and its whole schedule's time extrapolated
  from its last logged step where the schedule is ``config.<stage>.num_steps``."""
  last = 0
  metrics = os.path.join(workdir, "metrics.jsonl")
  if os.path.exists(metrics):
    with open(metrics) as f:
      steps = [json.loads(l) for l in f if l.strip()]
    last = max((m["step"] for m in steps if m.get("stage") == stage and "step" in m),
               default=0)
  total = config[stage].get("num_steps") if stage in config else None
  return {"cut_after_seconds": seconds, "last_logged_step": last, "num_steps": total,
          "extrapolated_seconds": seconds * total / last if total and last else None}


def main(argv):
  del argv
  os.makedirs(_OUT.value, exist_ok=True)
  check = Check(_OUT.value, _DRY_RUN.value, _BUDGET.value)
  devices = jax.devices()
  check.record("machine", {"jax": jax.__version__, "backend": jax.default_backend(),
                           "devices": [d.device_kind for d in devices],
                           "python": sys.version.split()[0]})
  rates = matmul_rates()
  check.record("matmul", rates)
  check.record("teacher_engine", teacher_engine(
      _DRY_RUN.value, rates["float32_default_gflops"] * 1e9, _TORCH_PEER.value))
  check.record("compiled", compiled(_COMPILED.value, _DATA.value, _DRY_RUN.value))
  for config, arg in (p.split(":") for p in _RUNS.value):
    check.record(f"stages_{config}_{arg}", stage_times(check, config, arg, _DATA.value,
                                                        _DRY_RUN.value))
  return 0


if __name__ == "__main__":
  app.run(main)
