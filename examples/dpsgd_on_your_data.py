"""DP-SGD on your own numpy arrays with your own Flax model, from Python.

The model is trained with DP-SGD (jax-privacy: Poisson sampling, per-example clipping,
Gaussian noise) for a target epsilon, then evaluated on held-out images:

  python examples/dpsgd_on_your_data.py [--private=60000 --epsilon=3 --epochs=20]

The data here is Fashion-MNIST's IDX files (Debian package dataset-fashion-mnist), read into
numpy arrays: put your own arrays in their place.
"""
import argparse

import flax.linen as nn
import numpy as np

import dgd_jax


class MyCNN(nn.Module):  # any flax.linen.Module mapping images to logits
  @nn.compact
  def __call__(self, x):
    x = nn.max_pool(nn.tanh(nn.Conv(16, (5, 5))(x)), (2, 2), (2, 2))
    return nn.Dense(10)(nn.tanh(nn.Dense(64)(x.reshape((x.shape[0], -1)))))


FASHION = "/usr/share/datasets/fashion-mnist"  # uint8 [N, 28, 28, 1], int labels


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--private", type=int, default=60000, help="private training images")
  p.add_argument("--epsilon", type=float, default=3.0)
  p.add_argument("--epochs", type=float, default=20.0)
  p.add_argument("--batch", type=int, default=0, help="expected batch (0: N // 20)")
  args = p.parse_args()
  (x, y), (x_test, y_test) = dgd_jax.read_idx(FASHION)
  x, y = x[:args.private], y[:args.private]

  result = dgd_jax.train_dpsgd(MyCNN(), x, y, x_test, y_test, epsilon=args.epsilon,
                               delta=1e-5, epochs=args.epochs, batch_size=args.batch or None,
                               learning_rate=2e-3)
  steps = result.report["release"]
  logits = MyCNN().apply(result.params, dgd_jax.images(x_test))  # result.model, the same
  print(f"{steps.steps} steps of expected batch {steps.batch_size}, noise multiplier "
        f"{steps.noise_multiplier:.3f}, clip norm {steps.norm_bound:g}; last logged loss "
        f"{result.report['metrics'][-1]['loss']:.3f}")
  print(f"test accuracy {np.mean(np.argmax(logits, -1) == y_test):.2%}")
  report = dgd_jax.epsilon(steps, delta=1e-5)  # pld, the default accountant
  print(f"epsilon {report.epsilon:.3f} at delta {report.delta:g} ({report.accountant}, "
        f"add/remove-one, N = {len(x)} taken as public): covers the released parameters; not "
        "hyper-parameters chosen by looking at the same data")


if __name__ == "__main__":
  main()
