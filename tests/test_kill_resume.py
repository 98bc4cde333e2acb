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


# Every stage that checkpoints, run alone (after the stages it reads) with a checkpoint every 5
# steps and enough steps to be killed between two: (config argument, stage, overrides).
STAGE_RUNS = {
    "baseline": ("baseline.py:{data},cpu", "baseline", ["baseline.num_steps=200"]),
    "teachers": ("pate.py:{data},cpu", "teachers",
                 ["num_teachers=4", "teachers.num_steps=600"]),
    "teacher_sweep": ("teacher_sweep.py:{data},cpu", "teacher_sweep",
                      ["sweep.sizes=(2,4)", "teachers.num_steps=200"]),
    "generator": ("dgd.py:{data},cpu,generator", "generator",
                  ["baseline.num_steps=20", "generator.rounds=2",
                   "generator.iterations_per_round=100", "generator.batch_size=32",
                   "generator.features=8", "generator.num_synthetic=64"]),
    "vae": ("pate.py:{data},cpu", "vae",
            ["pool.size=96", "vae.num_steps=200", "vae.batch_size=32", "vae.features=8",
             "vae.latent_dim=8"]),
    "student": ("pate.py:{data},cpu", "student",
                ["num_teachers=4", "teachers.num_steps=20", "pool.size=96",
                 "queries.num_queries=40", "vae.num_steps=10", "vae.batch_size=32",
                 "vae.features=8", "vae.latent_dim=8", "student.num_steps=200",
                 "student.batch_size=16"]),
    "dpsgd": ("dpsgd.py:{data},eps3", "dpsgd",
              ["dpsgd.num_steps=100", "dpsgd.batch_size=128", "dpsgd.microbatch_size=256"]),
    "dpdfd": ("dpdfd.py:{data},cpu", "dpdfd",
              ["baseline.num_steps=20", "dpdfd.num_steps=100", "dpdfd.batch_size=16",
               "dpdfd.features=8", "dpdfd.num_synthetic=40"]),
}


def _stage_command(case: str, npz_file, workdir) -> list[str]:
  """``python -m dgd_jax.main`` for ``STAGE_RUNS[case]``."""
  arg, stage, overrides = STAGE_RUNS[case]
  return [sys.executable, "-m", "dgd_jax.main",
          f"--config=dgd_jax/configs/{arg.format(data=f'npz:{npz_file}')}",
          f"--workdir={workdir}",
          f"--stages={stage}", "--config.checkpoint_every=5", "--config.log_every=5",
          "--config.noise_seed=1",  # the two workdirs draw the same noise
          *[f"--config.{o}" for o in overrides]]


def _checkpointed(folder) -> bool:
  """Whether a finished checkpoint (a step folder) lies in any checkpoints folder below."""
  return any(p.name.isdigit() for p in folder.glob("*checkpoints*/*")) if folder.is_dir() else False


# In CI's second tier: the teachers' stacked state (SIGKILL and Ctrl-C) and DP-SGD's noisy
# steps; the other stages with -m slow (about 50 s each).
IN_CI = {("teachers", signal.SIGKILL), ("teachers", signal.SIGINT), ("dpsgd", signal.SIGKILL)}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("case, sig", [
    pytest.param(c, s, marks=[pytest.mark.extended] if (c, s) in IN_CI else [],
                 id=f"{c}-{'Ctrl-C' if s == signal.SIGINT else 'SIGKILL'}")
    for c, s in [(c, signal.SIGKILL) for c in STAGE_RUNS] + [("teachers", signal.SIGINT)]])
def test_a_stage_killed_after_its_first_checkpoint_resumes_to_the_same_result(
    case, sig, npz_file, tmp_path):
  """Each checkpointing stage, killed once it saved a checkpoint, resumes to the result of an
  uninterrupted run (the teachers' stacked state, a step per teacher sharded over them,
  included); Ctrl-C says so in one line and exits 130."""
  stage = STAGE_RUNS[case][1]
  # a suite started in the background (`cmd &`) ignores SIGINT, and so would the run: a
  # terminal's Ctrl-C reaches a run with the default handler
  run = lambda w: subprocess.Popen(
      _stage_command(case, npz_file, w), cwd=REPO, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  whole = run(tmp_path / "whole")
  err = whole.communicate(timeout=1800)[1]
  assert whole.returncode == 0, err[-3000:]
  workdir = tmp_path / "killed"
  proc = run(workdir)
  while not _checkpointed(workdir / stage):
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    time.sleep(0.02)
  proc.send_signal(sig)
  _, err = proc.communicate(timeout=600)
  assert not (workdir / stage / "result.json").exists(), "finished before the kill"
  if sig == signal.SIGINT:
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("interrupted: rerun the same command")
  resumed = run(workdir)
  err = resumed.communicate(timeout=1800)[1]
  assert resumed.returncode == 0, err[-3000:]
  expected = json.loads((tmp_path / "whole" / stage / "result.json").read_text())
  assert untimed(json.loads((workdir / stage / "result.json").read_text())) == untimed(expected)
