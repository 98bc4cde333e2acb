"""The prepared device check (``dgd_jax.cli.device_check``, ``launch/device_check.sh``) in its dry
run: the same code at tiny shapes, so that the check a lent GPU runs cannot rot."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dgd_jax.cli import device_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.integration
def test_dry_run_writes_every_figure(idx_dir, tmp_path):
  """Every phase of the check at tiny shapes: the engine, the programs of DGD (Fashion-MNIST
  and the CIFAR-10 ViT preset on its synthetic stand-in) and DP-SGD compiled and timed with
  a step's schedule extrapolated, and DP-SGD's stages run; only JSON comes back."""
  out = tmp_path / "out"
  peer = tmp_path / "peer.py"  # the PyTorch peer's interface, without PyTorch
  peer.write_text("import json, sys\n"
                  "print(json.dumps({'impl': 'torch-loop', 'argv': sys.argv[1:]}))\n")
  run = subprocess.run(
      [sys.executable, "-m", "dgd_jax.cli.device_check", f"--out={out}", f"--data={idx_dir}",
       "--dry_run", "--programs=dgd:eps10,dgd:cifar10+eps3+vit,dpsgd:eps3",
       "--runs=dpsgd:eps3", f"--torch_peer={peer}"],
      cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  assert sorted(p.name for p in out.iterdir()) == ["device_check.json"]
  figures = json.loads((out / "device_check.json").read_text())
  assert figures["dry_run"] and figures["machine"]["backend"] == "cpu"
  assert figures["matmul"]["float32_highest_gflops"] > 0
  engine = figures["teacher_engine"]
  assert [(r["conv1"], r["conv2"]) for r in engine] == [(16, 32), (64, 128)]
  assert all(r["examples_per_second"] > 0 for r in engine)
  assert [r["argv"][-1] for r in figures["torch_peer"]] == ["32", "128"]  # --conv2 of each
  programs = figures["programs"]
  assert set(programs) == {"dgd.py:eps10", "dgd.py:cifar10,eps3,vit", "dpsgd.py:eps3"}
  for preset in programs.values():
    assert all("seconds_per_call" in p for stage in preset.values() for p in stage.values()), (
        preset)
  for preset in ("dgd.py:eps10", "dgd.py:cifar10,eps3,vit"):
    assert {"baseline", "teachers", "queries", "student"} <= set(programs[preset])
  baseline = programs["dgd.py:eps10"]["baseline"]["train_step"]
  assert baseline["calls"] == 1 and baseline["extrapolated_seconds"] > 0  # smoke: one step
  assert "dpsgd_step" in programs["dpsgd.py:eps3"]["dpsgd"]
  stages = figures["stages_dpsgd_eps3"]
  assert stages["dpsgd"]["stage_seconds"] > 0 and 0 <= stages["report"]["test_accuracy"] <= 1
  assert stages["report"]["epsilon"] <= 3.0


def test_a_phase_past_its_cap_records_what_it_left(tmp_path):
  """A phase whose cap is spent starts nothing more and says so."""
  check = device_check.Check(str(tmp_path), True, budget=100.0, caps={"programs": 0.0})
  figures = device_check.programs(check, ["dgd:eps10", "dpsgd:eps3"], "", "", True)
  assert figures == {"dgd.py:eps10": {"skipped": "cap"}, "dpsgd.py:eps3": {"skipped": "cap"}}


def test_launcher_refuses_without_the_prepared_wheels(tmp_path):
  """launch/device_check.sh needs .device/wheels (launch/device_prepare.sh): without them it
  says so and installs nothing."""
  repo = tmp_path / "repo"
  (repo / "launch").mkdir(parents=True)
  script = os.path.join(REPO, "launch", "device_check.sh")
  (repo / "launch" / "device_check.sh").write_text(open(script).read())
  run = subprocess.run(["bash", str(repo / "launch" / "device_check.sh")], capture_output=True,
                       text=True, check=False)
  assert run.returncode == 1 and "launch/device_prepare.sh" in run.stderr
  assert not (repo / ".device").exists()


def test_a_cifar10_preset_is_table_ii_on_the_synthetic_stand_in():
  """What the check compiles for 'dgd:cifar10+eps3+vit' is DGD Table II's config, but for
  where its images come from."""
  from dgd_jax.configs import dgd  # pylint: disable=g-import-not-at-top
  config = device_check.config_of("dgd", "cifar10,eps3,vit", "", "/x/shapes.npz", False)
  table2 = dgd.get_config("cifar10,paper")
  assert config.dataset == "npz:/x/shapes.npz"
  assert {**config.to_dict(), "dataset": ""} == {**table2.to_dict(), "dataset": ""}
