"""TensorFlow-free TFDS builders for MNIST, Fashion-MNIST and CIFAR-10.

Stock TFDS prepares ``mnist``/``fashion_mnist``/``cifar10`` only with TensorFlow installed. These
builders store uint8 tensors in array_record files and are read with
``builder.as_data_source`` (the ``tfds.data_source`` path), so they need no TensorFlow.

Offline they read the four IDX ``.gz`` files from a manual directory (Fashion-MNIST:
``/usr/share/datasets/fashion-mnist`` from the Debian package ``dataset-fashion-mnist``).
Online they fetch the official files with the TFDS download manager, which verifies the
sizes and SHA-256 sums in ``checksums.tsv`` beside this file. Manual files are checked by
parsing (magic numbers, lengths), not by checksum: Debian re-gzips them. CIFAR-10 reads the
official ``cifar-10-python.tar.gz`` (or its extracted folder) the same way (``cifar``); a
downloaded archive is checked against the official size and MD5.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow_datasets as tfds

from dgd_jax.data import cifar, idx
from dgd_jax.runtime.errors import DatasetError


def _manual_dir(dl_manager: tfds.download.DownloadManager) -> str | None:
  """The manual directory the download manager was given, or None (none, or an empty one)."""
  try:
    return os.fspath(dl_manager.manual_dir)
  except AssertionError:
    return None


class _IdxImageBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Shared body of the IDX builders; subclasses set the names, URL and class names."""

  @staticmethod
  def missing_files(manual_dir: str) -> list[str]:
    """The files a manual directory lacks ([] when it holds the dataset)."""
    return idx.missing_files(manual_dir)

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "dgd_jax builder: uint8 tensors in array_record, no TensorFlow."}
  URL: str = ""
  HOMEPAGE: str = ""
  CLASS_NAMES: tuple[str, ...] = ()

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
            "label": tfds.features.ClassLabel(names=list(self.CLASS_NAMES)),
        }),
        supervised_keys=("image", "label"),
        homepage=self.HOMEPAGE,
        disable_shuffling=True,  # keep the IDX order: PATE's protocol splits the test set by index
    )

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    manual = _manual_dir(dl_manager)
    if manual and not idx.missing_files(manual):
      paths = {k: os.path.join(manual, n) for k, n in idx.FILES.items()}
    else:
      paths = {k: os.fspath(p) for k, p in dl_manager.download(
          {k: self.URL + n for k, n in idx.FILES.items()}).items()}
    return {
        "train": self._generate_examples(paths["train_images"], paths["train_labels"]),
        "test": self._generate_examples(paths["test_images"], paths["test_labels"]),
    }

  def _generate_examples(self, images_path: str, labels_path: str):
    images, labels = idx.read_split(images_path, labels_path)
    for i, (image, label) in enumerate(zip(images, labels)):
      yield i, {"image": image, "label": int(label)}


class DgdMnist(_IdxImageBuilder, skip_registration=True):
  """MNIST handwritten digits (LeCun et al. 1998), 60k train / 10k test, 28x28x1."""

  URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
  HOMEPAGE = "http://yann.lecun.com/exdb/mnist/"
  CLASS_NAMES = tuple(str(d) for d in range(10))
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Place the four MNIST IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
      "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) in the manual directory.")


class DgdFashionMnist(_IdxImageBuilder, skip_registration=True):
  """Fashion-MNIST (Xiao et al. 2017), 60k train / 10k test, 28x28x1."""

  URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
  HOMEPAGE = "https://github.com/zalandoresearch/fashion-mnist"
  CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                 "Sneaker", "Bag", "Ankle boot")
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "On Debian/Ubuntu: `apt-get install dataset-fashion-mnist` puts the four IDX files in "
      "/usr/share/datasets/fashion-mnist; or place them in the manual directory yourself.")


class DgdCifar10(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """CIFAR-10 (Krizhevsky 2009), 50k train / 10k test, 32x32x3, from the python archive."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "dgd_jax builder: uint8 tensors in array_record, no TensorFlow."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      f"Place {cifar.ARCHIVE} (from {cifar.URL}), or the {cifar.FOLDER} folder it extracts to, "
      "in the manual directory.")

  @staticmethod
  def missing_files(manual_dir: str) -> list[str]:
    return cifar.missing(manual_dir)

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Tensor(shape=cifar.IMAGE_SHAPE, dtype=np.uint8),
            "label": tfds.features.ClassLabel(names=list(cifar.CLASS_NAMES)),
        }),
        supervised_keys=("image", "label"),
        homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
        disable_shuffling=True,  # keep the batches' order
    )

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    manual = _manual_dir(dl_manager)
    if manual and not cifar.missing(manual):
      path = manual
    else:
      path = os.fspath(dl_manager.download(cifar.URL))
      _check_download(path)
    splits = cifar.read(path)
    return {name: self._generate_examples(*splits[name]) for name in ("train", "test")}

  def _generate_examples(self, images: np.ndarray, labels: np.ndarray):
    for i, (image, label) in enumerate(zip(images, labels)):
      yield i, {"image": image, "label": int(label)}


def _check_download(path: str) -> None:
  """A downloaded CIFAR-10 archive has the official size and MD5, or is refused."""
  size = os.path.getsize(path)
  md5 = hashlib.md5()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      md5.update(block)
  if (size, md5.hexdigest()) != (cifar.ARCHIVE_BYTES, cifar.ARCHIVE_MD5):
    raise DatasetError(f"the downloaded {cifar.ARCHIVE} ({size} bytes, MD5 {md5.hexdigest()}) "
                       f"is not the official one ({cifar.ARCHIVE_BYTES} bytes, MD5 "
                       f"{cifar.ARCHIVE_MD5}): download it again, or place a copy in the "
                       "manual directory.")
