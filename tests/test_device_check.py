"""The prepared device check (``dgd_jax.cli.device_check``, ``launch/device_check.sh``) in its dry
run: the same code at tiny shapes, so that the check a lent GPU runs cannot rot."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_dry_run_writes_every_figure(idx_dir, tmp_path):
  out = tmp_path / "out"
  run = subprocess.run(
      [sys.executable, "-m", "dgd_jax.cli.device_check", f"--out={out}", f"--data={idx_dir}",
       "--dry_run", "--compiled=baseline:,dpsgd:eps3", "--runs=dpsgd:eps3"],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  figures = json.loads((out / "device_check.json").read_text())
  assert figures["dry_run"] and figures["machine"]["backend"] == "cpu"
  assert figures["matmul"]["float32_highest_gflops"] > 0
  engine = figures["teacher_engine"]
  assert [(r["conv1"], r["conv2"]) for r in engine] == [(16, 32), (64, 128)]
  assert all(r["examples_per_second"] > 0 for r in engine)
  assert set(figures["compiled"]) == {"baseline.py", "dpsgd.py:eps3"}
  assert "train_step" in figures["compiled"]["baseline.py"]["baseline"]
  assert "dpsgd_step" in figures["compiled"]["dpsgd.py:eps3"]["dpsgd"]
  stages = figures["stages_dpsgd_eps3"]
  assert stages["dpsgd"]["stage_seconds"] > 0 and 0 <= stages["report"]["test_accuracy"] <= 1
  assert stages["report"]["epsilon"] <= 3.0


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
