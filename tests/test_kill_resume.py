"""Killed anywhere, resumed to the same result: a tiny pipeline runs as a subprocess, is
SIGKILLed at random moments (inside stages and between them) and rerun with the same
command; the final report equals an uninterrupted run's. The baseline alone runs in the
default suite; the tiny PATE pipeline (teachers, VAE, label queries, student: checkpoints,
queried labels and votes) is marked slow. DeepInversion's synthetic set is killed inside its
batches and at their ends. ``--kills=N`` kills more often."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))
RUN = f"""
import sys
sys.path.insert(0, {TESTS!r})
import tiny_configs
from dgd_jax.runner import pipeline
config = getattr(tiny_configs, sys.argv[3])(sys.argv[1])
config.checkpoint_every = 5  # several checkpoints per stage, so kills land between them
pipeline.run(config, sys.argv[2], tuple(sys.argv[4:]) or None)
"""


def start(pipeline, npz_file, workdir, log, stages=()):
  return subprocess.Popen([sys.executable, "-c", RUN, npz_file, str(workdir), pipeline, *stages],
                          cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def progress(workdir) -> str:
  """Where a run stands: its finished stages and the latest checkpoint of the others."""
  out = []
  for stage in sorted(os.listdir(workdir)) if workdir.is_dir() else []:
    folder = workdir / stage
    if (folder / "result.json").exists():
      out.append(f"{stage}: done")
    elif (folder / "checkpoints").is_dir():
      steps = [int(n) for n in os.listdir(folder / "checkpoints") if n.isdigit()]
      out.append(f"{stage}: step {max(steps, default=0)}")
  return ", ".join(out) or "nothing"


def events(workdir) -> int:
  """How far a run got, counted in work done: the distinct (stage, step) records logged
  (every 5 steps) and the finished stages. A resumed run counts its earlier runs' work."""
  logged = set()
  if (workdir / "metrics.jsonl").exists():
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
      try:
        record = json.loads(line)
      except ValueError:  # cut short by a kill
        continue
      logged.add((record.get("stage"), record.get("step")))
  return len(logged) + len(list(workdir.glob("*/result.json")))


def kill_at(proc, workdir, target: int, delay: float) -> bool:
  """Kills ``proc`` ``delay`` seconds after the run reaches ``target`` events (inside a
  stage, or between stages once it finished one); False if it finished first."""
  while events(workdir) < target:
    if proc.poll() is not None:
      return False
    time.sleep(0.05)
  time.sleep(delay)
  if proc.poll() is not None:
    return False
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  return True


def untimed(value):
  if isinstance(value, dict):
    return {k: untimed(v) for k, v in value.items() if not k.endswith("_seconds")}
  if isinstance(value, list):
    return [untimed(v) for v in value]
  return value


@pytest.mark.integration
@pytest.mark.parametrize("pipeline", [
    pytest.param("baseline", marks=[pytest.mark.extended, pytest.mark.slow]),  # CI's 2nd tier
    pytest.param("pate", marks=pytest.mark.slow)])
def test_killed_anywhere_resumes_to_the_same_report(pipeline, npz_file, tmp_path, request):
  logs = tmp_path / "log.txt"
  with open(logs, "ab") as log:
    reference = start(pipeline, npz_file, tmp_path / "uninterrupted", log)
    assert reference.wait(timeout=1800) == 0, logs.read_text()[-3000:]
    total = events(tmp_path / "uninterrupted")

    workdir = tmp_path / "killed"
    rng = np.random.default_rng(20)
    targets = np.sort(rng.choice(np.arange(1, total + 1), replace=False,
                                 size=min(request.config.getoption("--kills"), total)))
    kills = []
    for target in targets:  # random points of the work, each reached by a rerun
      proc = start(pipeline, npz_file, workdir, log)
      if kill_at(proc, workdir, target, delay=float(rng.uniform(0, 0.5))):
        kills.append(f"at {target}/{total}: {progress(workdir)}")
      else:
        assert proc.returncode == 0, logs.read_text()[-3000:]
    final = start(pipeline, npz_file, workdir, log)
    assert final.wait(timeout=1800) == 0, logs.read_text()[-3000:]
  assert kills, "no run was killed: every one finished first"
  print("\n".join(kills))

  expected = json.loads((tmp_path / "uninterrupted" / "report.json").read_text())
  resumed = json.loads((workdir / "report.json").read_text())
  assert resumed["test_accuracy"] == expected["test_accuracy"]
  assert resumed.get("epsilon") == expected.get("epsilon")
  assert untimed(resumed["stages"]) == untimed(expected["stages"]), "\n".join(kills)
  assert not (workdir / "lock.json").exists()


def latest_checkpoint(folder) -> int:
  """The latest finished checkpoint's step in ``folder`` (0: none)."""
  return max([int(n) for n in os.listdir(folder) if n.isdigit()] if folder.is_dir() else [],
             default=0)


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_a_killed_deepinversion_resumes_to_the_same_synthetic_set(npz_file, tmp_path):
  """DeepInversion (generator stage, synthesis='inversion': 3 batches of 30 steps) runs
  through run_steps: killed inside a batch, at a batch's end and rerun each time, it ends with
  the uninterrupted run's synthetic set, bit for bit."""
  logs = tmp_path / "log.txt"
  stages = ("generator",)
  with open(logs, "ab") as log:
    reference = start("dgd_inversion", npz_file, tmp_path / "uninterrupted", log, stages)
    assert reference.wait(timeout=1800) == 0, logs.read_text()[-3000:]
    workdir = tmp_path / "killed"
    checkpoints = workdir / "generator" / "checkpoints"
    kills = []
    for target in (10, 35, 60):  # checkpointed every 5 steps; batch 2 starts at step 30
      proc = start("dgd_inversion", npz_file, workdir, log, stages)
      while latest_checkpoint(checkpoints) < target and proc.poll() is None:
        time.sleep(0.02)
      if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills.append(latest_checkpoint(checkpoints))
    final = start("dgd_inversion", npz_file, workdir, log, stages)
    assert final.wait(timeout=1800) == 0, logs.read_text()[-3000:]
  assert [k for k in kills if 0 < k < 90], f"no kill landed inside the inversion: {kills}"
  expected = np.load(tmp_path / "uninterrupted" / "generator" / "synthetic.npy")
  np.testing.assert_array_equal(np.load(workdir / "generator" / "synthetic.npy"), expected)
  assert untimed(json.loads((workdir / "generator" / "result.json").read_text())) == untimed(
      json.loads((tmp_path / "uninterrupted" / "generator" / "result.json").read_text()))


def _teachers_command(npz_file, workdir) -> list[str]:
  """``python -m dgd_jax.main`` for PATE's teachers alone: 4 teachers, 200 steps, a checkpoint
  every 5 steps (time to be killed between two)."""
  return [sys.executable, "-m", "dgd_jax.main",
          f"--config=dgd_jax/configs/pate.py:npz:{npz_file},cpu", f"--workdir={workdir}",
          "--stages=teachers", "--config.num_teachers=4", "--config.teachers.num_steps=200",
          "--config.checkpoint_every=5"]


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_a_killed_teacher_stage_resumes_to_the_same_teachers(sig, npz_file, tmp_path):
  """The stacked teacher state (a step per teacher, sharded over the teachers) restored from
  its first checkpoint trains on to the uninterrupted run's teachers; Ctrl-C says so in one
  line and exits 130."""
  run = lambda w, **kw: subprocess.Popen(_teachers_command(npz_file, w), cwd=REPO,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, **kw)
  whole = run(tmp_path / "whole")
  assert whole.wait(timeout=1800) == 0, whole.stderr.read()[-3000:]
  workdir = tmp_path / "killed"
  proc = run(workdir)
  while latest_checkpoint(workdir / "teachers" / "checkpoints") == 0:
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    time.sleep(0.02)
  proc.send_signal(sig)
  _, err = proc.communicate(timeout=600)
  assert not (workdir / "teachers" / "result.json").exists(), "finished before the kill"
  if sig == signal.SIGINT:
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("interrupted: rerun the same command")
  resumed = run(workdir)
  assert resumed.wait(timeout=1800) == 0, resumed.stderr.read()[-3000:]
  expected = json.loads((tmp_path / "whole" / "teachers" / "result.json").read_text())
  assert untimed(json.loads((workdir / "teachers" / "result.json").read_text())) == untimed(
      expected)
