"""Classifier training: one trace, loss goes down on real data, resume is exact."""
from __future__ import annotations


import chex
import jax
import numpy as np
import pytest

from dgd_jax.models.classifier import Classifier
from dgd_jax.training import train


def small_state(cfg, image_shape=(28, 28, 1)):
  model = Classifier(width=0.25)
  return model, train.create_train_state(model, train.optimizer(cfg), jax.random.key(0),
                                         image_shape)


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_train_step_traces_once():
  cfg = train.FitConfig(num_steps=10, batch_size=8)
  _, state = small_state(cfg)
  x = np.random.default_rng(0).normal(size=(32, 28, 28, 1)).astype(np.float32)
  y = np.arange(32, dtype=np.int32) % 10

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(state, x, y, key):
    return train.train_step(state, key, x, y, batch_size=8)

  for i in range(3):
    state, metrics = step(state, x, y, jax.random.key(i))
  assert int(state.step) == 3 and np.isfinite(float(metrics["loss"]))


@pytest.mark.integration
def test_short_training_on_fashion_mnist_beats_chance(fashion_mnist, tmp_path):
  d = fashion_mnist
  cfg = train.FitConfig(num_steps=200, batch_size=64, learning_rate=3e-3, log_every=50,
                        checkpoint_every=1000)
  model, state = small_state(cfg)
  x_eval, y_eval = d.x_test[:2000], d.y_test[:2000]
  loss_before = float(train.cross_entropy(model.apply(state.params, x_eval), y_eval))
  state = train.fit(state, d.x_train, d.y_train, jax.random.key(1), cfg, str(tmp_path), "test")
  loss_after = float(train.cross_entropy(model.apply(state.params, x_eval), y_eval))
  assert loss_after < 0.3 * loss_before, (loss_before, loss_after)
  acc = train.accuracy(model.apply, state.params, x_eval, y_eval)
  assert acc > 0.7, acc  # chance is 0.1


@pytest.mark.integration
def test_fit_resumes_exactly(npz_file, tmp_path):
  with np.load(npz_file) as f:
    x = f["x_train"][..., None].astype(np.float32) / 127.5 - 1
    y = f["y_train"].astype(np.int32)
  cfg = train.FitConfig(num_steps=20, batch_size=16, checkpoint_every=10, log_every=5)
  _, state = small_state(cfg)
  uninterrupted = train.fit(state, x, y, jax.random.key(3), cfg, str(tmp_path / "a"), "a")

  class Interrupt(Exception):
    pass

  def crash_at_15(m):
    if m["step"] == 15:
      raise Interrupt()

  _, state = small_state(cfg)
  with pytest.raises(Interrupt):
    train.fit(state, x, y, jax.random.key(3), cfg, str(tmp_path / "b"), "b", crash_at_15)
  _, fresh = small_state(cfg)
  resumed = train.fit(fresh, x, y, jax.random.key(3), cfg, str(tmp_path / "b"), "b")
  assert int(resumed.step) == 20
  chex.assert_trees_all_close(resumed.params, uninterrupted.params, rtol=1e-5, atol=1e-6)


def test_non_finite_loss_raises(npz_file, tmp_path):
  with np.load(npz_file) as f:
    x = np.full(f["x_train"][..., None].shape, np.inf, np.float32)  # inf - inf = nan
    y = f["y_train"].astype(np.int32)
  cfg = train.FitConfig(num_steps=5, batch_size=8, log_every=1)
  _, state = small_state(cfg)
  with pytest.raises(train.NonFiniteLossError, match="lower the learning rate"):
    train.fit(state, x, y, jax.random.key(0), cfg, str(tmp_path), "nan")


def test_self_training_fits_each_round_to_the_last_models_logits():
  x = np.arange(12, dtype=np.float32).reshape(6, 2)
  apply_fn = lambda params, xb: xb * params  # a "model" whose parameter scales its input
  seen = []

  def fit_round(targets, round_):
    seen.append((round_, np.asarray(targets)))
    return float(round_ + 1)  # the next model's parameter

  history = train.self_training(fit_round, apply_fn, 1.0, x, 2)
  assert history == [1.0, 2.0, 3.0]  # the first model's parameters, then each round's
  assert [r for r, _ in seen] == [1, 2]
  np.testing.assert_allclose(seen[0][1], x * 1.0)  # round 1 reads the first model's logits
  np.testing.assert_allclose(seen[1][1], x * 2.0)  # round 2 those of round 1's model
  assert train.self_training(fit_round, apply_fn, 1.0, x, 0) == [1.0]


def test_mean_distribution_averages_the_members_softmax():
  x = np.array([[0.0, 1.0], [2.0, -1.0]], np.float32)
  apply_fn = lambda params, xb: xb * params
  mean = train.mean_distribution(apply_fn, [1.0, 3.0], x)
  expected = (np.asarray(jax.nn.softmax(x)) + np.asarray(jax.nn.softmax(3 * x))) / 2
  np.testing.assert_allclose(mean, expected, rtol=1e-6)
  np.testing.assert_allclose(mean.sum(-1), 1.0, rtol=1e-6)
