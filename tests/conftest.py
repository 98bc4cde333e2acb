"""Shared fixtures: real Fashion-MNIST (Debian package) prepared once, tiny generated data."""
from __future__ import annotations

import fcntl
import os
import shutil

# JAX's persistent compilation cache, set before jax is imported (subprocess tests inherit it):
# the suite compiles the same small programs in many tests (every sweep point, resumed run
# and CLI call), so each is compiled once per worker and read from disk after that. Results
# do not change: a hit is the same XLA executable. One folder per pytest-xdist worker (jax
# writes entries without a lock).
# An entry cut short (test_kill_resume SIGKILLs runs, possibly mid-write) fails jax's
# decompression on read: jax warns and compiles afresh. Override with JAX_COMPILATION_CACHE_DIR.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "jax",
    os.environ.get("PYTEST_XDIST_WORKER", "main")))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# XLA:CPU's backend optimisation level for the suite (a flag XLA reads when the CPU backend
# starts, so set before any test runs; subprocess tests inherit it). The suite's programs are
# small and run a few steps, where LLVM's optimisation passes cost more compile time than they
# save: level 0 ran tests/test_pipeline.py in 185 s against 289 s (docs/PERFORMANCE.md).
# The smoke runs (-m smoke) execute the presets' full-size programs, where optimised code pays
# for its compile (a smoke teachers stage took 214 s at level 0, 128 s at the default): they
# keep XLA's default, and so does the compile tier (-m compile), which proves the programs as a
# run compiles them. Results are the same programs' results. XLA_FLAGS that already set the
# level are left as they are.
OPT_LEVEL_FLAG = "--xla_backend_optimization_level"


def pytest_configure(config):
  flags, marks = os.environ.get("XLA_FLAGS", ""), config.option.markexpr or ""
  # a run selecting the smoke runs or the compile tier: the full-size programs as a run has them
  full = any(m in marks and f"not {m}" not in marks for m in ("smoke", "compile"))
  if not full and OPT_LEVEL_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {OPT_LEVEL_FLAG}=0".strip()

from dgd_jax.data import idx, load_dataset  # noqa: E402

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(scope="session")
def fashion_mnist_dir(tmp_path_factory) -> str:
  """A fresh TFDS data dir into which the TFDS builder prepared the real Fashion-MNIST: once
  per test run, the first pytest-xdist worker to ask preparing it under a lock, the others
  waiting for it (a preparation takes seconds that every worker would pay)."""
  assert not idx.missing_files(FASHION_MNIST_DIR), (
      f"Fashion-MNIST IDX files missing from {FASHION_MNIST_DIR}: "
      "apt-get install dataset-fashion-mnist (.ci/run does this).")
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):  # the run's folder, shared by its workers
    root = root.parent
  data_dir = root / "tfds_fashion_mnist"
  with open(root / "tfds_fashion_mnist.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (root / "tfds_fashion_mnist.done").exists():
      load_dataset("fashion_mnist", data_dir=str(data_dir), download=False)
      (root / "tfds_fashion_mnist.done").touch()
  return str(data_dir)


@pytest.fixture(scope="session")
def fashion_mnist(fashion_mnist_dir):
  """The real Fashion-MNIST, read from the data dir prepared for the run."""
  return load_dataset("fashion_mnist", data_dir=fashion_mnist_dir, download=False)


def make_images(rng, n: int, shape=(28, 28), num_classes: int = 10):
  """Class-dependent synthetic uint8 images (a bright square whose position is the label),
  so that a classifier can learn them."""
  labels = rng.integers(0, num_classes, n).astype(np.uint8)
  images = rng.integers(0, 40, (n,) + shape).astype(np.uint8)
  for i, label in enumerate(labels):
    r, c = divmod(int(label), 4)
    images[i, 2 + 6 * r:6 + 6 * r, 2 + 6 * c:6 + 6 * c] = 255
  return images, labels


@pytest.fixture
def idx_dir(tmp_path):
  """A folder with the four standard IDX files: 64 train and 32 test images."""
  rng = np.random.default_rng(0)
  for split, n in (("train", 64), ("test", 32)):
    images, labels = make_images(rng, n)
    idx.write_idx(os.path.join(tmp_path, idx.FILES[f"{split}_images"]), images)
    idx.write_idx(os.path.join(tmp_path, idx.FILES[f"{split}_labels"]), labels)
  return str(tmp_path)


def write_npz(folder, num_train: int = 512, num_test: int = 128, seed: int = 1,
              name: str = "data.npz") -> str:
  """An npz dataset of learnable synthetic images (``make_images``), ``num_train`` train and
  ``num_test`` test."""
  rng = np.random.default_rng(seed)
  x_train, y_train = make_images(rng, num_train)
  x_test, y_test = make_images(rng, num_test)
  path = os.path.join(folder, name)
  np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
  return path


@pytest.fixture
def npz_file(tmp_path):
  return write_npz(tmp_path)


@pytest.fixture(scope="session")
def finished_dgd(tmp_path_factory):
  """One finished tiny DGD run (``tiny_configs.dgd``) shared by the tests that only read it
  or copy it: (npz path, workdir, report). Copy the workdir before writing to it."""
  import tiny_configs  # pylint: disable=g-import-not-at-top
  from dgd_jax.runner import pipeline  # pylint: disable=g-import-not-at-top
  folder = tmp_path_factory.mktemp("finished_dgd")
  path = write_npz(folder)
  workdir = str(folder / "run")
  return path, workdir, pipeline.run(tiny_configs.dgd(path), workdir)


@pytest.fixture
def finished_dgd_copy(finished_dgd, tmp_path):
  """(npz path, a private copy of the finished DGD workdir, its report)."""
  path, workdir, report = finished_dgd
  copy = str(tmp_path / "run")
  shutil.copytree(workdir, copy)
  return path, copy, report


def pytest_addoption(parser):
  parser.addoption("--kills", type=int, default=3, help="How many times the kill/resume "
                   "harness (test_kill_resume.py) SIGKILLs the pipeline; more for a longer check.")
