"""Fast hyper-parameter scan for DP-SGD ScatterNet + linear (development tool, not the shipped
code path). The linear softmax layer on per-example group-normed ScatterNet features has a
closed-form per-example gradient, (softmax - onehot) x [features; 1], so each step is two
matmuls instead of B vmapped gradients: a 40-epoch run takes about a minute on 2 CPU cores
instead of 15. The maths is dgd_jax.dpsgd.dpsgd_step's (Poisson sample, clip to C, add
N(0, sigma^2 C^2), divide by the expected batch, SGD with momentum) and the noise is
calibrated by dgd_jax.privacy; the random draws differ from the shipped run's, so a scan point
and the shipped run of the same settings agree in distribution, not digit for digit.
Confirm a chosen point with ``python -m dgd_jax.main --config=dgd_jax/configs/dpsgd.py:...``.

  python launch/scatternet_scan.py --features=/tmp/scat.npz '{"accountant": "pld"}' \
      '{"accountant": "pld", "batch": 16384, "lr": 32}'

Each argument is one point (JSON of ``run``'s keywords); one JSON line of results per point.
``views=2`` averages each example's gradient with its mirror image's before clipping
(augmentation multiplicity, De et al. 2022; no extra epsilon).
"""
from __future__ import annotations

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import dpsgd, dpsgd_plan, privacy
from dgd_jax.configs import dpsgd as dpsgd_configs
from dgd_jax.data import load_private


def features(path: str) -> dict:
  """ScatterNet features of Fashion-MNIST (and of its mirror images), cached in ``path``."""
  if not os.path.exists(path):
    config = dpsgd_configs.get_config("fashion_mnist,eps3")
    data = load_private(config)
    arrays = {"y_train": data.y_train, "y_test": data.y_test}
    for name, images in (("train", data.x_train), ("test", data.x_test)):
      arrays[f"x_{name}"] = dpsgd_plan.inputs(config, images)
      arrays[f"mirror_{name}"] = dpsgd_plan.inputs(config, images[:, :, ::-1])
    np.savez(path, **arrays)
  with np.load(path) as f:
    return dict(f)


def group_norm(x: np.ndarray, groups: int, power: float = 1.0) -> np.ndarray:
  """Per-example group norm without affine parameters (models.dpsgd.group_norm), flattened,
  with a constant 1 appended for the bias; ``power`` < 1 compresses the coefficients first."""
  x = np.abs(x) ** power if power != 1.0 else x
  n, h, w, c = x.shape
  g = x.reshape(n, h, w, groups, c // groups)
  g = (g - g.mean(axis=(1, 2, 4), keepdims=True)) / np.sqrt(g.var(axis=(1, 2, 4),
                                                                  keepdims=True) + 1e-6)
  return np.concatenate([g.reshape(n, -1), np.ones((n, 1))], 1).astype(np.float32)


def run(f: dict, batch: int = 8192, lr: float = 16.0, epochs: float = 40, norm_bound: float = 0.1,
        epsilon: float = 3.0, accountant: str = "pld", groups: int = 27, momentum: float = 0.9,
        seed: int = 0, views: int = 1, power: float = 1.0) -> dict:
  n = len(f["y_train"])
  steps = int(np.ceil(epochs * n / batch))
  sigma = privacy.dpsgd_noise_multiplier(
      privacy.DpsgdSteps(1.0, batch, n, steps, norm_bound, "poisson"), epsilon, 1e-5, accountant)
  xs = [jnp.asarray(group_norm(f[k], groups, power)) for k in ("x_train", "mirror_train")[:views]]
  y = jax.nn.one_hot(f["y_train"], 10)
  c = norm_bound

  @jax.jit
  def step(w, v, key, idx):
    real = (idx >= 0).astype(jnp.float32)[:, None]
    idx = jnp.maximum(idx, 0)
    xb = [x[idx] for x in xs]
    r = [(jax.nn.softmax(x @ w) - y[idx]) * real / views for x in xb]  # dLoss/dlogits per view
    # ||sum_v r_v x_v^T||_F^2 = sum_{v,u} (r_v . r_u)(x_v . x_u)
    sq = sum(jnp.sum(r[a] * r[b], 1) * jnp.sum(xb[a] * xb[b], 1)
             for a in range(views) for b in range(views))
    scale = jnp.minimum(1.0, c / jnp.sqrt(jnp.maximum(sq, 1e-24)))[:, None]
    g = sum(x.T @ (rv * scale) for x, rv in zip(xb, r))
    g = (g + sigma * c * jax.random.normal(key, g.shape)) / batch
    v = momentum * v + g
    return w - lr * v, v

  rng, key = np.random.default_rng(seed), jax.random.key(seed)
  w = jnp.zeros((xs[0].shape[1], 10))
  v = jnp.zeros_like(w)
  padded = int(np.ceil((batch + 6 * np.sqrt(batch) + 1) / 256) * 256)
  for _ in range(steps):
    chosen = np.flatnonzero(rng.random(n) < batch / n)  # Poisson sampling, rate B / N
    idx = np.full(max(padded, len(chosen)), -1, np.int32)
    idx[:len(chosen)] = chosen
    key, k = jax.random.split(key)
    w, v = step(w, v, k, jnp.asarray(idx))
  test = jnp.asarray(group_norm(f["x_test"], groups, power))
  accuracy = float(jnp.mean(jnp.argmax(test @ w, 1) == f["y_test"]))
  return dict(batch=batch, lr=lr, epochs=epochs, accountant=accountant, groups=groups,
              momentum=momentum, seed=seed, views=views, power=power, steps=steps,
              noise_multiplier=round(sigma, 4), test_accuracy=round(100 * accuracy, 2))


def main(argv: list[str]) -> None:
  path = next((a.split("=", 1)[1] for a in argv if a.startswith("--features=")),
              "scatternet_features.npz")
  f = features(path)
  for point in (a for a in argv if not a.startswith("--")):
    t = time.time()
    result = run(f, **json.loads(point))
    print(json.dumps({**result, "seconds": round(time.time() - t, 1)}), flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
