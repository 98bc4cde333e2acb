"""The comparison table's command (issue 19 part 3): every row's preset loads; a tiny table
is run, written, and rebuilt from the finished runs without training again."""
from __future__ import annotations

import os

import pytest

from dgd_jax import compare, methods
from dgd_jax.errors import WorkdirConflictError


def test_every_row_is_a_preset_of_a_known_method():
  names = [r.name for r in compare.ROWS]
  assert len(set(names)) == len(names)
  covered = {r.config().method for r in compare.ROWS}
  assert {"dgd", "pate", "dpdfd", "dpsgd"} <= covered <= set(methods.METHODS)


def test_tiny_table_runs_then_rebuilds_from_the_finished_runs(npz_file, tmp_path):
  rows = (
      compare.Row("baseline", f"baseline.py:npz:{npz_file},cpu", "91.0% (a paper)",
                  (("baseline.num_steps", 5),)),
      compare.Row("dpsgd", f"dpsgd.py:npz:{npz_file},eps3",
                  overrides=(("dpsgd.batch_size", 128), ("dpsgd.num_steps", 3))),
  )
  root = str(tmp_path / "compare")
  text = compare.run(root, rows)
  lines = text.splitlines()
  assert len(lines) == 2 + len(rows) and lines[0].startswith("| row |")
  assert lines[2].startswith("| baseline | `baseline.py:") and "∞ (no DP release)" in lines[2]
  assert "91.0% (a paper)" in lines[2]
  assert "(`pld`)" in lines[3] and "DP-SGD steps" in lines[3] and " min " in lines[3]
  with open(os.path.join(root, "comparison.md")) as f:
    assert f.read() == text
  metrics = os.path.join(root, "dpsgd", "metrics.jsonl")
  before = os.path.getsize(metrics)
  assert compare.run(root, rows) == text  # reused: nothing trained again
  assert os.path.getsize(metrics) == before
  missing = compare.Row("missing", f"baseline.py:npz:{npz_file},cpu")
  last = compare.run(root, rows + (missing,), collect_only=True).splitlines()[-1]
  assert last.startswith("| missing |") and "| not run |" in last
  assert not os.path.exists(os.path.join(root, "missing"))
  # Running one row still tables every row: --rows never drops the others' results.
  other = str(tmp_path / "other")
  lines = compare.run(other, rows, only=("baseline",)).splitlines()
  assert "| not run |" not in lines[2] and "| dpsgd |" in lines[3] and "| not run |" in lines[3]
  assert not os.path.exists(os.path.join(other, "dpsgd"))
  assert "| not run |" in compare.run(str(tmp_path / "none"), rows, collect_only=True)
  # A finished run of another config is not tabled under this row's name, and not run over.
  impostor = compare.Row("baseline", f"baseline.py:npz:{npz_file},cpu",
                         overrides=(("baseline.num_steps", 6),))
  line = compare.run(root, (impostor,), collect_only=True).splitlines()[-1]
  assert f"| {compare.STALE} |" in line and "%" not in line
  with pytest.raises(WorkdirConflictError, match="another config"):
    compare.run(root, (impostor,))
