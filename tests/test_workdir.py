"""The workdir: its lock (one writer per workdir, a killed run's lock taken over), whole
writes, and its format (a workdir of another format is refused)."""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.configs import baseline as baseline_config
from dgd_jax.plan.context import config_slice
from dgd_jax.runner import pipeline
from dgd_jax.runtime import errors
from dgd_jax.runtime import files
from dgd_jax.runtime import workdir
from dgd_jax.runtime.errors import WorkdirLockedError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def holder(tmp_path):
  """Another process holding the lock of ``tmp_path / 'w'`` until it is killed."""
  code = textwrap.dedent(f"""
      import sys, time
      from dgd_jax.runtime.workdir import Workdir
      with Workdir({str(tmp_path / 'w')!r}).lock():
        print("locked", flush=True)
        time.sleep(300)
      """)
  proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                          text=True)
  assert proc.stdout.readline() == "locked\n"
  yield proc
  proc.kill()
  proc.wait()


def lock_record(path):
  with open(os.path.join(path, workdir.LOCK)) as f:
    return json.load(f)


@pytest.mark.integration
def test_a_second_run_is_refused_naming_the_first(holder, tmp_path, npz_file):
  path = str(tmp_path / "w")
  held = lock_record(path)
  assert held["pid"] == holder.pid and held["host"] == socket.gethostname()
  with pytest.raises(WorkdirLockedError) as e:
    with workdir.Workdir(path).lock():
      pytest.fail("entered a locked workdir")
  message = str(e.value)
  assert f"pid {holder.pid} on host {socket.gethostname()}, started {held['started']}" in message
  assert f"kill {holder.pid}" in message and "use another --workdir" in message
  # Through the pipeline: refused before it writes anything.
  config = baseline_config.get_config(f"npz:{npz_file},cpu")
  with pytest.raises(WorkdirLockedError, match=f"pid {holder.pid} on host"):
    pipeline.run(config, path)
  assert sorted(os.listdir(path)) == [workdir.LOCK] and lock_record(path) == held


@pytest.mark.integration
def test_the_lock_of_a_killed_run_is_taken_over_and_released(holder, tmp_path):
  path = str(tmp_path / "w")
  killed = lock_record(path)
  holder.kill()
  holder.wait()
  with workdir.Workdir(path).lock():
    mine = lock_record(path)
    assert mine["pid"] == os.getpid() and mine["started"] != killed["started"]
    with pytest.raises(WorkdirLockedError, match=f"pid {os.getpid()} on host"):
      with workdir.Workdir(path).lock():  # held by this process now
        pass
  assert os.listdir(path) == []  # released, and nothing left behind


def write_lock(path, **record):
  os.makedirs(path, exist_ok=True)
  record = {"pid": os.getpid(), "host": socket.gethostname(), "started": "then",
            "command": "python -m dgd_jax.main", **record}
  with open(os.path.join(path, workdir.LOCK), "w") as f:
    json.dump(record, f)


@pytest.mark.integration
def test_a_reused_pid_is_not_taken_for_the_run_that_held_the_lock(tmp_path):
  path = str(tmp_path / "w")
  sleeper = subprocess.Popen(["sleep", "60"])
  try:
    start = workdir._process_start(sleeper.pid)
    assert start is not None  # Linux
    write_lock(path, pid=sleeper.pid, pid_start=start)  # the live process itself: refused
    with pytest.raises(WorkdirLockedError, match=f"pid {sleeper.pid} on host"):
      with workdir.Workdir(path).lock():
        pass
    write_lock(path, pid=sleeper.pid, pid_start=start - 1)  # the same pid, another process
    with workdir.Workdir(path).lock():
      assert lock_record(path)["pid"] == os.getpid()
  finally:
    sleeper.kill()
    sleeper.wait()


def test_a_lock_from_another_host_is_refused_with_the_manual_fix(tmp_path):
  path = str(tmp_path / "w")
  write_lock(path, pid=1, host="other-node-7")
  with pytest.raises(WorkdirLockedError) as e:
    with workdir.Workdir(path).lock():
      pass
  assert "pid 1 on host other-node-7, started then" in str(e.value)
  assert f"if that run is gone, remove {os.path.join(path, workdir.LOCK)}" in str(e.value)
  assert lock_record(path)["host"] == "other-node-7"  # untouched


def test_an_unreadable_lock_is_refused_and_kept(tmp_path):
  path = tmp_path / "w"
  path.mkdir()
  (path / workdir.LOCK).write_text('{"pid": 12')
  with pytest.raises(WorkdirLockedError, match="cannot be read .* If none is, remove that file"):
    with workdir.Workdir(str(path)).lock():
      pass
  assert (path / workdir.LOCK).read_text() == '{"pid": 12'


def test_the_lock_is_released_when_the_run_fails_and_only_the_writer_locks(tmp_path):
  path = str(tmp_path / "w")
  with pytest.raises(RuntimeError):
    with workdir.Workdir(path).lock():
      raise RuntimeError("stage failed")
  assert not os.path.exists(os.path.join(path, workdir.LOCK))
  write_lock(path, host="other-node-7")
  with workdir.Workdir(path, writer=False).lock():  # process k > 0 of a multi-process run
    pass


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
  path = str(tmp_path / "result.json")
  files.write_json(path, {"accuracy": 0.5})

  def crash(f):
    f.write('{"accuracy": 0.')
    raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    files.atomic_write(path, crash)
  assert files.read_json(path) == {"accuracy": 0.5}
  assert os.listdir(tmp_path) == ["result.json"]
  with pytest.raises(FileExistsError):  # exclusive: never replaces
    files.write_json(path, {"accuracy": 0.9}, exclusive=True)
  assert files.read_json(path) == {"accuracy": 0.5}


def test_arrays_are_saved_whole(tmp_path):
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  files.save_array(str(tmp_path / "x.npy"), x)
  files.save_arrays(str(tmp_path / "q.npz"), indices=np.arange(3), labels=x[:, 0])
  np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), x)
  with np.load(tmp_path / "q.npz") as q:
    assert sorted(q.files) == ["indices", "labels"]
  assert sorted(os.listdir(tmp_path)) == ["q.npz", "x.npy"]  # no other names (no .npy added)


def test_leftovers_of_a_killed_write_do_not_block_the_stage(tmp_path, npz_file):
  config = baseline_config.get_config(f"npz:{npz_file},cpu")
  wd = workdir.Workdir(str(tmp_path / "w"))
  stage = workdir.Stage(wd, "baseline", config_slice(config, ("seed", "model", "baseline")))
  os.makedirs(stage.path)
  (tmp_path / "w" / "baseline" / ".stage.json.x1y2.tmp").write_text('{"sta')  # killed here
  stage.begin()  # not refused as a foreign folder
  assert files.read_json(os.path.join(stage.path, "stage.json"))["stage"] == "baseline"


def test_a_metrics_line_cut_short_by_a_kill_is_skipped(tmp_path):
  wd = workdir.Workdir(str(tmp_path))
  wd.log_metrics("student", {"step": 10, "loss": 1.0})
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"stage": "student", "step": 20, "lo')  # killed mid-line
  wd.log_metrics("student", {"step": 20, "loss": 0.5})
  assert wd.read_metrics("student") == [{"stage": "student", "step": 10, "loss": 1.0},
                                        {"stage": "student", "step": 20, "loss": 0.5}]
  assert (tmp_path / "metrics.jsonl").read_text().splitlines()[2] == (
      '{"stage": "student", "step": 20, "loss": 0.5}')


@pytest.mark.integration
def test_a_workdir_of_another_format_is_refused_whole_before_anything_runs(tmp_path, npz_file):
  """config.json records the workdir format; a workdir without it (or of another) is refused
  by the run and by the readers of its config, naming both formats, and nothing is written."""
  config = baseline_config.get_config(f"npz:{npz_file},cpu")
  config.baseline.update(num_steps=2, batch_size=8)
  path = tmp_path / "w"
  pipeline.run(config, str(path))
  recorded = json.loads((path / workdir.CONFIG).read_text())
  assert recorded["format"] == workdir.FORMAT
  assert workdir.Workdir(str(path)).read_config() == files.plain(config)
  del recorded["format"]  # as a workdir of format 1 wrote it
  (path / workdir.CONFIG).write_text(json.dumps(recorded))
  before = sorted(p.name for p in path.iterdir())
  expected = f"workdir of format 1 .*reads format {workdir.FORMAT} only"
  with pytest.raises(errors.WorkdirConflictError, match=expected):
    pipeline.run(config, str(path))
  with pytest.raises(errors.WorkdirConflictError, match=expected):
    workdir.Workdir(str(path)).read_config()
  assert sorted(p.name for p in path.iterdir()) == before and not (path / workdir.LOCK).exists()


def test_a_stage_written_before_a_field_was_added_or_removed_is_read_at_its_neutral_value(
    tmp_path):
  """A stored slice that lacks an added field (or holds a removed one) at the value that
  reproduces what its stage did matches: the finished stage is not refused for a field that
  changes nothing there. The same slice against any other value is a conflict naming it."""
  ours = {"num_teachers": 250, "teachers": {"num_steps": 600, "width": 0.0, "mixup": 0.0}}
  written_before = {"num_teachers": 250, "teachers": {"num_steps": 600, "shared_init": False}}
  assert workdir.as_written_now(written_before) == ours
  wd = workdir.Workdir(str(tmp_path / "w"))
  stage = workdir.Stage(wd, "teachers", ours)
  os.makedirs(stage.path)
  files.write_json(os.path.join(stage.path, "stage.json"),
                     {"stage": "teachers", "hash": "old", "config": written_before})
  stage.check()
  for field, value in (("mixup", 0.4), ("width", 0.5)):
    other = workdir.Stage(wd, "teachers", {**ours, "teachers": {**ours["teachers"], field: value}})
    with pytest.raises(errors.WorkdirConflictError, match=f"teachers.{field}: {value}"):
      other.check()
  files.write_json(os.path.join(stage.path, "stage.json"),  # one initialisation for all
                     {"stage": "teachers", "config": {**written_before, "teachers": {
                         **written_before["teachers"], "shared_init": True}}})
  with pytest.raises(errors.WorkdirConflictError, match="teachers.shared_init"):
    stage.check()


def test_a_field_renamed_since_is_read_under_its_new_name():
  """DPDFD's analysis was recorded as ``privacy.relation``: a stored slice holding it matches
  the same value under ``privacy.dpdfd_analysis``, and DP-SGD's stored record reads its
  neighbours from the old ``relation`` key."""
  old = {"privacy": {"relation": "direct", "delta": 1e-5, "allow_large_delta": False}}
  assert workdir.as_written_now(old) == {
      "privacy": {"dpdfd_analysis": "direct", "delta": 1e-5, "allow_large_delta": False}}
  record = privacy.DpsgdSteps(2.0, 100, 1000, 10, neighbours="replace_one")
  stored = {**record.describe(), "relation": "replace_one"}
  del stored["neighbours"]
  assert privacy.DpsgdSteps.from_json(stored).neighbours == "replace_one"


def test_a_budget_guard_recorded_off_as_0_reads_as_inf():
  """The guard off was privacy.max_epsilon 0 (now refused), now inf: a stored slice with 0
  matches a run with inf, and a real budget stays what it was."""
  old = {"privacy": {"max_epsilon": 0.0, "delta": 1e-5, "allow_large_delta": False}}
  assert workdir.as_written_now(old) == {
      "privacy": {"max_epsilon": math.inf, "delta": 1e-5, "allow_large_delta": False}}
  budget = {"privacy": {"max_epsilon": 3.0, "delta": 1e-5, "allow_large_delta": False}}
  assert workdir.as_written_now(budget) == budget


def test_a_config_recorded_before_a_field_was_added_is_read_with_its_neutral_value(tmp_path):
  """config.json written before teachers.mixup existed reads back with mixup 0 (what that run
  did), so the code that reads the field and the stage check see one config."""
  path = tmp_path / "w"
  path.mkdir()
  (path / workdir.CONFIG).write_text(json.dumps(
      {"format": workdir.FORMAT, "seed": 0, "teachers": {"num_steps": 600, "shared_init": False}}))
  assert workdir.Workdir(str(path)).read_config() == {
      "seed": 0, "teachers": {"num_steps": 600, "width": 0.0, "mixup": 0.0}}


@pytest.mark.integration
def test_a_workdir_is_bound_to_its_datas_content(tmp_path):
  """Other arrays written to the same npz path are refused with the fix (the stages of the old
  data are never reused and credited to the new); the same content at another path is not."""
  import shutil  # pylint: disable=g-import-not-at-top
  import tiny_configs  # pylint: disable=g-import-not-at-top
  from conftest import write_npz  # pylint: disable=g-import-not-at-top
  path = write_npz(tmp_path, seed=1)
  config = tiny_configs.baseline(path)
  wd = str(tmp_path / "w")
  pipeline.run(config, wd)
  report = open(os.path.join(wd, "report.json")).read()
  write_npz(tmp_path, seed=2)  # new arrays, same path
  with pytest.raises(errors.WorkdirConflictError, match="made from other data"):
    pipeline.run(config, wd)
  assert open(os.path.join(wd, "report.json")).read() == report  # nothing changed
  write_npz(tmp_path, seed=1)  # the data it was made from
  pipeline.run(config, wd)


@pytest.mark.integration
def test_dgd_refuses_a_class_count_mismatch_before_any_stage(tmp_path):
  from dgd_jax.configs import dgd as dgd_config  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (200, 28, 28), dtype=np.uint8)
  path = str(tmp_path / "three.npz")
  np.savez(path, x_train=x, y_train=np.arange(200) % 3, x_test=x[:30], y_test=np.arange(30) % 3)
  config = dgd_config.get_config(f"npz:{path},cpu")
  with pytest.raises(errors.ConfigError, match=r"labels have 3 classes.*queries.num_classes=3"):
    pipeline.run(config, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


@pytest.mark.integration
def test_a_mistyped_config_file_is_one_line_with_the_closest(tmp_path):
  out = subprocess.run([sys.executable, "-m", "dgd_jax.main",
                        "--config=dgd_jax/configs/dgdd.py:fashion_mnist,cpu",
                        f"--workdir={tmp_path / 'w'}"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
  assert out.returncode != 0 and "Traceback" not in out.stderr
  assert "no such config file (did you mean 'dgd_jax/configs/dgd.py'?)" in out.stderr
