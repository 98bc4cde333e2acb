"""One entry point for every dataset: ``load_dataset(name, ...)`` -> ``Dataset``.

Names:
  * ``fashion_mnist``, ``mnist``, ``cifar10``: dgd_jax's own TF-free TFDS builders
    (``builders.py``), prepared once into the TFDS data dir from a manual directory (the IDX
    files; CIFAR-10's ``cifar-10-python.tar.gz``) or by download.
  * ``idx:<dir>``: the four standard IDX ``.gz`` files in ``<dir>`` (bring your own data).
  * ``npz:<file>``: a NumPy archive with ``x_train, y_train, x_test, y_test``; images uint8
    [N, H, W] or [N, H, W, C] in 0..255, labels integers in 0..K-1.
  * any other TFDS catalog name (``svhn_cropped``, ...): stock TFDS, which
    needs TensorFlow (``pip install 'dgd_jax[tf]'``).

Images come out as float32 in [-1, 1] (x / 127.5 - 1) with a trailing channel axis,
labels as int32.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
import zipfile
import zlib

import numpy as np
from absl import logging

from dgd_jax.data import idx
from dgd_jax.runtime.errors import DatasetError

DEFAULT_MANUAL_DIRS = {"fashion_mnist": "/usr/share/datasets/fashion-mnist"}
BUILT_IN = ("fashion_mnist", "mnist", "cifar10")


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A labelled image dataset in memory: images float32 in [-1, 1], [N, H, W, C]."""

  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int

  @property
  def image_shape(self) -> tuple[int, int, int]:
    return tuple(self.x_train.shape[1:])

  def fingerprint(self) -> str:
    """``content_fingerprint`` of its four arrays: binds a workdir to the data it read."""
    return content_fingerprint(self.x_train, self.y_train, self.x_test, self.y_test)

  def with_private_size(self, size: int) -> "Dataset":
    """The first ``size`` training examples as the private set (0: all); the test split is
    kept whole."""
    if size == 0:
      return self
    if not 0 < size <= len(self.x_train):
      raise DatasetError(f"config.private_size={size}: {self.name} has {len(self.x_train)} "
                         f"training examples; choose 1..{len(self.x_train)} (0 = all).")
    return dataclasses.replace(self, x_train=self.x_train[:size], y_train=self.y_train[:size])

  def with_test_size(self, size: int) -> "Dataset":
    """At most the first ``size`` test examples (0: all); set by ``plan.checks.smoke_schedules``."""
    if size == 0:
      return self
    return dataclasses.replace(self, x_test=self.x_test[:size], y_test=self.y_test[:size])


def content_fingerprint(*arrays: np.ndarray) -> str:
  """A hash (blake2b) of the arrays' shapes, dtypes and bytes."""
  h = hashlib.blake2b(digest_size=16)
  for a in arrays:
    h.update(str((a.shape, a.dtype.str)).encode())
    h.update(np.ascontiguousarray(a).data)
  return h.hexdigest()


def to_float(images: np.ndarray) -> np.ndarray:
  """uint8 0..255 -> float32 in [-1, 1]."""
  return images.astype(np.float32) / 127.5 - 1.0


def _first_bad(name: str, key: str, a: np.ndarray, bad: np.ndarray) -> tuple[int, str]:
  """(example index, '<name>: key[i, j, ...] is <value> (and n more like it)') of the first
  True entry of ``bad``."""
  first = tuple(int(i) for i in np.argwhere(bad)[0])
  more = int(bad.sum()) - 1
  return first[0], (f"{name}: {key}[{', '.join(map(str, first))}] is {a[first]}"
                    + (f" (and {more} more like it)" if more else ""))


def check_pixels(name: str, key: str, x: np.ndarray) -> None:
  """Refuses images with non-finite pixels or pixels outside 0..255, naming the array and the
  first bad index: such data would otherwise train until the loss turns NaN."""
  if x.dtype == np.uint8:
    return
  if not np.issubdtype(x.dtype, np.number):
    raise DatasetError(f"{name}: {key} has dtype {x.dtype}; store images as uint8 0..255.")
  if np.issubdtype(x.dtype, np.inexact) and not np.isfinite(x).all():
    i, where = _first_bad(name, key, x, ~np.isfinite(x))
    raise DatasetError(f"{where}: pixels must be finite. Fix or drop image {i} of {key}; "
                       "store images as uint8 0..255.")
  bad = (x < 0) | (x > 255)
  if bad.any():
    i, where = _first_bad(name, key, x, bad)
    raise DatasetError(f"{where}, outside 0..255 ({key} spans [{x.min()}, {x.max()}]). Store "
                       "images as uint8 0..255 (data in [0, 1]: multiply by 255).")
  if x.size and np.issubdtype(x.dtype, np.inexact) and x.max() <= 1.0:
    raise DatasetError(f"{name}: {key} spans [{x.min()}, {x.max()}]: images scaled to [0, 1] "
                       "would train as near-black pixels of 0..255. Pass pixels 0..255 "
                       f"({key} * 255, as uint8).")


def check_layout(name: str, key: str, x: np.ndarray) -> None:
  """Refuses image arrays that are not [N, H, W] or [N, H, W, C] with N >= 1, naming the
  likely mistake (channels first, an empty split)."""
  if x.ndim not in (3, 4):
    raise DatasetError(f"{name}: {key} has shape {x.shape}; expected [N, H, W] or "
                       "[N, H, W, C].")
  if not len(x):
    raise DatasetError(f"{name}: {key} holds no images (shape {x.shape}); every split needs "
                       "at least one.")
  if x.ndim == 4 and x.shape[1] in (1, 3, 4) and x.shape[-1] not in (1, 3, 4):
    raise DatasetError(f"{name}: {key} has shape {x.shape}, channels first ([N, C, H, W]); "
                       f"store [N, H, W, C]: np.moveaxis({key}, 1, -1).")


def check_labels(name: str, key: str, y: np.ndarray, num_classes: int | None) -> None:
  """Refuses labels that are not integers in [0, K), K = ``num_classes`` where the dataset
  states it, naming the array and the first bad index."""
  if not np.issubdtype(y.dtype, np.number):
    raise DatasetError(f"{name}: {key} has dtype {y.dtype}; labels must be integers 0..K-1.")
  with np.errstate(invalid="ignore"):
    bad = ~np.isfinite(y) | (y != np.round(y)) | (y < 0)
    if num_classes:
      bad |= y >= num_classes
  if bad.any():
    i, where = _first_bad(name, key, y, bad)
    classes = f"0..{num_classes - 1}" if num_classes else "0..K-1"
    raise DatasetError(f"{where}: labels must be integers {classes}. Fix or drop example {i} "
                       f"of {key}.")


def check_classes(name: str, y_train: np.ndarray, y_test: np.ndarray) -> int:
  """K, the class count a dataset that does not state it implies: max(y_train) + 1, refused
  where a class of 0..K-1 has no training example (a stray label) or a test label has no
  class; logs the per-class counts it inferred."""
  counts = np.bincount(y_train.astype(np.int64))
  k = len(counts)
  empty = np.flatnonzero(counts == 0)
  if len(empty):
    shown = ", ".join(map(str, empty[:5])) + (f" and {len(empty) - 5} more" if len(empty) > 5
                                               else "")
    raise DatasetError(
        f"{name}: y_train's labels reach {k - 1}, so there would be {k} classes, but classes "
        f"{shown} have no training example: a stray label? Labels must be 0..K-1 with every "
        "class present in y_train (count them with np.bincount(y_train)).")
  if k < 2:
    raise DatasetError(f"{name}: every training label is {k - 1}, one class only: a classifier "
                       "needs at least two (labels 0..K-1, K >= 2, each in y_train).")
  unseen = y_test[y_test >= k]
  if unseen.size:
    raise DatasetError(f"{name}: y_test holds label {int(unseen[0])}, which no training "
                       f"example has (y_train's classes are 0..{k - 1}): fix the label, or "
                       "drop those test examples.")
  logging.info("%s: %d classes inferred from the labels (0..%d; training examples per class "
               "%d..%d)", name, k, k - 1, counts.min(), counts.max())
  return k


def _make(name: str, x_train, y_train, x_test, y_test, num_classes: int | None = None) -> Dataset:
  """Validates raw uint8 arrays and converts them to a ``Dataset``."""
  arrays = {"x_train": np.asarray(x_train), "y_train": np.asarray(y_train),
            "x_test": np.asarray(x_test), "y_test": np.asarray(y_test)}
  for split in ("train", "test"):
    x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
    check_layout(name, f"x_{split}", x)
    check_pixels(name, f"x_{split}", x)  # indices as stored, before a channel axis is added
    if x.ndim == 3:
      x = arrays[f"x_{split}"] = x[..., None]
    if y.ndim != 1 or len(y) != len(x):
      raise DatasetError(f"{name}: {len(x)} images but y_{split} has shape {y.shape}; need "
                         "one integer label per image.")
  if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
    raise DatasetError(f"{name}: train images {arrays['x_train'].shape[1:]} and test images "
                       f"{arrays['x_test'].shape[1:]} differ in shape.")
  for k in ("y_train", "y_test"):
    check_labels(name, k, arrays[k], num_classes)
  k = num_classes or check_classes(name, arrays["y_train"], arrays["y_test"])
  return Dataset(name, to_float(arrays["x_train"]), arrays["y_train"].astype(np.int32),
                 to_float(arrays["x_test"]), arrays["y_test"].astype(np.int32), k)


def _load_idx_dir(directory: str) -> Dataset:
  if not os.path.isdir(directory):
    raise DatasetError(f"idx:{directory}: no such directory. Point idx: at a folder holding "
                       f"{', '.join(idx.FILES.values())}.")
  missing = idx.missing_files(directory)
  if missing:
    raise DatasetError(f"idx:{directory} lacks {', '.join(missing)}; the folder needs the "
                       f"four standard IDX files {', '.join(idx.FILES.values())}.")
  (x_train, y_train), (x_test, y_test) = idx.read_folder(directory)
  return _make(f"idx:{directory}", x_train, y_train, x_test, y_test)


def _load_npz(path: str) -> Dataset:
  if not os.path.isfile(path):
    raise DatasetError(f"npz:{path}: no such file. Save one with np.savez(path, x_train=..., "
                       "y_train=..., x_test=..., y_test=...).")
  try:
    f = np.load(path, allow_pickle=False)
    if not isinstance(f, np.lib.npyio.NpzFile):
      raise ValueError("a single .npy array, not an .npz archive")
    with f:
      missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in f]
      if missing:
        raise DatasetError(f"npz:{path} lacks arrays {missing}; it needs x_train, y_train, "
                           "x_test, y_test.")
      arrays = {k: f[k] for k in ("x_train", "y_train", "x_test", "y_test")}
  except DatasetError:
    raise
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise DatasetError(f"npz:{path} cannot be read as an .npz archive ({type(e).__name__}: "
                       f"{e}): it may be truncated or of another format. Write it again with "
                       "np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...).") from None
  return _make(f"npz:{path}", **arrays)


def _read_all(source) -> list:
  """Every example of a TFDS data source, read in one batched call (faster than
  indexing). tfds.testing.mock_data's source breaks ``__getitems__`` (it passes no self),
  so that case falls back to indexing."""
  try:
    return source.__getitems__(range(len(source)))
  except TypeError:
    return [source[i] for i in range(len(source))]


def _load_builtin(name: str, data_dir: str | None, manual_dir: str | None,
                  download: bool) -> Dataset:
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from dgd_jax.data import builders  # pylint: disable=g-import-not-at-top

  cls = {"mnist": builders.DgdMnist, "fashion_mnist": builders.DgdFashionMnist,
         "cifar10": builders.DgdCifar10}[name]
  builder = cls(data_dir=data_dir, file_format="array_record")
  if not builder.is_prepared():
    manual_dir = manual_dir or DEFAULT_MANUAL_DIRS.get(name)
    have_manual = bool(manual_dir) and os.path.isdir(manual_dir) and not cls.missing_files(
        manual_dir)
    if manual_dir and os.path.isdir(manual_dir) and not have_manual:
      raise DatasetError(f"{name}: manual directory {manual_dir} lacks "
                         f"{', '.join(cls.missing_files(manual_dir))}. "
                         + cls.MANUAL_DOWNLOAD_INSTRUCTIONS)
    if not have_manual and not download:
      raise DatasetError(
          f"{name} is not prepared in {builder.data_dir} and no local copy was found"
          f"{' in ' + manual_dir if manual_dir else ''}. "
          + cls.MANUAL_DOWNLOAD_INSTRUCTIONS
          + " Then pass --config.manual_dir=<dir>, or set --config.download=True online.")
    config = tfds.download.DownloadConfig(manual_dir=manual_dir if have_manual else None)
    try:
      builder.download_and_prepare(download_config=config)
    except Exception as e:  # network errors come in many types
      if have_manual or isinstance(e, DatasetError):
        raise
      raise DatasetError(
          f"{name}: download failed ({type(e).__name__}: {e}). Offline, "
          + cls.MANUAL_DOWNLOAD_INSTRUCTIONS + " Then pass --config.manual_dir=<dir>.") from e
  splits = {}
  for split in ("train", "test"):
    examples = _read_all(builder.as_data_source(split=split))
    splits[split] = (np.stack([e["image"] for e in examples]),
                     np.array([e["label"] for e in examples]))
  return _make(name, *splits["train"], *splits["test"],
               num_classes=builder.info.features["label"].num_classes)


def _load_stock_tfds(name: str, data_dir: str | None) -> Dataset:
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  if name not in tfds.list_builders(with_community_datasets=False):
    raise DatasetError(
        f"Unknown dataset {name!r}. Known: {', '.join(BUILT_IN)} (built in, no TensorFlow), "
        "idx:<dir>, npz:<file>, or a TFDS catalog name such as svhn_cropped.")
  if importlib.util.find_spec("tensorflow") is None:
    raise DatasetError(
        f"{name} is a stock TFDS dataset, which needs TensorFlow: pip install 'dgd_jax[tf]' "
        "(or use fashion_mnist, mnist, idx:<dir>, npz:<file>, which do not).")
  builder = tfds.builder(name, data_dir=data_dir)
  builder.download_and_prepare()
  arrays = {}
  for split in ("train", "test"):
    x, y = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1, as_supervised=True))
    arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y
  return _make(name, num_classes=builder.info.features["label"].num_classes, **arrays)


def load_dataset(name: str, *, data_dir: str | None = None, manual_dir: str | None = None,
                 download: bool = True) -> Dataset:
  """Loads a dataset by name (see the module docstring) into memory.

  Args:
    name: ``fashion_mnist``, ``mnist``, ``idx:<dir>``, ``npz:<file>`` or a TFDS name.
    data_dir: the TFDS data dir (None: TFDS's default, ``~/tensorflow_datasets``).
    manual_dir: where the IDX files of a built-in dataset lie (None: the dataset's default).
    download: whether a built-in dataset may be downloaded when no manual files exist.
  """
  if name.startswith("idx:"):
    return _load_idx_dir(os.path.expanduser(name[4:]))
  if name.startswith("npz:"):
    return _load_npz(os.path.expanduser(name[4:]))
  if name in BUILT_IN:
    return _prepared_builtin(name, data_dir or None, manual_dir or None, download)
  return _load_stock_tfds(name, data_dir or None)


@functools.lru_cache(maxsize=1)
def _prepared_builtin(name: str, data_dir: str | None, manual_dir: str | None,
                      download: bool) -> Dataset:
  """``_load_builtin``, kept for the next call with the same arguments: a prepared TFDS
  dataset does not change, and decoding its 70,000 images takes seconds (every run of a
  sweep, a comparison or a compile check reads it again). Its arrays are read-only."""
  data = _load_builtin(name, data_dir, manual_dir, download)
  for array in (data.x_train, data.y_train, data.x_test, data.y_test):
    array.setflags(write=False)
  return data


def load_private(config) -> Dataset:
  """The dataset a run's config names (``dataset``, ``data_dir``, ``manual_dir``,
  ``download``), its private set restricted to ``config.private_size`` (0: all) and, in a
  smoke run, its test split to ``config.test_size``."""
  return load_dataset(config.dataset, data_dir=config.data_dir or None,
                      manual_dir=config.manual_dir or None, download=config.download
                      ).with_private_size(config.private_size
                                          ).with_test_size(config.get("test_size", 0))
