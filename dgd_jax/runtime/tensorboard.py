"""TensorBoard event files beside metrics.jsonl, so that ``tensorboard --logdir <workdir>``
shows a run: each stage's training curves as a run of its own (``<workdir>/tensorboard/<stage>``)
and the finished run's summary (``<workdir>/tensorboard/summary``: test accuracy, the baseline's,
epsilon per accountant). Written with tensorboardX, which needs no TensorFlow. metrics.jsonl
stays the record the code reads; these files are for looking."""
from __future__ import annotations

import numbers
import os

import tensorboardX

FOLDER = "tensorboard"
_open: dict[str, tensorboardX.SummaryWriter] = {}  # event-file folder -> its writer


def _writer(folder: str) -> tensorboardX.SummaryWriter:
  """One open writer per folder (a new writer starts a new event file), for the workdir in use;
  the writers of other workdirs are closed."""
  if folder not in _open:
    root = os.path.dirname(folder)
    for other in [f for f in _open if os.path.dirname(f) != root]:
      _open.pop(other).close()
    _open[folder] = tensorboardX.SummaryWriter(folder)
  return _open[folder]


def scalars(workdir: str, run: str, step: int, values: dict) -> None:
  """Writes the real-valued entries of ``values`` (booleans and others skipped) at ``step``
  under ``run`` ('<stage>' or 'summary'), flushed."""
  writer = _writer(os.path.join(workdir, FOLDER, run))
  for tag, value in values.items():
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
      writer.add_scalar(tag, float(value), step)
  writer.flush()


def summary(workdir: str, report: dict) -> None:
  """The run's headline numbers (report.json's) under 'summary' at step 0, then every writer
  of the workdir closed."""
  values = {"test_accuracy": report.get("test_accuracy"),
            "baseline_accuracy": report.get("baseline_accuracy"),
            **{f"epsilon/{name}": eps for name, eps in (report.get("epsilons") or {}).items()}}
  scalars(workdir, "summary", 0, {k: v for k, v in values.items() if v is not None})
  close(workdir)


def close(workdir: str) -> None:
  """Closes the open writers under ``workdir``."""
  root = os.path.join(workdir, FOLDER)
  for folder in [f for f in _open if os.path.dirname(f) == root]:
    _open.pop(folder).close()
