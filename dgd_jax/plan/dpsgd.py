"""DP-SGD as a config plans it, for the ``dpsgd`` stage and DGD's private baseline (the
config-aware side of ``dgd_jax.training.dpsgd``, which trains): the checks of ``config.dpsgd``, the
model and its inputs, the planned ``privacy.DpsgdSteps`` record with its noise (given, or
calibrated to ``privacy.max_epsilon``), the dpsgd stage's run, and the private baseline's
record, composed with the label queries under the same relation, and its run: each run also
the audit's canary run of it (``dgd_jax.audit.canaries``)."""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from dgd_jax import privacy
from dgd_jax.models import dpsgd as dpsgd_models
from dgd_jax.models import scattering
from dgd_jax.models import backbone as backbone_model
from dgd_jax.plan import backbone
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan.context import Context, config_teachers_changed, planned_noise, private_size
from dgd_jax.privacy import checks as privacy_checks
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import dpsgd as dpsgd_training
from dgd_jax.training import train


BACKBONE = "backbone"  # config.dpsgd.model: the public pretrained backbone config.model names


def check(config) -> None:
  """ConfigError naming the field and the fix for values DP-SGD cannot use."""
  d = config.dpsgd
  models = tuple(dpsgd_models.MODELS) + (BACKBONE,)
  if d.model not in models:
    raise ConfigError(f"config.dpsgd.model={d.model!r}; use one of {models}.")
  for name in ("num_steps", "batch_size"):
    if d[name] == 0:
      raise ConfigError(f"config.dpsgd.{name}=0 is derived from the data's size: plan the run "
                        "with plan.checks.run_config(config) first (it sets it), or set it >= 1.")
  for name in ("num_steps", "batch_size", "microbatch_size"):
    if d[name] < 1:
      raise ConfigError(f"config.dpsgd.{name}={d[name]}; it must be >= 1.")
  if not d.norm_bound > 0:
    raise ConfigError(f"config.dpsgd.norm_bound={d.norm_bound}: the clip norm C must be > 0 "
                      "(it is the sensitivity of each step's gradient sum).")
  if not d.learning_rate > 0:
    raise ConfigError(f"config.dpsgd.learning_rate={d.learning_rate}; it must be > 0.")
  if not 0 <= d.momentum < 1:
    raise ConfigError(f"config.dpsgd.momentum={d.momentum}; it must be in [0, 1).")
  if d.noise < 0:
    raise ConfigError(f"config.dpsgd.noise={d.noise}; it must be > 0, or 0 to calibrate it to "
                      "config.privacy.max_epsilon.")


def public_size(config, read: int | None = None) -> int:
  """N of the sampling rate q = B / N, a public value: ``config.private_size`` when set (a config
  value), else the training split's size (``read``, or read from the data), which a catalog
  dataset publishes. For data of your own, set ``config.private_size`` to make N a config
  value; under add/remove-one a neighbour is then sampled at the same q."""
  size = config.private_size
  if size:
    return size
  return read if read is not None else private_size(config)


def steps_for_epochs(epochs: float, size: int, batch_size: int) -> int:
  """ceil(epochs N / B), at least 1: the steps at expected batch B that visit each of N
  examples ``epochs`` times in expectation."""
  return max(1, math.ceil(epochs * size / batch_size))


def schedule(config, size: int) -> tuple[int, int, str]:
  """(expected batch, steps, why) for N = ``size`` examples: ``dpsgd.batch_size`` and
  ``num_steps`` where set, else the batch round(q N) at ``sampling_rate`` q and the steps
  ceil(epochs N / batch), so that a preset keeps its sampling rate and epochs on data of any
  size."""
  d = config.dpsgd
  if d.batch_size == 0 and not 0 < d.sampling_rate <= 1:
    raise ConfigError(f"config.dpsgd.batch_size=0 takes the batch from sampling_rate x N, but "
                      f"sampling_rate={d.sampling_rate}: set it in (0, 1], or set batch_size.")
  if d.num_steps == 0 and not d.epochs > 0:
    raise ConfigError(f"config.dpsgd.num_steps=0 takes the steps from epochs x N / batch, but "
                      f"epochs={d.epochs}: set epochs > 0, or set num_steps.")
  batch = d.batch_size or max(1, round(d.sampling_rate * size))
  steps = d.num_steps or steps_for_epochs(d.epochs, size, batch)
  why = (f"batch {batch}" + (f" = round({d.sampling_rate:.6g} x {size})" if not d.batch_size
                             else " (set)")
         + f", {steps} steps" + (f" = ceil({d.epochs:g} epochs x {size} / {batch})"
                                 if not d.num_steps else " (set)"))
  return batch, steps, why


def with_schedule(config):
  """``config`` with a derived DP-SGD batch and step count (``schedule``) in place of 0, the
  rule's fields then 0 (the numbers are what a run depends on) and the reason in
  ``config.dpsgd_schedule_chosen``; ``config`` itself when it sets both. N is ``public_size``,
  as for q: a catalog dataset's published size, or ``config.private_size`` (set it for data
  of your own, since add/remove-one neighbours change the size read from the data, and with
  it the schedule)."""
  d = config.get("dpsgd")
  if d is None or (d.batch_size and d.num_steps):
    return config
  batch, steps, why = schedule(config, public_size(config))
  config = copy.deepcopy(config)
  with config.unlocked():
    config.dpsgd.update(batch_size=batch, num_steps=steps, sampling_rate=0.0, epochs=0.0)
    config.dpsgd_schedule_chosen = why
  return config


def release(config, noise: float, dataset_size: int | None = None) -> privacy.DpsgdSteps:
  """The ledger record of the planned DP-SGD steps at noise multiplier ``noise`` (q = B / N,
  N = ``public_size``; the batch and steps of ``schedule``)."""
  d = config.dpsgd
  size = public_size(config, dataset_size)
  batch, steps, _ = schedule(config, size)
  return privacy.DpsgdSteps(noise, batch, size, steps, d.norm_bound, d.sampling)


def noise_multiplier(config, dataset_size: int | None = None) -> float:
  """``dpsgd.noise``, or the least noise whose plan fits ``privacy.max_epsilon`` (target epsilon
  in, noise multiplier out: jax-privacy's calibration, confirmed by the ledger)."""
  check(config)
  d, p = config.dpsgd, config.privacy
  return planned_noise("dpsgd", d.noise, p.max_epsilon, lambda: privacy.dpsgd_noise_multiplier(
      release(config, 1.0, dataset_size), p.max_epsilon, p.delta, p.accountant))


def inputs(config, model, images: np.ndarray) -> np.ndarray:
  """What ``model`` (``model_of``) reads: ScatterNet coefficients (data-independent), a
  head-only backbone's frozen features (public weights, computed once), or the images."""
  d = config.dpsgd
  if backbone_model.head_only(model):
    return backbone_model.features(model, images)
  if d.model not in dpsgd_models.SCATTERING:
    return images
  return scattering.features(images, d.scattering_scales, d.scattering_orientations)


def released_module(config, num_classes: int):
  """The released model's module, its input transform (``inputs``) and its words for it
  (``Method.released_module``)."""
  model, d = model_of(config, num_classes), config.dpsgd
  if backbone_model.head_only(model):
    read = "the frozen public backbone's features of the scaled images"
  elif d.model in dpsgd_models.SCATTERING:
    read = ("their ScatterNet coefficients, dgd_jax.models.scattering.features(x, "
            f"{d.scattering_scales}, {d.scattering_orientations})")
  else:
    return model, None, "the scaled images"
  return model, lambda images: inputs(config, model, images), read


def model_of(config, num_classes: int):
  d = config.dpsgd
  if d.model == BACKBONE:
    if not config.model.backbone:
      raise ConfigError("config.dpsgd.model='backbone' needs config.model.backbone (e.g. "
                        "'vit') and its config.model.checkpoint.")
    return backbone.classifier(config, num_classes)
  if d.model in dpsgd_models.SCATTERING:
    return dpsgd_models.MODELS[d.model](num_classes=num_classes, groups=d.groups,
                                        norm_affine=d.norm_affine)
  return dpsgd_models.MODELS[d.model](num_classes=num_classes)


# ---- the dpsgd stage's run (and the audit's canary run of it) ---------------------------------

def fresh_state(config, model, input_shape, key: jax.Array) -> train_state.TrainState:
  """A fresh model for ``input_shape`` with DP-SGD's optimizer (SGD, momentum, the
  parameters' moving average)."""
  d = config.dpsgd
  params = model.init(key, jnp.zeros((1,) + tuple(input_shape), jnp.float32))
  tx = optax.sgd(d.learning_rate, momentum=d.momentum or None)
  return train_state.TrainState.create(
      apply_fn=model.apply, params=params,
      tx=optax.chain(tx, dpsgd_training.parameter_average(d.ema)) if d.ema else tx)


def planned(ctx: Context) -> tuple[privacy.DpsgdSteps, privacy.PrivacyLedger]:
  """The dpsgd stage's record (its noise calibrated) and ledger, the budget checked."""
  config, p = ctx.config, ctx.config.privacy
  n = public_size(config, len(ctx.dataset.x_train))
  record = release(config, noise_multiplier(config, n), n)
  ledger = privacy.PrivacyLedger([record])
  if privacy_checks.has_budget(p.max_epsilon):
    ledger.check_budget(p.max_epsilon, p.delta, p.accountant)
  return record, ledger


def train_dpsgd(ctx: Context, record: privacy.DpsgdSteps, checkpoint_dir: str, purpose: str,
                canaries: dpsgd_training.Canaries | None = None):
  """(model, trained state, the model's training and test inputs, feature seconds): the
  record's DP-SGD run of ``ctx``'s config from the public initialisation, its noise and
  batches drawn for ``purpose``, with an audit's ``canaries``."""
  config, data, d = ctx.config, ctx.dataset, ctx.config.dpsgd
  model = model_of(config, data.num_classes)
  t0 = time.perf_counter()
  x_train = inputs(config, model, data.x_train)
  x_test = inputs(config, model, data.x_test)
  feature_seconds = time.perf_counter() - t0
  init_key = ctx.key("dpsgd")  # public: the initialisation
  noise_key, batches = ctx.noise_key(purpose), ctx.noise_rng(f"{purpose}_batches")  # secret
  init = backbone_model.init_shape(model, x_train.shape[1:], data.image_shape)
  state = fresh_state(config, model, init, init_key)
  fit = train.FitConfig(num_steps=d.num_steps, batch_size=d.batch_size,
                        learning_rate=d.learning_rate, checkpoint_every=config.checkpoint_every,
                        log_every=config.log_every)
  state = dpsgd_training.train_private(state, model, x_train, data.y_train, record,
                                       d.microbatch_size, fit, noise_key, batches,
                                       checkpoint_dir, purpose, ctx.log, canaries=canaries)
  return model, state, x_test, feature_seconds


# ---- DGD's private baseline -----------------------------------------------------------------

def baseline_releases(config, neighbours: str = "replace_one", dataset_size: int | None = None
                      ) -> list[privacy.DpsgdSteps]:
  """The planned DP-SGD record of DGD's baseline when ``config.baseline.dpsgd`` is set (the
  ``private_baseline`` argument of dgd.py), else [], stated under the relation ``neighbours``
  so that it composes with the teachers' label queries under the same one. ``dpsgd.noise=0``
  calibrates the noise so that the baseline and the fixed query plan together fit
  ``privacy.max_epsilon`` under every relation the partition covers (one dp-accounting
  composition each under ``privacy.accountant``, PLD)."""
  if "dpsgd" not in config.get("baseline", {}):
    return []
  b, d, p = config.baseline, config.baseline.dpsgd, config.privacy
  if config.queries.plan != "fixed":
    raise ConfigError("a private baseline (config.baseline.dpsgd) shares the budget with the "
                      "label queries: set config.queries.plan='fixed' (the automatic plan "
                      "spends the whole budget on queries).")
  template = privacy.DpsgdSteps(d.noise or 1.0, d.batch_size, public_size(config, dataset_size),
                                b.num_steps, d.norm_bound, d.sampling, neighbours=neighbours)

  def calibrate() -> float:  # the least noise that fits beside every relation's queries
    shape = (template.batch_size, template.dataset_size, template.steps, template.norm_bound,
             template.sampling)
    return max(_noise_with(shape, (q.mechanism, q.noise_parameter, q.count, q.teachers_changed,
                                   q.neighbours), p.max_epsilon, p.delta, p.accountant)
               for q in (query_plan.release(config, neighbours=r)
                         for r in config_teachers_changed(config)))

  return [template.with_noise(planned_noise("baseline.dpsgd", d.noise, p.max_epsilon,
                                            calibrate))]


def train_baseline(ctx: Context, model, cfg: train.FitConfig, record: privacy.DpsgdSteps,
                   checkpoint_dir: str, purpose: str,
                   canaries: dpsgd_training.Canaries | None = None):
  """The final state of the record's DP-SGD run of DGD's baseline (``model``, Adam by
  ``cfg``) from its public initialisation, noise and batches drawn for ``purpose``, with an
  audit's ``canaries``."""
  config, data = ctx.config, ctx.dataset
  init_key, _ = jax.random.split(ctx.key("baseline"))  # public: the initialisation
  noise_key, batches = ctx.noise_key(purpose), ctx.noise_rng(f"{purpose}_batches")  # secret
  state = train.create_train_state(model, train.optimizer(cfg), init_key, data.image_shape)
  return dpsgd_training.train_private(state, model, data.x_train, data.y_train, record,
                                      config.baseline.dpsgd.microbatch_size, cfg, noise_key,
                                      batches, checkpoint_dir, purpose, ctx.log,
                                      canaries=canaries)


@functools.lru_cache(maxsize=16)
def _noise_with(steps: tuple, queries: tuple, target: float, delta: float,
                accountant: str) -> float:
  """The least baseline noise whose steps, composed with the fixed queries (under the
  queries' relation), fit ``target``."""
  batch, size, count, norm, sampling = steps
  mechanism, noise, num, changed, neighbours = queries
  template = privacy.DpsgdSteps(1.0, batch, size, count, norm, sampling, neighbours=neighbours)
  fixed = privacy.MECHANISMS[mechanism](noise, num, teachers_changed=changed,
                                        neighbours=neighbours)
  alone = privacy.epsilon_of(fixed, delta, accountant)
  if not alone < target:
    raise ConfigError(f"the fixed label queries alone ({num} {mechanism}, noise {noise:g}) give "
                      f"epsilon {alone:.4g} ({accountant}), leaving nothing of "
                      f"privacy.max_epsilon={target:g} for the private baseline: fewer "
                      "queries (config.queries.num_queries) or more noise.")
  return privacy.min_noise(template, target, delta, accountant, rtol=1e-4, others=[fixed])


def recorded_baseline(results: dict, neighbours: str | None = None) -> list[privacy.DpsgdSteps]:
  """The DP-SGD record of the baseline that actually ran (the result of
  ``stages.baseline.run_private``), stated under the relation ``neighbours`` (None: as it
  ran; the steps are the same under either), or []."""
  r = results.get("baseline", {}).get("release")
  if not r:
    return []
  record = privacy.DpsgdSteps.from_json(r)
  return [dataclasses.replace(record, neighbours=neighbours) if neighbours else record]


def neighbours(config) -> tuple[str, ...]:
  """DP-SGD's relation: add/remove-one (one example in or out of the Poisson samples)."""
  del config
  return ("add_or_remove_one",)


def releases(config, neighbours: str = "add_or_remove_one") -> list[privacy.Release]:
  """The planned DP-SGD steps, what the budget guard and ``sweep --accounting_only`` account
  before anything is trained."""
  return [dataclasses.replace(release(config, noise_multiplier(config)),
                              neighbours=neighbours)]
