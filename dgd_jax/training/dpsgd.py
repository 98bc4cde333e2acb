"""DP-SGD (Abadi et al. 2016, Algorithm 1) on jax-privacy, for the ``dpsgd`` stage and DGD's
private baseline: the model is trained on the private set with per-example clipping
(``jax_privacy.clipped_grad``), Gaussian noise
(``jax_privacy.noise_addition.gaussian_privatizer``) and Poisson batch selection
(``jax_privacy.batch_selection.CyclicPoissonSampling``), accounted by the ledger's
``DpsgdSteps`` record: the batch selection is built from that record, so the sampling the
trainer performs is the sampling the accountant composes. Config-free: what a config makes of
it (the model, the planned record, the calibrated noise) is ``dpsgd_plan``.

Each step releases sum_i clip_C(g_i) + N(0, sigma^2 C^2 I) over a Poisson sample (add/remove-one
sensitivity C); dividing by the public expected batch size q N, momentum and the model are
post-processing. For ScatterNet + linear (non-affine group norm) the clipped sum is computed in
closed form (``linear_clipped_grad``, ghost clipping), tested equal to jax-privacy's. ScatterNet
features (``models.scattering``) are a fixed transform of each image, so they cost no epsilon.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax_privacy import batch_selection, clipped_grad, clipping, noise_addition

from dgd_jax import privacy
from dgd_jax.privacy import noise
from dgd_jax.models import adapter
from dgd_jax.models import dpsgd as dpsgd_models
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import train


class Canaries(NamedTuple):
  """An audit run's gradient canaries (``dgd_jax.audit.canaries``): batch slots from
  ``num_real`` on are the included canaries ``slot_ids`` (int [m_in]) of ``num_canaries``;
  a sampled one adds C on its own coordinate of the noisy sum, and ``score(z)`` of each step's
  noisy canary coordinates (in units of C) is summed into the state's ``canary_scores``."""
  num_real: int
  slot_ids: np.ndarray
  num_canaries: int
  score: Callable[[jnp.ndarray], jnp.ndarray]


class CanaryState(train_state.TrainState):
  """A DP-SGD state that also sums each gradient canary's score over the steps."""
  canary_scores: jax.Array


def dpsgd_step(state: train_state.TrainState, key: jax.Array, x: jnp.ndarray, y: jnp.ndarray,
               idx: jnp.ndarray, *, grad_fn, noise_std: float, expected_batch: float,
               canaries: Canaries | None = None):
  """One DP-SGD step on the examples ``idx`` of (x, y) (-1: padding; from
  ``canaries.num_real`` on: canary slots). Pure; jit it."""
  padding = idx < 0
  if canaries is not None:
    is_canary = idx >= canaries.num_real
    padding = padding | is_canary
  safe = jnp.where(padding, 0, idx)
  # Abadi Alg. 1 lines 4-6: per-example gradients, clipped to C, summed (jax-privacy); each
  # example's dropout key split from the step's (a model that takes ``train``).
  clipped_sum, aux = grad_fn(state.params, x[safe], y[safe], key, is_padding_example=padding)
  released = clipped_sum
  if canaries is not None:  # each sampled canary's clipped gradient: C on its coordinate
    slots = jnp.asarray(canaries.slot_ids)
    ids = slots[jnp.clip(idx - canaries.num_real, 0, len(slots) - 1)]
    dirac = jnp.zeros(canaries.num_canaries).at[ids].add(
        jnp.where(is_canary, grad_fn.l2_norm_bound, 0.0))
    released = {"model": clipped_sum, "canaries": dirac}
  # Line 7: + N(0, sigma^2 C^2 I), as GAUSSIAN_DRAWS jax-privacy privatizers of std
  # sigma C / sqrt(GAUSSIAN_DRAWS) each (privacy.noise.normal's hardening), a fresh key per step.
  for draw in range(noise.GAUSSIAN_DRAWS):
    privatizer = noise_addition.gaussian_privatizer(
        stddev=noise_std / math.sqrt(noise.GAUSSIAN_DRAWS), prng_key=jax.random.fold_in(key, draw))
    released, _ = privatizer.update(released, privatizer.init(released))
  noisy_sum = released
  if canaries is not None:
    noisy_sum = released["model"]
    state = state.replace(canary_scores=state.canary_scores + canaries.score(
        released["canaries"] / grad_fn.l2_norm_bound))
  # Divided by the public expected batch size q N (never the realised, private one).
  grads = jax.tree.map(lambda g: g / expected_batch, noisy_sum)
  real = jnp.maximum(jnp.sum(~padding), 1)
  # Diagnostics for the server's log (not released): mean loss and clipped fraction.
  metrics = {"loss": jnp.sum(jnp.where(padding, 0.0, aux.values)) / real,
             "clipped_fraction": jnp.sum(jnp.where(padding, False, aux.grad_norms >
                                                   grad_fn.l2_norm_bound)) / real}
  return state.apply_gradients(grads=grads), metrics


class AverageState(NamedTuple):
  average: Any  # exponential moving average of the parameters after each step


def parameter_average(decay: float) -> optax.GradientTransformation:
  """Keeps an exponential moving average of the parameters in the optimizer state (checkpointed
  with it); the updates pass through unchanged. Post-processing of the noisy steps: no epsilon
  (De et al. 2022 use it for DP-SGD)."""

  def init(params):
    return AverageState(jax.tree.map(jnp.array, params))

  def update(updates, state, params):
    new = optax.apply_updates(params, updates)
    return updates, AverageState(jax.tree.map(lambda a, p: decay * a + (1.0 - decay) * p,
                                              state.average, new))

  return optax.GradientTransformation(init, update)


def _loss(model, loss_fn: Callable = train.cross_entropy):
  """The per-example loss jax-privacy differentiates: ``loss_fn`` of ``model``'s logits, in
  training mode (its dropout from the example's own ``key``) where the model takes ``train``."""
  dropout = adapter.takes_train(model)

  def loss(params, xb, yb, key):  # one example with a batch axis of 1 (keep_batch_dim)
    logits = (train.training_apply(model.apply, params, xb, key) if dropout
              else model.apply(params, xb))
    return loss_fn(logits, yb)
  return loss


class ClippedGrad(NamedTuple):
  """What DP-SGD trains with: ``fn(params, inputs[idx], y[idx], is_padding_example=...)``, the
  clipped per-example gradient sum (sensitivity ``fn.l2_norm_bound``), reads ``inputs(x)``,
  a fixed per-example transform of the training set applied once before training."""
  fn: clipping.BoundedSensitivityCallable
  inputs: Callable[[jnp.ndarray], jnp.ndarray]


def linear_clipped_grad(groups: int, l2_clip_norm: float) -> ClippedGrad:
  """The sum of clipped per-example cross-entropy gradients of ``models.dpsgd.ScatterLinear``
  with a non-affine group norm, without materialising them (ghost clipping, Goodfellow 2015).
  The head's input z_i (the group-normalised features, a parameter-free function of example
  i, computed once for the training set by ``inputs``) gives the gradient
  g_i = [z_i; 1] (x) e_i with e_i = softmax(W^T z_i + b) - onehot(y_i), so
  ||g_i||^2 = (||z_i||^2 + 1) ||e_i||^2 and sum_i s_i g_i = (Z^T (s e), sum_i s_i e_i) with
  s_i = min(1, C / ||g_i||) (0 for padding): the same sum as ``clipped_grad`` (tests), one
  matmul instead of B outer products. Same output and sensitivity C as ``clipped_grad(...,
  return_values=True, return_grad_norms=True)`` on ``_loss``."""
  finite = lambda a: jnp.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)  # as clip_pytree
  norm = dpsgd_models.group_norm_module(groups, affine=False)

  @jax.jit
  def inputs(x):  # z_i for every example
    return finite(norm.apply({}, x).reshape(x.shape[0], -1))

  def fun(params, z, y, key, is_padding_example):
    del key  # no dropout in a linear head
    head = params["params"]["Dense_0"]
    logits = z @ head["kernel"] + head["bias"]
    e = finite(jax.nn.softmax(logits) - jax.nn.one_hot(y, logits.shape[-1]))  # d loss_i/d logits
    grad_norms = jnp.sqrt((jnp.sum(z ** 2, -1) + 1.0) * jnp.sum(e ** 2, -1))
    scale = jnp.where(is_padding_example | ~(grad_norms > 0), 0.0,
                      jnp.minimum(1.0, l2_clip_norm / grad_norms))  # clip_pytree's rule
    se = scale[:, None] * e
    grads = {"params": {"Dense_0": {"kernel": z.T @ se, "bias": jnp.sum(se, 0)}}}
    values = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return grads, clipping.AuxiliaryOutput(values=values, grad_norms=grad_norms, aux=None)

  return ClippedGrad(clipping.BoundedSensitivityCallable(fun, l2_clip_norm, has_aux=True), inputs)


def clipped_grad_of(model, norm_bound: float, microbatch_size: int,
                    loss: Callable | None = None) -> ClippedGrad:
  """The clipped per-example gradient sum DP-SGD trains ``model`` with: jax-privacy's
  ``clipped_grad`` of ``loss(logits, labels)`` (None: the cross-entropy) on the examples as
  they are, or, for the cross-entropy of ScatterNet + linear with a non-affine group norm, its
  closed form (``linear_clipped_grad``)."""
  if loss is None and isinstance(model, dpsgd_models.ScatterLinear) and not model.norm_affine:
    return linear_clipped_grad(model.groups, norm_bound)
  return ClippedGrad(clipped_grad(_loss(model, loss or train.cross_entropy),
                                  l2_clip_norm=norm_bound,
                                  batch_argnums=(1, 2), microbatch_size=microbatch_size,
                                  return_values=True, return_grad_norms=True, prng_argnum=3),
                     lambda x: x)


def batches(record: privacy.DpsgdSteps, num_examples: int, rng: np.random.Generator,
            multiple: int) -> list[np.ndarray]:
  """Every step's example indices from the record's jax-privacy batch selection, drawn from
  ``rng`` (secret: amplification by subsampling assumes nobody knows the batches), padded
  with -1 to a multiple of ``multiple`` (a few shapes, so a few traces)."""
  strategy = record.batch_selection()
  return [batch_selection.pad_to_multiple_of(np.asarray(b), multiple)
          for b in strategy.batch_iterator(num_examples, rng=rng)]


def private_step(model, record: privacy.DpsgdSteps, microbatch_size: int,
                 loss: Callable | None = None, canaries: Canaries | None = None):
  """(the jitted DP-SGD step ``step(state, key, inputs, y, idx)``, the clipped gradient's
  ``inputs`` transform) for ``model`` and ``loss`` (None: cross-entropy) under the record's
  clip norm and noise, with an audit's ``canaries``; refused where jax-privacy's stated
  sensitivity is not the one the record charges."""
  grad_fn, inputs = clipped_grad_of(model, record.norm_bound, microbatch_size, loss)
  # The sum's sensitivity under the record's relation is what the record charges.
  stated = grad_fn.sensitivity(record.neighboring_relation)
  if not stated == record.l2_sensitivity:
    raise ConfigError(f"jax-privacy states sensitivity {stated} for the clipped sum, the ledger "
                      f"charges {record.l2_sensitivity}: refusing.")
  step = jax.jit(functools.partial(dpsgd_step, grad_fn=grad_fn, noise_std=record.noise_std,
                                   expected_batch=float(record.batch_size), canaries=canaries),
                 donate_argnums=0)
  return step, inputs


def step_program(state, model, x, y, record: privacy.DpsgdSteps, microbatch_size: int):
  """``private_step``'s step as a function of arrays with the abstract values it runs on
  (state, key, inputs, labels, a batch of the expected size padded as ``batches`` pads):
  ``(fn, args)`` for a stage's ``Program``; ``x``, ``y`` abstract."""
  step, inputs = private_step(model, record, microbatch_size)
  size = -(-record.batch_size // microbatch_size) * microbatch_size
  return step, (state, noise.abstract_key(), jax.eval_shape(inputs, x), y,
                jax.ShapeDtypeStruct((size,), jnp.int32))


def train_private(state: train_state.TrainState, model, x: np.ndarray, y: np.ndarray,
                  record: privacy.DpsgdSteps, microbatch_size: int, fit: train.FitConfig,
                  noise_key: jax.Array, batch_rng: np.random.Generator, checkpoint_dir: str,
                  name: str, log: Callable[[dict], None] = lambda m: None,
                  loss: Callable | None = None, canaries: Canaries | None = None):
  """``record.steps`` DP-SGD steps of ``state`` (``model``'s parameters) on (x, y) with the
  record's batch selection, clip norm and noise (resumable from ``checkpoint_dir``). The
  noise (``noise_key``) and the batches (``batch_rng``) must be secret
  (``privacy.noise.NoiseSource``); a resumed run passes the same ones and redraws the same
  batches. With an audit's ``canaries`` the state becomes a ``CanaryState`` and the batches
  are drawn over the examples and the included canaries, at the record's sampling
  probability."""
  step, inputs = private_step(model, record, microbatch_size, loss, canaries)
  slots = 0
  if canaries is not None:
    slots = len(canaries.slot_ids)
    state = CanaryState.create(apply_fn=state.apply_fn, params=state.params, tx=state.tx,
                               canary_scores=jnp.zeros(canaries.num_canaries))
  indices = batches(record, len(x) + slots, batch_rng, microbatch_size)
  x_dev, y_dev = inputs(jnp.asarray(x)), jnp.asarray(y)  # what grad_fn reads, once
  return train.run_steps(
      state, lambda s, k: step(s, k, x_dev, y_dev, jnp.asarray(indices[int(s.step)])),
      noise_key, fit, checkpoint_dir, name, log)
