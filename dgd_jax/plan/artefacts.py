"""What stages write and how later stages read it back: artefact file names, the models
built from the config, and one loader per artefact (baseline/student classifier, teacher
ensemble, generator, VAE, queried labels). Stages import this module, never each other.
"""
from __future__ import annotations

import functools
import importlib
import json
import os

import jax
import jax.numpy as jnp
import flax.linen as nn
import numpy as np
import optax
from absl import logging
from jax.sharding import NamedSharding, PartitionSpec as P

from dgd_jax.models import backbone as backbone_model
from dgd_jax.models.adapter import WithFeatures
from dgd_jax.models.classifier import Classifier
from dgd_jax.models.generator import Generator
from dgd_jax.models.vae import VAE
from dgd_jax.plan import backbone
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan.context import Context, Program, abstract, abstract_key
from dgd_jax.runtime import distributed
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import load_array
from dgd_jax.synthesis import generative
from dgd_jax.training import ensemble
from dgd_jax.training import memory_plan
from dgd_jax.training import placement
from dgd_jax.training import train

CHECKPOINTS = "checkpoints"  # <stage>/checkpoints: the stage's Orbax checkpoints
# dpdfd/replay_checkpoints: the replayed student; _1, _2, ...: its self-training rounds
REPLAY_CHECKPOINTS = "replay_checkpoints"
SYNTHETIC = "synthetic.npy"  # generator (and dpdfd_samples): the synthetic images
SYNTHETIC_LABELS = "synthetic_labels.npy"  # generator: the baseline's labels of them
# queries: indices into the pool, noisy labels, answered mask (and the release where it is
# not the labels, under its ``aggregation.Aggregator.released`` name: the noisy "histograms",
# or the noisy "counts" of the labels' classes)
QUERIES = "queries.npz"
VOTES = "votes.npy"  # queries: the teachers' vote histograms: PRIVATE, accounting only


# Models and training settings from the config.

def user_model(config, num_classes: int) -> nn.Module:
  """``config.model.module`` ('package.module:Class') built as Class(num_classes=K, **kwargs)
  with ``config.model.kwargs`` (a JSON object), with the paper classifier's interface
  (``WithFeatures``); ConfigError naming the fix otherwise."""
  m = config.model
  if config.method == "dpsgd":
    raise ConfigError(f"config.model.module={m.module!r}: the dpsgd method trains its own "
                      "models (config.dpsgd.model); train a module of yours with DP-SGD from "
                      "Python (dgd_jax.train_dpsgd), or set --config.model.module=''.")
  path, _, name = m.module.partition(":")
  try:
    cls = getattr(importlib.import_module(path), name)
    kwargs = json.loads(m.kwargs) if m.kwargs else {}
  except (ImportError, AttributeError, ValueError) as e:
    raise ConfigError(f"config.model.module={m.module!r} / kwargs={m.kwargs!r} ({e}): give "
                      "'package.module:Class', importable here, and kwargs as a JSON object, "
                      "e.g. --config.model.kwargs='{\"features\": 64}'.") from None
  if not (isinstance(cls, type) and issubclass(cls, nn.Module)) or not isinstance(kwargs, dict):
    raise ConfigError(f"config.model.module={m.module!r} is not a flax.linen.Module class, or "
                      f"kwargs={m.kwargs!r} not a JSON object.")
  return WithFeatures(cls(num_classes=num_classes, **kwargs))


def classifier(config, num_classes: int, block: str | None = None,
               lowering: str = "im2col") -> nn.Module:
  """The paper classifier at the config's width (baseline, teachers and students), or at
  ``config.<block>.width`` where that block sets one (> 0; e.g. a wider student), or the
  user's module (``config.model.module``, ``user_model``: every classifier of the run, at
  its own size), or the public pretrained backbone where ``config.model.roles`` names the
  block's role (``plan.backbone``). ``lowering='conv'`` for a paper classifier that is never
  vmapped (models/classifier.py)."""
  if backbone.takes(config, block):
    return backbone.classifier(config, num_classes)
  if config.model.module:
    return user_model(config, num_classes)
  width = (config[block].get("width", 0) if block and block in config else 0)
  return Classifier(num_classes=num_classes, width=width or config.model.width,
                    hidden=tuple(config.model.hidden), lowering=lowering)


def teacher_model(config, num_classes: int) -> nn.Module:
  """The teachers' classifier: ``config.teachers.width`` where set, else the model's."""
  return classifier(config, num_classes, "teachers")


def fit_config(config, block: str) -> train.FitConfig:
  """Training hyperparameters from ``config.<block>`` (e.g. 'baseline', 'teachers')."""
  b = config[block]
  return train.FitConfig(num_steps=b.num_steps, batch_size=b.batch_size,
                         learning_rate=b.learning_rate, end_learning_rate=b.end_learning_rate,
                         checkpoint_every=config.checkpoint_every, log_every=config.log_every)


def generator_settings(block) -> generative.GeneratorSettings:
  """The generator step's settings from the ``generator`` config block (Eq. 2 and its
  priors)."""
  return generative.GeneratorSettings(
      block.batch_size, block.latent_dim, block.alpha, block.beta,
      generative.Priors(w_stats=block.w_stats, w_tv=block.w_tv, jitter=block.jitter,
                        mirror=block.mirror))


def teacher_memory(config, data, n: int):
  """The teachers' model, fit config, mesh, the chunk asked for and its memory plan for
  n teachers (on abstract values: the teachers per vmapped chunk that fit the device with
  their optimizer and training set)."""
  model = teacher_model(config, data.num_classes)
  cfg = fit_config(config, "teachers")
  mesh = placement.teacher_mesh(n)
  try:
    wanted, planned = memory_plan.for_teachers(
        model, train.optimizer(cfg), data.image_shape, mesh, n, len(data.x_train),
        cfg.batch_size, config.teachers.chunk)
  except ConfigError as e:  # the flags that set what the plan names
    raise ConfigError(f"{e} Flags: --config.num_teachers, --config.model.width, "
                      "--config.teachers.batch_size.") from None
  return model, cfg, mesh, wanted, planned


def teacher_plan(config, data, n: int):
  """What runs n teachers: (model, fit config, teacher mesh, the teachers per vmapped chunk
  that fit the device, ``teacher_memory``). The teachers stage records the chunk in its
  result; readers use that one."""
  model, cfg, mesh, wanted, plan = teacher_memory(config, data, n)
  logging.info("%s", plan.describe())
  chunk = distributed.agree_min(plan.chunk)  # one program on every process
  if chunk < wanted:
    logging.warning("teachers: chunk %d does not fit the device (of every process); using "
                    "chunk %d.", wanted, chunk)
  return model, cfg, mesh, chunk


def teacher_programs(config, data, rows: list[np.ndarray], member_update=None
                     ) -> dict[str, Program]:
  """The teacher ensemble's programs for one member per index row (``new_teachers``): its
  initialisation, its training step (``member_update``: ``ensemble.member_step``'s
  ``robust``) on each device's examples, held to the memory plan's total, and the votes on
  one query chunk (``ensemble.vote_histograms``)."""
  n = len(rows)
  model, cfg, mesh, _, plan = teacher_memory(config, data, n)
  tx, on_mesh = train.optimizer(cfg), NamedSharding(mesh, P(placement.AXIS))
  init = lambda key: ensemble.init_teachers(model, tx, key, n, data.image_shape, mesh)
  state = jax.tree.map(lambda s: abstract(s, sharding=on_mesh),
                       jax.eval_shape(init, abstract_key()))
  shards, local = ensemble.Partitions.stack(rows).localize(mesh.size)
  features, x_shape = feature_programs(model, data.image_shape)
  examples = (abstract(shards.shape + x_shape, jnp.float32, on_mesh),
              abstract(shards.shape, data.y_train.dtype, on_mesh),
              abstract(local.indices, sharding=on_mesh), abstract(local.sizes, sharding=on_mesh))
  step = ensemble.make_train_step(mesh, cfg.batch_size, plan.chunk, member_update)
  predict = ensemble.make_predict_fn(mesh, model.apply, plan.chunk)
  queries = abstract((ensemble.QUERY_CHUNK,) + data.image_shape, data.x_train.dtype)
  return {
      "init": Program(init, (abstract_key(),)),
      **features,
      "train_step": Program(step, (state, abstract_key()) + examples, budget=plan.total),
      "votes": Program(lambda params, x: ensemble.histogram(predict(params, x),
                                                            data.num_classes),
                       (state.params, queries)),
  }


def feature_programs(model: nn.Module, image_shape: tuple) -> tuple[dict, tuple]:
  """What ``model`` trains on before it trains: for a head-only backbone
  (``models.backbone.head_only``) its features' program on one batch of images and the shape
  of one feature vector, the head's input; else no program and the image's shape."""
  if not backbone_model.head_only(model):
    return {}, tuple(image_shape)
  program = backbone_model.feature_program(model)
  batch = abstract((backbone_model.FEATURE_BATCH,) + tuple(image_shape), jnp.float32)
  return ({"features": Program(program, (batch,))},
          tuple(jax.eval_shape(program, batch).shape[1:]))


def teacher_inputs(model: nn.Module, images: np.ndarray) -> np.ndarray:
  """What the teachers train on: the frozen backbone's features of every private image,
  computed once, for head-only teachers (``models.backbone.features``), else the images."""
  if backbone_model.head_only(model):
    return backbone_model.features(model, images)
  return images


def new_teachers(config, data, n: int, key: jax.Array):
  """n freshly initialised teachers on the teacher mesh, and what runs them: returns
  (state [n, ...], predict_fn, mesh, chunk, fit config, model)."""
  model, cfg, mesh, chunk = teacher_plan(config, data, n)
  state = ensemble.init_teachers(model, train.optimizer(cfg), key, n, data.image_shape, mesh)
  return state, ensemble.make_predict_fn(mesh, model.apply, chunk), mesh, chunk, cfg, model


def generator_model(block, image_shape: tuple[int, ...], standardize_output: bool
                    ) -> Generator:
  """A generator (``models.generator``) at ``block``'s latent_dim and features: DGD's
  (``config.generator``) or DPDFD's (``config.dpdfd``, no standardised output)."""
  return Generator(image_shape=image_shape, latent_dim=block.latent_dim,
                   features=block.features, standardize_output=standardize_output)


def dgd_generator(config, image_shape: tuple[int, ...]) -> Generator:
  return generator_model(config.generator, image_shape, config.generator.standardize_output)


def dpdfd_generator(config, image_shape: tuple[int, ...]) -> Generator:
  return generator_model(config.dpdfd, image_shape, False)


def new_generator(config, image_shape: tuple[int, ...], key: jax.Array
                  ) -> generative.GeneratorState:
  """A freshly initialised DGD generator with its optimizer (lr / 10 every ``decay_every``
  rounds)."""
  g = config.generator
  tx = optax.adam(optax.exponential_decay(g.learning_rate, g.decay_every * g.iterations_per_round,
                                          0.1, staircase=True))
  return generative.create_generator_state(dgd_generator(config, image_shape), tx, key,
                                           g.latent_dim)


def vae_model(config, image_shape) -> VAE:
  v = config.vae
  return VAE(image_shape=image_shape, latent_dim=v.latent_dim, features=v.features,
             tanh_output=v.tanh_output)


# Loaders: one per artefact of a finished stage.

def _checkpoints(ctx: Context, stage: str) -> str:
  return os.path.join(ctx.stage_path(stage), CHECKPOINTS)


def student_fits(members: int, rounds: int) -> list[str]:
  """The student stage's fits in order, each named by the suffix of its metrics and
  checkpoints (the first: none): the ensemble's other members, the student distilled from
  them, then the self-training rounds. The last is the released student."""
  fits = [""] + [f"_member_{m}" for m in range(1, members)]
  if members > 1:
    fits.append("_distilled")
  return fits + [f"_self_training_{r}" for r in range(1, rounds + 1)]


def load_classifier(ctx: Context, stage: str, lowering: str = "im2col"):
  """A finished classifier stage's (model, params); ``stage`` also names its config block
  ('baseline' or 'student': the released student, the last of ``student_fits``, as the
  stage's result records it); ``lowering`` as ``classifier``'s."""
  model = classifier(ctx.config, ctx.dataset.num_classes, stage, lowering)
  x = jnp.zeros((1,) + ctx.dataset.image_shape, jnp.float32)
  folder = _checkpoints(ctx, stage)
  if stage == "student":
    folder += ctx.results["student"]["released_fit"]
  return model, train.load_params(folder, jax.eval_shape(model.init, jax.random.key(0), x))


def load_dpsgd(ctx: Context):
  """A finished DP-SGD stage's released model: (model, params, inputs), ``inputs(images)``
  what the model reads (``dpsgd_plan.inputs``)."""
  config = ctx.config
  model = dpsgd_plan.model_of(config, ctx.dataset.num_classes)
  inputs = lambda images: dpsgd_plan.inputs(config, model, images)
  shape = backbone_model.init_shape(model, inputs(ctx.dataset.x_train[:1]).shape[1:],
                                    ctx.dataset.image_shape)
  params = train.load_params(_checkpoints(ctx, "dpsgd"), jax.eval_shape(
      model.init, jax.random.key(0), jnp.zeros((1,) + shape, jnp.float32)))
  return model, params, inputs


def load_teachers(ctx: Context):
  """The finished teachers stage's stacked parameters [n, ...] on the teacher mesh, its
  prediction function, and the teachers per vmapped chunk it planned (its result's
  ``chunk``). Prediction holds no gradients or optimizer state, so the chunk planned for
  training fits any device at least as large as the one that trained; on a smaller one,
  rerun the teachers stage there (its memory plan picks the chunk)."""
  config, data = ctx.config, ctx.dataset
  n, chunk = config.num_teachers, ctx.results["teachers"]["chunk"]
  model, mesh = teacher_model(config, data.num_classes), placement.teacher_mesh(n)
  x = jnp.zeros((1,) + data.image_shape, jnp.float32)
  abstract = jax.eval_shape(jax.vmap(lambda k: model.init(k, x)),
                            jax.random.split(jax.random.key(0), n))
  on_mesh = NamedSharding(mesh, P(placement.AXIS))
  params = train.load_params(_checkpoints(ctx, "teachers"), jax.tree.map(
      lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=on_mesh), abstract))
  return params, ensemble.make_predict_fn(mesh, model.apply, chunk), chunk


def generator_shape(model: Generator, latent_dim: int) -> dict:
  """The generator's variables (params, batch_stats), abstract."""
  return jax.eval_shape(functools.partial(model.init, train=False), jax.random.key(0),
                        jnp.zeros((2, latent_dim)))


def load_generator(ctx: Context) -> tuple[Generator, dict]:
  """The finished generator stage's (model, variables): its parameters and BatchNorm
  statistics."""
  model = dgd_generator(ctx.config, ctx.dataset.image_shape)
  return model, train.load_items(_checkpoints(ctx, "generator"),
                                 generator_shape(model, ctx.config.generator.latent_dim))


def replay_checkpoints(ctx: Context, rounds: int) -> str:
  """dpdfd/replay_checkpoints (the replay), then _1, _2, ... (the self-training rounds)."""
  return os.path.join(ctx.stage_path("dpdfd"),
                      REPLAY_CHECKPOINTS + (f"_{rounds}" if rounds else ""))


def load_dpdfd(ctx: Context, self_training: int = 0):
  """The finished DPDFD stage's student and Algorithm 1's generator: (student, params,
  generator, variables). The student is the one the stage reports: the replayed one after
  ``self_training`` rounds where ``dpdfd.replay_epochs`` > 0, else Algorithm 1's."""
  config, data = ctx.config, ctx.dataset
  student = classifier(config, data.num_classes)
  params = jax.eval_shape(student.init, jax.random.key(0),
                          jnp.zeros((1,) + data.image_shape, jnp.float32))
  generator = dpdfd_generator(config, data.image_shape)
  abstract = {"generator": generator_shape(generator, config.dpdfd.latent_dim)}
  replayed = config.dpdfd.replay_epochs > 0
  items = train.load_items(_checkpoints(ctx, "dpdfd"),
                           abstract if replayed else {**abstract, "params": params})
  if replayed:
    items["params"] = train.load_params(replay_checkpoints(ctx, self_training), params)
  return student, items["params"], generator, items["generator"]


def load_vae(ctx: Context, image_shape) -> tuple[VAE, dict]:
  """The finished VAE stage's (model, params)."""
  vae = vae_model(ctx.config, image_shape)
  x, key = jnp.zeros((1,) + tuple(image_shape), jnp.float32), jax.random.key(0)
  return vae, train.load_params(_checkpoints(ctx, "vae"),
                                jax.eval_shape(vae.init, key, x, key)["params"])


def load_synthetic(ctx: Context, stage: str = "generator") -> np.ndarray:
  return load_array(os.path.join(ctx.stage_path(stage), SYNTHETIC))


def load_synthetic_labels(ctx: Context) -> np.ndarray:
  """The baseline's labels of the synthetic set (generator stage; not released)."""
  return load_array(os.path.join(ctx.stage_path("generator"), SYNTHETIC_LABELS))


def load_queries(ctx: Context) -> dict[str, np.ndarray]:
  """The queries stage's ``indices`` (into the pool), noisy ``labels`` and ``answered`` (and
  ``histograms``, the released noisy vote histograms, or ``counts``, the released noisy
  counts of the class in ``labels``, where the aggregator releases them)."""
  return dict(load_array(os.path.join(ctx.stage_path("queries"), QUERIES)))


def load_votes(ctx: Context) -> np.ndarray:
  """The teachers' vote histograms of the queries: PRIVATE (accounting and diagnostics)."""
  return load_array(os.path.join(ctx.stage_path("queries"), VOTES))
