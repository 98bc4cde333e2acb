"""The workdir: resolved config, JSON-lines metrics, one folder per stage, report.

Layout::

  <workdir>/config.json        the latest run's resolved config (every run: runs.jsonl)
  <workdir>/metrics.jsonl      one JSON object per logged step, with its stage
  <workdir>/<stage>/stage.json the config slice that produced the stage, and its hash
  <workdir>/<stage>/checkpoints/  Orbax checkpoints (resume from the latest step)
  <workdir>/<stage>/result.json   the stage's outputs; its presence marks the stage done
  <workdir>/report.json, report.md

A stage whose folder holds another config slice is refused (``WorkdirConflictError``),
never overwritten: artefacts already written are not lost. In a multi-process run every
process reads the workdir and only the writer (process 0; ``writer=False`` elsewhere)
writes these files; Orbax checkpoints are written by all.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from typing import Any

import ml_collections

from dgd_jax.errors import WorkdirConflictError


def plain(value: Any) -> Any:
  """Config values as JSON-compatible Python (tuples become lists)."""
  if isinstance(value, (ml_collections.ConfigDict, dict)):
    return {k: plain(v) for k, v in sorted(dict(value).items())}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  return value


def config_slice(config: ml_collections.ConfigDict, keys: tuple[str, ...]) -> dict:
  """The part of ``config`` named by top-level ``keys`` (what a stage depends on); keys the
  config lacks (e.g. no generator block in PATE) are left out."""
  return {k: plain(config[k]) for k in keys if k in config}


def fingerprint(obj: Any) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
  if isinstance(a, dict) and isinstance(b, dict):
    out = []
    for k in sorted(set(a) | set(b)):
      out += _differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}{k}.")
    return out
  return [] if a == b else [f"{prefix[:-1]}: {a!r} here, {b!r} in the workdir"]


def write_json(path: str, obj: Any) -> None:
  """Writes JSON atomically (temp file + rename), so a crash never leaves half a file."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)


def read_json(path: str) -> Any:
  with open(path) as f:
    return json.load(f)


class Stage:
  """One stage's folder: its config slice, checkpoints and result."""

  def __init__(self, workdir: "Workdir", name: str, config_part: dict):
    self.workdir, self.name, self.config_part = workdir, name, config_part
    self.path = os.path.join(workdir.path, name)
    self.checkpoint_dir = os.path.join(self.path, "checkpoints")

  @property
  def result_path(self) -> str:
    return os.path.join(self.path, "result.json")

  def check(self) -> None:
    """Refuses a folder that holds another config's artefacts."""
    meta_path = os.path.join(self.path, "stage.json")
    if os.path.exists(meta_path):
      theirs = read_json(meta_path)["config"]
      diffs = _differences(self.config_part, theirs)
      if diffs:
        raise WorkdirConflictError(
            f"{self.path} holds '{self.name}' artefacts of another config:\n  "
            + "\n  ".join(diffs)
            + f"\nNothing was changed. Use a new --workdir, or re-run with the config in "
            f"{os.path.join(self.workdir.path, 'config.json')}.")
    elif os.path.isdir(self.path) and os.listdir(self.path):
      raise WorkdirConflictError(
          f"{self.path} exists, is not empty and has no stage.json, so dgd_jax cannot tell "
          "what made it. Nothing was changed. Use a new --workdir.")

  def begin(self) -> None:
    self.check()
    if not self.workdir.writer:
      return
    os.makedirs(self.path, exist_ok=True)
    write_json(os.path.join(self.path, "stage.json"),
               {"stage": self.name, "hash": fingerprint(self.config_part),
                "config": self.config_part})

  def abandon_if_empty(self) -> None:
    """Removes what ``begin`` wrote if the stage stopped before saving any artefact."""
    if not self.workdir.writer:
      return
    if not os.path.isdir(self.checkpoint_dir) or not os.listdir(self.checkpoint_dir):
      shutil.rmtree(self.path, ignore_errors=True)

  def done(self) -> bool:
    return os.path.exists(self.result_path)

  def result(self) -> dict:
    return read_json(self.result_path)

  def finish(self, result: dict) -> None:
    if self.workdir.writer:
      write_json(self.result_path, result)


class Workdir:
  """A run's working directory (see the module docstring)."""

  def __init__(self, path: str, writer: bool = True):
    self.path = os.path.abspath(os.path.expanduser(path))
    self.writer = writer
    if os.path.exists(self.path) and not os.path.isdir(self.path):
      raise WorkdirConflictError(f"--workdir {self.path} is a file, not a directory.")

  def stage(self, name: str, config: ml_collections.ConfigDict, keys: tuple[str, ...]
            ) -> Stage:
    return Stage(self, name, config_slice(config, keys))

  def record_config(self, config: ml_collections.ConfigDict) -> None:
    if not self.writer:
      return
    os.makedirs(self.path, exist_ok=True)
    resolved = plain(config)
    write_json(os.path.join(self.path, "config.json"), resolved)
    with open(os.path.join(self.path, "runs.jsonl"), "a") as f:
      f.write(json.dumps({"time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                          "config": resolved}) + "\n")

  def log_metrics(self, stage: str, metrics: dict) -> None:
    if not self.writer:
      return
    with open(os.path.join(self.path, "metrics.jsonl"), "a") as f:
      f.write(json.dumps({"stage": stage, **metrics}) + "\n")

  def read_metrics(self, stage: str) -> list[dict]:
    """The stage's logged metrics by step; after a resume, the last record of each step."""
    path = os.path.join(self.path, "metrics.jsonl")
    if not os.path.exists(path):
      return []
    by_step = {}
    with open(path) as f:
      for line in f:
        record = json.loads(line)
        if record.get("stage") == stage and "step" in record:
          by_step[record["step"]] = record
    return [by_step[k] for k in sorted(by_step)]
