"""DGD's generative stream as pure, jittable steps: the data-free generator trained against
the frozen baseline (DGD Eq. 2, after DAFL) and the VAE trained on its synthetic data.

Generator loss on a batch of synthetic x = G(z) with frozen baseline logits o(x), softmax
p(x) and backbone features f(x) (DGD Eq. 2):

  L = mean_i CE(o(x_i), argmax_j o(x_i)_j)   # one-hot term: confident samples
      + alpha * sum_j pbar_j ln pbar_j         # pbar = mean_i p(x_i): -H(pbar), class balance
      - beta * mean_{i,k} |f(x_i)_k|           # activation term: strong features

The paper prints "+ beta ||f||_1" but motivates the term by real data having *higher*
activations, so the activation is rewarded, as in DAFL's code (-features.abs().mean()).
The entropy uses the natural log; DAFL's code used log10, i.e. its alpha is ln(10) times
smaller in natural-log units. alpha = 5, beta = 0.1 (DGD Section III-B).
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from dgd_jax.models.vae import VAE, elbo_terms


class GeneratorState(train_state.TrainState):
  """Generator parameters, optimizer state and BatchNorm statistics."""

  batch_stats: Any = None


def generator_loss_terms(logits: jnp.ndarray, features: jnp.ndarray) -> dict[str, jnp.ndarray]:
  """The three terms of DGD Eq. 2 on a batch (before weighting)."""
  one_hot = optax.softmax_cross_entropy_with_integer_labels(
      logits, jax.lax.stop_gradient(jnp.argmax(logits, -1))).mean()  # l(phi_b(x), argmax)
  p_mean = jax.nn.softmax(logits).mean(axis=0)
  neg_entropy = jnp.sum(p_mean * jnp.log(p_mean))  # pbar log pbar = -H(pbar)
  activation = jnp.abs(features).mean()  # ||phi_b(W_b^-; x)||_1, averaged as in DAFL
  return {"one_hot": one_hot, "neg_entropy": neg_entropy, "activation": activation}


def generator_loss(logits: jnp.ndarray, features: jnp.ndarray, alpha: float = 5.0,
                   beta: float = 0.1) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
  """DGD Eq. 2: one_hot + alpha * (-entropy of the batch-mean softmax) - beta * activation."""
  t = generator_loss_terms(logits, features)
  loss = t["one_hot"] + alpha * t["neg_entropy"] - beta * t["activation"]  # DGD Eq. 2
  return loss, {**t, "loss": loss, "batch_entropy": -t["neg_entropy"]}


def generator_step(state: GeneratorState, key: jax.Array, baseline_apply: Callable,
                   baseline_params: Any, batch_size: int, latent_dim: int, alpha: float,
                   beta: float) -> tuple[GeneratorState, dict[str, jnp.ndarray]]:
  """One generator update against the frozen baseline (the five steps of DGD III-B):
  draw z, generate x, apply the baseline, Eq. 2, back-propagate into the generator only."""
  z = jax.random.normal(key, (batch_size, latent_dim))

  def loss_fn(params):
    x, updates = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, z,
                                train=True, mutable=["batch_stats"])
    logits, features = baseline_apply(baseline_params, x, with_features=True)
    loss, metrics = generator_loss(logits, features, alpha, beta)
    return loss, (metrics, updates["batch_stats"])

  (_, (metrics, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  state = state.apply_gradients(grads=grads).replace(batch_stats=batch_stats)
  return state, metrics


def vae_step(state: train_state.TrainState, model: VAE, x: jnp.ndarray, key: jax.Array,
             batch_size: int) -> tuple[train_state.TrainState, dict[str, jnp.ndarray]]:
  """One VAE update on a minibatch drawn uniformly (with replacement) from the synthetic set
  ``x``; minimises the negative ELBO (Kingma & Welling Eq. 10)."""
  batch_key, sample_key = jax.random.split(key)
  xb = x[jax.random.randint(batch_key, (batch_size,), 0, x.shape[0])]

  def loss_fn(params):
    terms = elbo_terms(model, params, xb, sample_key)
    return terms["loss"], terms

  (_, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  return state.apply_gradients(grads=grads), terms
