"""The comparison table's command: every row's preset loads; a tiny table
is run, written, and rebuilt from the finished runs without training again."""
from __future__ import annotations

import os

import pytest

from dgd_jax.cli import compare
from dgd_jax.runner import methods
from dgd_jax.runtime.errors import WorkdirConflictError


def test_every_row_is_a_preset_of_a_known_method():
  names = [r.name for r in compare.ROWS]
  assert len(set(names)) == len(names)
  covered = {r.config().method for r in compare.ROWS}
  assert {"dgd", "pate", "dpdfd", "dpsgd"} <= covered <= set(methods.METHODS)


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_tiny_table_runs_then_rebuilds_from_the_finished_runs(npz_file, tmp_path):
  rows = (
      compare.Row("baseline", f"baseline.py:npz:{npz_file},cpu",
                  overrides=(("baseline.num_steps", 5),)),
      compare.Row("dpsgd", f"dpsgd.py:npz:{npz_file},eps3",
                  overrides=(("dpsgd.batch_size", 128), ("dpsgd.num_steps", 3))),
  )
  root = str(tmp_path / "compare")
  papers = {"baseline": "91.0% (a paper)"}
  text = compare.run(root, rows, published=papers)
  lines = text.splitlines()
  assert len(lines) == 2 + len(rows) and lines[0].startswith("| row |")
  assert lines[2].startswith("| baseline | `baseline.py:") and "∞ (no DP release)" in lines[2]
  assert "91.0% (a paper)" in lines[2]
  assert "(`pld`)" in lines[3] and "DP-SGD steps" in lines[3] and " min " in lines[3]
  with open(os.path.join(root, "comparison.md")) as f:
    assert f.read() == text
  metrics = os.path.join(root, "dpsgd", "metrics.jsonl")
  before = os.path.getsize(metrics)
  assert compare.run(root, rows, published=papers) == text  # reused: nothing trained again
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


def _fake_report(accuracy: float, epsilon: float, accountant: str = "rdp") -> dict:
  return {"test_accuracy": accuracy, "wall_seconds": 61.0, "epsilon_is_data_dependent": False,
          "privacy": {"epsilon": epsilon, "accountant": accountant, "delta": 1e-5},
          "covers": {"covered": "fake answers"}}


@pytest.mark.integration
def test_collect_only_draws_the_frontier_from_finished_rows(tmp_path):
  """frontier.png and frontier.csv come from the same finished rows as comparison.md (here
  tiny fake reports: nothing is trained), plus the rows' published numbers."""
  from dgd_jax.runtime.files import write_json
  by_name = {r.name: r for r in compare.ROWS}
  fake = {"dgd_eps10": _fake_report(0.7654, 9.9993), "dgd_eps1": _fake_report(0.5795, 0.990),
          "dgd_private_eps10": _fake_report(0.6214, 9.9998, "pld"),
          "dpsgd_scatternet_eps3": _fake_report(0.8960, 3.0, "pld"),
          "dpsgd_scatternet_eps1": _fake_report(0.8688, 1.0, "pld")}
  root = tmp_path / "compare"
  for name, report in fake.items():
    (root / name).mkdir(parents=True)
    write_json(str(root / name / "report.json"), report)
  rows = tuple(by_name[n] for n in ("dgd_eps10", "dgd_eps1", "dgd_private_eps10", "pate",
                                    "dpsgd_scatternet_eps1", "dpsgd_scatternet_eps3"))
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  papers = compare.read_published(os.path.join(repo, "docs", "published.csv"))
  text = compare.run(str(root), rows, collect_only=True, published=papers)
  assert "76.54%" in text and "| pate | `pate.py" in text and "| not run |" in text
  assert "| 88.2% (paper preset; DGD Table I) |" in text  # the papers' numbers, from the file
  png = root / "frontier.png"
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
  points, published = compare.frontier_points(rows, fake, published=papers)
  whole = {p["row"]: p["whole"] for p in points}
  assert whole == {"dgd_eps10": False, "dgd_eps1": False, "dgd_private_eps10": True,
                   "dpsgd_scatternet_eps1": True, "dpsgd_scatternet_eps3": True}
  assert {(p["line"], p["epsilon"], p["accuracy"]) for p in published} == {
      ("DGD", 10.0, 88.2), ("DGD", 1.0, 64.9), ("DP-SGD, ScatterNet + linear", 3.0, 89.7)}
  csv_lines = (root / "frontier.csv").read_text().splitlines()
  assert csv_lines[0].startswith("line,row,kind,epsilon")
  assert len(csv_lines) == 1 + len(points) + len(published)
  assert any(",dgd_eps10,measured,9.9993,76.54,the label answers only" in l for l in csv_lines)


def test_every_row_has_a_frontier_line_and_a_coverage():
  """Each row of the real table is drawn on a named line, with filled (whole) or hollow
  (label answers only) markers as its method's privacy note says."""
  for row in compare.ROWS:
    assert compare.line_of(row) in compare.LINES.values(), row.name
  whole = {r.name: compare.covers_everything(r.config()) for r in compare.ROWS}
  assert not whole["dgd_eps10"] and not whole["dpdfd_ensemble_eps10"]
  assert whole["dgd_private_eps1"] and whole["pate"] and whole["dpdfd_eps10"]
  assert all(whole[n] for n in whole if n.startswith("dpsgd"))


def test_the_committed_cells_fill_the_rows_not_finished_here():
  """docs/measured.csv draws every measured method when no row is finished; a finished row's
  own report replaces its committed cell; each cell's coverage is its row's."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  cells = compare.read_measured(os.path.join(repo, "docs", "measured.csv"))
  points, _ = compare.frontier_points(compare.ROWS, {}, cells)
  assert len(points) == len(cells) and {p["line"] for p in points} >= set(compare.LINES.values())
  finished = {"dgd_eps10": _fake_report(0.7654, 9.9993)}
  points, _ = compare.frontier_points(compare.ROWS, finished, cells)
  assert [round(p["accuracy"], 2) for p in points if p["row"] == "dgd_eps10"] == [76.54]
  by_name = {r.name: r for r in compare.ROWS}
  for c in cells:
    assert c["line"] in compare.LINES.values() or c["line"].startswith("PATE+"), c
    if c["row"]:
      assert c["line"] == compare.line_of(by_name[c["row"]])
      assert c["whole"] == compare.covers_everything(by_name[c["row"]].config()), c["row"]
