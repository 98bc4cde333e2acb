"""Damaged artefacts and an unwritable workdir: a clear error naming the file, its stage and
the fix, and nothing else in the workdir changed."""
from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import logging as absl_logging

from dgd_jax.configs import baseline as baseline_config
from dgd_jax.runner import pipeline
from dgd_jax.runtime import files
from dgd_jax.runtime import workdir
from dgd_jax.runtime.errors import DamagedArtefactError, WorkdirNotWritableError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config(npz_file):
  config = baseline_config.get_config(f"npz:{npz_file},cpu")
  config.baseline.num_steps = 20
  config.baseline.batch_size = 16
  config.log_every = 10
  config.checkpoint_every = 10
  return config


@pytest.fixture
def finished(npz_file, tmp_path):
  """A finished baseline run's workdir."""
  path = tmp_path / "w"
  report = pipeline.run(tiny_config(npz_file), str(path))
  return path, report


def snapshot(path):
  """Every file under ``path`` with its bytes."""
  return {os.path.relpath(os.path.join(root, name), path):
          open(os.path.join(root, name), "rb").read()
          for root, _, names in os.walk(path) for name in names}


@pytest.mark.integration
def test_a_corrupt_result_json_names_the_stage_and_changes_nothing(finished, npz_file):
  path, _ = finished
  result = path / "baseline" / "result.json"
  result.write_text(result.read_text()[:40])  # cut short
  before = snapshot(path)
  with pytest.raises(DamagedArtefactError) as e:
    pipeline.run(tiny_config(npz_file), str(path))
  message = str(e.value)
  assert message.startswith(f"{result} cannot be read (JSONDecodeError")
  assert f"recompute the 'baseline' stage: rm -r {path / 'baseline'}, then re-run" in message
  assert snapshot(path) == before  # nothing written, lock released


@pytest.mark.integration
def test_the_cli_reports_a_damaged_artefact_without_a_traceback(finished, npz_file):
  path, _ = finished
  (path / "baseline" / "result.json").write_text("[1, 2]\n")  # valid JSON, not a result
  done = subprocess.run(
      [sys.executable, "-m", "dgd_jax.main",
       f"--config=dgd_jax/configs/baseline.py:npz:{npz_file},cpu", f"--workdir={path}",
       "--config.baseline.num_steps=20", "--config.baseline.batch_size=16",
       "--config.log_every=10", "--config.checkpoint_every=10"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1].startswith(
      f"error: {path / 'baseline' / 'result.json'} cannot be read (ValueError: a JSON list")
  assert f"rm -r {path / 'baseline'}" in done.stderr


@pytest.mark.integration
def test_a_truncated_checkpoint_names_the_stage_and_changes_nothing(finished, npz_file):
  path, report = finished
  os.remove(path / "baseline" / "result.json")  # the stage now resumes from its checkpoint
  step = path / "baseline" / "checkpoints" / "20"
  for root, _, names in os.walk(step):
    for name in names:
      if name != "commit_success.txt":
        with open(os.path.join(root, name), "r+b") as f:
          f.truncate(os.path.getsize(os.path.join(root, name)) // 2)
  before = snapshot(path)
  with pytest.raises(DamagedArtefactError) as e:
    pipeline.run(tiny_config(npz_file), str(path))
  assert str(e.value).startswith(f"{step} cannot be read (")
  assert f"rm -r {path / 'baseline'}, then re-run the same command" in str(e.value)
  after = snapshot(path)
  assert after.pop("runs.jsonl").startswith(before.pop("runs.jsonl"))  # the attempt is logged
  assert after == before
  # The fix works: the recomputed stage gives the same result.
  os.system(f"rm -r {path / 'baseline'}")
  again = pipeline.run(tiny_config(npz_file), str(path))
  assert again["test_accuracy"] == report["test_accuracy"]


@pytest.mark.parametrize("name, array, cut", [
    ("synthetic.npy", np.ones((64, 28, 28, 1), np.float32), 1000),
    ("synthetic.npy", np.ones((64, 28, 28, 1), np.float32), 40),  # inside the header
    ("queries.npz", None, 100),
])
def test_a_truncated_array_names_its_stage(tmp_path, name, array, cut):
  stage = tmp_path / "w" / "generator"
  stage.mkdir(parents=True)
  files.write_json(str(stage / "stage.json"), {"stage": "generator", "config": {}})
  file = str(stage / name)
  if array is None:
    files.save_arrays(file, indices=np.arange(50), labels=np.zeros(50, np.int32))
  else:
    files.save_array(file, array)
  with open(file, "r+b") as f:
    f.truncate(cut)
  with pytest.raises(DamagedArtefactError) as e:
    files.load_array(file)
  assert str(e.value).startswith(f"{file} cannot be read (")
  assert f"recompute the 'generator' stage: rm -r {stage}, then re-run" in str(e.value)
  assert os.path.getsize(file) == cut  # left as it was


@pytest.mark.integration
def test_a_full_disk_names_the_file_and_the_rerun_resumes(npz_file, tmp_path, monkeypatch):
  path = tmp_path / "w"
  fsync = os.fsync

  def full_disk_for_the_result(fd):
    if ".result.json." in os.readlink(f"/proc/self/fd/{fd}"):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    fsync(fd)

  monkeypatch.setattr(os, "fsync", full_disk_for_the_result)
  with pytest.raises(WorkdirNotWritableError) as e:
    pipeline.run(tiny_config(npz_file), str(path))
  result = path / "baseline" / "result.json"
  assert str(e.value).startswith(f"cannot write {result}: No space left on device. Free space")
  assert "re-run the same command" in str(e.value)
  assert sorted(os.listdir(path / "baseline")) == ["checkpoints", "stage.json"]  # no temp file
  assert not (path / workdir.LOCK).exists()
  monkeypatch.setattr(os, "fsync", fsync)
  metrics = (path / "metrics.jsonl").read_text()
  report = pipeline.run(tiny_config(npz_file), str(path))  # resumes at step 20: no training
  assert (path / "metrics.jsonl").read_text() == metrics and 0 <= report["test_accuracy"] <= 1


@pytest.mark.integration
def test_a_disk_too_full_for_a_checkpoint_is_one_line_and_the_rerun_resumes(
    npz_file, tmp_path, monkeypatch, capfd):
  """Orbax writes a checkpoint in its own threads, which log each failed write with its
  traceback: the free space is checked before a save starts, so a full disk is one line."""
  path = tmp_path / "w"
  usage = files.shutil.disk_usage
  saves = []

  def full_after_the_first_checkpoint(folder):
    saves.append(folder)
    free = usage(folder).free if len(saves) == 1 else 1000
    return usage(folder)._replace(free=free)

  monkeypatch.setattr(files.shutil, "disk_usage", full_after_the_first_checkpoint)
  with pytest.raises(WorkdirNotWritableError) as e:
    pipeline.run(tiny_config(npz_file), str(path))
  checkpoints = path / "baseline" / "checkpoints"
  assert str(e.value).startswith(f"cannot write {checkpoints / '20'}: No space left on device")
  assert "Traceback" not in capfd.readouterr().err
  assert sorted(os.listdir(checkpoints)) == ["10"]  # the first checkpoint, whole
  monkeypatch.setattr(files.shutil, "disk_usage", usage)
  report = pipeline.run(tiny_config(npz_file), str(path))  # resumes at step 10
  assert 0 <= report["test_accuracy"] <= 1


def test_a_writers_own_log_of_a_failed_write_is_left_out(tmp_path, caplog):
  """What Orbax's threads log of a write that fails is dropped; other errors still show."""
  caplog.set_level(logging.ERROR)
  target = str(tmp_path / "x")
  with pytest.raises(WorkdirNotWritableError, match="No space left on device"):
    with files.writing(target):
      absl_logging.error("thread raised: Failed to write 1923 bytes: No space left on device")
      raise ValueError("RESOURCE_EXHAUSTED: Failed to write: No space left on device")
  absl_logging.error("another error")
  assert [r.getMessage() for r in caplog.records] == ["another error"]


def test_an_orbax_write_failure_is_reported_the_same_way(tmp_path):
  with pytest.raises(WorkdirNotWritableError, match="cannot write /x/1: Read-only file system"):
    with files.writing("/x/1"):
      raise ValueError("TensorStore: Error writing ...: [Errno 30] Read-only file system")
  with pytest.raises(KeyError):  # other errors pass through
    with files.writing("/x/1"):
      raise KeyError("params")
