r"""One table of every method at about epsilon 1, 3 and 10 on Fashion-MNIST (delta 1e-5):
accuracy, epsilon with its accountant, what it covers, wall time, and the published numbers
beside them. Runs each row's preset in ``<root>/<row>`` (a finished workdir is reused, so a
rerun only rebuilds the table) and writes ``<root>/comparison.md``, and from the same rows the
privacy-utility picture ``<root>/frontier.png`` (test accuracy against epsilon, one line per
method, filled markers where the epsilon covers everything the model learnt from the private
data, hollow where it covers the label answers only, the published numbers as stars) with its
numbers in ``<root>/frontier.csv``. Rows without a finished run are drawn from the committed
measured cells (``--measured``, docs/measured.csv: each cell's number, accountant, command and
the commit that recorded it), so the picture shows every measured method; the papers' numbers
come from ``--published`` (docs/published.csv).

  python -m dgd_jax.compare --root=workdirs/compare [--rows=dgd_eps10,dpsgd_cnn_eps3]
      [--collect_only]

``--rows`` runs only the named rows, and ``--collect_only`` none; either way the table lists
every row, and rows without a finished run are listed as not run. A row's
workdir may be a symlink to a finished run of the same command made elsewhere; a workdir whose
stages were made by another config (e.g. before a preset changed) is not tabled: its row says
so, and ``--rows=<row>`` refuses to run there until it is moved away. The wall time
is the sum of the stage times recorded when each stage ran (a reused stage keeps its own).
"""
from __future__ import annotations

import csv
import dataclasses
import importlib
import io
import os
import re
import sys

from absl import app, flags, logging

from dgd_jax.configs.common import with_overrides
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime import distributed
from dgd_jax.runtime import host
from dgd_jax.runtime import plots
from dgd_jax.runtime import progress
from dgd_jax.runtime.errors import ConfigError, UserInputError, WorkdirConflictError
from dgd_jax.runtime.files import read_json, write_text


@dataclasses.dataclass(frozen=True)
class Row:
  name: str  # the workdir under --root
  spec: str  # '<config file in dgd_jax/configs>:<argument>'
  overrides: tuple[tuple[str, object], ...] = ()  # ('block.field', value) pairs

  def config(self):
    module, _, arg = self.spec.partition(":")
    return with_overrides(importlib.import_module(
        f"dgd_jax.configs.{module.removesuffix('.py')}").get_config(arg), self.overrides)


ROWS = (
    Row("dgd_eps10", "dgd.py:fashion_mnist,cpu"),
    Row("dgd_eps3", "dgd.py:fashion_mnist,cpu,eps3"),
    Row("dgd_eps1", "dgd.py:fashion_mnist,cpu,eps1"),
    Row("dgd_private_eps10", "dgd.py:fashion_mnist,cpu,private_baseline"),
    Row("dgd_private_eps3", "dgd.py:fashion_mnist,cpu,eps3,private_baseline"),
    Row("dgd_private_eps1", "dgd.py:fashion_mnist,cpu,eps1,private_baseline"),
    Row("pate", "pate.py:fashion_mnist,cpu"),
    Row("pate_plus", "pate.py:fashion_mnist,cpu,plus"),
    Row("dpdfd_eps10", "dpdfd.py:fashion_mnist,cpu"),
    Row("dpdfd_eps1", "dpdfd.py:fashion_mnist,cpu,eps1"),
    Row("dpdfd_ensemble_eps10", "dpdfd.py:fashion_mnist,cpu,ensemble,eps10"),
    Row("dpdfd_ensemble_eps1", "dpdfd.py:fashion_mnist,cpu,ensemble,eps1"),
    Row("dpsgd_scatternet_eps1", "dpsgd.py:fashion_mnist,eps1"),
    Row("dpsgd_scatternet_eps3", "dpsgd.py:fashion_mnist,eps3"),
    Row("dpsgd_scatternet_eps10", "dpsgd.py:fashion_mnist,eps10"),
    Row("dpsgd_cnn_eps1", "dpsgd.py:fashion_mnist,eps1,cnn"),
    Row("dpsgd_cnn_eps3", "dpsgd.py:fashion_mnist,eps3,cnn"),
    Row("dpsgd_cnn_eps10", "dpsgd.py:fashion_mnist,eps10,cnn"),
)
# One line of the frontier per row-name stem (the name without its ``_eps<N>`` suffix).
LINES = {
    "dgd": "DGD",
    "dgd_private": "DGD end to end (private_baseline)",
    "pate": "PATE (LNMax, every query charged)",
    "pate_plus": "PATE+ (Confident-GNMax, Renyi filter)",
    "dpdfd": "DPDFD, one teacher",
    "dpdfd_ensemble": "DPDFD, ensemble on a synthetic set",
    "dpsgd_scatternet": "DP-SGD, ScatterNet + linear",
    "dpsgd_cnn": "DP-SGD, tanh CNN",
}
HEADER = ("| row | command (`python -m dgd_jax.main --config=dgd_jax/configs/...`) | accuracy | "
          "epsilon (accountant) | what the epsilon covers | wall time | published |\n"
          "|---|---|---|---|---|---|---|")


STALE = "made by another config (move its workdir away to rerun)"


def table_row(row: Row, report: dict | None, missing: str = "not run",
              published: str = "—") -> str:
  """One Markdown line from a finished run's report.json (None: ``missing``), with the
  ``published`` number at the row's epsilon."""
  if report is None:
    return f"| {row.name} | `{row.spec}` | {missing} | | | | {published} |"
  p = report["privacy"]
  epsilon = ("∞ (no DP release)" if p["epsilon"] is None else
             f"{p['epsilon']:.5g} (`{p['accountant']}`"
             + (", DATA-DEPENDENT" if report.get("epsilon_is_data_dependent") else "")
             + (", label DP only" if p.get("unit") == "label" else "") + ")")
  covered = (report.get("covers") or {}).get("covered", "—")
  minutes, seconds = divmod(round(report["wall_seconds"]), 60)
  return (f"| {row.name} | `{row.spec}` | {100 * report['test_accuracy']:.2f}% | {epsilon} | "
          f"{covered} | {minutes} min {seconds:02d} s | {published} |")


def line_of(row: Row) -> str:
  stem = re.sub(r"_eps\d+$", "", row.name)
  return LINES.get(stem, stem)


def nominal_epsilon(row: Row) -> float | None:
  """The budget the row's name states (``..._eps3`` -> 3), where the published number is."""
  m = re.search(r"_eps(\d+)$", row.name)
  return float(m.group(1)) if m else None


def covers_everything(config) -> bool:
  """Whether the run's epsilon covers everything its released model learnt from the private
  data (DP-SGD, PATE with a public pool, DGD's private_baseline, DPDFD's Algorithm 1), rather
  than only the teachers' label answers on inputs made from the private data without noise
  (DGD, DPDFD on a synthetic set; privacy.FIXED_INPUTS_NOTE)."""
  if methods.method(config).audited(config):  # the models the epsilon covers whole
    return True
  if config.method == "dpdfd":  # Algorithm 1's own generator sees the teacher only by noise
    from dgd_jax.plan import dpdfd  # pylint: disable=g-import-not-at-top
    return not dpdfd.uses_synthetic(config) and config.dpdfd.teacher != "private_data"
  return False


def read_published(path: str) -> dict[str, str]:
  """The papers' numbers (docs/published.csv): row -> the published accuracy at the row's
  epsilon, with its source."""
  with open(path, newline="") as f:
    return {r["row"]: r["published"] for r in csv.DictReader(f)}


def read_measured(path: str) -> list[dict]:
  """The committed measured cells (docs/measured.csv): one dict per cell, with ``accuracy``
  (%) and ``epsilon`` as floats and ``whole`` True where the epsilon covers everything."""
  with open(path, newline="") as f:
    return [{**c, "accuracy": float(c["accuracy_percent"]), "epsilon": float(c["epsilon"]),
             "whole": c["covers"] == "everything"} for c in csv.DictReader(f)]


def frontier_points(rows, reports: dict, measured=(), published=None
                    ) -> tuple[list[dict], list[dict]]:
  """The measured points (each finished row with an epsilon, and each committed cell in
  ``measured`` whose row did not finish here) and the published ones (a row's text in
  ``published`` that starts with a percentage, placed at its nominal epsilon)."""
  published_text = published or {}
  points, published = [], []
  for c in measured:
    if c["row"] not in reports:
      points.append({k: c[k] for k in ("line", "row", "epsilon", "accuracy", "whole")})
  for row in rows:
    report = reports.get(row.name)
    if report is not None and report["privacy"]["epsilon"] is not None:
      points.append({"line": line_of(row), "row": row.name,
                     "epsilon": float(report["privacy"]["epsilon"]),
                     "accuracy": 100 * report["test_accuracy"],
                     "whole": covers_everything(row.config())})
    text = published_text.get(row.name, "—")
    m = re.match(r"\s*(\d+(?:\.\d+)?)%", text)
    if m and nominal_epsilon(row) is not None:
      published.append({"line": line_of(row), "row": row.name, "epsilon": nominal_epsilon(row),
                        "accuracy": float(m.group(1)), "source": text})
  return points, published


def write_frontier(root: str, rows, reports: dict, measured=(), published=None) -> bool:
  """``<root>/frontier.png`` and ``<root>/frontier.csv`` from the finished rows' reports, the
  committed ``measured`` cells of the others and the published numbers; False (and no PNG)
  without matplotlib."""
  points, published = frontier_points(rows, reports, measured, published)
  out = io.StringIO()
  writer = csv.writer(out, lineterminator="\n")
  writer.writerow(["line", "row", "kind", "epsilon", "test_accuracy_percent", "covers"])
  for p in points:
    writer.writerow([p["line"], p["row"], "measured", f"{p['epsilon']:.6g}",
                     f"{p['accuracy']:.2f}", "everything learnt from the private data"
                     if p["whole"] else "the label answers only"])
  for p in published:
    writer.writerow([p["line"], p["row"], "published", f"{p['epsilon']:g}",
                     f"{p['accuracy']:g}", p["source"]])
  write_text(os.path.join(root, "frontier.csv"), out.getvalue())
  return plots.frontier(os.path.join(root, "frontier.png"), points, published,
                        title=f"Test accuracy against epsilon, delta 1e-5 ({len(points)} "
                              f"measured cells, {len(reports)} of them from finished rows)")


def run(root: str, rows=ROWS, collect_only: bool = False, only=None, measured=(),
        published=None) -> str:
  """Runs every row (only those named in ``only``, or none with ``collect_only``), then
  writes and returns the table of all ``rows``, each from its finished run if it has one;
  the picture adds the committed ``measured`` cells of the rows not finished here, and
  both the ``published`` numbers (row -> text, ``read_published``)."""
  published = published or {}
  for row in rows:
    if not collect_only and (only is None or row.name in only):
      pipeline.run(row.config(), os.path.join(root, row.name))
  lines = [HEADER]
  tabled = {}  # row name -> the finished report it is tabled from
  for row in rows:
    path = os.path.join(root, row.name, "report.json")
    report = read_json(path) if os.path.exists(path) else None
    paper = published.get(row.name, "—")  # the published number at the row's epsilon
    finished = report is not None and report.get("test_accuracy") is not None
    if finished:  # a report made by another config must not stand in this row
      try:
        pipeline.check_workdir(row.config(), os.path.join(root, row.name))
      except WorkdirConflictError as e:
        logging.warning("%s: %s", row.name, e)
        lines.append(table_row(row, None, STALE, paper))
        continue
    if finished:
      tabled[row.name] = report
    lines.append(table_row(row, report if finished else None, published=paper))
  text = "\n".join(lines) + "\n"
  if distributed.is_writer():
    os.makedirs(root, exist_ok=True)
    write_text(os.path.join(root, "comparison.md"), text)
    write_frontier(root, rows, tabled, measured, published)
  return text


_ROOT = flags.DEFINE_string("root", "workdirs/compare", "Folder holding one workdir per row.")
_ROWS = flags.DEFINE_list("rows", None, "Run only these rows (default: all); the table "
                         "still lists every row.")
_COLLECT = flags.DEFINE_bool("collect_only", False, "Train nothing; table the finished rows.")
_MEASURED = flags.DEFINE_string("measured", "docs/measured.csv", "Committed measured cells the "
                                "picture draws for rows not finished under --root ('' : none).")
_PUBLISHED = flags.DEFINE_string("published", "docs/published.csv", "The papers' numbers, "
                                 "per row, for the table and the stars ('' : none).")


def main(argv):
  del argv
  progress.setup_cli_logging()
  by_name = {r.name: r for r in ROWS}
  try:
    host.use_every_core()  # before the first device use (host.py)
    unknown = sorted(set(_ROWS.value or ()) - set(by_name))
    if unknown:
      raise ConfigError(f"--rows names unknown rows {unknown}; known: {sorted(by_name)}.")
    for name, path in (("measured", _MEASURED.value), ("published", _PUBLISHED.value)):
      if path and not os.path.exists(path):
        raise ConfigError(f"--{name}={path} does not exist: run from the repository root, "
                          f"or pass --{name}='' to leave those numbers out.")
    measured = read_measured(_MEASURED.value) if _MEASURED.value else ()
    published = read_published(_PUBLISHED.value) if _PUBLISHED.value else {}
    print(run(_ROOT.value, ROWS, _COLLECT.value, _ROWS.value, measured, published), end="")
  except UserInputError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  app.run(main)
