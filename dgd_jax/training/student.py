"""DGD's student step (Eq. 1, 5, 6) on released labels over an unlabelled pool: its losses,
its targets from the released histograms or counts, and the jitted step (config-free; the
student stage and ``plan/student_fit.py`` drive it).

Eq. 6 as implemented, per unlabelled batch (means over the batch):
  w_normal  * ||f(x_hat) - f(x_perp)||^2      # normal regularisation
  w_tangent * ||f(x_hat) - f(x_par)||^2       # tangent regularisation
  w_entropy * H(p(x_hat))                     # entropy regularisation
The paper prints the last term as + sum p log p (= -H) but says it "ensures the student
output more determinate predictions", i.e. lower entropy, as in TNAR/VAT; we minimise H.

Beside Eq. 6, the unlabelled samples can teach through consistency (FixMatch, Sohn et al.
2020 Eq. 4): a weakly augmented view's confident prediction is the target of a strongly
augmented view,
  w_consistency * mean_j 1[max p(weak(x_j)) >= threshold] CE(f(strong(x_j)), argmax p(weak(x_j)))
(``consistency_augment=False``: both views are x_j itself, i.e. confident pseudo-labels, Lee 2013)
and the labelled batch can be augmented (``augment``) or mixed (``mixup`` > 0: Eq. 5 on
pairs x~ = lam x_i + (1 - lam) x_j with targets lam e_{y_i} + (1 - lam) e_{y_j}, lam ~
Beta(mixup, mixup); Zhang et al. 2018), which resists the noisy labels.

Where the queries released noisy vote histograms (``queries.aggregator='gaussian_histogram'``)
the labelled targets are the noisy vote shares h~ / n, unbiased and unclipped, and Eq. 5's
cross-entropy, unbounded below for a negative target, becomes the Brier score (``brier_score``);
label propagation, built for hard labels, is off. Where they released one noisy count per sample
(the class-count release: the votes for the class the sample was made for) the targets are
``class_count_targets``, under the same Brier score.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dgd_jax.models.vae import VAE
from dgd_jax.training import triples
from dgd_jax.training import augment
from dgd_jax.training import train


def uses_vae(s) -> bool:
  """Whether the student block ``s`` turns Eq. 6 on, the only term that reads the VAE."""
  return s.w_normal > 0 or s.w_tangent > 0 or s.w_entropy > 0


def entropy(logits: jnp.ndarray) -> jnp.ndarray:
  logp = jax.nn.log_softmax(logits)
  return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def consistency_loss(weak_logits: jnp.ndarray, strong_logits: jnp.ndarray, threshold: float
                     ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """FixMatch Eq. 4: mean_j 1[max p_weak_j >= threshold] CE(strong_j, argmax p_weak_j), the
  weak view held fixed; also the share of confident rows."""
  p_weak = jax.nn.softmax(jax.lax.stop_gradient(weak_logits))
  confident = (p_weak.max(-1) >= threshold).astype(jnp.float32)
  ce = optax.softmax_cross_entropy_with_integer_labels(strong_logits, jnp.argmax(p_weak, -1))
  return jnp.mean(confident * ce), jnp.mean(confident)


@dataclasses.dataclass(frozen=True)
class StudentSettings:
  """The student step's hyper-parameters (static under jit; the plan's ``student_fit.settings``
  reads them from a config's student block)."""

  batch_size: int
  unlabelled_batch_size: int
  augment: bool  # shift/mirror the labelled batch
  mixup: float  # > 0: Eq. 5 on mixed pairs, lam ~ Beta(mixup, mixup)
  w_consistency: float  # FixMatch's weight
  consistency_augment: bool  # False: both views are the sample (pseudo-labels)
  threshold: float  # FixMatch's confidence threshold
  w_normal: float  # Eq. 6
  w_tangent: float
  w_entropy: float
  eps1: float  # DGD's latent noise
  eps_tangent: float  # Eq. 4
  eps_normal: float
  adversarial: bool  # Eq. 4's directions by the student's divergence (TNAR)
  brier: bool = False  # the labelled loss is the Brier score (targets: noisy vote shares)


def _triples(student, vae: VAE, vae_params, params, xu, k_z, k_noise, k_dir,
             s: StudentSettings):
  """Eq. 4's (x_hat, x_par, x_perp) of the unlabelled batch ``xu``: its VAE codes (with DGD's
  eps1 noise) decoded, and moved along the tangent and normal directions (held fixed)."""
  mean, logvar = vae.apply({"params": vae_params}, xu, method=VAE.encode)
  z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(k_z, mean.shape)  # e_j ~ q(e|x_j)
  if s.eps1 > 0:
    z = triples.latent_noise(k_noise, z, s.eps1)  # DGD's eps1 term
  divergence = None
  if s.adversarial:
    frozen = jax.lax.stop_gradient(params)

    def divergence(x, x2):
      p = jax.nn.log_softmax(student.apply(frozen, x))
      q = jax.nn.log_softmax(student.apply(frozen, x2))
      return jnp.sum(jnp.exp(p) * (p - q))

  decode = lambda z: vae.apply({"params": vae_params}, z, method=VAE.decode)
  return jax.lax.stop_gradient(
      triples.triples(decode, z, k_dir, s.eps_tangent, s.eps_normal, divergence))  # Eq. 4


def brier_score(logits: jnp.ndarray, targets: jnp.ndarray) -> jnp.ndarray:
  """mean_j sum_c (p_jc - t_jc)^2: linear in the targets up to a constant and bounded, so
  unbiased noisy targets (negative entries included) give an unbiased loss, which the
  cross-entropy, unbounded below for a negative target, cannot."""
  return jnp.mean(jnp.sum((jax.nn.softmax(logits) - targets) ** 2, axis=-1))


def _labelled_loss(student, params, xb, yb, key, s: StudentSettings):
  """Eq. 5 on the labelled batch: labels [B], or target distributions [B, K] (a self-training
  round; the released vote shares under ``s.brier``), on mixed pairs where ``s.mixup`` > 0."""
  targets = yb if yb.ndim == 2 else jax.nn.one_hot(yb, student.num_classes)
  apply = lambda x: train.training_apply(student.apply, params, x, key)  # dropout on
  if s.brier:
    if s.mixup > 0:
      xb, targets = augment.mixup(jax.random.fold_in(key, 2), xb, targets, s.mixup)
    return brier_score(apply(xb), targets)
  if s.mixup > 0:  # Eq. 5 on mixed pairs (mixup, Zhang et al. 2018)
    x_mix, t_mix = augment.mixup(jax.random.fold_in(key, 2), xb, targets, s.mixup)
    return optax.softmax_cross_entropy(apply(x_mix), t_mix).mean()
  if yb.ndim == 2:
    return optax.softmax_cross_entropy(apply(xb), targets).mean()
  return train.cross_entropy(apply(xb), yb)  # Eq. 5


def _unlabelled_terms(student, params, loss, views, hats, s: StudentSettings
                      ) -> tuple[jnp.ndarray, dict]:
  """``loss`` plus FixMatch's consistency on the (weak, strong) ``views`` and Eq. 6 on the
  triples ``hats`` (each None when off), weighted; and the terms."""
  terms = {}
  if views is not None:
    terms["consistency"], terms["confident_fraction"] = consistency_loss(
        student.apply(params, views[0]), student.apply(params, views[1]), s.threshold)
    loss = loss + s.w_consistency * terms["consistency"]
  if hats is not None:
    x_hat, x_par, x_perp = hats
    apply_f = lambda x: student.apply(params, x, with_features=True)
    logits_hat, f_hat = apply_f(x_hat)
    sq = lambda a, b: jnp.mean(jnp.sum((a - b) ** 2, axis=-1))
    terms["normal"] = sq(f_hat, apply_f(x_perp)[1])  # Eq. 6, first term
    terms["tangent"] = sq(f_hat, apply_f(x_par)[1])  # Eq. 6, second term
    terms["entropy"] = jnp.mean(entropy(logits_hat))  # Eq. 6, third term (see docstring)
    loss = (loss + s.w_normal * terms["normal"] + s.w_tangent * terms["tangent"]
            + s.w_entropy * terms["entropy"])
  return loss, terms


def make_step(student, vae: VAE, vae_params, x_s, y_s, x_u, s: StudentSettings):
  """The jitted semi-supervised step (Eq. 1 = Eq. 5 + Eq. 6), ``step(state, key)``."""
  unsupervised = uses_vae(s)
  consistency = s.w_consistency > 0

  def step(state, key):
    k_s, k_u, k_z, k_noise, k_dir = jax.random.split(key, 5)
    idx = jax.random.randint(k_s, (s.batch_size,), 0, x_s.shape[0])
    xb, yb = x_s[idx], y_s[idx]
    k_aug, k_c, k_weak, k_strong = jax.random.split(jax.random.fold_in(key, 1), 4)
    if s.augment:
      xb = augment.weak(k_aug, xb)
    views = hats = None
    if consistency:  # FixMatch: a weak and a strong view of unlabelled samples
      xc = x_u[jax.random.randint(k_c, (s.unlabelled_batch_size,), 0, x_u.shape[0])]
      views = ((augment.weak(k_weak, xc), augment.strong(k_strong, xc))
               if s.consistency_augment else (xc, xc))  # else: pseudo-labels
    if unsupervised:
      xu = x_u[jax.random.randint(k_u, (s.unlabelled_batch_size,), 0, x_u.shape[0])]
      hats = _triples(student, vae, vae_params, state.params, xu, k_z, k_noise, k_dir, s)

    def loss_fn(params):
      ce = _labelled_loss(student, params, xb, yb, key, s)
      loss, terms = _unlabelled_terms(student, params, ce, views, hats, s)
      return loss, {"ce": ce, **terms}

    (loss, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    return state.apply_gradients(grads=grads), {**terms, "loss": loss}

  return jax.jit(step, donate_argnums=0)


def class_count_targets(counts: np.ndarray, classes: np.ndarray, num_teachers: int,
                        num_classes: int) -> np.ndarray:
  """Targets [Q, K] float32 from (noisy) counts n_c of each query's class c
  (the class-count release): a = n_c / n on c, an unbiased estimate of its vote share, and
  the rest, 1 - a, spread evenly over the other classes (the release says nothing of them);
  entries below 0 and above 1 kept (``brier_score``)."""
  a = np.asarray(counts, np.float64) / num_teachers
  targets = np.repeat(((1 - a) / (num_classes - 1))[:, None], num_classes, axis=1)
  targets[np.arange(len(a)), classes] = a
  return targets.astype(np.float32)


def shares(histograms: np.ndarray, num_teachers: int) -> np.ndarray:
  """Vote shares h / n [Q, K] float32 of (noisy) histograms over n teachers; from the released
  histograms n + N(0, sigma^2 I) an unbiased estimate of the teachers' vote shares, entries
  below 0 and above 1 kept (``brier_score``)."""
  return (np.asarray(histograms, np.float64) / num_teachers).astype(np.float32)
