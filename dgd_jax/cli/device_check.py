r"""The prepared device check: one command on a lent accelerator, its figures as JSON.

  bash launch/device_check.sh                      # on the device machine ($OUT set)
  python -m dgd_jax.cli.device_check --out=/tmp/check --data=<IDX folder> [--dry_run]

Measures, in this order so that the first minutes already pay, each phase under its own cap
of seconds (``--caps``; the whole under ``--budget``), and rewrites
``<out>/device_check.json`` after each figure (a run cut short keeps what it measured):

1. the machine: jax's version, backend and devices; the float32 matmul rate at full precision
   and at the backend's default precision (TF32 on recent NVIDIA GPUs);
2. ``engine``: the teacher engine, 250 teachers x 32 examples at 16/32 and 64/128 channels
   (examples/s and the fraction of each peak), with the backend's chunk;
3. ``torch``: the PyTorch per-teacher loop beside it, where ``--torch_peer`` names the peer
   script (``shared/bench/torch_teachers.py``), in a process stopped at its cap;
4. ``programs``: every jitted program of the paper presets (``PROGRAMS``: Fashion-MNIST's, and
   DGD Table II's and DP-SGD's on CIFAR-10 shapes, from a synthetic npz written here: CIFAR-10
   does not travel to the device) compiled at its full shapes with XLA's memory for it, then
   run a few times on sample arguments of those shapes (``Program.sample_args``, ``timed``):
   its seconds per call and, for a stage's step, the whole schedule extrapolated (``calls``);
5. ``stages``: the presets in ``RUNS`` run for real, one stage per process, each stage under
   an equal share of what is left of the cap: its seconds and accuracy, or where it was cut.

Each phase records what its cap left undone (``"skipped": "cap"``). The runs' workdirs live
outside ``--out``, which holds the JSON only.

``--dry_run`` runs the same code at tiny shapes (4 teachers, one-step schedules, few queries)
on any backend: the test suite runs it, so the check cannot rot before a device comes.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
from absl import app, flags

from dgd_jax.cli import bench
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan.context import memory
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.files import read_json, write_json

_OUT = flags.DEFINE_string("out", None, "Folder for device_check.json (the JSON only).")
_DATA = flags.DEFINE_string("data", "", "Folder of Fashion-MNIST's four IDX files (empty: the "
                            "dataset's default, the Debian package's folder).")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Tiny shapes: the same code path in seconds.")
_BUDGET = flags.DEFINE_float("budget", 540.0, "Seconds for the whole check: no phase starts "
                             "past it, and each phase's cap is cut to what is left.")
# Each phase's cap in seconds (module docstring); their sum may exceed the budget.
CAPS = {"engine": 60, "torch": 45, "programs": 270, "stages": 150}
_CAPS = flags.DEFINE_list("caps", [f"{k}={v}" for k, v in CAPS.items()],
                          "Seconds per phase, as phase=seconds.")
_TORCH_PEER = flags.DEFINE_string("torch_peer", "", "The PyTorch peer script "
                                  "(torch_teachers.py); empty: no PyTorch figure.")
# The presets whose programs compile and run on sample arguments (config:argument, the
# argument's tokens joined by '+' on the command line; 'cifar10' stands for a synthetic npz of
# CIFAR-10's shapes).
PROGRAMS = ("teachers:", "dgd:eps10", "dgd:cifar10+eps3+vit", "pate:plus", "dpdfd:",
            "ldp:ldp1", "dpsgd:eps3", "dpsgd:cifar10+backbone")
# The presets whose stages run for real, in order (config:argument).
RUNS = ("dpsgd:eps3",)
_PROGRAMS = flags.DEFINE_list("programs", list(PROGRAMS), "Presets whose programs compile "
                              "and run (config:argument, tokens joined by '+').")
_RUNS = flags.DEFINE_list("runs", list(RUNS), "Presets (config:argument) whose stages run.")
flags.mark_flags_as_required(["out"])
# What a dry run changes: the fewest teachers, steps and samples that still run every stage.
DRY_RUN = {"smoke": True, "num_teachers": 4, "queries.num_queries": 8,
           "generator.num_synthetic": 32, "pool.size": 16, "dpsgd.batch_size": 16}
WIDTHS = ((16, 32), (64, 128))
TIMED_CALLS = 3  # runs of each compiled program after its first
CIFAR10_SHAPE = (50_000, 32, 32, 3)  # the synthetic stand-in's training set (test: 10,000)


class Check:
  """The figures so far, written to ``<out>/device_check.json`` after each one."""

  def __init__(self, out: str, dry_run: bool, budget: float, caps: dict):
    self.out, self.start, self.budget, self.caps = out, time.perf_counter(), budget, caps
    self.path = os.path.join(out, "device_check.json")
    self.figures = {"dry_run": dry_run, "budget_seconds": budget, "caps_seconds": caps}

  def left(self) -> float:
    return self.budget - (time.perf_counter() - self.start)

  def deadline(self, phase: str) -> float:
    """When ``phase`` must stop (perf_counter time): its cap, within the whole budget."""
    return time.perf_counter() + max(0.0, min(self.caps.get(phase, 0.0), self.left()))

  def record(self, key: str, value) -> None:
    self.figures[key] = value
    self.figures["elapsed_seconds"] = time.perf_counter() - self.start
    write_json(self.path, self.figures)
    print(json.dumps({key: value}), flush=True)


def presets(items) -> list[tuple[str, str]]:
  """[(config, argument)] of 'config:tok+tok' items."""
  out = []
  for item in items:
    config, _, arg = item.partition(":")
    out.append((config, arg.replace("+", ",")))
  return out


def parse_caps(items) -> dict:
  caps = dict(CAPS)
  for item in items:
    name, _, value = item.partition("=")
    if name not in CAPS or not value:
      raise app.UsageError(f"--caps={item!r}: give phase=seconds for phases {tuple(CAPS)}.")
    caps[name] = float(value)
  return caps


CIFAR10 = "cifar10"  # in a preset's argument: CIFAR-10's config, on the synthetic stand-in


def argument(config: str, arg: str, data: str, dry_run: bool) -> str:
  """The config argument the check runs a preset with: on Fashion-MNIST (``data``, an IDX
  folder, or the default), or on CIFAR-10 where the argument names it; the CPU preset in a
  dry run."""
  parts = [p for p in arg.split(",") if p]
  name = CIFAR10 if CIFAR10 in parts else (f"idx:{data}" if data else "fashion_mnist")
  rest = [p for p in parts if p != CIFAR10] + (["cpu"] if dry_run and config == "dgd" else [])
  return ",".join([name] + rest)


def config_of(config: str, arg: str, data: str, synthetic: str, dry_run: bool):
  """The preset's config (with the dry run's changes where they apply); a CIFAR-10 preset's
  images come from the synthetic npz of its shapes, the rest of its config is CIFAR-10's."""
  out = importlib.import_module(f"dgd_jax.configs.{config}").get_config(
      argument(config, arg, data, dry_run))
  if out.dataset == CIFAR10:
    out.dataset = f"npz:{synthetic}"
  for field, value in dry_run_fields(out, dry_run).items():
    block, _, name = field.rpartition(".")
    (out[block] if block else out)[name] = value
  return out


def dry_run_fields(config, dry_run: bool) -> dict:
  """The dry run's changes to the fields this config has (none for a real run)."""
  return {f: v for f, v in DRY_RUN.items() if dry_run and f.split(".")[0] in config}


def overrides(config, dry_run: bool) -> list[str]:
  """The dry run's changes, and the images' source, as command-line flags for
  ``dgd_jax.main``."""
  return ([f"--config.dataset={config.dataset}"]
          + [f"--config.{f}={v}" for f, v in dry_run_fields(config, dry_run).items()])


def write_synthetic_cifar10(path: str, dry_run: bool) -> str:
  """An npz of CIFAR-10's shapes (uniform noise pixels, balanced labels): what the programs
  of a CIFAR-10 preset are compiled and timed on where the data is not."""
  n, test = (512, 128) if dry_run else (CIFAR10_SHAPE[0], 10_000)
  rng = np.random.default_rng(0)
  np.savez(path, x_train=rng.integers(0, 256, (n,) + CIFAR10_SHAPE[1:], dtype=np.uint8),
           y_train=np.arange(n) % 10,
           x_test=rng.integers(0, 256, (test,) + CIFAR10_SHAPE[1:], dtype=np.uint8),
           y_test=np.arange(test) % 10)
  return path


def matmul_rates() -> dict:
  """The float32 matmul rate (GFLOP/s) at full precision and at the backend's default."""
  with jax.default_matmul_precision("highest"):
    highest = bench.matmul_peak_flops()
  return {"float32_highest_gflops": highest / 1e9,
          "float32_default_gflops": bench.matmul_peak_flops() / 1e9}


def teacher_engine(check: Check, dry_run: bool, peak: float) -> list[dict]:
  """The ensemble step at both widths, each started only within the phase's cap."""
  n, steps = (4, 1) if dry_run else (250, 5)
  stop, rows = check.deadline("engine"), []
  for conv1, conv2 in WIDTHS:
    if time.perf_counter() >= stop:
      rows.append({"conv1": conv1, "conv2": conv2, "skipped": "cap"})
      continue
    rows.append(bench.teachers(n, 32, conv1, conv2, steps, peak=peak,
                               per_teacher=32 if dry_run else 240))
  return rows


def torch_peer(check: Check, dry_run: bool, script: str) -> list[dict]:
  """The PyTorch per-teacher loop at both widths, its process stopped at the phase's cap."""
  n, steps = (4, 1) if dry_run else (250, 5)
  stop, rows = check.deadline("torch"), []
  for conv1, conv2 in WIDTHS:
    left = stop - time.perf_counter()
    if left <= 1:
      rows.append({"impl": "torch-loop", "conv1": conv1, "conv2": conv2, "skipped": "cap"})
      continue
    try:
      run = subprocess.run([sys.executable, script, "--teachers", str(n), "--batch", "32",
                            "--steps", str(steps), "--conv1", str(conv1), "--conv2",
                            str(conv2)], capture_output=True, text=True, timeout=left,
                           check=False)
    except subprocess.TimeoutExpired:
      rows.append({"impl": "torch-loop", "conv1": conv1, "conv2": conv2, "skipped": "cap"})
      continue
    rows.append(json.loads(run.stdout) if run.returncode == 0
                else {"impl": "torch-loop", "error": run.stderr[-500:]})
  return rows


def calls(config, stage: str, program: str) -> int | None:
  """How many times ``stage``'s schedule runs ``program``, where the program is its step and
  the schedule one step count (``config.<stage>.num_steps``), else None."""
  if not program.endswith("step") or stage not in config:
    return None
  steps = config[stage].get("num_steps")
  return int(steps) if steps else None


def timed(program, count: int) -> dict:
  """Compiles ``program`` at its shapes, runs it once and then ``count`` more times on its
  ``sample_args``: XLA's memory for it and the seconds per call."""
  t0 = time.perf_counter()
  compiled = program.compile()
  compile_seconds = time.perf_counter() - t0
  sizes = memory(compiled)
  args = program.sample_args()
  jax.block_until_ready(compiled(*args))
  t0 = time.perf_counter()
  for _ in range(count):
    jax.block_until_ready(compiled(*args))
  return {**sizes, "compile_seconds": compile_seconds,
          "seconds_per_call": (time.perf_counter() - t0) / max(count, 1)}


def programs(check: Check, items, data: str, synthetic: str, dry_run: bool) -> dict:
  """Every program of the presets ``items`` compiled and timed (``timed``) within the phase's cap:
  {preset: {stage: {program: figures}}}; a step's figures add the calls of its stage's
  schedule and their extrapolated seconds."""
  stop, out = check.deadline("programs"), {}
  for config, arg in presets(items):
    name = f"{config}.py:{arg}" if arg else f"{config}.py"
    if time.perf_counter() >= stop:
      out[name] = {"skipped": "cap"}
      continue
    try:
      cfg = plan_checks.run_config(config_of(config, arg, data, synthetic, dry_run))
      stages = pipeline.stage_programs(cfg)
    except Exception as e:  # pylint: disable=broad-except  # recorded, the check goes on
      out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
      continue
    out[name] = {}
    for stage, progs in stages.items():
      out[name][stage] = {}
      for program_name, program in progs.items():
        if time.perf_counter() >= stop:
          out[name][stage][program_name] = {"skipped": "cap"}
          continue
        try:
          figures = timed(program, 1 if dry_run else TIMED_CALLS)
        except Exception as e:  # pylint: disable=broad-except
          figures = {"error": f"{type(e).__name__}: {e}"[:500]}
        n = calls(cfg, stage, program_name)
        if n and "seconds_per_call" in figures:
          figures.update(calls=n, extrapolated_seconds=n * figures["seconds_per_call"])
        out[name][stage][program_name] = figures
  return out


def stage_times(check: Check, stop: float, workdir: str, config: str, arg: str, data: str,
                synthetic: str, dry_run: bool) -> dict:
  """Each stage of the preset run alone in a process, each under an equal share of what is
  left until ``stop``: its seconds, or where it was cut."""
  cfg = plan_checks.run_config(config_of(config, arg, data, synthetic, dry_run))
  spec = (importlib.import_module(f"dgd_jax.configs.{config}").__file__ + ":"
          + argument(config, arg, data, dry_run))
  names, out = list(methods.plan_stages(cfg)), {}
  for i, stage in enumerate(names):
    share = (stop - time.perf_counter()) / (len(names) - i)
    if share < 5:
      out[stage] = {"skipped": "cap"}
      continue
    command = [sys.executable, "-m", "dgd_jax.main", f"--config={spec}", f"--workdir={workdir}",
               f"--stages={stage}", *overrides(cfg, dry_run)]
    t0 = time.perf_counter()
    try:
      run = subprocess.run(command, capture_output=True, text=True, timeout=share, check=False)
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
  """Where a stage its share stopped had got to, and its whole schedule's time extrapolated
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
  check = Check(_OUT.value, _DRY_RUN.value, _BUDGET.value, parse_caps(_CAPS.value))
  devices = jax.devices()
  check.record("machine", {"jax": jax.__version__, "backend": jax.default_backend(),
                           "devices": [d.device_kind for d in devices],
                           "python": sys.version.split()[0]})
  rates = matmul_rates()
  check.record("matmul", rates)
  check.record("teacher_engine", teacher_engine(check, _DRY_RUN.value,
                                                rates["float32_default_gflops"] * 1e9))
  if _TORCH_PEER.value:
    check.record("torch_peer", torch_peer(check, _DRY_RUN.value, _TORCH_PEER.value))
  with tempfile.TemporaryDirectory(prefix="device_check_") as scratch:
    synthetic = write_synthetic_cifar10(os.path.join(scratch, "cifar10_shapes.npz"),
                                        _DRY_RUN.value)
    check.record("programs", programs(check, _PROGRAMS.value, _DATA.value, synthetic,
                                      _DRY_RUN.value))
    stop = check.deadline("stages")
    for config, arg in presets(_RUNS.value):
      check.record(f"stages_{config}_{arg}", stage_times(
          check, stop, os.path.join(scratch, f"{config}_{arg}"), config, arg, _DATA.value,
          synthetic, _DRY_RUN.value))
  return 0


if __name__ == "__main__":
  app.run(main)
