"""PATE on your own numpy arrays with your own Flax model, from Python.

Teachers on disjoint shards of the private images, GNMax labels for public images, a student
trained on those labels alone, and the epsilon of the labels:

  python examples/pate_on_your_arrays.py [--teachers=50 --steps=300 --queries=500]

The data here is Fashion-MNIST's IDX files (Debian package dataset-fashion-mnist), read into
numpy arrays: put your own arrays in their place.
"""
import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import dgd_jax


class MyCNN(nn.Module):  # any flax.linen.Module mapping images to logits
  @nn.compact
  def __call__(self, x):
    x = nn.max_pool(nn.relu(nn.Conv(16, (5, 5))(x)), (2, 2), (2, 2))
    return nn.Dense(10)(nn.relu(nn.Dense(64)(x.reshape((x.shape[0], -1)))))


FASHION = "/usr/share/datasets/fashion-mnist"  # uint8 [N, 28, 28, 1], int labels


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--private", type=int, default=20000, help="private training images")
  p.add_argument("--teachers", type=int, default=50)
  p.add_argument("--steps", type=int, default=300, help="Adam steps per teacher and student")
  p.add_argument("--queries", type=int, default=500, help="public images labelled")
  p.add_argument("--noise_scale", type=float, default=20.0, help="GNMax noise std sigma")
  args = p.parse_args()
  (x, y), (x_test, y_test) = dgd_jax.read_idx(FASHION)
  public, test = slice(0, args.queries), slice(5000, 7000)  # the test split's halves

  teachers = dgd_jax.train_teachers(MyCNN(), x[:args.private], y[:args.private], args.teachers,
                                    num_steps=args.steps, learning_rate=3e-3)
  votes = dgd_jax.teacher_votes(teachers, x_test[public])  # private: never publish these
  answers = dgd_jax.noisy_labels(votes, "gnmax", args.noise_scale)  # secret noise
  labels = answers.labels
  print(f"GNMax labels agree with the truth on {np.mean(labels == y_test[public]):.1%}")

  # The student sees only public images and the noisy labels (post-processing of the release).
  student, xs = MyCNN(), jnp.asarray(dgd_jax.images(x_test[public]))
  params = student.init(jax.random.key(1), xs[:1])
  tx = optax.adam(1e-3)
  opt = tx.init(params)

  @jax.jit
  def step(params, opt, key):
    i = jax.random.randint(key, (64,), 0, len(xs))
    loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(
        student.apply(p, xs[i]), jnp.asarray(labels)[i]).mean()
    updates, opt = tx.update(jax.grad(loss)(params), opt)
    return optax.apply_updates(params, updates), opt

  for s in range(args.steps):
    params, opt = step(params, opt, jax.random.key(s))
  logits = student.apply(params, jnp.asarray(dgd_jax.images(x_test[test])))
  print(f"student test accuracy {np.mean(np.argmax(logits, -1) == y_test[test]):.2%}")
  report = dgd_jax.epsilon(answers, delta=1e-5, accountant="rdp")
  print(f"epsilon {report.epsilon:.3f} at delta {report.delta:g} ({report.accountant}, "
        f"replace-one): covers the {len(labels)} released labels, and so the student; not the "
        "votes or the teachers, which must stay private")


if __name__ == "__main__":
  main()
