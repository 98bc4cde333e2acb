"""The workdir: resolved config, JSON-lines metrics, one folder per stage, report.

Layout::

  <workdir>/config.json        the latest run's resolved config (every run: runs.jsonl),
                               with the workdir's ``format``
  <workdir>/metrics.jsonl      one JSON object per logged step, with its stage
  <workdir>/<stage>/stage.json the config slice that produced the stage, and its hash
  <workdir>/<stage>/checkpoints/  Orbax checkpoints (resume from the latest step)
  <workdir>/<stage>/result.json   the stage's outputs; its presence marks the stage done
  <workdir>/report.json, report.md
  <workdir>/lock.json          the writing run's pid, host and start time, while it runs
  <workdir>/data.json          the fingerprint of the data the stages read (``bind_data``)
  <workdir>/noise.key          the secret the run's DP noise is drawn from (owner-only; never
                               publish it, ``secret``)
  <workdir>/noise_draws.json   the platform (backend, JAX and NumPy versions) each noisy
                               stage drew its secret noise on (``noise_platforms``)
  <workdir>/release/           what the run's epsilon lets a user publish (``runner.release``);
                               everything else in the workdir is private

A stage whose folder holds another config slice is refused (``WorkdirConflictError``),
never overwritten: artefacts already written are not lost. A slice written before a field was
added or removed is compared as this code would write it (``stored_slice``). In a
multi-process run every process reads the workdir and only the writer (process 0;
``writer=False`` elsewhere) writes these files and holds the lock; Orbax checkpoints are
written by all. A second run on the same workdir is refused while the first holds the lock
(``WorkdirLockedError``); the lock of a killed run (its pid no longer running on this host)
is taken over.

Every file is written whole (``runtime.files.atomic_write``) and ``result.json`` last, so a
killed run never leaves a half-written artefact that a rerun would take as finished.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import shutil
import socket
import sys
import time
import uuid
from typing import Any, Callable, Iterator

from absl import logging

from dgd_jax.runtime import distributed
from dgd_jax.runtime import tensorboard
from dgd_jax.runtime.errors import UserInputError, WorkdirConflictError, WorkdirLockedError
from dgd_jax.runtime.files import (append_line, atomic_write, damaged, fingerprint,
                                   is_temporary, makedirs, read_artefact_json, read_json,
                                   write_json, write_text)

LOCK = "lock.json"
CONFIG = "config.json"
NOISE_KEY_FILE = "noise.key"
NOISE_DRAWS = "noise_draws.json"
DATA = "data.json"
REPORT, REPORT_MD = "report.json", "report.md"
# The workdir format this code writes and reads (config.json's "format"). Format 2: the
# config holds every field the code reads (no reader falls back to a default for an absent
# one), and the teachers' result records the chunk they were planned with. A workdir of
# another format is refused whole (``check_format``), never read through defaults.
FORMAT = 2


# Fields added to (or removed from) the config since workdirs of this format were first
# written, each with the value that reproduces what a run without it (with it) did: a recorded
# config or stage slice is read with these filled in (dropped), so a finished stage is reused,
# not redone or refused, for a field that changes nothing there. Another value still conflicts.
ADDED_FIELDS = {("teachers", "mixup"): 0.0, ("teachers", "width"): 0.0,
                ("generator", "target_mix"): 0.0, ("queries", "ss_order"): 0.0,
                ("queries", "ss_beta"): 0.0, ("queries", "ss_sigma"): 0.0,
                ("dpsgd", "sampling_rate"): 0.0, ("dpsgd", "epochs"): 0.0,
                ("model", "module"): "", ("model", "kwargs"): "",
                ("privacy", "allow_large_delta"): False, ("model", "backbone"): "",
                ("model", "variant"): "B/16", ("model", "checkpoint"): "",
                ("model", "trainable"): "all", ("model", "image_size"): 0,
                ("model", "roles"): ["teachers", "baseline", "student"],
                ("audit", "canaries"): 0}
REMOVED_FIELDS = {("teachers", "shared_init"): False}
# Fields renamed since, old name: new name (one name per concept).
RENAMED_FIELDS = {("privacy", "relation"): ("privacy", "dpdfd_analysis")}
# Values that changed their spelling since, (block, field): (old, new): the budget guard off
# was max_epsilon 0, now inf (0 is refused).
CHANGED_VALUES = {("privacy", "max_epsilon"): (0.0, math.inf)}


def as_written_now(stored: dict) -> dict:
  """A recorded config (config.json) or stage slice (stage.json) as this code writes it: each of
  ``ADDED_FIELDS`` it lacks at its value, each of ``REMOVED_FIELDS`` it holds at its value
  dropped, each of ``RENAMED_FIELDS`` under its new name, each of ``CHANGED_VALUES`` in its new
  spelling (only in blocks the slice has)."""
  out = {k: dict(v) if isinstance(v, dict) else v for k, v in stored.items()}
  for (block, old), (_, new) in RENAMED_FIELDS.items():
    if isinstance(out.get(block), dict) and old in out[block] and new not in out[block]:
      out[block][new] = out[block].pop(old)
  for (block, field), value in ADDED_FIELDS.items():
    if isinstance(out.get(block), dict):
      out[block].setdefault(field, value)
  for (block, field), value in REMOVED_FIELDS.items():
    if isinstance(out.get(block), dict) and field in out[block] and out[block][field] == value:
      del out[block][field]
  for (block, field), (old, new) in CHANGED_VALUES.items():
    if isinstance(out.get(block), dict) and out[block].get(field) == old:
      out[block][field] = new
  return out


def stored_slice(meta_path: str) -> dict:
  """The config slice a stage folder's stage.json records, as this code would write it
  (``as_written_now``); ``DamagedArtefactError`` if the file holds none."""
  meta = read_artefact_json(meta_path)
  if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
    raise damaged(meta_path, ValueError("no 'config' object"))
  return as_written_now(meta["config"])


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
  if isinstance(a, dict) and isinstance(b, dict):
    out = []
    for k in sorted(set(a) | set(b)):
      out += _differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}{k}.")
    return out
  return [] if a == b else [f"{prefix[:-1]}: {a!r} here, {b!r} in the workdir"]


def write_report(folder: str, report: dict, text: str) -> None:
  """``report`` as ``<folder>/report.json`` and its markdown ``text`` as report.md."""
  write_json(os.path.join(folder, REPORT), report)
  write_text(os.path.join(folder, REPORT_MD), text)


def _proc_stat(pid: int) -> list[str] | None:
  """Fields 3.. of ``/proc/<pid>/stat`` (state, ppid, ...; Linux); None where unreadable."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()
  except (OSError, IndexError):
    return None


def _process_start(pid: int) -> int | None:
  """When process ``pid`` started, in clock ticks since boot (Linux; else None). With the pid
  it names one process: a pid reused after a restart has another start time."""
  fields = _proc_stat(pid)
  return None if fields is None else int(fields[19])


def _running_here(holder: dict) -> bool:
  """Whether the process a lock names (on this host) is still running."""
  try:
    os.kill(holder["pid"], 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    pass
  fields = _proc_stat(holder["pid"])
  if fields is None:  # no /proc: the pid exists
    return True
  if fields[0] == "Z":  # exited, not yet reaped
    return False
  return holder.get("pid_start") in (None, int(fields[19]))


def _describe_holder(holder: dict) -> str:
  return (f"pid {holder.get('pid')} on host {holder.get('host')}, started "
          f"{holder.get('started')} ({holder.get('command')})")


class Stage:
  """One stage's folder: its config slice, checkpoints and result."""

  def __init__(self, workdir: "Workdir", name: str, config_part: dict):
    self.workdir, self.name, self.config_part = workdir, name, config_part
    self.path = os.path.join(workdir.path, name)
    self.checkpoint_dir = os.path.join(self.path, "checkpoints")

  def purpose(self, purpose: str) -> str:
    """``purpose`` bound to this stage's config slice, for the secret draws it makes: stages of
    two configs that share one key (the grid points of a sweep, two ``train_dpsgd`` calls)
    draw independent noise, never the same draws at two noise scales (which would let their
    difference cancel the noise)."""
    return f"{self.name}/{fingerprint(self.config_part)}/{purpose}"

  @property
  def result_path(self) -> str:
    return os.path.join(self.path, "result.json")

  @property
  def meta_path(self) -> str:
    """stage.json: written when the stage begins."""
    return os.path.join(self.path, "stage.json")

  def check(self) -> None:
    """Refuses a folder that holds another config's artefacts."""
    if os.path.exists(self.meta_path):
      diffs = _differences(self.config_part, stored_slice(self.meta_path))
      if diffs:
        raise WorkdirConflictError(
            f"{self.path} holds '{self.name}' artefacts of another config:\n  "
            + "\n  ".join(diffs)
            + f"\nNothing was changed. Use a new --workdir, or re-run with the config in "
            f"{os.path.join(self.workdir.path, 'config.json')}.")
    elif os.path.isdir(self.path) and [n for n in os.listdir(self.path) if not is_temporary(n)]:
      raise WorkdirConflictError(
          f"{self.path} exists, is not empty and has no stage.json, so dgd_jax cannot tell "
          "what made it. Nothing was changed. Use a new --workdir.")

  def _meta(self) -> dict:
    meta = read_artefact_json(self.meta_path) if os.path.exists(self.meta_path) else {}
    if not isinstance(meta, dict):
      raise damaged(self.meta_path, ValueError(f"a JSON {type(meta).__name__}, not an object"))
    return meta

  @property
  def identity(self) -> str | None:
    """The id stage.json gives these artefacts: drawn when the stage first begins, kept by
    every resume (None: not begun, or begun before stages had ids)."""
    return self._meta().get("id")

  def check_data(self, data: str) -> None:
    """Refuses artefacts made from other data than ``data`` (its fingerprint now), as this
    stage recorded when it began (``bind_data``'s check, kept where data.json is gone)."""
    meta = self._meta()
    if "data" in meta and meta["data"] != data:
      raise WorkdirConflictError(
          f"{self.path} was made from other data (fingerprint {meta['data']}; the data now has "
          f"{data}; a '+' part is the pretrained checkpoint's). Nothing was changed. Use a new "
          "--workdir for the new data, or restore the data (and checkpoint) it was made from.")

  def check_inputs(self, inputs: dict[str, str | None]) -> None:
    """Refuses artefacts made from other results of the stages they read (``inputs``: each
    one's ``identity`` now) than those this stage recorded when it began; a stage that
    recorded none passes."""
    meta = self._meta()
    changed = sorted(n for n, i in meta.get("inputs", inputs).items() if inputs.get(n) != i)
    if changed:
      raise WorkdirConflictError(
          f"{self.path} was made from other results of {changed} than the workdir holds now "
          "(recomputed since), so it does not belong to them. Nothing was changed. Remove it "
          f"(rm -r {self.path}) to recompute it from them.")

  def begin(self, inputs: dict[str, str | None] | None = None, data: str | None = None
            ) -> None:
    """Writes stage.json: the config slice, the stage's ``identity`` (a new one unless it
    resumes) and, where given, the ``identity`` of each stage it reads (``check_inputs``) and
    the data's fingerprint (``check_data``)."""
    self.check()
    if not self.workdir.writer:
      return
    identity = self.identity or uuid.uuid4().hex
    makedirs(self.path)
    write_json(self.meta_path,
               {"stage": self.name, "hash": fingerprint(self.config_part),
                "config": self.config_part, "id": identity,
                **({"inputs": inputs} if inputs is not None else {}),
                **({"data": data} if data is not None else {})})

  def run(self, compute: Callable[[], dict], inputs: dict[str, str | None] | None = None,
          data: str | None = None) -> None:
    """Makes the stage: ``begin`` (recording ``inputs`` and ``data``), then ``compute()`` (its
    outputs), then ``finish`` with them and its wall time. A ``UserInputError`` before any
    artefact is saved (e.g. too many teachers) removes the folder, so that a fixed config can
    use it. Every process waits until result.json is written."""
    self.begin(inputs, data)
    t0 = time.perf_counter()
    try:
      result = compute()
    except UserInputError:
      self.abandon_if_empty()
      raise
    self.finish({**result, "stage_seconds": time.perf_counter() - t0})
    distributed.barrier(f"{self.name} finished")

  def abandon_if_empty(self) -> None:
    """Removes what ``begin`` wrote if the stage stopped before saving any artefact."""
    if not self.workdir.writer:
      return
    if not os.path.isdir(self.checkpoint_dir) or not os.listdir(self.checkpoint_dir):
      shutil.rmtree(self.path, ignore_errors=True)

  def done(self) -> bool:
    return os.path.exists(self.result_path)

  def result(self) -> dict:
    result = read_artefact_json(self.result_path)
    if not isinstance(result, dict):
      raise damaged(self.result_path, ValueError(f"a JSON {type(result).__name__}, not an object"))
    return result

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

  @property
  def lock_path(self) -> str:
    return os.path.join(self.path, LOCK)

  @contextlib.contextmanager
  def lock(self) -> Iterator[None]:
    """Holds ``<workdir>/lock.json`` while the body runs, so that one run writes the workdir
    at a time (only the writer locks). Refuses a workdir another live run holds; takes over
    the lock of a run that was killed on this host."""
    if not self.writer:
      yield
      return
    makedirs(self.path)
    mine = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "pid_start": _process_start(os.getpid()), "command": " ".join(sys.argv)}
    while True:
      try:
        write_json(self.lock_path, mine, exclusive=True)  # atomic: no one sees half a lock
        break
      except FileExistsError:
        self._take_over_if_stale()  # or raise WorkdirLockedError naming the holder
    try:
      yield
    finally:
      try:
        if read_json(self.lock_path) == mine:
          os.unlink(self.lock_path)
      except (OSError, ValueError):
        pass

  def _take_over_if_stale(self) -> None:
    """Removes the lock if the run it names was killed on this host; raises
    ``WorkdirLockedError`` naming that run otherwise."""
    try:
      with open(self.lock_path) as f:
        text = f.read()
      holder = json.loads(text)
      holder["pid"] = int(holder["pid"])
    except FileNotFoundError:
      return  # released meanwhile: try again
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise WorkdirLockedError(
          f"{self.lock_path} exists but cannot be read ({e}), so dgd_jax cannot tell whether "
          "another run is writing to this workdir. If none is, remove that file and re-run."
          ) from None
    here = socket.gethostname()
    if holder.get("host") != here:
      raise WorkdirLockedError(
          f"{self.path} is in use by another run: {_describe_holder(holder)}. Two runs writing "
          f"one workdir would corrupt its artefacts. Wait for that run to finish or use another "
          f"--workdir. This host ({here}) cannot see whether a process on {holder.get('host')} "
          f"is alive: if that run is gone, remove {self.lock_path} and re-run.")
    if _running_here(holder):
      raise WorkdirLockedError(
          f"{self.path} is in use by another run: {_describe_holder(holder)}. Two runs writing "
          f"one workdir would corrupt its artefacts. Wait for it to finish (or stop it: kill "
          f"{holder['pid']}), or use another --workdir.")
    # Stale: move it aside (atomic; of several processes taking over, one succeeds), and
    # check that what was moved is the stale lock, not one a faster process just created.
    aside = f"{self.lock_path}.stale.{os.getpid()}"
    try:
      os.rename(self.lock_path, aside)
    except FileNotFoundError:
      return  # another process took it over first: try again
    with open(aside) as f:
      moved = f.read()
    if moved != text:  # a live lock: put it back unless yet another run holds the name
      try:
        os.link(aside, self.lock_path)
      except FileExistsError:
        pass
    else:
      logging.warning("%s: taking over the lock of a run that no longer runs (%s); "
                      "finished stages are reused, interrupted ones resume.", self.path,
                      _describe_holder(holder))
    os.unlink(aside)

  def bind_data(self, name: str, fingerprint_: str) -> None:
    """Refuses data whose content differs from what this workdir's stages were made from
    (``data.json``, written at the first run that records one): the same path holding other
    arrays would otherwise reuse stages of the old data and credit them to the new."""
    path = os.path.join(self.path, DATA)
    if os.path.exists(path):
      recorded = read_artefact_json(path)
      if isinstance(recorded, dict) and recorded.get("fingerprint") != fingerprint_:
        raise WorkdirConflictError(
            f"{self.path} was made from other data: {recorded.get('dataset')} had content "
            f"fingerprint {recorded.get('fingerprint')}, {name} now has {fingerprint_} (a "
            "'+' part is the pretrained checkpoint's). Nothing was changed. Use a new "
            "--workdir for the new data, or restore the data (and checkpoint) it was made "
            "from.")
    elif self.writer:
      makedirs(self.path)
      write_json(path, {"dataset": name, "fingerprint": fingerprint_})

  def noise_platforms(self) -> dict[str, dict]:
    """{stage: the platform (``host.noise_platform``) it drew its secret noise on}: also the
    record that it drew, once its folder is gone (``secret`` refuses a missing key then)."""
    path = os.path.join(self.path, NOISE_DRAWS)
    recorded = read_artefact_json(path) if os.path.exists(path) else {}
    if not isinstance(recorded, dict):
      raise damaged(path, ValueError(f"a JSON {type(recorded).__name__}, not an object"))
    return recorded

  def check_noise_platform(self, stages: list[str], platform: dict, allow: bool) -> None:
    """Refuses to draw the noise of ``stages`` on another ``platform`` than they first drew on:
    one key gives other values there (a resumed stage would mix two draws, a recomputed one
    would release the same private data again under fresh noise), unless ``allow``."""
    recorded = self.noise_platforms()
    moved = {n: recorded[n] for n in stages if n in recorded and recorded[n] != platform}
    if moved and not allow:
      raise WorkdirConflictError(
          f"{self.path}: stages {sorted(moved)} drew their noise on "
          + "; ".join(f"{n}: {p}" for n, p in sorted(moved.items())) + f", and this run is on "
          f"{platform}, where the same key draws other noise: resuming or recomputing them "
          "here releases the same private data again under new noise. Nothing was changed. "
          "Run on the platform they drew on, or pass --allow_noise_redraw "
          "(pipeline.run(..., allow_noise_redraw=True)) to draw again and spend the budget "
          "again.")

  def record_noise_platform(self, stage: str, platform: dict) -> None:
    """Records that ``stage`` draws its noise on ``platform`` (before it draws)."""
    recorded = self.noise_platforms() if self.writer else {}
    if self.writer and recorded.get(stage) != platform:
      write_json(os.path.join(self.path, NOISE_DRAWS), {**recorded, stage: platform})

  @property
  def noise_key_path(self) -> str:
    return os.path.join(self.path, NOISE_KEY_FILE)

  def secret(self, drawn: list[str], size: int) -> bytes:
    """The run's secret (``privacy.noise.NoiseSource`` draws the run's DP noise from it):
    ``size`` bytes in ``noise.key``, drawn from the operating system's entropy at the
    workdir's first run and read back on every later one, so a resumed run releases the same
    answers. Process 0 reads or draws it and sends it to the others. ``drawn``: the stages
    already begun here that drew noise; without the key their releases cannot be resumed, so
    a missing key is then refused."""
    sent, refusal = bytes(size + 1), None  # a status byte, then the secret
    if self.writer:
      try:
        sent = b"\1" + self._read_or_draw_key(drawn, size)
      except UserInputError as e:  # the other processes must not wait for a key
        refusal = e
    sent = distributed.from_process_zero(sent)
    if refusal is not None:
      raise refusal
    if sent[0] != 1:
      raise WorkdirConflictError(f"process 0 refused {self.noise_key_path}: see its log.")
    return sent[1:]

  def _read_or_draw_key(self, drawn: list[str], size: int) -> bytes:
    path = self.noise_key_path
    if not os.path.exists(path):
      if drawn:
        raise WorkdirConflictError(
            f"{path} is missing, but stages {drawn} of this workdir drew noise from it: they "
            "cannot be resumed with other noise, and a second draw from their data would "
            "spend the budget again. Nothing was changed. Use a new --workdir, or restore "
            "that file.")
      makedirs(self.path)
      secret = os.urandom(size)
      with contextlib.suppress(FileExistsError):  # exclusive: never replace a key
        atomic_write(path, lambda f: f.write(secret), binary=True, exclusive=True)
      os.chmod(path, 0o600)
    mode = os.stat(path).st_mode
    if mode & 0o077:
      raise WorkdirConflictError(
          f"{path} can be read by other users (mode {oct(mode & 0o777)}): whoever read it can "
          "remove the noise from this run's releases. If nobody did, `chmod 600 "
          f"{path}` and re-run; else use a new --workdir.")
    with open(path, "rb") as f:
      secret = f.read()
    if len(secret) != size:
      raise WorkdirConflictError(
          f"{path} holds {len(secret)} bytes, not a {size}-byte key. "
          + (f"Stages {drawn} drew noise from the key it held: restore that file from a "
             "backup, or use a new --workdir (a new key would draw their data's noise again)."
             if drawn else "No stage drew noise from it: remove it, and a rerun draws a new "
             "key."))
    return secret

  def keep_secret(self, secret: bytes) -> None:
    """Writes the run's ``secret`` back to noise.key where the file went missing while the run
    held it (owner-only, never over another key): later reruns resume its releases."""
    path = self.noise_key_path
    if self.writer and not os.path.exists(path):
      logging.warning("%s was removed while the run held its key: written back, so that "
                      "reruns resume this run's releases. Never publish it.", path)
      with contextlib.suppress(FileExistsError):
        atomic_write(path, lambda f: f.write(secret), binary=True, exclusive=True)
      os.chmod(path, 0o600)

  def check_format(self) -> None:
    """Refuses a workdir written in another format (``FORMAT``); a new one passes."""
    path = os.path.join(self.path, CONFIG)
    if not os.path.exists(path):
      return
    recorded = read_artefact_json(path)
    theirs = recorded.get("format", 1) if isinstance(recorded, dict) else None
    if theirs != FORMAT:
      raise WorkdirConflictError(
          f"{self.path} is a workdir of format {theirs} ({path}); this dgd_jax reads format "
          f"{FORMAT} only: its artefacts may lack fields this version reads. Nothing was "
          "changed. Use a new --workdir, or read this one with the dgd_jax that wrote it.")

  def read_config(self) -> dict:
    """The config the workdir's latest run recorded (``check_format`` first), as this code
    would record it (``as_written_now``), without the workdir's ``format``."""
    path = os.path.join(self.path, CONFIG)
    if not os.path.exists(path):
      raise WorkdirConflictError(f"{path} does not exist: {self.path} is not the workdir of "
                                 "a `python -m dgd_jax.main` run (or the run has not started).")
    self.check_format()
    recorded = dict(read_artefact_json(path))
    del recorded["format"]
    return as_written_now(recorded)

  def record_config(self, resolved: dict) -> None:
    """Writes ``resolved`` (a run's config, ``plain``) as config.json and appends it to
    runs.jsonl."""
    if not self.writer:
      return
    makedirs(self.path)
    write_json(os.path.join(self.path, CONFIG), {**resolved, "format": FORMAT})
    append_line(os.path.join(self.path, "runs.jsonl"),
                {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                 "config": resolved})

  def log_metrics(self, stage: str, metrics: dict) -> None:
    if not self.writer:
      return
    append_line(os.path.join(self.path, "metrics.jsonl"), {"stage": stage, **metrics})
    if "step" in metrics:  # the same curves for TensorBoard
      tensorboard.scalars(self.path, stage, int(metrics["step"]),
                          {k: v for k, v in metrics.items() if k != "step"})

  def read_metrics(self, stage: str) -> list[dict]:
    """The stage's logged metrics by step; after a resume, the last record of each step."""
    path = os.path.join(self.path, "metrics.jsonl")
    if not os.path.exists(path):
      return []
    by_step = {}
    with open(path) as f:
      for line in f:
        try:
          record = json.loads(line)
        except ValueError:  # a line cut short by a killed run
          continue
        if record.get("stage") == stage and "step" in record:
          by_step[record["step"]] = record
    return [by_step[k] for k in sorted(by_step)]
