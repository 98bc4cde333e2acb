"""The student's fit as a config makes it (``training/student.py`` holds its step): how many
students learn the release and from which labels (ensemble, propagation, self-training),
trained for the student stage and for the queries stage's refit rounds (``queries.refits``).
Everything here reads the pool, the released labels and the VAE only.

With ``ensemble`` = k > 1 (0: chosen for the release's noise, ``members``), k students learn
the labels so, each from its own initialisation and minibatches, and the student is a fresh one
trained on their mean predicted distribution over the whole pool (ensemble distillation: the
members' errors on noisy labels differ, their mean is steadier than any one of them). With
``self_training`` = R, R fresh students follow, each trained the same way on the last one's
predicted distributions over the whole pool. With ``propagation`` = k, while the labels cover
at most ``PROPAGATION_MAX_SHARE`` of the pool, the first student learns the whole pool instead,
each sample labelled with the likeliest class after the released labels spread to it by label
propagation on the k-NN graph of the pool's ScatterNet features (``propagation.propagate``,
Zhou et al. 2004; hard labels, which teach the student more than the propagated distributions).
All are post-processing of the released labels: no epsilon."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax.labelling import propagation
from dgd_jax.plan.artefacts import classifier, fit_config, student_fits
from dgd_jax.plan.context import Context
from dgd_jax.training import train
from dgd_jax.training.student import StudentSettings, make_step

# ``student.propagation`` runs only while the released labels cover at most this share of
# the pool: a few labels reach the rest of the pool only through it, while labels that
# already cover much of the pool are better learnt as released than replaced by propagated
# ones.
PROPAGATION_MAX_SHARE = 0.05
# ``student.ensemble = 0`` (the CPU presets): ENSEMBLE students distilled into one where the
# release's noise per teacher, sigma / n, is at least NOISE_PER_VOTE, else one student: the
# members' errors on noisy labels differ and their mean averages them out; under small noise
# there is little to average, and the distillation costs more than it gives.
ENSEMBLE = 5
NOISE_PER_VOTE = 0.3


def propagates(config, num_labelled: int, pool_size: int) -> bool:
  """Whether the student learns from labels propagated over the pool (module docstring)."""
  return (config.student.propagation > 0
          and num_labelled <= PROPAGATION_MAX_SHARE * pool_size)


def members(config, noise_scale: float | None) -> int:
  """How many students learn the release (``student.ensemble``; 0: ``ENSEMBLE`` where the
  noise per teacher, the release's ``noise_scale`` over ``num_teachers``, is at least
  ``NOISE_PER_VOTE``, else 1; the noise is read only then, so None does where
  ``student.ensemble`` is set)."""
  k = config.student.ensemble
  if k:
    return k
  noise = noise_scale / config.num_teachers
  return ENSEMBLE if noise >= NOISE_PER_VOTE else 1


def settings(block, brier: bool = False) -> StudentSettings:
  """The student step's settings from a config's ``student`` block."""
  return StudentSettings(brier=brier, **{f.name: block[f.name]
                                          for f in dataclasses.fields(StudentSettings)
                                          if f.name != "brier"})


def train_student(ctx: Context, vae: tuple, x_s: np.ndarray, y_s: np.ndarray, x_u: np.ndarray,
                  name: str, checkpoint_dir: str, pool_features: np.ndarray | None = None,
                  brier: bool = False, k: int = 1, key: str = "student"):
  """The student trained on labelled (x_s, y_s) and unlabelled x_u, with
  ``vae`` = ``load_vae``'s (model, params) for Eq. 6, or (None, None) when it is off; given
  ``pool_features`` (``propagation.features`` of x_s then x_u, when ``propagates``), on the
  whole pool instead, each sample's target the released labels propagated to it.
  With k > 1 (``members``), k students are trained so, each from its own
  initialisation and minibatches, and a fresh student learns their mean predicted distribution
  over the whole pool (x_s and x_u; post-processing). Then ``student.self_training`` rounds,
  each a fresh student trained the same way on the last one's predicted distributions over
  the whole pool. Each fit is named ``name`` and ``checkpoint_dir`` with its
  ``artefacts.student_fits`` suffix. Returns the model, each round's parameters (the first
  student or the distilled one, then the self-training rounds; the last is the student) and
  the ensemble's members. ``brier``: the labelled loss is the Brier score (``y_s``: the
  released vote shares, ``shares``). ``key``: the name of the run's key its draws derive from."""
  config = ctx.config
  student = classifier(config, ctx.dataset.num_classes, "student", lowering="conv")
  cfg = fit_config(config, "student")
  init_key, train_key = jax.random.split(ctx.key(key))
  fits = iter(enumerate(student_fits(k, config.student.self_training)))

  def new_step(x, y):
    return make_step(student, *vae, jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_u),
                     settings(config.student, brier))

  def fit(x, y, step=None):  # step: new_step(x, y) shared by the members, compiled once
    index, suffix = next(fits)
    # the other members and the distilled student draw keys of their own; the first student
    # and the self-training rounds the stage's
    init, run = ((jax.random.fold_in(init_key, index), jax.random.fold_in(train_key, index))
                 if suffix.startswith(("_member", "_distilled")) else (init_key, train_key))
    state = train.create_train_state(student, train.optimizer(cfg), init, x.shape[1:])
    step = step or new_step(x, y)
    log = lambda metrics: ctx.workdir.log_metrics(name + suffix, metrics)  # its own curve
    return train.run_steps(state, step, run, cfg, checkpoint_dir + suffix, name + suffix,
                           log).params

  x_all = np.concatenate([x_s, x_u])
  first = (x_s, y_s)
  if pool_features is not None:  # Zhou et al. 2004: each reached sample, its likeliest label
    p, reached = propagation.propagate(
        pool_features, np.arange(len(x_s)), y_s, ctx.dataset.num_classes,
        config.student.propagation)
    first = (x_all[reached], p[reached].argmax(-1).astype(np.int32))
  step = new_step(*first)
  trained = [fit(*first, step) for _ in range(k)]
  params = trained[0]
  if k > 1:  # the members' mean predicted distribution teaches one student
    params = fit(x_all, train.mean_distribution(student.apply, trained, x_all))
  rounds = train.self_training(lambda logits, r: fit(x_all, np.asarray(jax.nn.softmax(logits))),
                               student.apply, params, x_all, config.student.self_training)
  return student, rounds, trained
