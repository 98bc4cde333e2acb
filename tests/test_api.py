"""The public API (dgd_jax/__init__.py, dgd_jax/api.py): exactly the documented names, your own
Flax models and numpy arrays, and the refusals of bad input."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgd_jax
from dgd_jax import privacy
from dgd_jax.plan import checks as plan_checks
from dgd_jax.runtime.errors import ConfigError, DatasetError, WorkdirConflictError

from conftest import make_images
from user_models import UserBatchNormCNN, UserCNN, UserMLP, UserStatefulMLP

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTED = ["Answers", "Result", "Run", "Teachers", "dgd", "dpdfd", "dpsgd_noise_for",
              "epsilon", "images", "labels", "load_release", "noise_for", "noisy_labels",
              "open_run", "pate", "plan_queries", "privacy", "read_idx", "run",
              "smooth_sensitivity_epsilon", "teacher_votes", "train_dpsgd", "train_teachers"]


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
def test_public_names_stay_what_they_say_after_any_calls(npz_file, tmp_path):
  """In a fresh interpreter: every public name is the API's object after the API and every
  subpackage are imported (no subpackage shadows a function), ``from dgd_jax import run,
  labels`` gives the functions, and ``run`` runs a method after other API calls; the package
  ships py.typed."""
  code = f"""
import importlib, pkgutil, sys, dgd_jax
for m in pkgutil.walk_packages(dgd_jax.__path__, "dgd_jax."):
  if not m.name.endswith("__main__") and ".cli." not in m.name:
    importlib.import_module(m.name)
from dgd_jax import api, run, labels
for name in dgd_jax.__all__:
  want = dgd_jax.privacy if name == "privacy" else getattr(api, name)
  assert getattr(dgd_jax, name) is want, name
assert callable(run) and callable(labels)
x = dgd_jax.images([[[0, 255]]]); y = dgd_jax.labels([1], 1, 2)
sys.path.insert(0, {os.path.join(REPO, "tests")!r})
import tiny_configs
report = dgd_jax.run(tiny_configs.baseline({npz_file!r}), {str(tmp_path / "w")!r})
assert report["method"] == "baseline", report
"""
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=300)
  assert os.path.exists(os.path.join(REPO, "dgd_jax", "py.typed"))


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
  assert teachers.image_shape == (28, 28, 1)  # what teacher_votes checks queries against
  votes = dgd_jax.teacher_votes(teachers, queries.astype(np.float32))  # float pixels too
  assert votes.shape == (100, 10) and (votes.sum(axis=1) == 4).all()
  assert np.mean(votes.argmax(axis=1) == truth) > 0.5  # chance is 0.1
  answers = dgd_jax.noisy_labels(votes, "gnmax", 1.0, noise_seed=0)
  release = answers.release
  assert answers.labels.shape == (100,) and isinstance(release, privacy.GNMaxQueries)
  assert release.queries == 100 and release.noise_scale == 1.0
  report = dgd_jax.epsilon(answers, delta=1e-5, accountant="rdp")  # one record, or a list
  expected = privacy.PrivacyLedger([privacy.GNMaxQueries(1.0, 100)]).epsilon(
      1e-5, "rdp", data_dependent=False)
  assert report.epsilon == expected.epsilon and not report.data_dependent
  assert dgd_jax.epsilon([release], accountant="rdp").epsilon == report.epsilon


def test_each_mechanism_returns_its_labels_and_record():
  votes = np.tile([[30, 2, 0, 0]], (20, 1))
  for mechanism, kind in (("lnmax", privacy.LNMaxQueries), ("gnmax", privacy.GNMaxQueries),
                          ("gaussian_histogram", privacy.HistogramQueries)):
    a = dgd_jax.noisy_labels(votes, mechanism, 2.0, noise_seed=1)
    assert type(a.release) is kind and (a.labels == 0).all() and a.answered.all(), mechanism
    assert (a.histograms is not None) == (mechanism == "gaussian_histogram"), mechanism
  np.testing.assert_array_equal(a.histograms.argmax(-1), a.labels)  # the labels' histograms
  a = dgd_jax.noisy_labels(votes, "confident_gnmax", 2.0, noise_seed=1, threshold=100,
                           sigma1=1.0, teachers_changed=2)
  assert (a.labels == -1).all() and not a.answered.any()  # no query passes the threshold
  assert isinstance(a.release, privacy.ConfidentGNMaxQueries) and a.release.teachers_changed == 2
  assert a.release.queries == 20  # every query charged, answered or not


def test_pate_accounting_from_the_top_level():
  """Data-dependent epsilons of the answers' votes (diagnostics) and their smooth-sensitivity
  release (a DP value), beside the data-independent guarantee; the planners, one default
  accountant (pld)."""
  votes = np.tile([[240, 5, 5, 0, 0, 0, 0, 0, 0, 0]], (100, 1))
  answers = dgd_jax.noisy_labels(votes, "confident_gnmax", 40.0, threshold=200, sigma1=150)
  guarantee = dgd_jax.epsilon(answers, accountant="rdp")
  dependent = dgd_jax.epsilon(answers, accountant="rdp_data_dependent", data_dependent=True)
  assert dependent.data_dependent and dependent.epsilon < guarantee.epsilon
  ss = dgd_jax.smooth_sensitivity_epsilon(answers, 1e-5, noise_seed=0)
  assert ss.dp_release and ss.source == "plan" and ss.released != ss.epsilon
  assert ss == dgd_jax.smooth_sensitivity_epsilon(answers, 1e-5, noise_seed=0)
  with pytest.raises(ConfigError, match="GNMax or Confident-GNMax"):
    dgd_jax.smooth_sensitivity_epsilon(dgd_jax.noisy_labels(votes, "lnmax", 40.0))
  with pytest.raises(ConfigError, match="Confident-GNMax has two"):
    dgd_jax.noise_for("confident_gnmax", 100, 3.0)
  sigma = dgd_jax.noise_for("gaussian_histogram", 4000, 10.0)
  assert sigma == pytest.approx(44.71, abs=0.01)  # the quick start's (README)
  assert dgd_jax.epsilon(privacy.HistogramQueries(sigma, 4000)).epsilon <= 10.0
  multiplier = dgd_jax.dpsgd_noise_for(60000, 2048, 10, 3.0)
  assert dgd_jax.epsilon(privacy.DpsgdSteps(multiplier, 2048, 60000, 293)).epsilon <= 3.0
  for f in (dgd_jax.epsilon, dgd_jax.noise_for, dgd_jax.plan_queries, dgd_jax.train_dpsgd,
            dgd_jax.dpsgd_noise_for):
    assert inspect.signature(f).parameters["accountant"].default == "pld", f


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


def test_your_own_model_reads_as_the_paper_classifier_does():
  """WithFeatures: the module's own parameter tree and logits; its features are the input of
  its last Dense (Eq. 2's and Eq. 6's f(.)), and DeepInversion sees its nn.Conv outputs."""
  import jax  # pylint: disable=g-import-not-at-top
  from dgd_jax.models import WithFeatures  # pylint: disable=g-import-not-at-top
  from dgd_jax.synthesis import generative  # pylint: disable=g-import-not-at-top
  x = dgd_jax.images(make_images(np.random.default_rng(0), 8)[0])
  for module, conv_layers in ((UserMLP(num_classes=10, features=16), 0), (UserCNN(), 1)):
    own = module.init(jax.random.key(0), x)
    wrapped = WithFeatures(module)
    assert (jax.tree.map(np.shape, wrapped.init(jax.random.key(0), x))
            == jax.tree.map(np.shape, own))
    logits, features = wrapped.apply(own, x, with_features=True)
    np.testing.assert_allclose(logits, module.apply(own, x), rtol=1e-6)
    head = own["params"]["Dense_1" if isinstance(module, UserMLP) else "Dense_0"]
    np.testing.assert_allclose(features @ head["kernel"] + head["bias"], logits, rtol=1e-5,
                               atol=1e-5)
    if isinstance(module, UserMLP):  # the hidden layer's activations
      hidden = own["params"]["Dense_0"]
      np.testing.assert_allclose(
          features, np.maximum(x.reshape(8, -1) @ hidden["kernel"] + hidden["bias"], 0),
          rtol=1e-5, atol=1e-5)
    stats = generative.baseline_forward(wrapped.apply, own, x)[2]
    assert len(stats) == conv_layers
    assert wrapped.num_classes == 10
  with pytest.raises(ValueError, match=r"keeps variables besides its parameters "
                     r"\(\['counters'\]"):
    WithFeatures(UserStatefulMLP()).init(jax.random.key(0), x)


def test_batchnorm_runs_as_a_group_norm_and_dropout_only_in_training():
  """A module with BatchNorm and Dropout behind the adapter: parameters only (BatchNorm's scale
  and bias, no running statistics); each example's logits its own (no batch statistics, as
  DP-SGD needs); the same logits in evaluation, dropout masks in training
  (``train.training_apply``)."""
  from dgd_jax.models import WithFeatures  # pylint: disable=g-import-not-at-top
  from dgd_jax.training import train  # pylint: disable=g-import-not-at-top
  x = dgd_jax.images(make_images(np.random.default_rng(0), 8)[0])
  net = WithFeatures(UserBatchNormCNN())
  variables = net.init(jax.random.key(0), x)
  assert set(variables) == {"params"} and {"scale", "bias"} == set(
      variables["params"]["BatchNorm_0"])
  batch = net.apply(variables, x)
  np.testing.assert_allclose(net.apply(variables, x[:1]), batch[:1], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(net.apply(variables, x), batch)  # evaluation: deterministic
  a = train.training_apply(net.apply, variables, x, jax.random.key(1))
  b = train.training_apply(net.apply, variables, x, jax.random.key(2))
  assert not np.allclose(a, b) and not np.allclose(a, batch)  # dropout, per step key
  # DP-SGD's per-example loss: dropout from each example's own key
  from dgd_jax.training import dpsgd  # pylint: disable=g-import-not-at-top
  grad = jax.jit(jax.grad(dpsgd._loss(net)))
  y = jnp.array([3])
  g1, g2 = (grad(variables, x[:1], y, jax.random.key(k)) for k in (4, 5))
  assert not np.allclose(jax.tree.leaves(g1)[0], jax.tree.leaves(g2)[0])
  # the paper classifier takes train too, and ignores it
  from dgd_jax.models.classifier import Classifier  # pylint: disable=g-import-not-at-top
  paper = Classifier(num_classes=10, width=0.25)
  p = paper.init(jax.random.key(0), x)
  np.testing.assert_array_equal(train.training_apply(paper.apply, p, x, jax.random.key(3)),
                                paper.apply(p, x))


@pytest.mark.integration
def test_a_batchnorm_dropout_module_trains_as_teachers_and_under_dp_sgd():
  rng = np.random.default_rng(0)
  x, y = make_images(rng, 400)
  queries, truth = make_images(rng, 100)
  teachers = dgd_jax.train_teachers(UserBatchNormCNN(), x, y, 4, num_steps=60,
                                    learning_rate=3e-3)
  votes = dgd_jax.teacher_votes(teachers, queries)
  assert np.mean(votes.argmax(axis=1) == truth) > 0.5  # chance is 0.1
  result = dgd_jax.train_dpsgd(UserBatchNormCNN(), x, y, queries, truth, epsilon=3.0,
                               epochs=3, batch_size=100, learning_rate=1e-2)
  assert result.test_accuracy > 0.3 and result.epsilon <= 3.0


@pytest.mark.integration
def test_your_own_model_is_every_classifier_of_dgd_and_pate(npz_file, tmp_path):
  """config.model.module in DGD (baseline, DeepInversion on its convolutions, teachers, the
  student's features in Eq. 6) and in PATE (teachers, student); the teachers' and student's
  checkpoints hold the module's parameters."""
  import tiny_configs  # pylint: disable=g-import-not-at-top
  from dgd_jax.runner import methods, pipeline  # pylint: disable=g-import-not-at-top
  from dgd_jax.stages import student as student_stage  # pylint: disable=g-import-not-at-top
  config = tiny_configs.dgd_inversion(str(npz_file))
  config.num_teachers, config.teachers.num_steps = 4, 20
  config.queries.update(plan="fixed", aggregator="lnmax", noise_scale=40.0, num_queries=50)
  config.student.update(num_steps=30, batch_size=16, w_normal=0.1, w_tangent=0.1)
  config.model.module = "user_models:UserCNN"
  assert student_stage.uses_vae(config.student)  # Eq. 6 reads the module's features
  compiled = pipeline.compile_programs(config)  # every program, within its memory plan
  assert list(compiled) == list(methods.plan_stages(plan_checks.run_config(config)))
  report = pipeline.run(config, str(tmp_path / "dgd"))
  assert report["stages"]["baseline"]["test_accuracy"] > 0.3  # chance 0.1
  assert report["stages"]["generator"]["num_synthetic"] == 96
  assert 0 <= report["test_accuracy"] <= 1 and report["epsilon"] > 0
  config = tiny_configs.pate(str(npz_file))
  config.model.update(module="user_models:UserMLP", kwargs='{"features": 16}')
  report = pipeline.run(config, str(tmp_path / "pate"))
  assert 0 <= report["test_accuracy"] <= 1 and report["epsilon"] > 0
  config_json = json.loads((tmp_path / "pate" / "config.json").read_text())
  assert config_json["model"]["module"] == "user_models:UserMLP"


def test_a_module_of_your_own_is_refused_where_it_cannot_serve(npz_file, tmp_path):
  import tiny_configs  # pylint: disable=g-import-not-at-top
  from dgd_jax.configs import dpsgd as dpsgd_config  # pylint: disable=g-import-not-at-top
  from dgd_jax.configs import teachers as teachers_config  # pylint: disable=g-import-not-at-top
  from dgd_jax.runner import pipeline  # pylint: disable=g-import-not-at-top
  config = dpsgd_config.get_config(f"npz:{npz_file},cpu")
  config.model.module = "user_models:UserMLP"
  with pytest.raises(ConfigError, match="the dpsgd method trains its own models"):
    pipeline.run(config, str(tmp_path / "d"))
  config = tiny_configs.dgd(str(npz_file))
  config.model.module = "user_models:UserMLP"
  config.queries.refits = 1
  with pytest.raises(ConfigError, match="refits the paper classifier's head"):
    pipeline.run(config, str(tmp_path / "r"))
  config = teachers_config.get_config(f"npz:{npz_file},cpu")
  config.model.module = "no_such_package:Model"
  with pytest.raises(ConfigError, match="'package.module:Class', importable here"):
    pipeline.run(config, str(tmp_path / "t"))
  config.model.update(module="numpy:ndarray")
  with pytest.raises(ConfigError, match="is not a flax.linen.Module class"):
    pipeline.run(config, str(tmp_path / "t"))
  for name in "drt":
    assert not (tmp_path / name).exists()


@pytest.mark.integration
def test_statistics_matching_refuses_a_model_without_convolutions(npz_file, tmp_path):
  """DeepInversion's statistics need an nn.Conv; the baseline trained before it is kept."""
  import tiny_configs  # pylint: disable=g-import-not-at-top
  from dgd_jax.runner import pipeline  # pylint: disable=g-import-not-at-top
  config = tiny_configs.dgd_inversion(str(npz_file))
  config.model.module = "user_models:UserMLP"
  assert config.generator.w_stats > 0
  with pytest.raises(ConfigError, match="has no nn.Conv layer: set --config.generator.w_stats=0"):
    pipeline.run(config, str(tmp_path / "w"))
  assert json.loads((tmp_path / "w" / "baseline" / "result.json").read_text())["test_accuracy"]


@pytest.mark.integration
def test_dp_sgd_trains_your_model_within_the_budget():
  rng = np.random.default_rng(0)
  x, y = make_images(rng, 1000)
  x_test, y_test = make_images(rng, 300)
  # secret noise, so each run draws its own: a step size that learns under any draw
  result = dgd_jax.train_dpsgd(UserMLP(), x, y, x_test, y_test, epsilon=3.0, epochs=3,
                               batch_size=100, learning_rate=1e-2)
  record = result.report["release"]
  assert isinstance(record, privacy.DpsgdSteps)
  assert (record.dataset_size, record.batch_size, record.steps) == (1000, 100, 30)
  assert record.neighbours == "add_or_remove_one" and record.noise_multiplier > 0
  assert 2.99 <= dgd_jax.epsilon([record], delta=1e-5).epsilon <= 3.0
  assert result.epsilon == pytest.approx(dgd_jax.epsilon(record).epsilon)
  logits = UserMLP().apply(result.params, dgd_jax.images(x_test))
  assert np.mean(np.argmax(logits, -1) == y_test) > 0.5  # chance is 0.1
  assert result.test_accuracy == pytest.approx(float(np.mean(np.argmax(logits, -1) == y_test)))
  assert [m["step"] for m in result.report["metrics"]] == list(range(1, 31))  # every step
  assert {"loss", "clipped_fraction"} <= set(result.report["metrics"][0])


@pytest.mark.integration
def test_dp_sgd_takes_your_optimiser_and_loss_and_resumes_in_a_workdir(tmp_path):
  """The user's optax optimiser and loss train the model (the same draws as the default
  path's up to them: a seeded run is reproducible); a workdir keeps the noise key and the
  checkpoints, so a second call resumes to the same parameters; other arrays are refused."""
  import optax  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x, y = make_images(rng, 400)
  smooth = lambda logits, labels: optax.softmax_cross_entropy(
      logits, optax.smooth_labels(jax.nn.one_hot(labels, 10), 0.1)).mean()
  kw = dict(epsilon=3.0, epochs=2, batch_size=100, optimizer=optax.sgd(0.1), loss=smooth)
  first = dgd_jax.train_dpsgd(UserMLP(), x, y, workdir=str(tmp_path / "w"), **kw)
  assert (tmp_path / "w" / "noise.key").exists() and first.report["noise"]["private_release"]
  again = dgd_jax.train_dpsgd(UserMLP(), x, y, workdir=str(tmp_path / "w"), **kw)
  for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(again.params)):
    np.testing.assert_array_equal(a, b)  # resumed from its last checkpoint: nothing redrawn
  plain = dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3.0, epochs=2, batch_size=100,
                              noise_seed=1)
  assert not plain.report["noise"]["private_release"]
  assert not np.allclose(jax.tree.leaves(plain.params)[0], jax.tree.leaves(first.params)[0])
  with pytest.raises(WorkdirConflictError, match="made from other data"):
    dgd_jax.train_dpsgd(UserMLP(), x[::-1], y[::-1], workdir=str(tmp_path / "w"), **kw)


@pytest.mark.integration
def test_dgd_and_pate_on_arrays_return_the_released_student(tmp_path):
  """DGD and PATE from arrays and a module object: the Result's model and parameters give
  the reported test accuracy; DGD's workdir resumes (every stage reused)."""
  rng = np.random.default_rng(0)
  x, y = make_images(rng, 512)
  x_test, y_test = make_images(rng, 128)
  tiny = {"baseline.num_steps": 40, "baseline.batch_size": 32, "num_teachers": 4,
          "teachers.num_steps": 20, "generator.num_synthetic": 96, "generator.oversample": 1.0,
          "generator.inversion_batch_size": 32, "generator.inversion_steps": 30,
          "generator.synthetic_student_steps": 20, "queries.plan": "fixed",
          "queries.aggregator": "gaussian_histogram", "queries.noise_scale": 40.0,
          "queries.num_queries": 50, "student.num_steps": 30, "student.batch_size": 16,
          "student.ensemble": 1}
  result = dgd_jax.dgd(UserBatchNormCNN(), x, y, x_test, y_test, epsilon=10.0,
                       overrides=tiny, workdir=str(tmp_path / "d"))  # baseline, teachers, student
  assert isinstance(result.model.module, UserBatchNormCNN) and result.epsilon == pytest.approx(
      result.report["epsilon"])
  logits = result.model.apply(result.params, dgd_jax.images(x_test))
  assert float(np.mean(np.argmax(logits, -1) == y_test)) == pytest.approx(result.test_accuracy)
  again = dgd_jax.dgd(UserBatchNormCNN(), x, y, x_test, y_test, epsilon=10.0,
                      overrides=tiny, workdir=str(tmp_path / "d"))
  assert again.report["stage_seconds"] == result.report["stage_seconds"]  # all reused
  with pytest.raises(WorkdirConflictError, match="made from other arrays"):
    dgd_jax.dgd(UserBatchNormCNN(), x[::-1], y[::-1], x_test, y_test, epsilon=10.0,
                overrides=tiny, workdir=str(tmp_path / "d"))
  pate = dgd_jax.pate(UserBatchNormCNN(), x, y, x_test, y_test, epsilon=3.0, overrides={
      "num_teachers": 4, "teachers.num_steps": 20, "queries.num_queries": 40,
      "student.num_steps": 20, "student.batch_size": 16}, workdir=str(tmp_path / "p"))
  assert pate.report["method"] == "pate"
  held_out = slice(-pate.report["stages"]["student"]["num_evaluated"], None)  # not pooled
  logits = pate.model.apply(pate.params, dgd_jax.images(x_test[held_out]))
  assert float(np.mean(np.argmax(logits, -1) == y_test[held_out])) == pytest.approx(
      pate.test_accuracy)
  # the released model from release/ alone, on the user's module (BatchNorm as a group norm)
  for given in (UserBatchNormCNN(), None):  # None: rebuilt from report.json's model.module
    module, variables, prepare = dgd_jax.load_release(str(tmp_path / "p" / "run" / "release"),
                                                      given)
    np.testing.assert_allclose(module.apply(variables, prepare(x_test[held_out])), logits,
                               rtol=1e-5, atol=1e-5)
  with open(tmp_path / "p" / "run" / "release" / "report.json") as f:
    entry = json.load(f)["model"]
  assert "WithFeatures" in entry["module_note"] and "x / 127.5 - 1" in entry["inputs"]
  dpdfd = dgd_jax.dpdfd(UserCNN(), x, y, x_test, y_test, epsilon=10.0, preset="cpu,direct",
                        overrides={"dpdfd.num_steps": 10, "dpdfd.batch_size": 16,
                                   "dpdfd.replay_epochs": 0, "dpdfd.self_training": 0})
  assert dpdfd.workdir is None  # a temporary workdir, removed
  logits = dpdfd.model.apply(dpdfd.params, dgd_jax.images(x_test))
  assert float(np.mean(np.argmax(logits, -1) == y_test)) == pytest.approx(dpdfd.test_accuracy)
  assert dpdfd.report["privacy"]["unit"] == "label"  # direct training: label DP only


@pytest.mark.parametrize("call, error, match", [
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x, y, 500), ConfigError, "num_teachers=500"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x * 2.0, y, 4), DatasetError, "0..255"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x, y[:-1], 4), DatasetError, "one integer"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x, y + 10, 4, num_classes=10), DatasetError,
     "0..9"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x[0], y, 4), DatasetError, "shape"),
    (lambda x, y: dgd_jax.noisy_labels(np.ones((3, 10)), "argmax", 1.0, noise_seed=0), ConfigError,
     "mechanism='argmax'"),
    (lambda x, y: dgd_jax.noisy_labels(-np.ones((3, 10)), "gnmax", 1.0, noise_seed=0), DatasetError,
     "counts >= 0"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3, batch_size=500), ConfigError,
     "batch_size=500 with 200 examples"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=0), ConfigError, "epsilon"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y + 10, epsilon=3), DatasetError, "0..9"),
    # issue 69: silent misuse that used to give a wrong number
    (lambda x, y: dgd_jax.noisy_labels(np.full((3, 10), 0.1), "gnmax", 1.0), DatasetError,
     "whole counts"),  # vote shares
    (lambda x, y: dgd_jax.noisy_labels(np.array([[3, 1], [2, 1]]), "gnmax", 1.0), DatasetError,
     "same n >= 1 teachers"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(num_classes=5), x, y, 4), DatasetError,
     "0..4"),  # 5 logits, labels 0..9
    (lambda x, y: dgd_jax.train_teachers(UserMLP(num_classes=5), x, y, 4, num_classes=10),
     ConfigError, "model has 5 logits"),
    (lambda x, y: dgd_jax.train_teachers(UserMLP(), x / 255.0, y, 4), DatasetError,
     r"scaled to \[0, 1\]"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x / 255.0, y, epsilon=3), DatasetError,
     r"scaled to \[0, 1\]"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3, delta=0.01), ConfigError,
     "1/N = 1/200"),
    # issue 79: a delta of 1/N or more wherever N is known, and budgets that are none
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3, delta=0.01), ConfigError,
     r"or, knowingly, allow_large_delta=True"),
    (lambda x, y: dgd_jax.dpsgd_noise_for(100, 10, 1.0, 1.0, delta=0.05), ConfigError,
     r"1/N = 1/100.*allow_large_delta=True"),
    (lambda x, y: dgd_jax.dgd(UserMLP(), x, y, x, y, delta=0.01), ConfigError,
     r"1/N = 1/200.*allow_large_delta=True"),
    (lambda x, y: dgd_jax.pate(UserMLP(), x, y, x, y, overrides={"privacy.delta": 0.01}),
     ConfigError, r"1/N = 1/200"),
    (lambda x, y: dgd_jax.dpdfd(UserMLP(), x, y, x, y, epsilon=float("nan")), ConfigError,
     r"epsilon=nan is not a privacy budget: it must be a finite number > 0"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=float("nan")), ConfigError,
     r"epsilon=nan is not a privacy budget"),
    (lambda x, y: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=float("inf")), ConfigError,
     r"epsilon=inf is not a privacy budget"),
    (lambda x, y: dgd_jax.dpsgd_noise_for(100, 10, 1.0, -1.0), ConfigError,
     r"epsilon=-1.0 is not a privacy budget"),
    (lambda x, y: dgd_jax.noise_for("gnmax", 10, 0.0), ConfigError,
     r"epsilon=0.0 is not a privacy budget"),
    (lambda x, y: dgd_jax.noise_for("lnmax", 10, float("nan")), ConfigError,
     r"epsilon=nan is not a privacy budget"),
    (lambda x, y: dgd_jax.plan_queries(50, 10, float("inf")), ConfigError,
     r"target_epsilon=inf is not a privacy budget"),
    (lambda x, y: dgd_jax.plan_queries(50, 10, -1.0), ConfigError,
     r"target_epsilon=-1.0 is not a privacy budget"),
])
def test_bad_input_is_refused_with_the_fix(call, error, match):
  x, y = make_images(np.random.default_rng(0), 200)
  with pytest.raises(error, match=match):
    call(x, y)


@pytest.mark.integration
def test_a_large_delta_is_accepted_only_when_asked_and_then_warned(tmp_path):
  """The keyword accepts a delta of 1/N or more, with a warning; a method's refusal comes
  before anything is written to its workdir."""
  with pytest.warns(UserWarning, match=r"1/N = 1/100 \(allowed by allow_large_delta=True\)"):
    assert dgd_jax.dpsgd_noise_for(100, 10, 1.0, 1.0, delta=0.05, allow_large_delta=True) > 0
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    dgd_jax.dpsgd_noise_for(100, 10, 1.0, 1.0, delta=0.005)  # below 1/N: no warning
  x, y = make_images(np.random.default_rng(0), 64)
  with pytest.raises(ConfigError, match="allow_large_delta=True"):
    dgd_jax.dgd(UserMLP(), x, y, x, y, delta=0.05, workdir=str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def test_answers_print_no_votes_and_seeded_epsilons_say_they_are_not_private():
  """An Answers prints public quantities only (never the votes or another array); every
  epsilon of seeded answers (the report, its repr, the smooth-sensitivity release) says it is
  not a private release, and a secret draw's does not."""
  votes = np.tile([[237, 7, 6, 0, 0, 0, 0, 0, 0, 0]], (100, 1))
  for mechanism, extra in (("gnmax", {}), ("gaussian_histogram", {}),
                           ("confident_gnmax", dict(threshold=200, sigma1=150))):
    for seed in (None, 3):
      answers = dgd_jax.noisy_labels(votes, mechanism, 40.0, noise_seed=seed, **extra)
      text = repr(answers)
      assert str(answers) == text and "237" not in text and "array" not in text, text
      assert f"mechanism={mechanism!r}" in text and "noise_scale=40" in text
      assert "queries=100" in text and f"answered={int(answers.answered.sum())}" in text
      assert ("noise_seed=3, private_release=False" in text) == (seed is not None), text
      report = dgd_jax.epsilon(answers)
      assert report.private_release == (seed is None)
      assert ("NOT A PRIVATE RELEASE" in repr(report)) == (seed is not None)
      if seed is not None:
        assert report.note.startswith("NOT A PRIVATE RELEASE: the noise follows from "
                                      "noise_seed=3.")
        assert not report.to_json()["private_release"]
  secret = dgd_jax.noisy_labels(votes, "gnmax", 40.0)
  mixed = dgd_jax.epsilon([secret, dgd_jax.noisy_labels(votes, "gnmax", 40.0, noise_seed=5)])
  assert not mixed.private_release and "noise_seed=5" in mixed.note
  ss = dgd_jax.smooth_sensitivity_epsilon(secret)
  assert type(ss) is privacy.smooth_sensitivity.SmoothSensitivityRelease  # a secret draw
  for seeded in (dgd_jax.smooth_sensitivity_epsilon(secret, noise_seed=0),
                 dgd_jax.smooth_sensitivity_epsilon(answers)):
    assert isinstance(seeded, privacy.smooth_sensitivity.SmoothSensitivityRelease)
    assert not seeded.private_release and seeded.note.startswith("NOT A PRIVATE RELEASE")
    assert "NOT A PRIVATE RELEASE" in repr(seeded) and not seeded.to_json()["private_release"]


def _stopped_dpsgd(monkeypatch):
  """train_dpsgd with its training replaced by one that records the noise key and batch
  generator it was given, and stops."""
  from dgd_jax.training import dpsgd  # pylint: disable=g-import-not-at-top
  drawn = []

  class Stop(Exception):
    pass

  def stop(state, model, x, y, record, microbatch_size, fit, noise_key, batch_rng, *rest):
    drawn.append((np.asarray(jax.random.key_data(noise_key)),
                  batch_rng.integers(1 << 62, size=4)))
    raise Stop

  monkeypatch.setattr(dpsgd, "train_private", stop)
  return drawn, Stop


@pytest.mark.integration
def test_dp_sgd_draws_its_noise_for_everything_that_makes_its_run(monkeypatch, tmp_path):
  """The noise key and the batch generator are the NoiseSource's for a purpose that names the
  stage slice's fingerprint (as a run's stages bind theirs): another learning rate, optimiser,
  loss or model under the same noise_seed draws other noise and batches; the same call the
  same."""
  import optax  # pylint: disable=g-import-not-at-top
  from dgd_jax.privacy.noise import NoiseSource  # pylint: disable=g-import-not-at-top
  drawn, stop = _stopped_dpsgd(monkeypatch)
  x, y = make_images(np.random.default_rng(0), 200)
  base = dict(epsilon=3.0, epochs=1, batch_size=50, noise_seed=0)
  calls = {"base": {}, "again": {}, "learning_rate": dict(learning_rate=1e-2),
           "optimizer": dict(optimizer=optax.sgd(0.1)),
           "optimizer_rate": dict(optimizer=optax.sgd(0.2)),
           "loss": dict(loss=lambda logits, labels: jnp.mean(logits ** 2)),
           "model": {"model": UserMLP(features=16)}, "microbatch": dict(microbatch_size=16),
           "accountant": dict(accountant="rdp"), "seed": dict(seed=1)}
  keys, batches = {}, {}
  for name, kw in calls.items():
    folder = tmp_path / name
    kw = {**base, **kw}
    with pytest.raises(stop):
      dgd_jax.train_dpsgd(kw.pop("model", UserMLP()), x, y, workdir=str(folder), **kw)
    meta = json.loads((folder / "dpsgd" / "stage.json").read_text())
    source = NoiseSource.reproducible(0)
    expected = source.key(f"dpsgd/{meta['hash']}/noise")
    np.testing.assert_array_equal(drawn[-1][0], jax.random.key_data(expected))
    np.testing.assert_array_equal(
        drawn[-1][1], source.rng(f"dpsgd/{meta['hash']}/batches").integers(1 << 62, size=4))
    keys[name], batches[name] = drawn[-1][0].tobytes(), drawn[-1][1].tobytes()
  assert keys["again"] == keys["base"] and batches["again"] == batches["base"]
  others = [n for n in calls if n != "again"]
  assert len({keys[n] for n in others}) == len(others)  # every setting: its own noise
  assert len({batches[n] for n in others}) == len(others)  # and its own batches
  meta = json.loads((tmp_path / "optimizer" / "dpsgd" / "stage.json").read_text())["config"]
  assert meta["optimizer"].startswith("optax identity+scale ") and meta["learning_rate"] is None
  assert meta["model"].endswith(":UserMLP") and meta["loss"] == "cross_entropy (default)"


@pytest.mark.integration
def test_a_dp_sgd_workdir_refuses_another_run_and_resumes_the_same(tmp_path):
  """A second call on the same workdir with another learning rate, optimiser, loss or model
  is refused with the pipeline's conflict message (never the first call's parameters); the
  same call resumes to the same parameters; the optimiser's description is the same in
  another process (a killed run resumes there)."""
  import optax  # pylint: disable=g-import-not-at-top
  x, y = make_images(np.random.default_rng(0), 200)
  wd = str(tmp_path / "w")
  kw = dict(epsilon=3.0, epochs=1, batch_size=50, optimizer=optax.sgd(0.1))
  first = dgd_jax.train_dpsgd(UserMLP(), x, y, workdir=wd, **kw)
  again = dgd_jax.train_dpsgd(UserMLP(), x, y, workdir=wd, **kw)
  for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(again.params)):
    np.testing.assert_array_equal(a, b)
  for change, field in ((dict(optimizer=None, learning_rate=1e-2), "learning_rate"),
                        (dict(optimizer=optax.sgd(0.2)), "optimizer"),
                        (dict(loss=lambda logits, labels: jnp.mean(logits ** 2)), "loss"),
                        (dict(model=UserMLP(features=16)), "model_fingerprint")):
    changed = {**kw, **change}
    with pytest.raises(WorkdirConflictError,
                       match=rf"holds 'dpsgd' artefacts of another config:\n  {field}: "):
      dgd_jax.train_dpsgd(changed.pop("model", UserMLP()), x, y, workdir=wd, **changed)
  code = ("import optax; from dgd_jax import api; "
          "print(api._named(optax.sgd(0.1)), api._named(optax.softmax_cross_entropy))")
  other = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
  from dgd_jax import api  # pylint: disable=g-import-not-at-top
  assert other == (api._named(optax.sgd(0.1)) + " "
                   + api._named(optax.softmax_cross_entropy)).split()


def test_a_noise_that_drowns_the_ensemble_is_warned_with_the_expected_accuracy():
  """5 teachers at the example's default sigma 20: the labels are near chance even where 4 of
  5 agree; the warning says so (from public quantities) and names the planner."""
  votes = np.zeros((4, 10), int)
  votes[:, 0] = 5
  with pytest.warns(UserWarning, match=r"probability 0\.\d\d .*plan_queries\(5, 10"):
    dgd_jax.noisy_labels(votes, "gnmax", 20.0)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    dgd_jax.noisy_labels(votes * 50, "gnmax", 20.0)  # 250 teachers: no warning


def _teachers_on(image_shape):
  """A Teachers record of 2 UserMLP teachers trained on ``image_shape`` whose predict must not
  run: the shape check refuses the queries before any vote is taken."""
  def predict(params, x):
    raise AssertionError("the teachers voted on queries they were not trained for")
  return dgd_jax.Teachers(UserMLP(), None, 10, np.arange(4).reshape(2, 2), 1, predict,
                          image_shape)


def _seeded_answers():
  return dgd_jax.noisy_labels(np.tile([[240, 10, 0]], (5, 1)), "gnmax", 40.0, noise_seed=0)


def _per_example_loss(logits, labels):  # shape [1]: the mean over the batch axis left out
  import optax  # pylint: disable=g-import-not-at-top
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


# Issue 80: (id, call(x, y, workdir), error, message, what the workdir is before the call:
# None (absent, and absent after: nothing written), "file" (a file), "run_file" (a folder
# whose run/ is a file)). Every refusal is one line naming the argument and the fix.
BAD_API_INPUT = [
    ("teachers_no_steps", lambda x, y, wd: dgd_jax.train_teachers(UserMLP(), x, y, 4,
                                                                   num_steps=0),
     ConfigError, r"num_steps=0 must be a whole number >= 1: train each teacher", None),
    ("teachers_negative_steps", lambda x, y, wd: dgd_jax.train_teachers(UserMLP(), x, y, 4,
                                                                         num_steps=-5),
     ConfigError, r"num_steps=-5 must be a whole number >= 1", None),
    ("teachers_negative_rate", lambda x, y, wd: dgd_jax.train_teachers(
        UserMLP(), x, y, 4, learning_rate=-1e-3),
     ConfigError, r"learning_rate=-0.001 must be a finite number > 0: .*learning_rate=1e-3",
     None),
    ("teachers_zero_rate", lambda x, y, wd: dgd_jax.train_teachers(UserMLP(), x, y, 4,
                                                                    learning_rate=0.0),
     ConfigError, r"learning_rate=0.0 must be a finite number > 0", None),
    ("teachers_no_batch", lambda x, y, wd: dgd_jax.train_teachers(UserMLP(), x, y, 4,
                                                                   batch_size=0),
     ConfigError, r"batch_size=0 must be a whole number >= 1: draw at least one", None),
    ("noise_for_no_epochs", lambda x, y, wd: dgd_jax.dpsgd_noise_for(1000, 100, 0, 3.0),
     ConfigError, r"epochs=0 must be a finite number > 0: .*epochs=20", None),
    ("noise_for_negative_epochs", lambda x, y, wd: dgd_jax.dpsgd_noise_for(1000, 100, -2.0, 3.0),
     ConfigError, r"epochs=-2.0 must be a finite number > 0", None),
    ("noise_for_nan_epochs", lambda x, y, wd: dgd_jax.dpsgd_noise_for(1000, 100, float("nan"),
                                                                      3.0),
     ConfigError, r"epochs=nan must be a finite number > 0", None),
    ("dpsgd_no_epochs", lambda x, y, wd: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3,
                                                             epochs=0, workdir=wd),
     ConfigError, r"epochs=0 must be a finite number > 0", None),
    ("dpsgd_x_test_alone", lambda x, y, wd: dgd_jax.train_dpsgd(UserMLP(), x, y, x_test=x,
                                                                epsilon=3, workdir=wd),
     ConfigError, r"x_test was given without y_test: pass both x_test and y_test", None),
    ("dpsgd_y_test_alone", lambda x, y, wd: dgd_jax.train_dpsgd(UserMLP(), x, y, y_test=y,
                                                                epsilon=3, workdir=wd),
     ConfigError, r"y_test was given without x_test", None),
    ("dpsgd_bad_y_test", lambda x, y, wd: dgd_jax.train_dpsgd(UserMLP(), x, y, x, y[:-1],
                                                              epsilon=3, workdir=wd),
     DatasetError, r"y_test has shape \(199,\)", None),  # the split read before training too
    ("dpsgd_optimizer_name", lambda x, y, wd: dgd_jax.train_dpsgd(
        UserMLP(), x, y, epsilon=3, optimizer="adam", workdir=wd),
     ConfigError, r"optimizer='adam' is not an optax GradientTransformation: .*"
     r"optimizer=optax\.adam\(1e-3\)", None),
    ("dpsgd_loss_per_batch", lambda x, y, wd: dgd_jax.train_dpsgd(
        UserMLP(), x, y, epsilon=3, loss=_per_example_loss, workdir=wd),
     ConfigError, r"returns .*\(1,\).*loss must return a scalar per example", None),
    ("dpsgd_loss_signature", lambda x, y, wd: dgd_jax.train_dpsgd(
        UserMLP(), x, y, epsilon=3, loss=lambda logits: logits.sum(), workdir=wd),
     ConfigError, r"loss failed on one example's logits .*return a scalar per example", None),
    ("votes_image_size", lambda x, y, wd: dgd_jax.teacher_votes(_teachers_on((28, 28, 1)),
                                                                x[:, :14, :14]),
     ConfigError, r"shape \(14, 14, 1\) .* trained on \(28, 28, 1\): resize", None),
    ("votes_channels", lambda x, y, wd: dgd_jax.teacher_votes(
        _teachers_on((28, 28, 1)), np.repeat(x[..., None], 3, axis=-1)),
     ConfigError, r"shape \(28, 28, 3\) .* trained on \(28, 28, 1\)", None),
    ("dgd_unknown_block", lambda x, y, wd: dgd_jax.dgd(
        UserMLP(), x, y, x, y, overrides={"teacher.num_steps": 5}, workdir=wd),
     ConfigError, r"overrides key 'teacher.num_steps' is no field of the dgd preset: did you "
     r"mean 'teachers.num_steps'", None),
    ("pate_unknown_field", lambda x, y, wd: dgd_jax.pate(
        UserMLP(), x, y, x, y, overrides={"teachers.num_stepz": 5}, workdir=wd),
     ConfigError, r"'teachers.num_stepz' is no field of the pate preset: did you mean "
     r"'teachers.num_steps'", None),
    ("dpdfd_unknown_block", lambda x, y, wd: dgd_jax.dpdfd(
        UserMLP(), x, y, x, y, overrides={"zzz": 1}, workdir=wd),
     ConfigError, r"'zzz' is no field of the dpdfd preset: the preset's blocks are .*dpdfd",
     None),
    ("epsilon_without_switch", lambda x, y, wd: dgd_jax.epsilon(
        _seeded_answers(), accountant="rdp_data_dependent"),
     ConfigError, r"accountant='rdp_data_dependent' is data-dependent: pass "
     r"data_dependent=True", None),
    ("dpsgd_workdir_file", lambda x, y, wd: dgd_jax.train_dpsgd(UserMLP(), x, y, epsilon=3,
                                                                workdir=wd),
     WorkdirConflictError, r"workdir=.* is a file", "file"),
    ("dgd_workdir_file", lambda x, y, wd: dgd_jax.dgd(UserMLP(), x, y, x, y, workdir=wd),
     WorkdirConflictError, r"workdir=.* is a file, not a directory", "file"),
    ("pate_run_file", lambda x, y, wd: dgd_jax.pate(UserMLP(), x, y, x, y, workdir=wd,
                                                    overrides={"num_teachers": 4,
                                                               "queries.num_queries": 40}),
     WorkdirConflictError, r"workdir=.*run is a file", "run_file"),
]


@pytest.mark.parametrize("call, error, match, before", [c[1:] for c in BAD_API_INPUT],
                         ids=[c[0] for c in BAD_API_INPUT])
def test_each_bad_api_input_is_one_line_with_the_fix_before_anything_trains(
    call, error, match, before, monkeypatch, tmp_path):
  """Issue 80: every bad argument of the API is refused with a one-line ConfigError (or
  DatasetError, WorkdirConflictError) naming it and the fix, worded for the API (workdir=,
  not --workdir), before anything trains: the train steps, DP-SGD's loop and the pipeline's
  stages fail this test if reached, and an absent workdir stays absent."""
  from dgd_jax.runner import pipeline  # pylint: disable=g-import-not-at-top
  from dgd_jax.training import dpsgd, ensemble  # pylint: disable=g-import-not-at-top

  def trained(*args, **kwargs):
    raise AssertionError("training ran before the bad input was refused")
  monkeypatch.setattr(ensemble, "make_train_step", trained)
  monkeypatch.setattr(dpsgd, "train_private", trained)
  monkeypatch.setattr(pipeline, "_run_stages", trained)
  x, y = make_images(np.random.default_rng(0), 200)
  wd = tmp_path / "w"
  if before == "file":
    wd.write_text("mine")
  elif before == "run_file":
    wd.mkdir()
    (wd / "run").write_text("mine")
  with pytest.raises(error, match=match) as e:
    call(x, y, str(wd))
  message = str(e.value)
  assert "\n" not in message and "--workdir" not in message, message
  if before is None:
    assert not wd.exists()  # nothing written
  elif before == "file":
    assert wd.read_text() == "mine"
  else:
    assert (wd / "run").read_text() == "mine"
