"""DGD's generative stream as pure, jittable steps: the data-free generator trained against
the frozen baseline (DGD Eq. 2, after DAFL) and the VAE trained on its synthetic data.

Generator loss on a batch of synthetic x = G(z) with frozen baseline logits o(x), softmax
p(x) and backbone features f(x) (DGD Eq. 2):

  L = mean_i CE(o(x_i), argmax_j o(x_i)_j)   # one-hot term: confident samples
      + alpha * sum_j pbar_j ln pbar_j         # pbar = mean_i p(x_i): -H(pbar), class balance
      - beta * mean_{i,k} |f(x_i)_k|           # activation term: strong features

Optional image priors that make the samples look like data, each 0 by default (the paper's
Eq. 2 alone); all are functions of the frozen baseline and of private-set statistics, i.e. of
the generator path that DGD's epsilon does not cover (the report says so):

  + w_stats * sum_l ||mu_l(x) - mu_l*||_2 + ||var_l(x) - var_l*||_2   # DeepInversion Eq. 4
  + w_tv * TV(x)                                                       # DeepInversion R_prior
  with x randomly shifted / mirrored before the baseline sees it      # DeepInversion jitter

mu_l*, var_l* are the per-channel mean and variance of the baseline's convolution outputs on
the private training set (``layer_statistics``), computed once by the generator stage.

Instead of a generator, ``invert`` optimises each sample's pixels directly (DeepInversion,
Yin et al. 2020): x = tanh(v) with v free, target classes y dealt in turn,

  L = mean_i CE(o(jitter(x_i)), y_i) + w_stats * R_feature(x) + w_tv * TV(x)

the same priors and private-set statistics; every sample has its own optimisation, so the
set cannot collapse onto a few templates as a generator's can.

The paper prints "+ beta ||f||_1" but motivates the term by real data having *higher*
activations, so the activation is rewarded, as in DAFL's code (-features.abs().mean()).
The entropy uses the natural log; DAFL's code used log10, i.e. its alpha is ln(10) times
smaller in natural-log units. alpha = 5, beta = 0.1 (DGD Section III-B).
"""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import struct
from flax import traverse_util
from flax.training import train_state

from dgd_jax.models.adapter import is_convolution
from dgd_jax.models.vae import VAE, elbo_terms
from dgd_jax.training import augment
from dgd_jax.training import train

# How the generator stage synthesises: DGD's generator (Eq. 2) or DeepInversion's direct
# optimisation of each sample's pixels (``invert``).
SYNTHESES = ("generator", "inversion")


class GeneratorState(train_state.TrainState):
  """Generator parameters, optimizer state and BatchNorm statistics."""

  batch_stats: Any = None


def create_generator_state(model: nn.Module, tx: optax.GradientTransformation, key: jax.Array,
                           latent_dim: int) -> GeneratorState:
  """A freshly initialised generator (``models.generator.Generator``) with its optimizer."""
  variables = model.init(key, jnp.zeros((2, latent_dim)), train=False)
  return GeneratorState.create(apply_fn=model.apply, params=variables["params"],
                               batch_stats=variables["batch_stats"], tx=tx)


def generator_variables(state: GeneratorState) -> dict:
  """What the generator reads: its parameters and BatchNorm statistics."""
  return {"params": state.params, "batch_stats": state.batch_stats}


def generate(apply_fn: Callable, variables: dict, key: jax.Array, num: int, batch_size: int,
             latent_dim: int) -> np.ndarray:
  """``num`` synthetic images of the generator ``apply_fn`` with ``variables`` (parameters,
  BatchNorm statistics) from fresh latent draws, in batches (``sample_batch``)."""
  batch = jax.jit(lambda key: sample_batch(apply_fn, variables, key, batch_size, latent_dim))
  out = [np.asarray(batch(jax.random.fold_in(key, i)))
         for i in range(-(-num // batch_size))]
  return np.concatenate(out)[:num]


def sample_batch(apply_fn: Callable, variables: dict, key: jax.Array, batch_size: int,
                 latent_dim: int) -> jnp.ndarray:
  """One batch of the generator's images from fresh latent draws, with batch statistics (as
  during training)."""
  z = jax.random.normal(key, (batch_size, latent_dim))
  x, _ = apply_fn(variables, z, train=True, mutable=["batch_stats"])
  return x


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


def baseline_forward(baseline_apply: Callable, baseline_params: Any, x: jnp.ndarray):
  """The baseline's logits, backbone features and per-layer (mean, variance) of its
  convolution outputs over batch and space: [(mu_l [C_l], var_l [C_l]), ...], the layers in
  the order of their parameter paths (none for a model without convolutions)."""
  (logits, features), captured = baseline_apply(
      baseline_params, x, with_features=True, capture_intermediates=is_convolution,
      mutable=["intermediates"])
  layers = traverse_util.flatten_dict(captured.get("intermediates", {}))
  stats = [(a.mean(axis=(0, 1, 2)), a.var(axis=(0, 1, 2)))
           for a in (layers[path][0] for path in sorted(layers))]
  return logits, features, stats


def layer_moments(baseline_apply: Callable, baseline_params: Any, xb: jnp.ndarray) -> list:
  """The first and second moments [(E a_l, E a_l^2), ...] of the baseline's convolution
  outputs over a chunk ``xb`` (``layer_statistics`` sums them over the private set)."""
  return [(m, v + m ** 2) for m, v in baseline_forward(baseline_apply, baseline_params, xb)[2]]


def layer_statistics(baseline_apply: Callable, baseline_params: Any, x: np.ndarray,
                     batch_size: int = 1000) -> list[tuple[np.ndarray, np.ndarray]]:
  """mu_l*, var_l* of the baseline's convolution outputs over all of ``x`` (the private
  training set), from per-chunk first and second moments."""
  run = jax.jit(lambda xb: layer_moments(baseline_apply, baseline_params, xb))
  sums, n = None, 0
  for i in range(0, len(x), batch_size):
    xb = x[i:i + batch_size]
    moments = [(np.asarray(m, np.float64) * len(xb), np.asarray(s, np.float64) * len(xb))
               for m, s in run(xb)]
    sums = moments if sums is None else [(a + c, b + d) for (a, b), (c, d) in zip(sums, moments)]
    n += len(xb)
  return [(m / n, s / n - (m / n) ** 2) for m, s in sums]


def statistics_loss(stats, targets) -> jnp.ndarray:
  """DeepInversion Eq. 4: sum over layers of ||mu_l - mu_l*||_2 + ||var_l - var_l*||_2."""
  return sum(jnp.linalg.norm(m - tm) + jnp.linalg.norm(v - tv)
             for (m, v), (tm, tv) in zip(stats, targets))


def total_variation(x: jnp.ndarray) -> jnp.ndarray:
  """Anisotropic total variation: mean absolute difference of neighbouring pixels."""
  return (jnp.abs(x[:, 1:] - x[:, :-1]).mean() + jnp.abs(x[:, :, 1:] - x[:, :, :-1]).mean())


@dataclasses.dataclass(frozen=True)
class Priors:
  """The optional image priors added to Eq. 2 (module docstring); zeros = Eq. 2 alone."""

  w_stats: float = 0.0
  w_tv: float = 0.0
  jitter: int = 0  # largest random shift, pixels
  mirror: bool = False


@dataclasses.dataclass(frozen=True)
class GeneratorSettings:
  """The generator step's hyper-parameters (static under jit)."""

  batch_size: int
  latent_dim: int
  alpha: float = 5.0  # Eq. 2's entropy weight
  beta: float = 0.1  # Eq. 2's activation weight
  priors: Priors = Priors()


def generator_step(state: GeneratorState, key: jax.Array, baseline_apply: Callable,
                   baseline_params: Any, cfg: GeneratorSettings, targets=None
                   ) -> tuple[GeneratorState, dict[str, jnp.ndarray]]:
  """One generator update against the frozen baseline (the five steps of DGD III-B):
  draw z, generate x, apply the baseline, Eq. 2 (+ ``cfg.priors``; ``targets`` = the private
  set's ``layer_statistics`` when ``priors.w_stats`` > 0), back-propagate into the generator
  only."""
  priors = cfg.priors
  z = jax.random.normal(key, (cfg.batch_size, cfg.latent_dim))
  aug_key = jax.random.fold_in(key, 1)

  def loss_fn(params):
    x, updates = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, z,
                                train=True, mutable=["batch_stats"])
    seen = augment.weak(aug_key, x, priors.jitter, priors.mirror)
    logits, features, stats = baseline_forward(baseline_apply, baseline_params, seen)
    loss, metrics = generator_loss(logits, features, cfg.alpha, cfg.beta)
    if priors.w_stats > 0:
      metrics["statistics"] = statistics_loss(stats, targets)
      loss = loss + priors.w_stats * metrics["statistics"]
    if priors.w_tv > 0:
      metrics["total_variation"] = total_variation(x)
      loss = loss + priors.w_tv * metrics["total_variation"]
    metrics["loss"] = loss
    return loss, (metrics, updates["batch_stats"])

  (_, (metrics, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  state = state.apply_gradients(grads=grads).replace(batch_stats=batch_stats)
  return state, metrics


def inversion_loss(x: jnp.ndarray, y: jnp.ndarray, key: jax.Array, baseline_apply: Callable,
                   baseline_params: Any, priors: Priors, targets=None) -> jnp.ndarray:
  """DeepInversion's objective (Yin et al. 2020 Eq. 2-4) on a batch of images ``x`` with
  targets ``y`` (classes [B], or distributions [B, K]: ``inversion_targets``):
  CE(o(jitter(x)), y) + w_stats R_feature + w_tv TV(x)."""
  seen = augment.weak(key, x, priors.jitter, priors.mirror)
  logits, _, stats = baseline_forward(baseline_apply, baseline_params, seen)
  loss = (optax.softmax_cross_entropy_with_integer_labels(logits, y) if y.ndim == 1
          else optax.softmax_cross_entropy(logits, y)).mean()  # y: classes or distributions
  if priors.w_stats > 0:
    loss = loss + priors.w_stats * statistics_loss(stats, targets)
  if priors.w_tv > 0:
    loss = loss + priors.w_tv * total_variation(x)
  return loss


@struct.dataclass
class InversionState:
  """DeepInversion in progress, a train state like any other (``train.run_steps``
  checkpoints and resumes it): ``v`` the current batch's free pixels (x = tanh(v)) and
  ``opt_state`` their Adam state, ``images`` the finished batches' images [batches * B, ...];
  ``step`` counts the steps of every batch (batch b's step s is b * steps + s)."""

  step: int
  v: jax.Array
  opt_state: Any
  images: jax.Array


def inversion_labels(batch_size: int, num_classes: int, mix: float) -> jnp.ndarray:
  """A batch's targets: its classes dealt in turn, or (``mix`` > 0) ``inversion_targets``."""
  return jnp.asarray(inversion_classes(batch_size, batch_size, num_classes) if mix == 0
                     else inversion_targets(batch_size, num_classes, mix))


def inversion_update(tx: optax.GradientTransformation, y: jnp.ndarray,
                     baseline_apply: Callable, baseline_params: Any, priors: Priors,
                     targets=None) -> Callable:
  """One Adam step of DeepInversion on a batch's free pixels: ``update(v, opt_state, key)
  -> (v, opt_state, loss)`` on ``inversion_loss`` at x = tanh(v). Pure; jit it."""

  def update(v, opt_state, key):
    loss, grads = jax.value_and_grad(lambda v: inversion_loss(
        jnp.tanh(v), y, key, baseline_apply, baseline_params, priors, targets))(v)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(v, updates), opt_state, loss

  return update


def inversion_step(key: jax.Array, steps: int, learning_rate: float, num_classes: int,
                   batch_size: int, image_shape: tuple[int, ...], baseline_apply: Callable,
                   baseline_params: Any, priors: Priors, targets=None, mix: float = 0.0
                   ) -> Callable:
  """``step(state, _) -> (state, metrics)`` on an ``InversionState``: batch b starts (its step
  0) from v ~ N(0, 1) drawn with ``fold_in(key, b)`` and a fresh Adam, takes Adam step s on
  ``inversion_loss`` with ``fold_in(fold_in(key, b), s + 1)``, and after its last step writes
  tanh(v) into the batch's rows. The keys come from ``key`` and the state's step, not from the
  key ``run_steps`` folds (ignored), so that the set does not depend on how the steps are
  grouped. A Python function around one jitted Adam step: a conv inside ``lax.scan`` runs
  far slower on CPU (REFERENCE Sec. 8)."""
  tx = optax.adam(learning_rate)
  update = jax.jit(inversion_update(tx, inversion_labels(batch_size, num_classes, mix),
                                    baseline_apply, baseline_params, priors, targets))

  def step(state: InversionState, _) -> tuple[InversionState, dict]:
    b, s = divmod(int(state.step), steps)
    batch_key = jax.random.fold_in(key, b)
    v, opt_state, images = state.v, state.opt_state, state.images
    if s == 0:  # a new batch
      v = jax.random.normal(batch_key, (batch_size,) + tuple(image_shape))
      opt_state = tx.init(v)
    v, opt_state, loss = update(v, opt_state, jax.random.fold_in(batch_key, s + 1))
    if s == steps - 1:  # the batch is finished
      images = images.at[b * batch_size:(b + 1) * batch_size].set(jnp.tanh(v))
    return state.replace(step=state.step + 1, v=v, opt_state=opt_state, images=images), {
        "loss": loss}

  return step


def invert(key: jax.Array, num: int, batch_size: int, steps: int, learning_rate: float,
           num_classes: int, image_shape: tuple[int, ...], baseline_apply: Callable,
           baseline_params: Any, priors: Priors, targets=None, checkpoint_dir: str | None = None,
           log: Callable[[dict], None] = lambda m: None, checkpoint_every: int = 500,
           log_every: int = 100, mix: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
  """``num`` images synthesised by DeepInversion: each batch's pixels, x = tanh(v) in [-1, 1]
  and v ~ N(0, 1) at the start, minimise ``inversion_loss`` for ``steps`` Adam steps, with the
  target classes dealt in turn (a balanced set; ``mix`` > 0: each sample's target is its class
  mixed with another, ``inversion_targets``). Returns (x, classes). The steps run through
  ``train.run_steps`` (``inversion_step``), checkpointed in ``checkpoint_dir`` and resumed
  from it to the same set (None: a temporary folder, not resumable)."""
  batches = -(-num // batch_size)
  shape = (batch_size,) + tuple(image_shape)
  state = InversionState(step=0, v=jnp.zeros(shape), opt_state=optax.adam(learning_rate).init(
      jnp.zeros(shape)), images=jnp.zeros((batches * batch_size,) + tuple(image_shape)))
  step = inversion_step(key, steps, learning_rate, num_classes, batch_size, image_shape,
                        baseline_apply, baseline_params, priors, targets, mix)
  fit = train.FitConfig(num_steps=batches * steps, batch_size=batch_size,
                        checkpoint_every=checkpoint_every, log_every=log_every)
  with contextlib.ExitStack() as stack:
    if checkpoint_dir is None:
      checkpoint_dir = stack.enter_context(tempfile.TemporaryDirectory())
    state = train.run_steps(state, step, key, fit, checkpoint_dir, "inversion", log)
  return np.asarray(state.images)[:num], inversion_classes(num, batch_size, num_classes)


def inversion_classes(num: int, batch_size: int, num_classes: int) -> np.ndarray:
  """[num] int32: the class each of ``invert``'s samples is optimised for, dealt in turn
  within each batch: a function of the sample's index alone, not of any data."""
  return np.resize((np.arange(batch_size) % num_classes).astype(np.int32), num)


def inversion_targets(batch_size: int, num_classes: int, mix: float) -> np.ndarray:
  """[batch_size, K] float32: sample i's target distribution, 1 - lambda_i on its class
  a = i mod K (``inversion_classes``) and lambda_i = mix (i // K) / ceil(B / K) on the class
  b = a + 1 + (i // K) mod (K - 1) (mod K): each class's samples spread from its interior
  (lambda 0) towards its boundary with every other class; mix <= 0.5 keeps a the largest.
  A function of the index alone, like the classes."""
  i = np.arange(batch_size)
  a, group = i % num_classes, i // num_classes
  b = (a + 1 + group % (num_classes - 1)) % num_classes
  lam = mix * group / -(-batch_size // num_classes)
  y = np.zeros((batch_size, num_classes), np.float32)
  y[i, a] = 1 - lam
  y[i, b] += lam
  return y


def vae_step(state: train_state.TrainState, key: jax.Array, model: VAE, x: jnp.ndarray,
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
