"""DGD's generative stream: Eq. 2 by hand, each term's direction, short runs, one trace."""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

from dgd_jax.models.classifier import Classifier
from dgd_jax.models.generator import Generator
from dgd_jax.models.vae import VAE
from dgd_jax.synthesis import generative
from dgd_jax.training import train


def test_eq2_equals_hand_computation():
  logits = np.array([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]])
  features = np.array([[1.0, -2.0], [0.0, 3.0]])
  p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  one_hot = -np.mean(np.log(p[[0, 1], [0, 1]]))  # argmax classes 0 and 1
  pbar = p.mean(0)
  neg_entropy = np.sum(pbar * np.log(pbar))
  activation = np.abs(features).mean()  # 6 / 4
  loss, m = generative.generator_loss(jnp.asarray(logits), jnp.asarray(features), 5.0, 0.1)
  np.testing.assert_allclose(m["one_hot"], one_hot, rtol=1e-6)
  np.testing.assert_allclose(m["neg_entropy"], neg_entropy, rtol=1e-6)
  np.testing.assert_allclose(m["activation"], 1.5, rtol=1e-6)
  np.testing.assert_allclose(loss, one_hot + 5.0 * neg_entropy - 0.1 * activation, rtol=1e-6)


@pytest.mark.parametrize("term, alpha, beta, measure, direction", [
    ("one_hot", 0.0, 0.0, lambda lg, f: jax.nn.softmax(lg).max(-1).mean(), +1),  # confidence
    ("entropy", 1.0, 0.0, lambda lg, f: -generative.generator_loss_terms(lg, f)["neg_entropy"],
     +1),  # class balance of the batch
    ("activation", 0.0, 1.0, lambda lg, f: jnp.abs(f).mean(), +1),
])
@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_each_term_moves_in_its_intended_direction(term, alpha, beta, measure, direction):
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(16, 10)) + np.eye(10)[np.zeros(16, int)] * 3)
  features = jnp.asarray(rng.normal(size=(16, 8)))

  def objective(lg, f):
    loss_terms = generative.generator_loss_terms(lg, f)
    if term == "one_hot":
      return loss_terms["one_hot"]
    return generative.generator_loss(lg, f, alpha, beta)[0] - loss_terms["one_hot"]

  g_logits, g_features = jax.grad(objective, argnums=(0, 1))(logits, features)
  before = float(measure(logits, features))
  after = float(measure(logits - 0.1 * g_logits, features - 0.1 * g_features))
  assert direction * (after - before) > 0, (term, before, after)


def square_images(n: int):
  """Learnable images in [-1, 1]: a bright square whose position is the label."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, n)
  x = rng.uniform(-1, -0.8, (n, 28, 28, 1)).astype(np.float32)
  for i, label in enumerate(labels):
    r, c = divmod(int(label), 4)
    x[i, 2 + 6 * r:6 + 6 * r, 2 + 6 * c:6 + 6 * c] = 1.0
  return x, labels


def tiny_baseline():
  """A small classifier trained for a few steps on ``square_images``."""
  x, labels = square_images(512)
  model = Classifier(width=0.125)
  cfg = train.FitConfig(num_steps=60, batch_size=64, learning_rate=3e-3)
  state = train.create_train_state(model, train.optimizer(cfg), jax.random.key(0),
                                   (28, 28, 1))
  step = jax.jit(functools.partial(train.train_step, batch_size=64))
  for s in range(60):
    state, _ = step(state, jax.random.key(s), jnp.asarray(x), jnp.asarray(labels, jnp.int32))
  return model, state.params


@pytest.mark.integration
def test_short_generator_run_raises_batch_entropy_and_traces_once():
  baseline, baseline_params = tiny_baseline()
  gen = Generator(latent_dim=16, features=16)
  variables = gen.init(jax.random.key(1), jnp.zeros((2, 16)), train=False)
  state = generative.GeneratorState.create(apply_fn=gen.apply, params=variables["params"],
                                           batch_stats=variables["batch_stats"],
                                           tx=optax.adam(1e-2))

  @functools.partial(jax.jit, donate_argnums=0)
  @chex.assert_max_traces(n=1)
  def step(state, key):
    return generative.generator_step(state, key, baseline.apply, baseline_params,
                                     generative.GeneratorSettings(batch_size=64, latent_dim=16))

  entropies = []
  for s in range(40):
    state, metrics = step(state, jax.random.key(100 + s))
    entropies.append(float(metrics["batch_entropy"]))
  assert np.mean(entropies[-5:]) > np.mean(entropies[:5]) + 0.2, entropies
  assert np.mean(entropies[-5:]) > 0.8 * np.log(10), entropies


@pytest.mark.integration
def test_inversion_reaches_its_targets_balanced_in_range_and_deterministic():
  """DeepInversion (generative.invert): each batch's pixels are optimised until the baseline
  names its dealt target classes; a second call with the same key gives the same images."""
  baseline, baseline_params = tiny_baseline()
  x_real, _ = square_images(256)
  targets = generative.layer_statistics(baseline.apply, baseline_params, x_real)
  priors = generative.Priors(w_stats=1.0, w_tv=0.1, jitter=1)
  args = (jax.random.key(3), 45, 20, 60, 0.1, 10, (28, 28, 1), baseline.apply, baseline_params,
          priors, targets)
  x, y = generative.invert(*args)
  assert x.shape == (45, 28, 28, 1) and y.shape == (45,)
  assert np.abs(x).max() <= 1.0
  np.testing.assert_array_equal(y, np.resize(np.arange(20) % 10, 45))  # dealt in turn
  predicted = train.predict(baseline.apply, baseline_params, x)
  assert np.mean(predicted == y) >= 0.9, np.mean(predicted == y)
  loss = lambda images: float(generative.inversion_loss(
      jnp.asarray(images[:20]), jnp.asarray(y[:20]), jax.random.key(0), baseline.apply,
      baseline_params, priors, targets))
  start = np.tanh(np.asarray(jax.random.normal(jax.random.fold_in(args[0], 0),
                                               (20, 28, 28, 1))))
  assert loss(x) < 0.5 * loss(start), (loss(x), loss(start))
  np.testing.assert_array_equal(generative.invert(*args)[0], x)


def test_inversion_targets_mix_each_class_with_every_other_below_the_share_asked():
  y = generative.inversion_targets(250, 10, 0.5)
  a = generative.inversion_classes(250, 250, 10)
  np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(y.argmax(-1), a)  # the dealt class stays the largest
  second = np.where(np.arange(10) == a[:, None], -1.0, y).argmax(-1)
  assert y[np.arange(250), a].min() > 0.5 and y[:10].max(-1).min() == 1.0  # lambda 0 first
  for k in range(10):  # every class is mixed with each of the other nine
    assert set(second[(a == k) & (y.max(-1) < 1)]) == set(range(10)) - {k}
  np.testing.assert_array_equal(generative.inversion_targets(250, 10, 0.0),
                                np.eye(10, dtype=np.float32)[a])


@pytest.mark.integration
def test_inversion_with_mixed_targets_moves_the_baselines_second_class_share():
  """generative.invert(mix=0.5): the baseline still names each sample's dealt class, and gives
  the mixed-in class a larger share where the target asks for more of it."""
  baseline, baseline_params = tiny_baseline()
  x, y = generative.invert(jax.random.key(3), 40, 40, 80, 0.1, 10, (28, 28, 1), baseline.apply,
                           baseline_params, generative.Priors(), mix=0.5)
  target = generative.inversion_targets(40, 10, 0.5)
  p = np.asarray(jax.nn.softmax(train.logits(baseline.apply, baseline_params, x)))
  mixed = target.max(-1) < 0.8  # the samples asked for at least 20% of a second class
  assert mixed.sum() >= 10
  second_share = (p * (target > 0) * (target < target.max(-1, keepdims=True))).sum(-1)
  assert second_share[mixed].mean() > 0.15 > second_share[:10].mean(), second_share
  assert np.mean(p.argmax(-1) == y) >= 0.9


@pytest.mark.integration
def test_vae_loss_falls_and_traces_once():
  x = jnp.asarray(square_images(128)[0])
  model = VAE(latent_dim=8, features=8)
  params = model.init(jax.random.key(0), x[:2], jax.random.key(1))["params"]
  state = train_state.TrainState.create(apply_fn=model.apply, params=params,
                                        tx=optax.adam(1e-3))

  @functools.partial(jax.jit, donate_argnums=0)
  @chex.assert_max_traces(n=1)
  def step(state, key):
    return generative.vae_step(state, key, model, x, batch_size=32)

  losses = []
  for s in range(40):
    state, terms = step(state, jax.random.key(s))
    losses.append(float(terms["loss"]))
  assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses
