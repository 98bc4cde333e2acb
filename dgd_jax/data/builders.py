"""TensorFlow-free TFDS builders for MNIST and Fashion-MNIST.

Stock TFDS prepares ``mnist``/``fashion_mnist`` only with TensorFlow installed. These
builders store uint8 tensors in array_record files and are read with
``builder.as_data_source`` (the ``tfds.data_source`` path), so they need no TensorFlow.

Offline they read the four IDX ``.gz`` files from a manual directory (Fashion-MNIST:
``/usr/share/datasets/fashion-mnist`` from the Debian package ``dataset-fashion-mnist``).
Online they fetch the official files with the TFDS download manager, which verifies the
sizes and SHA-256 sums in ``checksums.tsv`` beside this file. Manual files are checked by
parsing (magic numbers, lengths), not by checksum: Debian re-gzips them.
"""
from __future__ import annotations

import os

import numpy as np
import tensorflow_datasets as tfds

from dgd_jax.data import idx


class _IdxImageBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Shared body of the IDX builders; subclasses set the names, URL and class names."""

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
    try:
      manual = os.fspath(dl_manager.manual_dir)
    except AssertionError:  # no manual dir configured, or it is empty
      manual = None
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
