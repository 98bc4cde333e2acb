"""Data layer: real Fashion-MNIST, mock MNIST, idx:/npz:, bad inputs, teacher partitions."""
from __future__ import annotations

import gzip
import os
import pickle
import tarfile

import numpy as np
import pytest
import tensorflow_datasets as tfds

from dgd_jax.data import (DatasetError, cifar, idx, load_dataset, teacher_partitions,
                          teacher_shards)
from dgd_jax.plan.context import teachers_changed
from dgd_jax.runtime.errors import ConfigError


@pytest.mark.integration
def test_fashion_mnist_real(fashion_mnist):
  d = fashion_mnist
  assert d.x_train.shape == (60000, 28, 28, 1) and d.x_test.shape == (10000, 28, 28, 1)
  assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int32
  assert d.x_train.min() == -1.0 and d.x_train.max() == 1.0
  assert d.num_classes == 10
  # IDX order is kept: the first training labels of Fashion-MNIST are 9 0 0 3 0 2 7 2 5 5.
  np.testing.assert_array_equal(d.y_train[:10], [9, 0, 0, 3, 0, 2, 7, 2, 5, 5])
  np.testing.assert_array_equal(np.bincount(d.y_train), [6000] * 10)
  np.testing.assert_array_equal(np.bincount(d.y_test), [1000] * 10)


@pytest.mark.integration
def test_fashion_mnist_prepared_once_then_reused(fashion_mnist, fashion_mnist_dir, tmp_path):
  # A data dir that is already prepared (by the fixture, from the IDX files) is read without
  # the manual files.
  again = load_dataset("fashion_mnist", data_dir=fashion_mnist_dir,
                       manual_dir=str(tmp_path / "nowhere"), download=False)
  np.testing.assert_array_equal(again.y_test, fashion_mnist.y_test)
  np.testing.assert_array_equal(again.x_train[:100], fashion_mnist.x_train[:100])


def test_mnist_under_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=20):
    d = load_dataset("mnist", data_dir=str(tmp_path))
  assert d.x_train.shape == (20, 28, 28, 1) and d.x_test.shape == (20, 28, 28, 1)
  assert d.num_classes == 10
  assert -1.0 <= d.x_train.min() <= d.x_train.max() <= 1.0
  assert set(np.unique(d.y_train)) <= set(range(10))


def _cifar_splits(rng, train: int, test: int) -> dict:
  return {"train": (rng.integers(0, 256, (train, 32, 32, 3), dtype=np.uint8),
                    rng.integers(0, 10, train)),
          "test": (rng.integers(0, 256, (test, 32, 32, 3), dtype=np.uint8),
                   rng.integers(0, 10, test))}


@pytest.mark.parametrize("form", ["archive", "extracted"])
def test_cifar10_from_the_official_python_archive(tmp_path, form):
  """CIFAR-10 reads a local cifar-10-python.tar.gz (or its extracted folder) without
  TensorFlow: the images in order, channels last, the planes decoded as the archive stores
  them (R, G, B rows of 32x32)."""
  splits = _cifar_splits(np.random.default_rng(0), 50, 20)
  manual = tmp_path / "manual"
  manual.mkdir()
  cifar.write(str(manual / cifar.ARCHIVE), splits)
  if form == "extracted":
    with tarfile.open(manual / cifar.ARCHIVE) as tar:
      tar.extractall(manual, filter="data")
    os.remove(manual / cifar.ARCHIVE)
  d = load_dataset("cifar10", data_dir=str(tmp_path / "tfds"), manual_dir=str(manual),
                   download=False)
  assert d.x_train.shape == (50, 32, 32, 3) and d.x_test.shape == (20, 32, 32, 3)
  assert d.num_classes == 10
  for key, (x, y) in (("train", splits["train"]), ("test", splits["test"])):
    np.testing.assert_allclose(getattr(d, f"x_{key}"), x / 127.5 - 1.0, atol=1e-6)
    np.testing.assert_array_equal(getattr(d, f"y_{key}"), y)
  # The archive's layout, written by hand: a row of 3072 bytes is the red plane (row-major),
  # then green, then blue.
  row = np.zeros((1, 3072), np.uint8)
  row[0, :1024], row[0, 1024 + 33] = 255, 7  # all red; green at pixel (1, 1)
  image, _ = cifar._batch(pickle.dumps({b"data": row, b"labels": [3]}, protocol=2), "hand")
  assert (image[0, ..., 0] == 255).all() and image[0, 1, 1, 1] == 7
  assert image.sum() == 255 * 1024 + 7


def test_cifar10_under_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=12):
    d = load_dataset("cifar10", data_dir=str(tmp_path))
  assert d.x_train.shape == (12, 32, 32, 3) and d.num_classes == 10


def test_cifar10_refuses_what_is_not_its_archive(tmp_path):
  """A batch that names code (a pickle can run any function) is refused as not CIFAR data;
  a missing batch and a missing archive name what to place where."""
  manual = tmp_path / "manual"
  manual.mkdir()
  with pytest.raises(DatasetError, match="cifar-10-python.tar.gz"):
    load_dataset("cifar10", data_dir=str(tmp_path / "a"), manual_dir=str(manual), download=False)
  folder = manual / cifar.FOLDER
  folder.mkdir()
  cifar.write(str(tmp_path / "ok.tar.gz"), _cifar_splits(np.random.default_rng(1), 10, 5))
  with tarfile.open(tmp_path / "ok.tar.gz") as tar:
    tar.extractall(manual, filter="data")
  os.remove(folder / "data_batch_3")
  with pytest.raises(DatasetError, match="lacks data_batch_3"):
    load_dataset("cifar10", data_dir=str(tmp_path / "b"), manual_dir=str(manual), download=False)

  class Code:
    def __reduce__(self):
      return (os.system, ("true",))

  (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": Code(), b"labels": []}))
  with pytest.raises(DatasetError, match="holds arrays only; this one names"):
    load_dataset("cifar10", data_dir=str(tmp_path / "c"), manual_dir=str(manual), download=False)


def test_idx_dir(idx_dir):
  d = load_dataset(f"idx:{idx_dir}")
  assert d.x_train.shape == (64, 28, 28, 1) and d.x_test.shape == (32, 28, 28, 1)
  raw, labels = idx.read_split(os.path.join(idx_dir, idx.FILES["train_images"]),
                               os.path.join(idx_dir, idx.FILES["train_labels"]))
  np.testing.assert_allclose(d.x_train, raw / 127.5 - 1.0, atol=1e-6)
  np.testing.assert_array_equal(d.y_train, labels)


def test_npz_file(npz_file):
  d = load_dataset(f"npz:{npz_file}")
  assert d.x_train.shape == (512, 28, 28, 1) and d.y_test.shape == (128,)
  assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int32
  assert d.num_classes == 10


@pytest.mark.parametrize("name, message", [
    ("idx:/no/such/dir", "no such directory"),
    ("npz:/no/such/file.npz", "no such file"),
    ("no_such_dataset_xyz", "Unknown dataset .no_such_dataset_xyz.. Known: fashion_mnist, mn"),
])
def test_missing_or_unknown(name, message):
  with pytest.raises(DatasetError, match=message):
    load_dataset(name)


def test_idx_dir_missing_files(idx_dir):
  os.remove(os.path.join(idx_dir, idx.FILES["test_labels"]))
  with pytest.raises(DatasetError, match="lacks t10k-labels-idx1-ubyte.gz"):
    load_dataset(f"idx:{idx_dir}")


def test_idx_wrong_magic(idx_dir):
  # Swap images and labels: each file now has the other's magic number.
  images = os.path.join(idx_dir, idx.FILES["train_images"])
  labels = os.path.join(idx_dir, idx.FILES["train_labels"])
  os.rename(images, images + ".x")
  os.rename(labels, images)
  os.rename(images + ".x", labels)
  with pytest.raises(idx.IdxError, match="magic number 2049, expected 2051"):
    load_dataset(f"idx:{idx_dir}")


def test_idx_truncated(idx_dir):
  path = os.path.join(idx_dir, idx.FILES["train_images"])
  with gzip.open(path) as f:
    raw = f.read()
  with gzip.open(path, "wb") as f:
    f.write(raw[:-100])
  with pytest.raises(idx.IdxError, match="truncated"):
    load_dataset(f"idx:{idx_dir}")


def test_idx_not_gzip(idx_dir):
  with open(os.path.join(idx_dir, idx.FILES["test_images"]), "wb") as f:
    f.write(b"not a gzip file at all")
  with pytest.raises(idx.IdxError, match="not a readable"):
    load_dataset(f"idx:{idx_dir}")


def test_idx_count_mismatch(idx_dir):
  idx.write_idx(os.path.join(idx_dir, idx.FILES["test_labels"]), np.zeros(31, np.uint8))
  with pytest.raises(idx.IdxError, match="holds 32 images but .* holds 31 labels"):
    load_dataset(f"idx:{idx_dir}")


def test_npz_missing_arrays_and_count_mismatch(tmp_path):
  path = str(tmp_path / "bad.npz")
  np.savez(path, x_train=np.zeros((4, 28, 28), np.uint8), y_train=np.zeros(4))
  with pytest.raises(DatasetError, match=r"lacks arrays \['x_test', 'y_test'\]"):
    load_dataset(f"npz:{path}")
  np.savez(path, x_train=np.zeros((4, 28, 28), np.uint8), y_train=np.zeros(3),
           x_test=np.zeros((2, 28, 28), np.uint8), y_test=np.zeros(2))
  with pytest.raises(DatasetError, match="4 images but y_train has shape"):
    load_dataset(f"npz:{path}")


def _npz_with(tmp_path, **bad) -> str:
  """A small valid npz dataset (float pixels, float labels) with the arrays in ``bad``
  replacing its own."""
  arrays = dict(x_train=np.full((6, 4, 4), 10.0), y_train=np.arange(6.0) % 3,
                x_test=np.full((3, 4, 4), 200.0), y_test=np.arange(3.0))
  arrays.update(bad)
  path = str(tmp_path / "data.npz")
  np.savez(path, **arrays)
  return path


def test_npz_float_pixels_in_range_load(tmp_path):
  d = load_dataset(f"npz:{_npz_with(tmp_path)}")
  assert d.num_classes == 3 and d.y_train.tolist() == [0, 1, 2, 0, 1, 2]
  np.testing.assert_allclose(d.x_test, 200.0 / 127.5 - 1.0, rtol=1e-6)


def _with(a, index, value):
  a = np.array(a)
  a[index] = value
  return a


@pytest.mark.parametrize("array, index, value, message", [
    ("x_train", (4, 2, 1), np.nan, r"x_train\[4, 2, 1\] is nan: pixels must be finite. Fix or "
     r"drop image 4 of x_train"),
    ("x_test", (1, 0, 3), np.inf, r"x_test\[1, 0, 3\] is inf: pixels must be finite"),
    ("x_train", (2, 3, 3), 256.0, r"x_train\[2, 3, 3\] is 256.0, outside 0..255 \(x_train "
     r"spans \[10.0, 256.0\]\)"),
    ("x_test", (0, 0, 0), -1.0, r"x_test\[0, 0, 0\] is -1.0, outside 0..255"),
    ("y_train", (5,), np.nan, r"y_train\[5\] is nan: labels must be integers 0..K-1. Fix or drop "
     r"example 5 of y_train"),
    ("y_test", (2,), -1.0, r"y_test\[2\] is -1.0: labels must be integers"),
    ("y_train", (3,), 1.5, r"y_train\[3\] is 1.5: labels must be integers"),
])
def test_npz_bad_values_name_the_array_and_index(tmp_path, array, index, value, message):
  """Non-finite or out-of-range pixels and bad labels are refused when the set is loaded, with
  the array, the first bad index and the fix; not trained on until the loss is NaN."""
  clean = dict(x_train=np.full((6, 4, 4), 10.0), y_train=np.arange(6.0) % 3,
               x_test=np.full((3, 4, 4), 200.0), y_test=np.arange(3.0))
  path = _npz_with(tmp_path, **{array: _with(clean[array], index, value)})
  with pytest.raises(DatasetError, match=message):
    load_dataset(f"npz:{path}")


def _truncated(path):
  data = open(path, "rb").read()
  with open(path, "wb") as f:
    f.write(data[:len(data) // 2])


def _not_npz(path):
  np.save(path.replace(".npz", ""), np.zeros(3))  # writes <path without .npz>.npy
  os.replace(path.replace(".npz", ".npy"), path)


# Each case: arrays replacing the valid set's (or a damage to its file) and the error it gets.
DATA_PATH_CASES = {
    "floats in [0, 1]": (dict(x_train=np.full((6, 4, 4), 0.5), x_test=np.full((3, 4, 4), 0.2)),
                         None, r"x_train spans \[0.5, 0.5\]: images scaled to \[0, 1\]"),
    "channels first": (dict(x_train=np.full((6, 1, 8, 8), 10.0),
                            x_test=np.full((3, 1, 8, 8), 10.0)),
                       None, r"channels first .* np.moveaxis\(x_train, 1, -1\)"),
    "empty train split": (dict(x_train=np.zeros((0, 4, 4)), y_train=np.zeros(0)), None,
                          "x_train holds no images"),
    "empty test split": (dict(x_test=np.zeros((0, 4, 4)), y_test=np.zeros(0)), None,
                         "x_test holds no images"),
    "a stray label": (dict(y_train=np.array([0, 1, 2, 0, 1, 1000.0])), None,
                      r"there would be 1001 classes, but classes 3, 4, 5, 6, 7 and 992 more "
                      "have no training example"),
    "a test-only label": (dict(y_test=np.array([0, 1, 12.0])), None,
                          "y_test holds label 12, which no training example has"),
    "one class only": (dict(y_train=np.zeros(6), y_test=np.zeros(3)), None,
                       "every training label is 0, one class only: a classifier needs at least "
                       "two"),
    "one image, no batch axis": (dict(x_train=np.full((4, 4), 10.0)), None,
                                 r"x_train has shape \(4, 4\); expected \[N, H, W\]"),
    "a truncated file": ({}, _truncated, "cannot be read as an .npz archive"),
    "not an npz": ({}, _not_npz, "cannot be read as an .npz archive"),
}


@pytest.mark.parametrize("case", list(DATA_PATH_CASES))
def test_the_data_path_refuses_with_the_fix(tmp_path, case):
  """Each bad input of issue 69's table is a DatasetError naming the array and the fix when
  the set is loaded (before any training)."""
  arrays, damage, message = DATA_PATH_CASES[case]
  path = _npz_with(tmp_path, **arrays)
  if damage:
    damage(path)
  with pytest.raises(DatasetError, match=message):
    load_dataset(f"npz:{path}")


def test_bad_values_are_counted_and_labels_checked_against_a_stated_k():
  from dgd_jax.data import loaders  # pylint: disable=g-import-not-at-top
  x = np.zeros((3, 2, 2), np.float32)
  x[1, 0, 0] = x[2, 1, 1] = np.nan
  with pytest.raises(DatasetError, match=r"x_train\[1, 0, 0\] is nan \(and 1 more like it\)"):
    loaders.check_pixels("d", "x_train", x)
  with pytest.raises(DatasetError, match=r"d: y_test\[2\] is 10: labels must be integers 0..9"):
    loaders.check_labels("d", "y_test", np.array([0, 9, 10], np.uint8), num_classes=10)
  loaders.check_labels("d", "y_test", np.array([0, 9, 10], np.uint8), num_classes=None)
  loaders.check_pixels("d", "x_train", np.full((2, 2, 2), 255, np.uint8))


def test_builtin_manual_dir_without_files(tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "README").write_text("not IDX")
  with pytest.raises(DatasetError, match="apt-get install dataset-fashion-mnist"):
    load_dataset("fashion_mnist", data_dir=str(tmp_path / "tfds"), manual_dir=str(empty))


def test_builtin_offline_without_files(tmp_path):
  with pytest.raises(DatasetError, match="not prepared .* --config.manual_dir"):
    load_dataset("mnist", data_dir=str(tmp_path / "tfds"), download=False)


def test_stock_tfds_needs_tensorflow():
  import importlib.util
  if importlib.util.find_spec("tensorflow") is not None:
    pytest.fail("This test checks the message shown without TensorFlow; run it in the "
                "test environment, which does not install the [tf] extra.")
  with pytest.raises(DatasetError, match=r"needs TensorFlow: pip install 'dgd_jax\[tf\]'"):
    load_dataset("svhn_cropped")


def test_partitions_disjoint_equal_deterministic():
  x = np.arange(1003)[:, None].astype(np.float32)  # each example's value is its index
  y = np.arange(1003) % 10
  xp, yp, dropped = teacher_partitions(x, y, 10, seed=0)
  assert xp.shape == (10, 100, 1) and yp.shape == (10, 100) and dropped == 3
  ids = xp[..., 0].astype(int)
  assert len(np.unique(ids)) == 1000  # disjoint
  np.testing.assert_array_equal(yp, ids % 10)  # labels travel with their images
  again, _, _ = teacher_partitions(x, y, 10, seed=0)
  np.testing.assert_array_equal(again, xp)
  other, _, _ = teacher_partitions(x, y, 10, seed=1)
  assert not np.array_equal(other, xp)
  assert not np.array_equal(ids[0], np.arange(100))  # shuffled, not contiguous slices


def test_partitions_bad_counts():
  x, y = np.zeros((5, 1)), np.zeros(5)
  with pytest.raises(ConfigError, match="more than the 5 training examples"):
    teacher_partitions(x, y, 6, seed=0)
  with pytest.raises(ConfigError, match="at least 1"):
    teacher_partitions(x, y, 0, seed=0)


def test_stable_partition_keeps_every_other_example_with_its_teacher():
  rng = np.random.default_rng(0)
  x, y = rng.random((3000, 4, 4, 1)).astype(np.float32), rng.integers(0, 10, 3000)
  shards = teacher_shards(x, y, 10, seed=0, partition="stable")
  owner = np.full(3000, -1)
  for t, s in enumerate(shards):
    owner[s] = t
  assert (owner >= 0).all() and sum(map(len, shards)) == 3000  # every example, once
  assert max(abs(len(s) - 300) for s in shards) < 5 * np.sqrt(300 * 0.9)  # nearly equal
  for seed in (0, 1):  # deterministic per seed, different across seeds
    again = teacher_shards(x, y, 10, seed=seed, partition="stable")
    assert all(np.array_equal(a, b) for a, b in zip(again, shards)) == (seed == 0)
  # Remove example 17 and add a new one (add/remove-one, twice): every other example keeps
  # its teacher. The shuffle partition re-deals them.
  keep = np.delete(np.arange(3000), 17)
  x2 = np.concatenate([x[keep], rng.random((1, 4, 4, 1)).astype(np.float32)])
  y2 = np.concatenate([y[keep], [3]])
  owner2 = np.full(3000, -1)
  for t, s in enumerate(teacher_shards(x2, y2, 10, seed=0, partition="stable")):
    owner2[s] = t
  np.testing.assert_array_equal(owner2[:2999], owner[keep])
  shuffled = teacher_shards(x, y, 10, seed=0)
  moved = teacher_shards(x2[:2999], y2[:2999], 10, seed=0)
  assert sum(set(keep[m]) != set(s) for m, s in zip(moved, shuffled)) == 10


def _changed_teachers(partition: str, relation: str, trials: int = 20) -> int:
  """The most teachers (of 250) whose shard changes, as a set of examples, when one example of
  2,000 is replaced, or one added or removed, over ``trials`` random changes."""
  rng = np.random.default_rng(1)
  pool = rng.integers(0, 256, (2000 + trials, 4, 4, 1)).astype(np.uint8)  # distinct examples
  labels = rng.integers(0, 10, len(pool))
  ids = np.arange(2000)

  def owners(rows):  # {teacher: the ids of its examples}
    return [frozenset(rows[s].tolist()) for s in
            teacher_shards(pool[rows], labels[rows], 250, seed=0, partition=partition)]

  before, worst = owners(ids), 0
  for t in range(trials):
    position, new = int(rng.integers(2000)), 2000 + t
    after = owners({"replace_one": np.where(ids == position, new, ids),
                    "add_one": np.append(ids, new),
                    "remove_one": np.delete(ids, position)}[relation])
    worst = max(worst, sum(a != b for a, b in zip(before, after)))
  return worst


@pytest.mark.parametrize("partition", ["shuffle", "stable"])
def test_teachers_changed_is_what_one_change_moves(partition):
  # The accounting scales every teacher-vote sensitivity by TEACHERS_CHANGED (privacy.events):
  # count what one change of the private set actually moves, under each relation.
  covered = teachers_changed(partition)
  assert _changed_teachers(partition, "replace_one") == covered["replace_one"]
  for one in ("add_one", "remove_one"):
    moved = _changed_teachers(partition, one)
    if "add_or_remove_one" in covered:
      assert moved == covered["add_or_remove_one"]
    else:  # not claimed: the shuffle re-deals the shards
      assert moved > 100, moved


def test_partition_refusals():
  x, y = np.zeros((5, 2), np.float32), np.zeros(5)
  with pytest.raises(ConfigError, match="without data: use fewer teachers"):
    teacher_shards(x, y, 5, seed=0, partition="stable")  # identical examples share a teacher
  with pytest.raises(ConfigError, match="more than the 5 training examples"):
    teacher_shards(x, y, 6, seed=0, partition="stable")
  with pytest.raises(ConfigError, match=r"teachers.partition='hash'; use one of"):
    teacher_shards(x, y, 2, seed=0, partition="hash")


def test_download_checksums_registered():
  # The online path verifies every official file against checksums.tsv beside builders.py.
  from dgd_jax.data import builders
  for cls in (builders.DgdMnist, builders.DgdFashionMnist):
    urls = {cls.URL + name for name in idx.FILES.values()}
    infos = cls.url_infos
    assert urls <= set(infos), urls - set(infos)
    assert all(len(infos[u].checksum) == 64 and infos[u].size > 0 for u in urls)
