"""examples/: each standalone script runs as a user runs it, at tiny sizes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import dgd_jax
from dgd_jax.plan import queries as query_plan

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = {  # script -> tiny arguments
    "pate_on_your_arrays.py": ["--private=2000", "--teachers=4", "--steps=60", "--queries=300",
                               "--noise_scale=1"],
    "accountant.py": ["--teachers=50", "--epsilon=3"],
    "dpsgd_on_your_data.py": ["--private=1000", "--epochs=3", "--batch=100"],
    "dgd_from_python.py": ["--private=1500", "--smoke", "--own_model"],
}


def test_every_example_is_listed_and_short():
  found = sorted(f for f in os.listdir(os.path.join(REPO, "examples")) if f.endswith(".py"))
  assert found == sorted(EXAMPLES)
  for name in found:
    with open(os.path.join(REPO, "examples", name)) as f:
      text = f.read()
    assert len(text.splitlines()) <= 80, name
    # the public API only: `import dgd_jax`, or public names from it
    for line in text.splitlines():
      if re.match(r"\s*(from|import) dgd_jax", line):
        assert line.strip() == "import dgd_jax" or (
            line.startswith("from dgd_jax import ") and all(
                n.strip() in dgd_jax.__all__ for n in line.split("import ", 1)[1].split(","))), (
                    name, line)


# The DP-SGD and DGD examples (a minute or more each on a slow host) run in CI's second tier:
# the default suite trains the same train_dpsgd and runs the same pipeline in tests/test_api.py.
SECOND_TIER = ("dgd_from_python.py", "dpsgd_on_your_data.py")


@pytest.mark.integration
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.extended, pytest.mark.slow] if n in SECOND_TIER else [])
    for n in sorted(EXAMPLES)])
def test_example_runs(name, tmp_path):
  workdir = [f"--workdir={tmp_path}"] if name == "dgd_from_python.py" else []
  run = subprocess.run([sys.executable, os.path.join("examples", name), *EXAMPLES[name],
                        *workdir],
                       cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  assert re.search(r"epsilon \d+\.\d{3}", run.stdout), run.stdout
  if name == "pate_on_your_arrays.py":
    accuracy = float(re.search(r"student test accuracy ([\d.]+)%", run.stdout).group(1))
    assert accuracy > 30.0, run.stdout  # chance is 10%
  if name == "dpsgd_on_your_data.py":
    assert re.search(r"epsilon 3\.000 ", run.stdout), run.stdout  # the default budget, spent
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", run.stdout).group(1))
    assert accuracy > 30.0, run.stdout
  if name == "dgd_from_python.py":  # one step each: the run and its report, not an accuracy
    assert re.search(r"epsilon 10\.000 .*\(pld\)", run.stdout), run.stdout
    # the count planned for 1,500 images at eps 10 (query_plan.num_teachers_for), not N // 80
    expected = query_plan.num_teachers_for(1500, 10.0)
    assert expected == 50 and f"({expected} teachers;" in run.stdout, run.stdout
    config = json.loads((tmp_path / "own_model_smoke" / "run" / "config.json").read_text())
    assert config["model"]["module"] == "__main__:MyCNN"
