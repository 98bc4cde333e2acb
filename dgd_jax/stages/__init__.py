"""Pipeline stages. Each module defines ``CONFIG_KEYS`` (the config slice its artefacts
depend on) and ``run(ctx) -> dict`` (JSON-able outputs); ``pipeline.STAGES`` lists them.
Helpers shared by stages live here."""
from __future__ import annotations

import os

import jax

from dgd_jax import train
from dgd_jax.models.classifier import Classifier


def classifier(config, num_classes: int, block: str | None = None) -> Classifier:
  """The paper classifier at the config's width (baseline, teachers and students), or at
  ``config.<block>.width`` where that block sets one (> 0; e.g. a wider student)."""
  width = (config[block].get("width", 0) if block and block in config else 0)
  return Classifier(num_classes=num_classes, width=width or config.model.width,
                    hidden=tuple(config.model.hidden))


def fit_config(config, block: str) -> train.FitConfig:
  """Training hyperparameters from ``config.<block>`` (e.g. 'baseline', 'teachers')."""
  b = config[block]
  return train.FitConfig(num_steps=b.num_steps, batch_size=b.batch_size,
                         learning_rate=b.learning_rate, end_learning_rate=b.end_learning_rate,
                         checkpoint_every=config.checkpoint_every, log_every=config.log_every)


def restore_classifier(ctx, stage: str):
  """A finished classifier stage's (model, params); ``stage`` also names its config block
  (e.g. 'baseline', 'student')."""
  model = classifier(ctx.config, ctx.dataset.num_classes, stage)
  template = train.create_train_state(model, train.optimizer(fit_config(ctx.config, stage)),
                                      jax.random.key(0), ctx.dataset.image_shape)
  return model, train.restore_params(os.path.join(ctx.stage_path(stage), "checkpoints"),
                                     template)
