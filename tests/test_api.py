"""The public API (dgd_jax/__init__.py, dgd_jax/api.py): exactly the documented names, your own
Flax models and numpy arrays, and the refusals of bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dgd_jax
from dgd_jax import privacy
from dgd_jax.runtime.errors import ConfigError, DatasetError

from conftest import make_images
from user_models import UserCNN, UserMLP

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTED = ["Teachers", "epsilon", "images", "labels", "noisy_labels", "plan_queries",
              "privacy", "run", "teacher_votes", "train_dpsgd", "train_teachers"]


def test_the_public_names_are_exactly_the_documented_ones():
  assert sorted(dgd_jax.__all__) == DOCUMENTED
  for name in DOCUMENTED:
    assert name in dgd_jax.__doc__ and getattr(dgd_jax, name) is not None, name
    if callable(getattr(dgd_jax, name)) and name != "Teachers":
      assert getattr(dgd_jax, name).__doc__, f"{name} has no docstring"
  assert dgd_jax.privacy is privacy
  with pytest.raises(AttributeError):
    dgd_jax.not_a_name  # noqa: B018


@pytest.mark.integration
def test_importing_the_package_leaves_the_api_unloaded():
  """The command-line tools import dgd_jax.<module>: the API (and all it imports) loads only
  when a public name is used."""
  code = ("import sys, dgd_jax.privacy; assert 'dgd_jax.api' not in sys.modules; "
          "import dgd_jax; dgd_jax.epsilon; assert 'dgd_jax.api' in sys.modules")
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


@pytest.mark.integration
@pytest.mark.parametrize("model", [UserMLP(), UserCNN()], ids=["mlp", "cnn"])
def test_your_own_model_trains_as_teachers_and_labels_with_an_epsilon(model):
  rng = np.random.default_rng(0)
  x, y = make_images(rng, 400)
  queries, truth = make_images(rng, 100)
  teachers = dgd_jax.train_teachers(model, x, y, 4, num_steps=60, batch_size=32,
                                    learning_rate=3e-3, seed=0)
  assert teachers.num_teachers == 4 and teachers.shards.shape == (4, 100)
  assert len(np.unique(teachers.shards)) == 400  # disjoint shards covering the set
  votes = dgd_jax.teacher_votes(teachers, queries.astype(np.float32))  # float pixels too
  assert votes.shape == (100, 10) and (votes.sum(axis=1) == 4).all()
  assert np.mean(votes.argmax(axis=1) == truth) > 0.5  # chance is 0.1
  labels, release = dgd_jax.noisy_labels(votes, "gnmax", 1.0, seed=0)
  assert labels.shape == (100,) and isinstance(release, privacy.GNMaxQueries)
  assert release.queries == 100 and release.sigma == 1.0
  report = dgd_jax.epsilon([release], delta=1e-5, accountant="rdp")
  expected = privacy.PrivacyLedger([privacy.GNMaxQueries(1.0, 100)]).epsilon(
      1e-5, "rdp", data_dependent=False)
  assert report.epsilon == expected.epsilon and not report.data_dependent


def test_each_mechanism_returns_its_labels_and_record():
  votes = np.tile([[30, 2, 0, 0]], (20, 1))
  for mechanism, kind in (("lnmax", privacy.LNMaxQueries), ("gnmax", privacy.GNMaxQueries),
                          ("gaussian_histogram", privacy.HistogramQueries)):
    labels, release = dgd_jax.noisy_labels(votes, mechanism, 2.0, seed=1)
    assert type(release) is kind and (labels == 0).all(), mechanism
  labels, release = dgd_jax.noisy_labels(votes, "confident_gnmax", 2.0, seed=1, threshold=100,
                                         sigma1=1.0, teachers_changed=2)
  assert (labels == -1).all()  # no query passes a threshold above its votes
  assert isinstance(release, privacy.ConfidentGNMaxQueries) and release.teachers_changed == 2
  assert release.queries == 20  # every query charged, answered or not


def test_plan_queries_fits_the_budget():
  plan = dgd_jax.plan_queries(250, 10, 10.0, delta=1e-5, max_queries=4000)
  assert plan.aggregator in ("lnmax", "gnmax") and 1 <= plan.num_queries <= 4000
  assert plan.epsilon <= 10.0


@pytest.mark.integration
@pytest.mark.parametrize("name, kwargs", [("UserMLP", '{"features": 16}'), ("UserCNN", "")])
def test_your_own_model_trains_as_teachers_from_the_command_line(name, kwargs, npz_file,
                                                                  tmp_path):
  workdir = tmp_path / "w"
  run = subprocess.run(
      [sys.executable, "-m", "dgd_jax.main",
       f"--config=dgd_jax/configs/teachers.py:npz:{npz_file},cpu",
       f"--config.model.module=user_models:{name}", f"--config.model.kwargs={kwargs}",
       "--config.num_teachers=4", "--config.teachers.num_steps=30", f"--workdir={workdir}"],
      cwd=REPO, env={**os.environ, "PYTHONPATH": os.path.join(REPO, "tests"),
                     "JAX_PLATFORMS": "cpu"},
      capture_output=True, text=True, timeout=300, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  teachers = json.loads((workdir / "report.json").read_text())["stages"]["teachers"]
  assert teachers["num_teachers"] == 4 and teachers["plurality_accuracy"] > 0.3  # chance 0.1


def test_a_module_of_your_own_is_refused_where_the_method_needs_the_paper_model(npz_file,
                                                                                 tmp_path):
  from dgd_jax.configs import dgd as dgd_config  # pylint: disable=g-import-not-at-top
  from dgd_jax.configs import teachers as teachers_config  # pylint: disable=g-import-not-at-top
  from dgd_jax.run import pipeline  # pylint: disable=g-import-not-at-top
  config = dgd_config.get_config(f"npz:{npz_file},cpu")
  config.model.module = "flax.linen:Dense"
  with pytest.raises(ConfigError, match="the dgd method reads the paper classifier"):
    pipeline.run(config, str(tmp_path / "d"))
  config = teachers_config.get_config(f"npz:{npz_file},cpu")
  config.model.module = "no_such_package:Model"
  with pytest.raises(ConfigError, match="'package.module:Class', importable here"):
    pipeline.run(config, str(tmp_path / "t"))
  config.model.update(module="numpy:ndarray")
  with pytest.raises(ConfigError, match="is not a flax.linen.Module class"):
    pipeline.run(config, str(tmp_path / "t"))
  assert not (tmp_path / "d").exists() and not (tmp_path / "t").exists()


@pytest.mark.integration
def test_dp_sgd_trains_your_model_within_the_budget():
  rng = np.random.default_rng(0)
  x, y = make_images(rng, 1000)
  x_test, y_test = make_images(rng, 300)
  params, record = dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3.0, epochs=3, batch_size=100,
                                       learning_rate=3e-3)
  assert isinstance(record, privacy.DpsgdSteps)
  assert (record.dataset_size, record.batch_size, record.steps) == (1000, 100, 30)
  assert record.relation == "add_or_remove_one" and record.noise_multiplier > 0
  assert 2.99 <= dgd_jax.epsilon([record], delta=1e-5).epsilon <= 3.0
  logits = UserMLP().apply(params, dgd_jax.images(x_test))
  assert np.mean(np.argmax(logits, -1) == y_test) > 0.5  # chance is 0.1


@pytest.mark.parametrize("call, error, match", [
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x, y, 500), ConfigError, "num_teachers=500"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x * 2.0, y, 4), DatasetError, "0..255"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x, y[:-1], 4), DatasetError, "one integer"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x, y + 10, 4, num_classes=10), DatasetError,
     "0..9"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x[0], y, 4), DatasetError, "shape"),
    (lambda x, y: dgd_jax.noisy_labels(np.ones((3, 10)), "argmax", 1.0, seed=0), ConfigError,
     "mechanism='argmax'"),
    (lambda x, y: dgd_jax.noisy_labels(-np.ones((3, 10)), "gnmax", 1.0, seed=0), DatasetError,
     "counts >= 0"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3, batch_size=500), ConfigError,
     "batch_size=500 with 200 examples"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=0), ConfigError, "epsilon"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y + 10, epsilon=3), DatasetError, "0..9"),
])
def test_bad_input_is_refused_with_the_fix(call, error, match):
  x, y = make_images(np.random.default_rng(0), 200)
  with pytest.raises(error, match=match):
    call(x, y)
