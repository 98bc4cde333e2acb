"""Workdir files written whole and read with a clear error: ``atomic_write`` (a temporary
file, fsynced, renamed into place), JSON, text, CSV and NumPy arrays, JSON-lines records. A
file that cannot be read raises ``DamagedArtefactError`` naming the stage folder to remove
(``damaged``); a failed write raises ``WorkdirNotWritableError`` naming the file
(``writing``). The workdir's layout, its stage folders and its lock are ``runtime/workdir.py``'s.
"""
from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
import zipfile
import zlib
from typing import Any, Callable, IO, Iterator

import numpy as np

from dgd_jax.runtime.errors import DamagedArtefactError, WorkdirNotWritableError

TEMP_SUFFIX = ".tmp"


def plain(value: Any) -> Any:
  """Config values as JSON-compatible Python (tuples become lists)."""
  if isinstance(value, dict) or hasattr(value, "to_dict"):  # a dict or a ConfigDict
    return {k: plain(v) for k, v in sorted(dict(value).items())}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  return value


def fingerprint(obj: Any) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _stage_folder(path: str) -> str | None:
  """The stage folder (the nearest one holding stage.json) that ``path`` lies in, if any."""
  folder = os.path.dirname(os.path.abspath(path))
  for _ in range(4):  # <stage>/file, <stage>/checkpoints/<step>/..., at most
    if os.path.exists(os.path.join(folder, "stage.json")):
      return folder
    folder = os.path.dirname(folder)
  return None


def _first_line(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f"{type(error).__name__}: {text[0][:300] if text else ''}"


def damaged(path: str, error: BaseException) -> DamagedArtefactError:
  """The error for a workdir file that cannot be read: names the file, the stage it belongs
  to and how to recompute it."""
  folder = _stage_folder(path)
  if folder is None:
    fix = f"remove {path} and re-run the same command"
  else:
    # realpath: a sweep's stage folders are links into its shared stages/ folder
    fix = (f"recompute the '{os.path.basename(folder)}' stage: rm -r {os.path.realpath(folder)}, "
           "then re-run the same command (finished stages are reused)")
  return DamagedArtefactError(
      f"{path} cannot be read ({_first_line(error)}): it is damaged, e.g. cut short by a full "
      f"disk or corrupted. Fix: {fix}. Nothing in the workdir was changed.")


_WRITE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)
SPACE_MARGIN = 1 << 16  # bytes a checkpoint's metadata needs besides its arrays


def _names_a_write_error(text: str) -> str | None:
  """The text of the write errno ``text`` names, if any."""
  return next((os.strerror(n) for n in _WRITE_ERRNOS if os.strerror(n) in text), None)


class _WriteErrorLogs(logging.Filter):
  """Drops the log records of a failed write (Orbax's threads log each with its traceback
  before the save raises it): ``writing`` reports the failure in one line."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not _names_a_write_error(record.getMessage())


def check_space(path: str, nbytes: int) -> None:
  """OSError ENOSPC (``writing`` reports it in one line) where the disk that holds ``path``
  has less than ``nbytes`` and a margin free: a writer that fails in its own threads (Orbax)
  is not started on a full disk. ``path`` is an existing folder."""
  if shutil.disk_usage(path).free < 1.1 * nbytes + SPACE_MARGIN:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
  """Turns a failure to write ``path`` (no permission, a read-only or full disk; also from
  Orbax, whose errors name the cause only in their text) into ``WorkdirNotWritableError``
  naming the file and the fix, and keeps the writers' own logs of it out of the output."""
  logs, quiet = logging.getLogger("absl"), _WriteErrorLogs()
  logs.addFilter(quiet)
  try:
    yield
  except WorkdirNotWritableError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    if isinstance(e, OSError):
      cause = e.errno in _WRITE_ERRNOS and os.strerror(e.errno)
    else:
      cause = _names_a_write_error(str(e))
    if not cause:
      raise
    raise WorkdirNotWritableError(
        f"cannot write {path}: {cause}. Free space on that disk or make it writable (or use "
        "another --workdir), then re-run the same command: finished stages are reused and an "
        "interrupted one resumes from its last checkpoint. Files already in the workdir were "
        "not changed.") from None
  finally:
    logs.removeFilter(quiet)


def atomic_write(path: str, write: Callable[[IO], None], binary: bool = False,
                 exclusive: bool = False) -> None:
  """Writes ``path`` all at once: ``write(f)`` fills a temporary file in the same folder
  (``.<name>.*.tmp``), which is flushed to disk and then renamed to ``path``. A crash leaves
  either the old file or the new one, never part of one. ``exclusive``: fail with
  ``FileExistsError`` instead of replacing an existing ``path`` (the new file is linked into
  place). Every artefact of the workdir is written through here."""
  folder, name = os.path.split(path)
  with writing(path):
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=folder or ".")
    try:
      with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"newline": ""})) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
      if exclusive:
        os.link(tmp, path)
      else:
        os.replace(tmp, path)
    finally:
      if os.path.exists(tmp):
        os.unlink(tmp)


def is_temporary(name: str) -> bool:
  """Whether a file name is one of ``atomic_write``'s temporary files (left by a crash)."""
  return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def write_json(path: str, obj: Any, exclusive: bool = False) -> None:
  """Writes ``obj`` as JSON atomically (``atomic_write``)."""

  def write(f):
    json.dump(obj, f, indent=2, sort_keys=True)
    f.write("\n")

  atomic_write(path, write, exclusive=exclusive)


def write_text(path: str, text: str) -> None:
  atomic_write(path, lambda f: f.write(text))


def write_csv(path: str, rows: list[dict], columns: list[str]) -> None:

  def write(f):
    writer = csv.DictWriter(f, columns)
    writer.writeheader()
    writer.writerows(rows)

  atomic_write(path, write)


def save_array(path: str, array) -> None:
  """``numpy.save`` atomically."""
  atomic_write(path, lambda f: np.save(f, array, allow_pickle=False), binary=True)


def save_arrays(path: str, **arrays) -> None:
  """``numpy.savez`` atomically."""
  atomic_write(path, lambda f: np.savez(f, **arrays), binary=True)


def append_line(path: str, record: dict) -> None:
  """Appends ``record`` as one JSON line. A run killed while appending may leave a partial
  last line: it is ended first, so the new record stays on a line of its own (readers skip
  the broken one)."""
  line = json.dumps(record) + "\n"
  with writing(path), open(path, "a+b") as f:
    if f.tell() > 0:
      f.seek(-1, os.SEEK_END)
      if f.read(1) != b"\n":
        line = "\n" + line
    f.write(line.encode())


def makedirs(path: str) -> None:
  with writing(path):
    os.makedirs(path, exist_ok=True)


def load_array(path: str) -> np.ndarray | dict[str, np.ndarray]:
  """A saved ``.npy`` array, or an ``.npz`` file's arrays as a dict, read whole; a damaged
  file raises ``DamagedArtefactError`` (see ``damaged``)."""
  try:
    data = np.load(path, allow_pickle=False)
    if isinstance(data, np.lib.npyio.NpzFile):
      with data:
        return {k: data[k] for k in data.files}
    return data
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise damaged(path, e) from None


def read_json(path: str) -> Any:
  with open(path) as f:
    return json.load(f)


def read_artefact_json(path: str) -> Any:
  """``read_json`` for a file the workdir must hold; a damaged one raises
  ``DamagedArtefactError``."""
  try:
    return read_json(path)
  except (OSError, ValueError) as e:
    raise damaged(path, e) from None
