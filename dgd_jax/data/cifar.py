"""CIFAR-10 (Krizhevsky 2009) from the official ``cifar-10-python.tar.gz``, without TensorFlow.

The archive holds ``cifar-10-batches-py/data_batch_1..5`` (50,000 training images) and
``test_batch`` (10,000), each a Python pickle of a dict with ``data`` (uint8 [10000, 3072], the
red, green and blue planes of a 32x32 image in row-major order) and ``labels``. The pickles are
read with an unpickler that reconstructs NumPy arrays, dicts, lists and strings only: a pickle
that names anything else (which could run code) is refused, so a user's archive is data, never
code. A folder where the archive was extracted (``cifar-10-batches-py``) reads the same way.
"""
from __future__ import annotations

import io
import os
import pickle
import tarfile

import numpy as np

from dgd_jax.runtime.errors import DatasetError

ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
URL = "https://www.cs.toronto.edu/~kriz/" + ARCHIVE
# The official archive's size and MD5 (https://www.cs.toronto.edu/~kriz/cifar.html): a
# downloaded archive is verified against them; a local copy is checked by parsing instead.
ARCHIVE_BYTES = 170_498_071
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck")
IMAGE_SHAPE = (32, 32, 3)

# What a CIFAR batch pickle may reconstruct: NumPy arrays (of either NumPy's module layout)
# and the codecs call Python 2 pickles of byte strings use.
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class _DataUnpickler(pickle.Unpickler):

  def find_class(self, module: str, name: str):
    if (module, name) not in _ALLOWED:
      raise pickle.UnpicklingError(f"a CIFAR batch holds arrays only; this one names "
                                   f"{module}.{name}")
    return super().find_class(module, name)


def _batch(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
  """(images uint8 [N, 32, 32, 3], labels) of one batch pickle's bytes."""
  try:
    d = _DataUnpickler(io.BytesIO(raw), encoding="bytes").load()
    data = np.asarray(d[b"data"], dtype=np.uint8)
    labels = np.asarray(d[b"labels"], dtype=np.int64)
  except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as e:
    raise DatasetError(f"{where} is not a CIFAR-10 python batch ({e}); use the official "
                       f"{ARCHIVE} from {URL}.") from None
  if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
    raise DatasetError(f"{where}: data of shape {data.shape} with {len(labels)} labels; a "
                       "CIFAR-10 batch holds [N, 3072] bytes and N labels.")
  return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels  # planes -> HWC


def missing(path: str | None) -> list[str]:
  """What a local copy at ``path`` (the archive, a folder holding it, or the extracted
  ``cifar-10-batches-py``) lacks: [] when it is readable."""
  if not path:
    return [ARCHIVE]
  if os.path.isfile(path) or os.path.isfile(os.path.join(path, ARCHIVE)):
    return []
  folder = _extracted(path)
  if folder is None:
    return [ARCHIVE]
  return [n for n in TRAIN_BATCHES + (TEST_BATCH,)
          if not os.path.isfile(os.path.join(folder, n))]


def _extracted(path: str | None) -> str | None:
  if not path or not os.path.isdir(path):
    return None
  inner = os.path.join(path, FOLDER)
  return inner if os.path.isdir(inner) else path


def read(path: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """{'train': (images, labels), 'test': (images, labels)} of a local copy (``missing``)."""
  archive = path if os.path.isfile(path) else os.path.join(path, ARCHIVE)
  if os.path.isfile(archive):
    try:
      with tarfile.open(archive, "r:gz") as tar:
        members = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
        raw = {n: tar.extractfile(members[n]).read()
               for n in TRAIN_BATCHES + (TEST_BATCH,) if n in members}
    except (tarfile.TarError, OSError, EOFError) as e:
      raise DatasetError(f"cannot read {archive} ({e}): it must be the gzipped tar {ARCHIVE} "
                         f"from {URL}.") from None
    lacking = [n for n in TRAIN_BATCHES + (TEST_BATCH,) if n not in raw]
    if lacking:
      raise DatasetError(f"{archive} lacks {', '.join(lacking)}: it must be {ARCHIVE} from "
                         f"{URL}.")
  else:
    folder = _extracted(path)
    lacking = missing(path)
    if lacking:
      raise DatasetError(f"{path} lacks {', '.join(lacking)}: put {ARCHIVE} (or its extracted "
                         f"{FOLDER} folder) there; it is at {URL}.")
    raw = {}
    for n in TRAIN_BATCHES + (TEST_BATCH,):
      with open(os.path.join(folder, n), "rb") as f:
        raw[n] = f.read()
  train = [_batch(raw[n], f"{path}:{n}") for n in TRAIN_BATCHES]
  return {"train": (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train])),
          "test": _batch(raw[TEST_BATCH], f"{path}:{TEST_BATCH}")}


def write(path: str, splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
  """Writes ``splits`` (uint8 [N, 32, 32, 3] images and labels) as a ``cifar-10-python.tar.gz``
  of the official layout: the training split cut into five batches. For tests and fixtures."""
  def pickled(x: np.ndarray, y: np.ndarray) -> bytes:
    data = np.ascontiguousarray(x.transpose(0, 3, 1, 2).reshape(len(x), -1), dtype=np.uint8)
    return pickle.dumps({b"data": data, b"labels": [int(v) for v in y]}, protocol=2)

  x, y = splits["train"]
  parts = np.array_split(np.arange(len(x)), len(TRAIN_BATCHES))
  files = {n: pickled(x[p], y[p]) for n, p in zip(TRAIN_BATCHES, parts)}
  files[TEST_BATCH] = pickled(*splits["test"])
  with tarfile.open(path, "w:gz") as tar:
    for name, blob in files.items():
      info = tarfile.TarInfo(f"{FOLDER}/{name}")
      info.size = len(blob)
      tar.addfile(info, io.BytesIO(blob))
