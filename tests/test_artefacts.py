"""Reading a finished model (``artefacts.load_*``): the checkpoint's parameters against
``jax.eval_shape``, with no optimizer, real initialisation or memory plan, equal to what the
stage trained."""
from __future__ import annotations

import os

import jax
import numpy as np
import optax
import pytest

from dgd_jax.data import load_private
from dgd_jax.models.classifier import Classifier
from dgd_jax.plan import artefacts
from dgd_jax.plan.context import Config, Context
from dgd_jax.runtime.workdir import Stage, Workdir
from dgd_jax.runtime.files import read_json
from dgd_jax.synthesis import generative
from dgd_jax.training import ensemble
from dgd_jax.training import memory_plan
from dgd_jax.training import placement
from dgd_jax.training import train


def _forbid(monkeypatch, module, name):
  def refuse(*args, **kwargs):
    raise AssertionError(f"reading a finished model called {module.__name__}.{name}")
  monkeypatch.setattr(module, name, refuse)


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_finished_models_are_read_without_building_their_training_state(finished_dgd,
                                                                         monkeypatch):
  _, path, _ = finished_dgd
  wd = Workdir(path, writer=False)
  config = Config(wd.read_config())
  results = {n: read_json(os.path.join(path, n, "result.json"))
             for n in ("baseline", "teachers", "generator")}
  ctx = Context(config, wd, Stage(wd, "audit", {}), lambda: load_private(config),
                results)
  for module, name in ((memory_plan, "estimate"), (memory_plan, "plan"),
                       (ensemble, "init_teachers"),
                       (generative, "create_generator_state"), (train, "create_train_state"),
                       (artefacts, "new_teachers"), (artefacts, "new_generator")):
    _forbid(monkeypatch, module, name)

  params, predict, chunk = artefacts.load_teachers(ctx)
  assert chunk == results["teachers"]["chunk"]
  leaf = jax.tree.leaves(params)[0]
  assert leaf.shape[0] == config.num_teachers
  assert leaf.sharding.spec == jax.sharding.PartitionSpec(placement.AXIS)
  data = ctx.dataset  # the stage's votes on its evaluation images, again from the read params
  x_eval = data.x_test[:results["teachers"]["eval_size"]]
  votes = ensemble.histogram(ensemble.teacher_predictions(predict, params, x_eval),
                             data.num_classes)
  np.testing.assert_array_equal(votes, np.load(os.path.join(path, "teachers",
                                                            "test_votes.npy")))

  model, variables = artefacts.load_generator(ctx)
  assert set(variables) == {"params", "batch_stats"}  # no optimizer state
  g = config.generator
  sample_key = jax.random.split(ctx.key("generator"), 4)[2]  # the stage's draws, again
  x = generative.generate(model.apply, variables, sample_key,
                          int(g.num_synthetic * g.oversample),
                          g.batch_size, g.latent_dim)
  kept = artefacts.load_synthetic(ctx)  # the stage kept num_synthetic of them
  assert len(kept) == g.num_synthetic
  assert {r.tobytes() for r in kept} <= {r.tobytes() for r in x}


@pytest.mark.integration
def test_load_items_reads_only_the_items_it_names(tmp_path):
  """The checkpoint holds Adam's state too; the parameters are read without it."""
  model = Classifier(width=0.25)
  cfg = train.FitConfig(num_steps=2, batch_size=4, learning_rate=1e-3, log_every=1,
                        checkpoint_every=2)
  state = train.create_train_state(model, optax.adam(1e-3), jax.random.key(0), (28, 28, 1))
  x = np.zeros((8, 28, 28, 1), np.float32)
  y = np.zeros((8,), np.int32)
  state = train.fit(state, x, y, jax.random.key(1), cfg, str(tmp_path / "c"), "c")
  abstract = jax.eval_shape(model.init, jax.random.key(0), x[:1])
  read = train.load_items(str(tmp_path / "c"), {"params": abstract})
  assert set(read) == {"params"}
  for a, b in zip(jax.tree.leaves(read["params"]), jax.tree.leaves(state.params)):
    np.testing.assert_array_equal(a, b)
