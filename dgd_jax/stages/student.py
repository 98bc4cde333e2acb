"""Student stage (DGD Eq. 1, supervised term): the student phi_s trained on the few
synthetic samples D_s with the teachers' noisy labels. It reads only the synthetic set,
the released labels and (for evaluation) the test set, never the private training data.

Not built yet: the unsupervised term of Eq. 1 on VAE triples (Eq. 4-6, tangent/normal
regularisation and entropy); this stage is the CE-only student of the ablation.
"""
from __future__ import annotations

import os

import jax
import numpy as np

from dgd_jax import train
from dgd_jax.stages import classifier, fit_config
from dgd_jax.stages.generator import SYNTHETIC
from dgd_jax.stages.queries import CONFIG_KEYS as QUERY_KEYS, QUERIES

CONFIG_KEYS = QUERY_KEYS + ("student",)


def run(ctx) -> dict:
  config = ctx.config
  x_syn = np.load(os.path.join(ctx.stage_path("generator"), SYNTHETIC))
  with np.load(os.path.join(ctx.stage_path("queries"), QUERIES)) as q:
    answered = q["answered"]
    x_s, labels = x_syn[q["indices"][answered]], q["labels"][answered]  # (D_s, L_s)
  test = ctx.dataset  # only x_test / y_test are read below
  model = classifier(config, test.num_classes)
  cfg = fit_config(config, "student")
  init_key, train_key = jax.random.split(ctx.key("student"))
  state = train.create_train_state(model, train.optimizer(cfg), init_key, x_s.shape[1:])
  state = train.fit(state, x_s, labels.astype(np.int32), train_key, cfg,
                    ctx.stage.checkpoint_dir, "student", ctx.log)  # CE on (D_s, L_s), Eq. 1
  return {"test_accuracy": train.accuracy(model.apply, state.params, test.x_test, test.y_test),
          "num_labelled": int(answered.sum())}
