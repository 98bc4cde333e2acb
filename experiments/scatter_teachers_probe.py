r"""Do teachers on a fixed feature map agree more on the synthetic pool than the run's CNNs?

Question: on a small private set (8,000 images, 50 teachers of 160) the GNMax noise binds
(RESULTS.md, DGD on a small private set): the teachers' top vote share on the synthetic pool
is 0.56. Would linear teachers on the ScatterNet transform (data-independent, so nothing is
learnt from the shards but the head) be more accurate and agree more on the pool?
Answer: no. Without weight decay (lr 0.5, 500 steps) the heads beat the CNNs on real images
(76.2% each against 72.8%, plurality 83.5% against 79.2%) but agree less on the pool (top vote
share 0.544 against 0.563), and the pool labelled by their plurality teaches 68.0% against the
CNNs' 75.7%: the pool is made for a CNN, and teachers of another family see it differently.
Feeds: RESULTS.md, "DGD on a small private set: 8,000 images, 50 teachers (ablation)".

A development diagnostic, not a release: it reads the teachers' votes without noise and
prints nothing a run publishes. It trains one softmax-regression head per teacher shard of the
run (``data.config_shards``, the run's partition) on per-image unit-norm ScatterNet
coefficients (full-batch Adam, weight decay), vmapped over the teachers, and prints for those
heads and for the run's CNN teachers: the mean teacher and the plurality accuracy on the real
test set, and on the first NUM pool samples the mean top vote share and how often the
plurality is the baseline's label, and what the pool labelled by the plurality teaches a
width-0.5 classifier (``train.fit``, 500 Adam steps of 128) on the real test set.

  python experiments/scatter_teachers_probe.py --workdir=workdirs/s8k50_f2
"""
from __future__ import annotations

import json
import tempfile
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dgd_jax.data import config_shards
from dgd_jax.models import scattering
from dgd_jax.plan import artefacts
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.training import ensemble
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
flags.mark_flag_as_required("workdir")
_STEPS = flags.DEFINE_integer("steps", 300, "Full-batch Adam steps of each head.")
_LR = flags.DEFINE_float("learning_rate", 0.05, "Adam learning rate.")
_DECAY = flags.DEFINE_float("weight_decay", 1e-3, "L2 weight of the heads.")
_NUM = flags.DEFINE_integer("num", 3000, "Pool samples to read.")
STUDENT = train.FitConfig(num_steps=500, batch_size=128, learning_rate=1e-3)


def unit_features(images: np.ndarray) -> np.ndarray:
  """Per-image unit-norm ScatterNet coefficients (no statistic of any other image)."""
  f = np.asarray(scattering.features(images), np.float32).reshape(len(images), -1)
  return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)


def train_heads(f: np.ndarray, y: np.ndarray, shards: list[np.ndarray], classes: int):
  """One softmax regression per shard, vmapped: weights [T, D, K], biases [T, K]."""
  x = jnp.asarray(np.stack([f[s] for s in shards]))  # equal shard sizes (shuffle partition)
  t = jax.nn.one_hot(jnp.asarray(np.stack([y[s] for s in shards])), classes)
  params = (jnp.zeros((len(shards), f.shape[1], classes)), jnp.zeros((len(shards), classes)))
  tx = optax.adam(_LR.value)

  def loss(p, xs, ts):
    logits = xs @ p[0] + p[1]
    return (optax.softmax_cross_entropy(logits, ts).mean()
            + _DECAY.value * jnp.sum(p[0] ** 2))

  def step(carry, _):
    p, s = carry
    g = jax.vmap(jax.grad(loss))(p, x, t)
    u, s = jax.vmap(tx.update)(g, s)
    return (optax.apply_updates(p, u), s), None

  state = jax.vmap(tx.init)(params)
  (params, _), _ = jax.jit(lambda c: jax.lax.scan(step, c, None, _STEPS.value))((params, state))
  return params


def summary(name, test_votes, y_test, pool_votes, named, per_teacher, transfer):
  teachers = pool_votes.sum(1)[0]
  print(json.dumps(dict(
      real_from_pool_plurality=round(float(transfer(pool_votes.argmax(1).astype(np.int32))), 4),
      teachers=name, mean_teacher_test=round(float(np.mean(per_teacher)), 4),
      plurality_test=round(float(np.mean(test_votes.argmax(1) == y_test)), 4),
      pool_top_vote_share=round(float(pool_votes.max(1).mean() / teachers), 3),
      pool_plurality_eq_baseline=round(float(np.mean(pool_votes.argmax(1) == named)), 3))),
        flush=True)


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "teachers")
  config, data = ctx.config, ctx.dataset
  k = data.num_classes
  x_pool = artefacts.load_synthetic(ctx)[:_NUM.value]
  named = artefacts.load_synthetic_labels(ctx)[:_NUM.value]
  params, predict, _ = artefacts.load_teachers(ctx)
  cnn_pool = ensemble.vote_histograms(predict, params, x_pool, k)
  cnn_test = ensemble.vote_histograms(predict, params, data.x_test, k)
  per_cnn = ctx.results["teachers"]["teacher_accuracy_mean"]
  model = artefacts.classifier(config, k).clone(width=0.5)
  folder = tempfile.mkdtemp()

  def transfer(labels):  # a width-0.5 classifier on the pool with these labels, on real test
    state = train.create_train_state(model, train.optimizer(STUDENT), jax.random.key(0),
                                     data.image_shape)
    state = train.fit(state, x_pool, labels, jax.random.key(7), STUDENT,
                      tempfile.mkdtemp(dir=folder), "transfer")
    return train.accuracy(model.apply, state.params, data.x_test, data.y_test)

  summary("the run's CNNs", cnn_test, data.y_test, cnn_pool, named, [per_cnn], transfer)

  t0 = time.time()
  shards = config_shards(config, data.x_train, data.y_train)
  w, b = train_heads(unit_features(data.x_train), data.y_train, shards, k)
  predict_heads = lambda f: np.asarray(jnp.argmax(jnp.einsum("nd,tdk->tnk", f, w)
                                                  + b[:, None], -1))
  test_pred = predict_heads(jnp.asarray(unit_features(data.x_test)))
  pool_pred = predict_heads(jnp.asarray(unit_features(x_pool)))
  print(f"ScatterNet heads: {time.time() - t0:.0f} s", flush=True)
  summary("ScatterNet + softmax regression", np.asarray(ensemble.histogram(test_pred, k)),
          data.y_test, np.asarray(ensemble.histogram(pool_pred, k)), named,
          np.mean(test_pred == data.y_test[None], axis=1), transfer)


if __name__ == "__main__":
  app.run(main)
