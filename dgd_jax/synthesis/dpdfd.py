"""DPDFD (Liu et al., IJCAI 2023) as pure, jittable pieces: the distillation loss L_T, the DP
mechanism A_{C,sigma} on the student's output gradients (Eq. 4), and one step of Algorithm 1
(generator -> synthetic batch D -> teacher and student -> DP targets -> student update ->
generator update). Accounting lives in ``privacy.dpdfd``.

Reading of Eq. 4 used here. g is the [B, K] gradient of L_T with respect to the student's
outputs; its rows g_i are normalised (``per_sample``: C g_i / (||g_i|| + e); ``batch``:
C g_i / (||g||_2 + e), Eq. 4 as printed) or clipped (the Fig. 2 ablation), Gaussian noise
N(0, sigma^2 C^2 I) is added to the [B, K] matrix (one independent draw per entry, not one
vector on the sum of the rows as Algorithm 1 line 8 reads; sigma is a multiplier of C, Eq. 4)
and the result divided by B. The DP targets are y_s = phi_s(D) - gamma * g_tilde, row by row
(Algorithm 1 line 9). ``privacy.dpdfd`` accounts exactly this release: B T releases of
sensitivity 2C for one teacher with per-sample rows (relation 'whole_batch'), T releases of 2C
under batch normalisation, and the ensemble and direct cases there.

Only g_tilde depends on the teacher (the private model); the student and the generator see
nothing else of it, so both are post-processing of the DP releases.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from dgd_jax.privacy import noise as dp_noise
from dgd_jax.synthesis import generative
from dgd_jax.training import augment
from dgd_jax.training import train

OPERATIONS = ("per_sample", "batch", "clip")  # normalisation readings of Eq. 4, or clipping
LOSSES = ("dkd", "kd")
# Where L_T's gradient is taken: at the student's outputs phi_s(D) (Algorithm 1), or at zero
# logits (a uniform student), which makes each released row a function of the teachers alone,
# a noisy soft vote, and the targets absolute rather than a step from the current student.
REFERENCES = ("student", "uniform")


@dataclasses.dataclass(frozen=True)
class StepSettings:
  """What one step of Algorithm 1 (or ``direct_step``) needs: the ``dpdfd`` config block's
  hyper-parameters and the noise multiplier sigma the plan chose."""

  batch_size: int  # B
  norm_bound: float  # C
  noise: float  # sigma, in multiples of C (Eq. 4)
  operation: str  # one of OPERATIONS
  loss: str  # one of LOSSES
  gamma: float  # the targets' step size (line 9)
  latent_dim: int = 0  # the generator's z (conversion only)
  alpha: float = 0.0  # L_G weights (Eq. 5)
  beta: float = 0.0
  reference: str = "student"  # one of REFERENCES


def dkd_loss(student_logits: jnp.ndarray, teacher_logits: jnp.ndarray, alpha: float = 1.0,
             beta: float = 8.0, temperature: float = 4.0) -> jnp.ndarray:
  """Decoupled KD (Zhao et al. 2022, Eq. 7) per example, target = argmax of the teacher:
  alpha * TCKD (binary target / non-target KL) + beta * NCKD (KL among non-targets), T^2."""
  target = jax.nn.one_hot(jnp.argmax(teacher_logits, -1), teacher_logits.shape[-1])
  p_t = jax.nn.softmax(teacher_logits / temperature)
  p_s = jax.nn.softmax(student_logits / temperature)
  binary = lambda p: jnp.stack([jnp.sum(p * target, -1), jnp.sum(p * (1 - target), -1)], -1)
  b_t, b_s = binary(p_t), binary(p_s)
  tckd = jnp.sum(b_t * (jnp.log(b_t + 1e-12) - jnp.log(b_s + 1e-12)), -1)  # KL(b_t || b_s)
  masked = lambda logits: logits / temperature - 1000.0 * target  # drop the target class
  q_t, logq_s = jax.nn.softmax(masked(teacher_logits)), jax.nn.log_softmax(masked(student_logits))
  nckd = jnp.sum(q_t * (jnp.log(q_t + 1e-12) - logq_s), -1)  # KL(q_t || q_s), non-targets
  return (alpha * tckd + beta * nckd) * temperature ** 2


def kd_loss(student_logits: jnp.ndarray, teacher_logits: jnp.ndarray,
            temperature: float = 4.0) -> jnp.ndarray:
  """Plain KD (Hinton et al. 2015) per example: T^2 KL(softmax(t/T) || softmax(s/T))."""
  p_t = jax.nn.softmax(teacher_logits / temperature)
  return temperature ** 2 * jnp.sum(
      p_t * (jnp.log(p_t + 1e-12) - jax.nn.log_softmax(student_logits / temperature)), -1)


def output_gradients(loss: str, student_logits: jnp.ndarray, teacher_logits: jnp.ndarray
                     ) -> jnp.ndarray:
  """g = dL_T / d phi_s(D), [B, K]: row i is example i's own gradient (one vjp; L_T sums
  per-example terms)."""
  per_example = dkd_loss if loss == "dkd" else kd_loss
  return jax.grad(lambda s: jnp.sum(per_example(s, teacher_logits)))(student_logits)


def bound(g: jnp.ndarray, norm_bound: float, operation: str, stability: float = 1e-8
          ) -> jnp.ndarray:
  """The rows of g normalised (DPDFD Eq. 4) or clipped to norm ``norm_bound`` (C)."""
  row_norms = jnp.linalg.norm(g, axis=-1, keepdims=True)
  if operation == "per_sample":
    return norm_bound * g / (row_norms + stability)  # C g_i / (||g_i|| + e)
  if operation == "batch":
    return norm_bound * g / (jnp.linalg.norm(g) + stability)  # C g_i / (||g||_2 + e), Eq. 4
  return g * jnp.minimum(1.0, norm_bound / (row_norms + 1e-30))  # clipping (Fig. 2 '-C')


def mechanism(key: jax.Array, g_bar: jnp.ndarray, noise_multiplier: float,
              norm_bound: float) -> jnp.ndarray:
  """A_{C,sigma} (DPDFD Eq. 4) on bounded gradients: (g_bar + N(0, sigma^2 C^2 I)) / B.
  With n teachers, ``g_bar`` is their [n, B, K] stack: per example, (1/n)(sum_j g_bar_ij +
  N(0, sigma^2 C^2 I)) (Sec. 4.4), then / B as in Algorithm 1."""
  if g_bar.ndim == 3:
    n = g_bar.shape[0]
    g_bar = jnp.sum(g_bar, axis=0)
  else:
    n = 1
  noise = noise_multiplier * norm_bound * dp_noise.normal(key, g_bar.shape)  # secret key
  return (g_bar + noise) / (n * g_bar.shape[0])


class DpdfdState(train_state.TrainState):
  """The student's state plus the generator's (parameters, optimizer, BatchNorm stats) and,
  for replay, every row released so far: ``released_x`` [B T, ...] the synthetic inputs and
  ``released_y`` [B T, K] their DP targets (post-processing of the releases)."""

  generator: generative.GeneratorState = None
  released_x: jnp.ndarray | None = None
  released_y: jnp.ndarray | None = None


def soft_cross_entropy(logits: jnp.ndarray, target_logits: jnp.ndarray) -> jnp.ndarray:
  """L_S: cross-entropy of the student's softmax to the softmax of the DP targets."""
  return optax.softmax_cross_entropy(logits, jax.nn.softmax(target_logits)).mean()


def generator_loss(logits: jnp.ndarray, features: jnp.ndarray, alpha: float, beta: float
                   ) -> jnp.ndarray:
  """L_G (DPDFD Eq. 5) on the student: CE to its own argmax + alpha * (-H of the batch-mean
  softmax) - beta * mean L2 norm of its backbone features (rewarded, as DAFL's activation)."""
  terms = generative.generator_loss_terms(logits, features)
  l2 = jnp.mean(jnp.linalg.norm(features, axis=-1))
  return terms["one_hot"] + alpha * terms["neg_entropy"] - beta * l2


def release_targets(key: jax.Array, x: jnp.ndarray, s_logits: jnp.ndarray,
                    teacher_logits_fn: Callable[[jnp.ndarray], jnp.ndarray], cfg: StepSettings
                    ) -> jnp.ndarray:
  """Algorithm 1 lines 4-9 on the batch ``x``: the DP targets y_s, the step's release.
  ``teacher_logits_fn(x)`` gives [B, K] logits (one teacher) or [n, B, K] (an ensemble)."""
  # Line 4's phi_s(D), or zero logits (reference 'uniform': the rows depend on the teachers only)
  r_logits = s_logits if cfg.reference == "student" else jnp.zeros_like(s_logits)
  t_logits = jax.lax.stop_gradient(teacher_logits_fn(x))
  per_teacher = jax.vmap(lambda t: output_gradients(cfg.loss, r_logits, t))
  g = (per_teacher(t_logits) if t_logits.ndim == 3 else
       output_gradients(cfg.loss, r_logits, t_logits))  # lines 4-6
  g_bar = bound(g, cfg.norm_bound, cfg.operation)  # line 7
  g_tilde = mechanism(key, g_bar, cfg.noise, cfg.norm_bound)  # line 8, Eq. 4
  return jax.lax.stop_gradient(r_logits - cfg.gamma * g_tilde)  # line 9: DP targets


def _learn(state: DpdfdState, x: jnp.ndarray, y_s: jnp.ndarray, student_apply: Callable,
           batch_size: int) -> tuple[DpdfdState, jnp.ndarray]:
  """Lines 10-11: the student follows the DP targets; the rows are kept for replay."""
  l_s, grads = jax.value_and_grad(
      lambda p: soft_cross_entropy(student_apply(p, x), y_s))(state.params)
  new_state = state.apply_gradients(grads=grads)
  if state.released_x is not None:  # keep this step's B released rows for ``replay_step``
    row = state.step * batch_size
    new_state = new_state.replace(
        released_x=jax.lax.dynamic_update_slice_in_dim(state.released_x, x, row, 0),
        released_y=jax.lax.dynamic_update_slice_in_dim(state.released_y, y_s, row, 0))
  return new_state, l_s


def step(state: DpdfdState, key: jax.Array, teacher_logits_fn: Callable[[jnp.ndarray],
         jnp.ndarray], student_apply: Callable, cfg: StepSettings
         ) -> tuple[DpdfdState, dict]:
  """One iteration of DPDFD Algorithm 1. ``teacher_logits_fn(x)`` gives [B, K] logits (one
  teacher) or [n, B, K] (an ensemble, Sec. 4.4)."""
  z_key, noise_key = jax.random.split(key)
  gen = state.generator
  z = jax.random.normal(z_key, (cfg.batch_size, cfg.latent_dim))

  def generate(params):
    x, updates = gen.apply_fn({"params": params, "batch_stats": gen.batch_stats}, z,
                              train=True, mutable=["batch_stats"])
    return x, updates["batch_stats"]

  x, batch_stats = generate(gen.params)  # lines 2-3: D = phi_g(z)
  x = jax.lax.stop_gradient(x)
  y_s = release_targets(noise_key, x, student_apply(state.params, x), teacher_logits_fn, cfg)
  new_state, l_s = _learn(state, x, y_s, student_apply, cfg.batch_size)  # lines 10-11

  def gen_loss(params):  # lines 12-13: L_S + L_G through D, the student held fixed
    x_g, _ = generate(params)
    logits, features = student_apply(new_state.params, x_g, with_features=True)
    return soft_cross_entropy(logits, y_s) + generator_loss(logits, features, cfg.alpha,
                                                            cfg.beta)

  l_g, g_grads = jax.value_and_grad(gen_loss)(gen.params)
  gen = gen.apply_gradients(grads=g_grads).replace(batch_stats=batch_stats)
  return new_state.replace(generator=gen), {"loss": l_s, "generator_loss": l_g}


def synthetic_step(state: DpdfdState, key: jax.Array, synthetic: jnp.ndarray,
                   teacher_logits_fn: Callable[[jnp.ndarray], jnp.ndarray],
                   student_apply: Callable, cfg: StepSettings) -> tuple[DpdfdState, dict]:
  """Algorithm 1 on a fixed synthetic set instead of a generator (``dpdfd.inputs=
  'synthetic'``): step t queries rows [t B, (t + 1) B) of ``synthetic``, so each sample is
  released once; no generator update."""
  x = jax.lax.dynamic_slice_in_dim(synthetic, state.step * cfg.batch_size, cfg.batch_size)
  y_s = release_targets(key, x, student_apply(state.params, x), teacher_logits_fn, cfg)
  new_state, l_s = _learn(state, x, y_s, student_apply, cfg.batch_size)
  return new_state, {"loss": l_s}


def replay_step(state: train_state.TrainState, key: jax.Array, released_x: jnp.ndarray,
                released_y: jnp.ndarray, batch_size: int, mixup: float = 0.0
                ) -> tuple[train_state.TrainState, dict]:
  """One student step on ``batch_size`` of the rows Algorithm 1 released (drawn uniformly):
  L_S of line 10 again, on targets already released, so post-processing;
  with ``mixup`` > 0 on mixed pairs and mixed target distributions (Zhang et al. 2018)."""
  x, y_s = train.sample_batch(key, released_x, released_y, batch_size)
  targets = jax.nn.softmax(y_s)
  if mixup > 0:
    x, targets = augment.mixup(jax.random.fold_in(key, 1), x, targets, mixup)
  return train.update(state, x, targets)


def sample_indices(key: jax.Array, dataset_size: int, batch_size: int) -> jnp.ndarray:
  """``batch_size`` distinct indices drawn uniformly without replacement from
  range(``dataset_size``), with a key that does not depend on the data: the sampling that
  ``privacy.dpdfd`` relation 'direct' accounts (``SampledWithoutReplacementDpEvent``)."""
  return jax.random.choice(key, dataset_size, (batch_size,), replace=False)


def direct_step(state: DpdfdState, key: jax.Array, x: jnp.ndarray, y: jnp.ndarray,
                student_apply: Callable, cfg: StepSettings) -> tuple[DpdfdState, dict]:
  """A_{C,sigma} applied to training on labelled private data (DPDFD Sec. 4.4, Table 4):
  B distinct private examples, the per-example gradients of the cross-entropy with respect
  to the model's outputs bounded and noised as in Eq. 4, DP targets, no generator.

  LABEL DP ONLY: the update back-propagates the targets through the model at the private
  inputs xb without noise, so only the labels are protected (``privacy.dpdfd``)."""
  idx_key, noise_key = jax.random.split(key)
  idx = sample_indices(idx_key, x.shape[0], cfg.batch_size)  # B of N, without replacement
  xb, yb = x[idx], y[idx]
  s_logits = student_apply(state.params, xb)
  g = jax.grad(lambda s: optax.softmax_cross_entropy_with_integer_labels(s, yb).sum())(
      s_logits)  # rows: each example's own gradient
  g_tilde = mechanism(noise_key, bound(g, cfg.norm_bound, cfg.operation), cfg.noise,
                      cfg.norm_bound)  # Eq. 4
  y_s = jax.lax.stop_gradient(s_logits - cfg.gamma * g_tilde)
  loss, grads = jax.value_and_grad(
      lambda p: soft_cross_entropy(student_apply(p, xb), y_s))(state.params)
  return state.apply_gradients(grads=grads), {"loss": loss}
