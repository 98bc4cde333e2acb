"""DGD from Python on your own arrays, with your own Flax model if you like.

Takes the first --private Fashion-MNIST training images as the private set and the test split
as the test set, and runs DGD's CPU preset on them with ``dgd_jax.dgd``:

  python examples/dgd_from_python.py [--private=8000] [--own_model]
  python examples/dgd_from_python.py --private=1500 --smoke   # every stage, one step each

--own_model makes MyCNN below (any flax.linen.Module from images to logits with a num_classes
field) the baseline's, the teachers' and the student's model. The workdir keeps each finished
stage: run it again to resume. Publish only its run/release/ folder.
"""
import argparse
import os

import flax.linen as nn
import numpy as np

import dgd_jax


class MyCNN(nn.Module):  # rebuilt as MyCNN(num_classes=K, **its other fields)
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = nn.max_pool(nn.relu(nn.Conv(16, (3, 3))(x)), (2, 2), (2, 2))
    return nn.Dense(self.num_classes)(nn.relu(nn.Dense(64)(x.reshape((x.shape[0], -1)))))


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--private", type=int, default=8000, help="private training images")
  p.add_argument("--own_model", action="store_true", help="MyCNN in place of the paper CNN")
  p.add_argument("--smoke", action="store_true", help="every schedule cut to one step")
  p.add_argument("--workdir", default="/tmp/dgd_from_python")
  args = p.parse_args()
  (x, y), (x_test, y_test) = dgd_jax.read_idx("/usr/share/datasets/fashion-mnist")
  workdir = os.path.join(args.workdir, ("own_model" if args.own_model else "paper_model")
                         + ("_smoke" if args.smoke else ""))
  result = dgd_jax.dgd(MyCNN() if args.own_model else None, x[:args.private], y[:args.private],
                       x_test, y_test, epsilon=10.0, preset="cpu,smoke" if args.smoke else "cpu",
                       workdir=workdir)

  report = result.report
  logits = result.model.apply(result.params, dgd_jax.images(x_test))  # the released student
  print(f"DGD student test accuracy {np.mean(np.argmax(logits, -1) == y_test):.2%} "
        f"({report['num_teachers']} teachers; baseline {report['baseline_accuracy']:.2%}, "
        "not private)")
  privacy = report["privacy"]
  print(f"epsilon {privacy['epsilon']:.3f} at delta {privacy['delta']:g} "
        f"({privacy['accountant']}); neighbours: {privacy['neighbours']}")
  print(f"covers: {report['covers']['covered']}; what it does not cover (the non-private "
        f"baseline, the synthetic set, ...): {len(report['covers']['not_covered'])} notes in "
        f"{result.workdir}/report.md")


if __name__ == "__main__":
  main()
