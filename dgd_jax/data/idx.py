"""Reading IDX files (the MNIST / Fashion-MNIST format), gzipped or not, with checks.

IDX layout (LeCun et al.): a 4-byte magic number ``0x00 0x00 <dtype> <ndim>``, ``ndim``
big-endian uint32 dimension sizes, then the data. Image files are uint8 of shape
[N, rows, cols] (magic 2051), label files uint8 of shape [N] (magic 2049).
"""
from __future__ import annotations

import gzip
import os

import numpy as np

from dgd_jax.runtime.errors import DatasetError

IMAGES_MAGIC = 2051  # 0x00000803: uint8, 3 dimensions
LABELS_MAGIC = 2049  # 0x00000801: uint8, 1 dimension

# The four standard file names (as distributed for MNIST and Fashion-MNIST).
FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


class IdxError(DatasetError):
  """A malformed or missing IDX file."""


def _read_bytes(path: str) -> bytes:
  if not os.path.isfile(path):
    raise IdxError(f"IDX file not found: {path}")
  opener = gzip.open if path.endswith(".gz") else open
  try:
    with opener(path, "rb") as f:
      return f.read()
  except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError; truncation is EOFError.
    raise IdxError(f"{path} is not a readable (gzipped) IDX file ({e}); "
                   "download it again or check the path.") from e


def read_idx(path: str, expected_magic: int) -> np.ndarray:
  """Returns the uint8 array stored in one IDX file, checking magic number and length."""
  raw = _read_bytes(path)
  if len(raw) < 4:
    raise IdxError(f"{path} is truncated: {len(raw)} bytes, no IDX header.")
  magic = int.from_bytes(raw[:4], "big")
  if magic != expected_magic:
    raise IdxError(f"{path} has IDX magic number {magic}, expected {expected_magic} "
                   f"({'images' if expected_magic == IMAGES_MAGIC else 'labels'}); "
                   "is this the right file?")
  ndim = raw[3]
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise IdxError(f"{path} is truncated inside its header.")
  shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
  expected = int(np.prod(shape)) if shape else 0
  got = len(raw) - header
  if got != expected:
    raise IdxError(f"{path} is truncated or padded: header says shape {shape} "
                   f"({expected} bytes of data), file holds {got}. Download it again.")
  return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def read_split(images_path: str, labels_path: str) -> tuple[np.ndarray, np.ndarray]:
  """Returns (images [N, H, W, 1] uint8, labels [N] int32) from one pair of IDX files."""
  images = read_idx(images_path, IMAGES_MAGIC)
  labels = read_idx(labels_path, LABELS_MAGIC)
  if images.shape[0] != labels.shape[0]:
    raise IdxError(f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
                   f"{labels.shape[0]} labels; the two files must come from the same split.")
  return images[..., None], labels.astype(np.int32)


def read_folder(directory: str) -> tuple[tuple[np.ndarray, np.ndarray],
                                         tuple[np.ndarray, np.ndarray]]:
  """((x_train, y_train), (x_test, y_test)) from the four standard IDX files (``FILES``) in
  ``directory``, as ``read_split`` returns them: uint8 images, int32 labels."""
  paths = {k: os.path.join(directory, n) for k, n in FILES.items()}
  return tuple(read_split(paths[f"{split}_images"], paths[f"{split}_labels"])
               for split in ("train", "test"))


def missing_files(directory: str) -> list[str]:
  """Names of the four standard IDX files that are absent from ``directory``."""
  return [n for n in FILES.values() if not os.path.isfile(os.path.join(directory, n))]


def write_idx(path: str, array: np.ndarray) -> None:
  """Writes a uint8 array as a gzipped IDX file (for tests and for exporting data)."""
  array = np.asarray(array, dtype=np.uint8)
  magic = (0x08 << 8) | array.ndim
  header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
  with gzip.open(path, "wb") as f:
    f.write(header + array.tobytes())
