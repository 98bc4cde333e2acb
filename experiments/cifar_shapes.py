"""Fashion-MNIST at CIFAR-10's shapes, for the CIFAR-10 ViT presets.

Question: does DGD with ViT teachers (``dgd.py:<data>,cpu,vit``) run end to end at CIFAR-10's
shapes on this host, which has no CIFAR-10, and what does it learn there?
Answer: it runs every stage in 16 min 35 s; random-init ViT-mu/8 teachers of 240 images each
reach 63.7% (plurality 76.05%) but agree little on the inverted samples, and the student
reaches 38.07% at eps 10 (the noiseless-label student 52.99%): shapes-only evidence for
CIFAR-10, whose Table II accuracy rests on a pretrained backbone.
Feeds: RESULTS.md, "CIFAR-10 and ViT teachers".

Each image is padded by 2 pixels to 32 x 32 and its grey channel repeated three times.

  python experiments/cifar_shapes.py --out=/tmp/fmnist_32x32x3.npz
"""
from __future__ import annotations

import argparse

import numpy as np

import dgd_jax


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--idx", default="/usr/share/datasets/fashion-mnist")
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  (x_train, y_train), (x_test, y_test) = dgd_jax.read_idx(args.idx)

  def colour(x):
    x = np.pad(x.reshape(-1, 28, 28), ((0, 0), (2, 2), (2, 2)))
    return np.repeat(x[..., None], 3, axis=-1)

  np.savez(args.out, x_train=colour(x_train), y_train=y_train, x_test=colour(x_test),
           y_test=y_test)


if __name__ == "__main__":
  main()
