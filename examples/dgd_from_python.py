"""DGD from Python on an npz of your own, with your own Flax model if you like.

Writes the first --private Fashion-MNIST training images and the test split to an npz, as your
own data would be, and runs DGD's CPU preset on it with ``dgd_jax.run``:

  python examples/dgd_from_python.py [--private=8000] [--own_model]
  python examples/dgd_from_python.py --private=1500 --smoke   # every stage, one step each

--own_model makes MyCNN below (any flax.linen.Module from images to logits) the baseline's,
the teachers' and the student's model, as --config.model.module=package.module:Class does on
the command line. The workdir keeps each finished stage: run it again to resume.
"""
import argparse
import os

import flax.linen as nn
import numpy as np

import dgd_jax
from dgd_jax.configs import dgd
from dgd_jax.data import idx


class MyCNN(nn.Module):  # built as MyCNN(num_classes=K, **config.model.kwargs)
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = nn.max_pool(nn.relu(nn.Conv(16, (3, 3))(x)), (2, 2), (2, 2))
    return nn.Dense(self.num_classes)(nn.relu(nn.Dense(64)(x.reshape((x.shape[0], -1)))))


def write_npz(path, private, folder="/usr/share/datasets/fashion-mnist"):
  """Fashion-MNIST's IDX files (Debian package dataset-fashion-mnist) as an npz."""
  (x, y), (x_test, y_test) = idx.read_folder(folder)
  np.savez(path, x_train=x[:private], y_train=y[:private], x_test=x_test, y_test=y_test)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--private", type=int, default=8000, help="private training images")
  p.add_argument("--own_model", action="store_true", help="MyCNN in place of the paper CNN")
  p.add_argument("--smoke", action="store_true", help="every schedule cut to one step")
  p.add_argument("--workdir", default="/tmp/dgd_from_python")
  args = p.parse_args()
  os.makedirs(args.workdir, exist_ok=True)
  data = os.path.join(args.workdir, f"fashion_{args.private}.npz")
  if not os.path.exists(data):
    write_npz(data, args.private)

  config = dgd.get_config(f"npz:{data},cpu" + (",smoke" if args.smoke else ""))
  if args.own_model:
    config.model.module = "__main__:MyCNN"  # importable as package.module:Class
  workdir = os.path.join(args.workdir, ("own_model" if args.own_model else "paper_model")
                         + ("_smoke" if args.smoke else ""))
  report = dgd_jax.run(config, workdir)

  print(f"DGD student test accuracy {report['test_accuracy']:.2%} "
        f"({report['num_teachers']} teachers; baseline {report['baseline_accuracy']:.2%}, "
        "not private)")
  privacy = report["privacy"]
  print(f"epsilon {privacy['epsilon']:.3f} at delta {privacy['delta']:g} "
        f"({privacy['accountant']}); neighbours: {privacy['neighbours']}")
  print(f"covers: {report['covers']['covered']}; what it does not cover (the non-private "
        f"baseline, the synthetic set, ...): {len(report['covers']['not_covered'])} notes in "
        f"{workdir}/report.md")


if __name__ == "__main__":
  main()
