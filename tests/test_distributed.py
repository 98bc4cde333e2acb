"""Multi-process runs: topology detection, same teachers on any topology, clear failures,
launcher dry runs."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from dgd_jax.runner import methods
from dgd_jax.runtime import distributed
from dgd_jax.runtime import host
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import placement

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEACHERS, STEPS = 8, 20


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def teacher_flags(npz_file: str, workdir: str) -> list[str]:
  return [f"--config=dgd_jax/configs/teachers.py:npz:{npz_file},cpu", f"--workdir={workdir}",
          f"--config.num_teachers={TEACHERS}", f"--config.teachers.num_steps={STEPS}",
          "--config.log_every=10"]


def env_with(devices: int) -> dict:
  return {**os.environ, "JAX_PLATFORMS": "cpu",
          "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


def run_single(flags: list[str], devices: int) -> None:
  subprocess.run([sys.executable, "-m", "dgd_jax.main", *flags], cwd=REPO, check=True,
                 env=env_with(devices), capture_output=True, timeout=300)


def run_launcher_commands(launcher_args: list[str], flags: list[str]) -> list[str]:
  """The commands ``launch/local_multiprocess.sh --dry_run`` prints, run concurrently as the
  launcher runs them; returns each process's output."""
  dry = subprocess.run(["bash", "launch/local_multiprocess.sh", "--dry_run", *launcher_args,
                        "--", *flags], cwd=REPO, check=True, capture_output=True, text=True)
  commands = [line[:-1].strip() for line in dry.stdout.splitlines() if line.endswith("&")]
  python_dir = os.path.dirname(sys.executable)  # the commands call `python`: this one
  env = {**os.environ, "PATH": f"{python_dir}:{os.environ['PATH']}"}
  procs = [subprocess.Popen(c, shell=True, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True) for c in commands]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
  return outs


def saved_teachers(workdir: str) -> dict:
  path = os.path.join(workdir, "teachers", "checkpoints", str(STEPS), "default")
  checkpointer = ocp.PyTreeCheckpointer()
  meta = checkpointer.metadata(path)
  tree = getattr(getattr(meta, "item_metadata", meta), "tree", meta)
  args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
  return checkpointer.restore(path, restore_args=args)["params"]


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_two_processes_train_the_same_teachers_as_one_device(npz_file, tmp_path):
  """1 process x 1 device, 1 process x 8 devices and 2 processes x 2 devices (gloo): the
  same teachers, votes and results for a fixed seed."""
  runs = {name: str(tmp_path / name) for name in ("one", "eight", "two_by_two")}
  run_single(teacher_flags(npz_file, runs["one"]), devices=1)
  run_single(teacher_flags(npz_file, runs["eight"]), devices=8)
  outs = run_launcher_commands(["--processes=2", "--devices_per_process=2",
                                f"--port={free_port()}"],
                               teacher_flags(npz_file, runs["two_by_two"]))
  assert "process 1 of 2; 2 local of 4 devices" in outs[1]
  assert '"method": "teachers"' in outs[0] and '"method"' not in outs[1]  # process 0 writes
  votes = {k: np.load(os.path.join(p, "teachers", "test_votes.npy")) for k, p in runs.items()}
  params = {k: saved_teachers(p) for k, p in runs.items()}
  results = {k: json.load(open(os.path.join(p, "teachers", "result.json")))
             for k, p in runs.items()}
  assert votes["one"].sum(axis=1).tolist() == [TEACHERS] * len(votes["one"])
  for name in ("eight", "two_by_two"):
    np.testing.assert_array_equal(votes[name], votes["one"])
    for a, b in zip(jax.tree.leaves(params[name]), jax.tree.leaves(params["one"])):
      assert a.shape[0] == TEACHERS
      # The programs differ (8 teachers vmapped on one device, 1 per device, 2 per device), so
      # float32 sums are reassociated; Adam (lr 1e-3) turns that into differences up to ~5e-6
      # in a few parameters after 20 steps on some CPUs. A real difference (another minibatch
      # or key) moves parameters by ~1e-3 per step.
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-5, err_msg=name)
    for key in ("teacher_accuracy_mean", "plurality_accuracy", "lnmax_accuracy_scale_20"):
      assert results[name][key] == results["one"][key], (name, key)
  with open(os.path.join(runs["two_by_two"], "metrics.jsonl")) as f:  # written once
    assert [json.loads(line)["step"] for line in f] == [10, 20]


@pytest.mark.integration
def test_unreachable_coordinator_fails_within_the_timeout(npz_file, tmp_path):
  t0 = time.monotonic()
  out = subprocess.run(
      [sys.executable, "-m", "dgd_jax.main", *teacher_flags(npz_file, str(tmp_path / "w")),
       f"--coordinator_address=localhost:{free_port()}", "--num_processes=2",
       "--process_id=1", "--distributed_timeout=3"],
      cwd=REPO, env=env_with(1), capture_output=True, text=True, timeout=120)
  assert out.returncode != 0
  assert "did not answer within 3 s" in out.stderr and "Start process 0" in out.stderr
  assert time.monotonic() - t0 < 60
  assert not os.path.exists(tmp_path / "w")  # nothing written


def test_coordinator_port_in_use_is_refused():
  with socket.socket() as s:
    s.bind(("", 0))
    s.listen()
    port = s.getsockname()[1]
    with pytest.raises(distributed.CoordinatorError, match="Pick a free port"):
      distributed.initialize(distributed.Topology("explicit", f"localhost:{port}", 2, 0))


@pytest.mark.parametrize("env, flags, expected", [
    ({}, {}, distributed.Topology()),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}, {}, distributed.Topology()),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, {}, distributed.Topology("slurm")),
    ({"TPU_WORKER_HOSTNAMES": "a,b"}, {}, distributed.Topology("tpu")),
    ({"TPU_WORKER_HOSTNAMES": "a"}, {}, distributed.Topology()),
    ({}, {"force": True}, distributed.Topology("auto")),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"},
     {"coordinator_address": "h:1", "num_processes": 2, "process_id": 1},
     distributed.Topology("explicit", "h:1", 2, 1)),
    ({}, {"coordinator_address": "h:1", "num_processes": 1, "process_id": 0},
     distributed.Topology()),
])
def test_detect_reads_flags_then_environment(env, flags, expected):
  assert distributed.detect(env, **flags) == expected


@pytest.mark.parametrize("flags, match", [
    ({"coordinator_address": "h:1", "num_processes": 2, "process_id": 2}, "process_id"),
    ({"coordinator_address": "h:1"}, "num_processes"),
    ({"num_processes": 2, "process_id": 0}, "coordinator_address"),
])
def test_detect_refuses_incomplete_flags(flags, match):
  with pytest.raises(ConfigError, match=match):
    distributed.detect({}, **flags)


def test_multiprocess_refuses_uneven_teacher_counts():
  with pytest.raises(ConfigError, match="250 teachers do not split evenly over the 4 devices"):
    placement.mesh_size(250, num_devices=4, num_processes=2)
  assert placement.mesh_size(8, num_devices=4, num_processes=2) == 4


def test_single_process_uses_the_most_devices_that_divide():
  assert placement.mesh_size(250, num_devices=8) == 5
  assert placement.mesh_size(7, num_devices=8) == 7
  assert placement.mesh_size(7, num_devices=6) == 1


def test_one_process_asks_for_a_cpu_device_per_core(monkeypatch):
  """host.use_every_core: a device per core unless XLA_FLAGS already sets a count;
  DGD_CPU_DEVICES overrides the count, and 1 leaves XLA alone."""
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
  monkeypatch.delenv("DGD_CPU_DEVICES", raising=False)
  assert host.use_every_core() == 3
  assert os.environ["XLA_FLAGS"] == ("--xla_cpu_enable_fast_math=false "
                                     "--xla_force_host_platform_device_count=3")
  assert host.use_every_core() == 0  # a count is set: left as it is
  monkeypatch.delenv("XLA_FLAGS")
  monkeypatch.setenv("DGD_CPU_DEVICES", "1")
  assert host.use_every_core() == 0 and "XLA_FLAGS" not in os.environ
  monkeypatch.setenv("DGD_CPU_DEVICES", "4")
  assert host.use_every_core() == 4
  assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
  monkeypatch.delenv("XLA_FLAGS")
  monkeypatch.setenv("DGD_CPU_DEVICES", "two")
  with pytest.raises(ValueError, match="DGD_CPU_DEVICES='two': give a whole number"):
    host.use_every_core()


def test_multiprocess_refuses_single_process_stages(monkeypatch):
  monkeypatch.setattr(distributed, "is_multiprocess", lambda: True)
  sharded = {n for n, spec in methods.STAGES.items() if spec.multiprocess}
  assert sharded == {"teachers", "teacher_sweep"}  # the registry's
  distributed.check_multiprocess(["teachers", "teacher_sweep"], sharded)
  with pytest.raises(ConfigError, match=r"\['baseline', 'student'\] run on one process"):
    distributed.check_multiprocess(["baseline", "teachers", "student"], sharded)


def dry_run(script: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run(["bash", f"launch/{script}", "--dry_run", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=60)


def test_launcher_dry_runs_print_the_commands():
  flags = ["--", "--config=dgd_jax/configs/teachers.py:fashion_mnist", "--workdir=/shared/w"]
  slurm = dry_run("slurm.sh", "--nodes=4", "--gpus_per_node=8", *flags)
  assert slurm.returncode == 0, slurm.stderr
  assert "#SBATCH --nodes=4" in slurm.stdout and "#SBATCH --gpus-per-node=8" in slurm.stdout
  assert "srun python -m dgd_jax.main --distributed --config=" in slurm.stdout
  tpu = dry_run("tpu_vm.sh", "--name=t", "--zone=z", "--bucket=gs://b", "--run=r", *flags[:2])
  assert tpu.returncode == 0, tpu.stderr
  lines = tpu.stdout.splitlines()
  assert lines[0].startswith("gcloud compute tpus tpu-vm create t --zone=z")
  assert any("--worker=all" in line and "dgd_jax.main --distributed" in line
             and "--workdir=$HOME/shared/r" in line for line in lines)
  assert lines[-1] == "mkdir -p workdirs && gcloud storage cp -r gs://b/r workdirs/"
  assert dry_run("tpu_vm.sh", *flags).returncode == 2  # no --name/--zone/--bucket
  sweep = dry_run("sweep_teachers.sh", "--launcher=local", "--sizes=4,8", "--",
                  "--processes=2", "--devices_per_process=3")
  assert sweep.returncode == 0, sweep.stderr
  assert sweep.stdout.count("dgd_jax.main --coordinator_address=localhost:") == 2
  assert "--config.sweep.sizes=" in sweep.stdout
  uneven = dry_run("sweep_teachers.sh", "--launcher=local", "--sizes=10,25")
  assert uneven.returncode == 2 and "35 members, not divisible by 4" in uneven.stderr
