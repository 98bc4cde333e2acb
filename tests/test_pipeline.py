"""The command line and the workdir: report, reuse of finished stages, refusal of another
config's workdir, clear errors without tracebacks."""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from dgd_jax.configs import baseline as baseline_config
from dgd_jax.data import load_private
from dgd_jax.plan import artefacts
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan import dgd as dgd_plan
from dgd_jax.plan import pool
from dgd_jax.plan import student_fit
from dgd_jax.plan.context import Config, Context
from dgd_jax.runtime.workdir import Stage, Workdir
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError, WorkdirConflictError
from dgd_jax.runtime.files import read_json
from dgd_jax.stages import student as student_stage
from dgd_jax.training import ensemble
from dgd_jax.training import student
from dgd_jax.training import train

import presets
import tiny_configs
from report_checks import assert_noiseless_named

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--config.baseline.num_steps=40", "--config.baseline.batch_size=32",
        "--config.log_every=20", "--config.checkpoint_every=20"]


def tiny_config(npz_file):
  config = baseline_config.get_config(f"npz:{npz_file},cpu")
  config.baseline.num_steps = 40
  config.baseline.batch_size = 32
  config.log_every = 20
  return config


def test_get_config_presets():
  paper = baseline_config.get_config("fashion_mnist")
  cpu = baseline_config.get_config("fashion_mnist,cpu")
  assert paper.dataset == cpu.dataset == "fashion_mnist"
  assert paper.model.width == 1.0 and cpu.model.width < 1.0
  assert cpu.baseline.num_steps < paper.baseline.num_steps
  assert baseline_config.get_config("svhn_cropped").model.hidden == (384, 192)
  with pytest.raises(ConfigError, match="the dataset is the first token only"):
    baseline_config.get_config("mnist,fashion_mnist")


@pytest.mark.parametrize("module,arg", presets.CPU_PRESETS + [
    ("dgd", "cpu,eps3"), ("pate", "cpu,plus"), ("dgd", "cpu,smoke")],
    ids=lambda v: str(v))
def test_the_stages_and_their_keys_are_fixed_before_the_config_is_resolved(
    module, arg, npz_file):
  """``checked_plan`` chooses the stages, their config keys and the noisy stages on the
  config as given, then resolves its values (``plan.checks.run_config``): every preset's
  plan is the same on the resolved config, with the optional audit too."""
  config = importlib.import_module(f"dgd_jax.configs.{module}").get_config(
      f"npz:{npz_file},{arg}")
  resolved = plan_checks.run_config(config)
  for stages in (None, methods.plan_stages(config) + ("audit",)):
    names = methods.plan_stages(config, stages)
    assert names == methods.plan_stages(resolved, stages)
    for name in names:
      assert methods.config_keys(name, config) == methods.config_keys(name, resolved), name
      assert methods.draws_noise(name, config) == methods.draws_noise(name, resolved), name
  plan = pipeline.checked_plan(config)
  assert plan.config.to_dict() == resolved.to_dict() and plan.stages == methods.plan_stages(
      resolved)
  assert plan.keys == {n: methods.config_keys(n, resolved) for n in plan.stages}
  assert plan.noisy == {n for n in plan.stages if methods.draws_noise(n, resolved)}


@pytest.mark.integration
def test_run_reuse_and_conflict(npz_file, tmp_path):
  workdir = str(tmp_path / "w")
  report = pipeline.run(tiny_config(npz_file), workdir)
  assert 0.0 <= report["test_accuracy"] <= 1.0
  assert_noiseless_named(workdir)
  assert report["test_accuracy"] > 0.3  # the synthetic classes are easy; chance is 0.1
  with open(os.path.join(workdir, "report.json")) as f:
    assert json.load(f)["test_accuracy"] == report["test_accuracy"]
  assert "stages.baseline" in report["noiseless"]  # the baseline method: nothing private
  for name in ("config.json", "metrics.jsonl", "report.md", "baseline/stage.json",
               "baseline/result.json"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert os.listdir(os.path.join(workdir, "baseline", "checkpoints"))

  def snapshot():
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      metrics = f.read()
    with open(os.path.join(workdir, "baseline", "result.json")) as f:
      return metrics, f.read()

  before = snapshot()
  again = pipeline.run(tiny_config(npz_file), workdir)  # reuses: no new training
  assert again["test_accuracy"] == report["test_accuracy"]
  assert snapshot() == before

  other = tiny_config(npz_file)
  other.model.width = 0.5
  with pytest.raises(WorkdirConflictError, match=r"model.width: 0.5 here, 0.25 in the workdir"):
    pipeline.run(other, workdir)
  assert snapshot() == before  # nothing lost or overwritten


@pytest.mark.integration
def test_bad_config_values(npz_file, tmp_path):
  with pytest.raises(ConfigError, match="learning_rate=0.0"):
    config = tiny_config(npz_file)
    config.baseline.learning_rate = 0.0
    pipeline.run(config, str(tmp_path / "w"))
  with pytest.raises(ConfigError, match="Unknown stages .* for method .baseline."):
    pipeline.run(tiny_config(npz_file), str(tmp_path / "w"), stages=("teachers_xyz",))
  with pytest.raises(ConfigError, match="generator.synthesis='gan'; it must be one of"):
    config = tiny_configs.dgd(npz_file)
    config.generator.synthesis = "gan"
    pipeline.run(config, str(tmp_path / "w"))
  with pytest.raises(ConfigError, match="teachers.mixup=0.4 with teachers.augment"):
    config = tiny_configs.dgd(npz_file)
    config.teachers.update(mixup=0.4, augment=True)
    pipeline.run(config, str(tmp_path / "w"))
  with pytest.raises(ConfigError, match="teachers.mixup=-1.0; it must be >= 0"):
    config = tiny_configs.dgd(npz_file)
    config.teachers.mixup = -1.0
    pipeline.run(config, str(tmp_path / "w"))
  with pytest.raises(ConfigError, match=r"generator.target_mix=0.6; it must be in \[0, 0.5\]"):
    config = tiny_configs.dgd(npz_file)
    config.generator.target_mix = 0.6
    pipeline.run(config, str(tmp_path / "w"))
  with pytest.raises(ConfigError, match="target_mix=0.25 mixes DeepInversion's targets; "
                     "generator.synthesis='generator' has none"):
    config = tiny_configs.dgd(npz_file)
    config.generator.update(synthesis="generator", target_mix=0.25)
    pipeline.run(config, str(tmp_path / "w"))
  assert not os.path.exists(tmp_path / "w")  # refused before writing anything


@pytest.mark.integration
def test_foreign_directory_refused(npz_file, tmp_path):
  workdir = tmp_path / "w"
  (workdir / "baseline").mkdir(parents=True)
  (workdir / "baseline" / "notes.txt").write_text("mine")
  with pytest.raises(WorkdirConflictError, match="has no stage.json"):
    pipeline.run(tiny_config(npz_file), str(workdir))
  assert (workdir / "baseline" / "notes.txt").read_text() == "mine"


def run_cli(*args):
  return subprocess.run([sys.executable, "-m", "dgd_jax.main", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_cli_end_to_end(npz_file, tmp_path):
  workdir = str(tmp_path / "cli")
  config = f"--config=dgd_jax/configs/baseline.py:npz:{npz_file},cpu"
  done = run_cli(config, f"--workdir={workdir}", *TINY)
  assert done.returncode == 0, done.stderr[-3000:]
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  assert summary["method"] == "baseline" and 0 <= summary["test_accuracy"] <= 1
  assert "ETA" in done.stderr  # progress lines with rate and ETA

  refused = run_cli(config, f"--workdir={workdir}", *TINY, "--config.seed=7")
  assert refused.returncode != 0
  assert "error:" in refused.stderr and "seed: 7 here, 0 in the workdir" in refused.stderr
  assert "Traceback" not in refused.stderr

  missing = run_cli("--config=dgd_jax/configs/baseline.py:idx:/no/such/dir,cpu",
                    f"--workdir={tmp_path / 'm'}", *TINY)
  assert missing.returncode != 0 and "no such directory" in missing.stderr
  assert "Traceback" not in missing.stderr


def teachers_config(npz_file, num_teachers=4):
  from dgd_jax.configs import teachers as teachers_config_file
  config = teachers_config_file.get_config(f"npz:{npz_file},cpu")
  config.num_teachers = num_teachers
  config.teachers.num_steps = 30
  config.log_every = 10
  return config


@pytest.mark.integration
def test_teachers_stage(npz_file, tmp_path):
  workdir = tmp_path / "t"
  report = pipeline.run(teachers_config(npz_file), str(workdir))
  result = report["stages"]["teachers"]
  assert result["num_teachers"] == 4 and result["examples_per_teacher"] == 128
  assert "stages.teachers" in assert_noiseless_named(str(workdir))["noiseless"]
  assert result["dropped_examples"] == 0
  for k in ("teacher_accuracy_mean", "plurality_accuracy", "lnmax_accuracy_scale_20",
            "lnmax_accuracy_scale_40"):
    assert 0.0 <= result[k] <= 1.0, k
  assert result["teacher_accuracy_min"] <= result["teacher_accuracy_mean"] <= \
      result["teacher_accuracy_max"]
  votes = np.load(workdir / "teachers" / "test_votes.npy")
  assert votes.shape == (128, 10) and (votes.sum(axis=1) == 4).all()
  assert result["eval_size"] == 128  # the teachers method evaluates on the whole test set


@pytest.mark.integration
def test_teachers_eval_size_reads_the_head_of_the_test_set(npz_file, tmp_path):
  config = teachers_config(npz_file)
  config.teachers.eval_size = 50
  report = pipeline.run(config, str(tmp_path / "t"))
  assert report["stages"]["teachers"]["eval_size"] == 50
  votes = np.load(tmp_path / "t" / "teachers" / "test_votes.npy")
  assert votes.shape == (50, 10) and (votes.sum(axis=1) == 4).all()
  from dgd_jax.configs import dgd as dgd_config_file
  assert dgd_config_file.get_config("fashion_mnist,cpu").teachers.eval_size == 2000
  assert dgd_config_file.get_config("fashion_mnist").teachers.eval_size == 0  # paper preset


@pytest.mark.integration
def test_teachers_width_sets_the_teachers_model_and_is_read_back(npz_file, tmp_path):
  config = teachers_config(npz_file)
  config.teachers.width = 2 * config.model.width
  path = str(tmp_path / "t")
  pipeline.run(config, path)
  wd = Workdir(path, writer=False)
  results = {"teachers": read_json(os.path.join(path, "teachers", "result.json"))}
  ctx = Context(Config(wd.read_config()), wd, Stage(wd, "audit", {}),
                lambda: load_private(config), results)
  params, predict, _ = artefacts.load_teachers(ctx)
  def size(model):  # parameters of one model
    x = np.zeros((1,) + ctx.dataset.image_shape, np.float32)
    return sum(l.size for l in jax.tree.leaves(jax.eval_shape(model.init, jax.random.key(0), x)))
  wide, narrow = (size(artefacts.classifier(config, 10, b)) for b in ("teachers", None))
  assert sum(l.size for l in jax.tree.leaves(params)) == config.num_teachers * wide != \
      config.num_teachers * narrow
  votes = ensemble.histogram(ensemble.teacher_predictions(
      predict, params, ctx.dataset.x_test[:results["teachers"]["eval_size"]]), 10)
  np.testing.assert_array_equal(votes, np.load(os.path.join(path, "teachers",
                                                            "test_votes.npy")))
  config.teachers.width = -1.0
  with pytest.raises(ConfigError, match="teachers.width=-1.0; it must be > 0, or 0"):
    pipeline.run(config, str(tmp_path / "w"))


@pytest.mark.integration
def test_too_many_teachers_is_refused_and_leaves_the_workdir_usable(npz_file, tmp_path):
  workdir = tmp_path / "t"
  with pytest.raises(ConfigError, match="num_teachers=600 is more than the 512 training"):
    pipeline.run(teachers_config(npz_file, num_teachers=600), str(workdir))
  assert not (workdir / "teachers").exists()
  pipeline.run(teachers_config(npz_file, num_teachers=2), str(workdir))  # fixed config runs


@pytest.mark.integration
def test_teacher_sweep_writes_csv_and_plot(npz_file, tmp_path):
  from dgd_jax.configs import teacher_sweep as sweep_config_file
  config = sweep_config_file.get_config(f"npz:{npz_file},cpu")
  config.sweep.sizes = (2, 4, 8)
  config.sweep.noise_scales = (1.0, 40.0)
  config.teachers.num_steps = 20
  config.log_every = 10
  report = pipeline.run(config, str(tmp_path / "s"))
  result = report["stages"]["teacher_sweep"]
  assert result["members_trained"] == 14
  assert "stages.teacher_sweep" in assert_noiseless_named(str(tmp_path / "s"))["noiseless"]
  assert [r["teachers"] for r in result["table"]] == [2, 4, 8]
  assert [r["examples_per_teacher"] for r in result["table"]] == [256, 128, 64]
  with open(tmp_path / "s" / "teacher_sweep" / "sweep.csv") as f:
    lines = f.read().strip().splitlines()
  assert len(lines) == 4 and "lnmax_accuracy_scale_40" in lines[0]
  png = (tmp_path / "s" / "teacher_sweep" / "sweep.png").read_bytes()
  assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
def test_generative_stream_stages(npz_file, tmp_path):
  workdir = tmp_path / "d"
  report = pipeline.run(tiny_configs.dgd_generative(npz_file), str(workdir),
                        stages=("vae",))
  assert set(report["stages"]) == {"baseline", "generator", "vae"}  # prerequisites ran
  g = report["generator"]
  assert g["num_synthetic"] == 256 and sum(g["class_histogram"]) == 256
  assert 0 <= g["label_entropy"] <= np.log(10) + 1e-9
  assert 0 <= g["synthetic_student_accuracy"] <= 1
  assert g["raw_student_accuracy"] == report["stages"]["baseline"]["test_accuracy"]
  assert np.isfinite(report["vae"]["negative_elbo"])
  x = np.load(workdir / "generator" / "synthetic.npy")
  assert x.shape == (256, 28, 28, 1) and -1 <= x.min() and x.max() <= 1
  for png in ("generator/samples.png", "vae/reconstructions.png"):
    assert (workdir / png).read_bytes()[:4] == b"\x89PNG"
  metrics = (workdir / "metrics.jsonl").read_text()
  again = pipeline.run(tiny_configs.dgd_generative(npz_file), str(workdir),
                       stages=("generator",))
  assert again["generator"] == g  # reused from the cache, not retrained
  assert (workdir / "metrics.jsonl").read_text() == metrics


@pytest.fixture
def fashion_mnist_subset(fashion_mnist, tmp_path):
  """A few hundred real Fashion-MNIST images (400 train, 200 test) as an npz dataset."""
  to_uint8 = lambda x: np.round((x[..., 0] + 1) * 127.5).astype(np.uint8)
  path = str(tmp_path / "fashion_mnist_subset.npz")
  np.savez(path, x_train=to_uint8(fashion_mnist.x_train[:400]),
           y_train=fashion_mnist.y_train[:400], x_test=to_uint8(fashion_mnist.x_test[:200]),
           y_test=fashion_mnist.y_test[:200])
  return path


@pytest.mark.integration
def test_dgd_end_to_end_report_on_real_fashion_mnist(fashion_mnist_subset, tmp_path):
  workdir = tmp_path / "d"
  report = pipeline.run(tiny_configs.dgd(fashion_mnist_subset), str(workdir))
  for key in ("method", "dataset", "test_accuracy", "baseline_accuracy", "queries", "delta",
              "epsilon", "accountant", "epsilons", "covers", "wall_seconds", "stage_seconds"):
    assert report[key] is not None, key
  assert report["method"] == "dgd"
  assert report["queries"] == 50 and report["delta"] == 1e-5 and report["accountant"] == "rdp"
  assert 0 <= report["test_accuracy"] <= 1 and 0 <= report["baseline_accuracy"] <= 1
  # The headline is the data-independent plan: 50 LNMax queries at b = 40.
  from dgd_jax import privacy
  planned = privacy.PrivacyLedger([privacy.LNMaxQueries(40.0, 50)]).epsilon(1e-5, "rdp")
  assert report["epsilon"] == pytest.approx(planned.epsilon, rel=1e-12)
  assert set(report["epsilons"]) >= {"rdp", "pld", "moments_accountant"}
  assert any("generator" in note for note in report["covers"]["not_covered"])
  # Eq. 6 is off, so the student reads no VAE and none is trained (student.uses_vae)
  assert set(report["stage_seconds"]) == {"baseline", "teachers", "generator", "queries",
                                          "student"}
  assert report["wall_seconds"] == pytest.approx(sum(report["stage_seconds"].values()))
  md = (workdir / "report.md").read_text()
  assert f"epsilon = {report['epsilon']:.4g} at delta = 1e-05 (rdp accountant" in md
  for png in ("generator/samples.png", "student/training_curve.png"):
    assert f"]({png})" in md and (workdir / png).read_bytes()[:4] == b"\x89PNG", png


@pytest.mark.integration
def test_dgd_resumes_after_an_interrupted_stage(finished_dgd, tmp_path, monkeypatch):
  from dgd_jax.plan import student_fit
  npz_file, finished, uninterrupted = finished_dgd  # the same config but checkpoint_every
  config = tiny_configs.dgd(npz_file)
  config.checkpoint_every = 10  # not in any stage's config slice: the same artefacts

  class Interrupt(Exception):
    pass

  make_step = student.make_step

  def crash_after_25_steps(*args, **kwargs):
    step, calls = make_step(*args, **kwargs), []

    def crashing(state, key):
      calls.append(1)
      if len(calls) > 25:  # after the checkpoint at step 20
        raise Interrupt()
      return step(state, key)

    return crashing

  monkeypatch.setattr(student_fit, "make_step", crash_after_25_steps)
  workdir = tmp_path / "b"
  workdir.mkdir()  # the finished run's secret noise key: the same noisy answers
  shutil.copy(os.path.join(finished, "noise.key"), workdir / "noise.key")
  with pytest.raises(Interrupt):
    pipeline.run(config, str(workdir))
  assert not (workdir / "student" / "result.json").exists()
  assert (workdir / "queries" / "result.json").exists()
  before = (workdir / "metrics.jsonl").read_text()
  monkeypatch.setattr(student_fit, "make_step", make_step)
  resumed = pipeline.run(config, str(workdir))
  after = (workdir / "metrics.jsonl").read_text()
  assert after.startswith(before)
  new = [json.loads(line) for line in after[len(before):].splitlines()]
  # The finished stages were reused, not rerun: only the student stage's two curves (the
  # released student and its noiseless-label diagnostic, which had not started) were logged.
  assert {r["stage"] for r in new} == {"student", "student_noiseless"}
  # the student resumed from its step-20 checkpoint
  assert min(r["step"] for r in new if r["stage"] == "student") > 20
  untimed = lambda r: {k: v for k, v in r.items() if not k.endswith("_seconds")}
  for name in ("teachers", "generator", "queries", "student"):
    assert untimed(resumed["stages"][name]) == untimed(uninterrupted["stages"][name]), name
  assert resumed["epsilon"] == uninterrupted["epsilon"]


@pytest.mark.integration
def test_budget_guard_refuses_before_anything_runs(npz_file, tmp_path):
  config = tiny_configs.dgd(npz_file)
  config.privacy.max_epsilon = 0.5  # 50 queries at b = 40 need about 1.6 (rdp)
  with pytest.raises(ConfigError, match="above the maximum epsilon 0.5"):
    pipeline.run(config, str(tmp_path / "d"))
  assert not (tmp_path / "d").exists()


@pytest.mark.integration
def test_student_never_reads_private_training_data(finished_dgd_copy):
  from dgd_jax.data import load_dataset
  from dgd_jax.stages import student
  npz_file, workdir, _ = finished_dgd_copy  # its queries; a VAE and a new student below
  workdir = pathlib.Path(workdir)
  shutil.rmtree(workdir / "student")
  config = tiny_configs.dgd(npz_file)
  config.student.update(w_normal=1.0, w_tangent=1.0, w_entropy=0.1, unlabelled_batch_size=8)
  pipeline.run(config, str(workdir), stages=("vae",))  # Eq. 6 reads it; the finished run had none
  logged_before = len((workdir / "metrics.jsonl").read_text().splitlines())
  real = load_dataset(f"npz:{npz_file}")

  TestSetOnly = tiny_configs.without_training_data(real)
  wd = Workdir(str(workdir))
  stage = Stage(wd, "student", methods.stage_slice("student", config))
  stage.begin()
  result = student.run(Context(config, wd, stage, TestSetOnly, {}))
  assert 0 <= result["test_accuracy"] <= 1 and result["num_labelled"] == 50
  assert result["num_unlabelled"] == 256 - 50  # D_u: the synthetic samples not queried
  logged = [json.loads(l) for l in
            (workdir / "metrics.jsonl").read_text().splitlines()[logged_before:]]
  semi = [m for m in logged if m["stage"] == "student"]
  assert semi and all(np.isfinite(m[k]) for m in semi for k in ("normal", "tangent", "entropy"))


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_dgd_with_every_issue16_lever_end_to_end(fashion_mnist_subset, tmp_path):
  """DeepInversion with priors and stable selection, augmented teachers, an automatic query
  plan, a mixup and FixMatch student, the noiseless-label diagnostic and a restricted private
  set: the report carries the plan, the diagnostics and their privacy notes."""
  config = tiny_configs.dgd(fashion_mnist_subset)
  config.private_size = 300
  config.teachers.augment = True
  config.generator.update(w_stats=1.0, w_tv=0.1, jitter=1, mirror=True, oversample=1.5,
                          learning_rate=0.02, synthesis="inversion", inversion_steps=3,
                          inversion_batch_size=50, synthetic_student_steps=7)
  config.queries.update(plan="auto", num_queries=60)
  config.student.update(augment=True, mixup=0.4, w_consistency=1.0, threshold=0.5,
                        unlabelled_batch_size=16, diagnose_noiseless=True, self_training=1)
  workdir = tmp_path / "d"
  report = pipeline.run(config, str(workdir))
  q = report["stages"]["queries"]
  chosen = q["plan"]["chosen"]
  assert report["queries"] == chosen["num_queries"] <= 60
  assert (q["aggregator"], q["noise_scale"]) == (chosen["aggregator"], chosen["noise_scale"])
  assert report["epsilon"] <= config.privacy.max_epsilon
  assert report["stages"]["teachers"]["examples_per_teacher"] == 300 // 4  # private_size
  g = report["stages"]["generator"]
  assert g["synthesis"] == "inversion" and g["num_synthetic"] == 256
  assert sum(g["class_histogram"]) == 256
  # the data-free diagnostic trained its own 7 steps, not the baseline's schedule
  assert os.listdir(workdir / "generator" / "student_checkpoints") == ["7"]
  for key in ("student_accuracy_noiseless_labels", "label_accuracy_vs_baseline",
              "noisy_label_agreement_with_plurality"):
    assert 0 <= report[key] <= 1, key
  notes = " ".join(report["covers"]["not_covered"])
  assert "w_stats" in notes and "noiseless plurality" in notes
  found = assert_noiseless_named(str(workdir))["noiseless"]
  assert {"noisy_label_agreement_with_plurality", "stages.queries.top_vote_share_by_round",
          "student_accuracy_noiseless_labels", "label_accuracy_vs_baseline"} <= set(found)
  md = (workdir / "report.md").read_text()
  assert "## Query plan" in md and "noiseless plurality reaches" in md
  logged = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert any(m["stage"] == "student" and "consistency" in m for m in logged)
  assert any(m["stage"] == "student_noiseless" for m in logged)
  # one self-training round, for the student and for its noiseless-label twin
  rounds = report["stages"]["student"]["test_accuracy_by_self_training_round"]
  assert len(rounds) == 2 and rounds[-1] == report["stages"]["student"]["test_accuracy"]
  assert {"student_self_training_1", "student_noiseless_self_training_1"} <= {
      m["stage"] for m in logged}


@pytest.mark.integration
def test_dgd_with_released_histograms(finished_dgd_copy):
  """queries.aggregator='gaussian_histogram': the queries stage keeps the released noisy
  histograms beside the labels (their argmax), the ledger charges the Gaussian histogram with
  no data-dependent value, and the student learns the vote shares under the Brier score."""
  npz_file, workdir, _ = finished_dgd_copy
  for stage in ("queries", "student"):
    shutil.rmtree(pathlib.Path(workdir) / stage)
  config = tiny_configs.dgd(npz_file)
  config.queries.update(aggregator="gaussian_histogram", plan="auto", num_queries=60)
  config.privacy.max_epsilon = 3.0
  config.student.diagnose_noiseless = True
  report = pipeline.run(config, workdir)
  q = dict(np.load(pathlib.Path(workdir) / "queries" / "queries.npz"))
  votes = np.load(pathlib.Path(workdir) / "queries" / "votes.npy")
  assert q["histograms"].shape == (60, 10) and q["histograms"].dtype == np.float32
  np.testing.assert_array_equal(q["labels"], q["histograms"].argmax(1))
  sigma = report["stages"]["queries"]["noise_scale"]
  assert 0.5 * sigma < np.std(q["histograms"] - votes) < 1.5 * sigma  # the noise, not the votes
  assert 2.99 < report["epsilon"] <= 3.0 and not report["epsilon_is_data_dependent"]
  assert "gaussian_histogram" in report["covers"]["covered"]
  student_result = report["stages"]["student"]
  assert not student_result["propagated"] and student_result["num_labelled"] == 60
  assert 0 <= student_result["student_accuracy_noiseless_labels"] <= 1
  metrics = (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()
  curve = [json.loads(l) for l in metrics]
  assert all(np.isfinite(m["loss"]) for m in curve if m["stage"] == "student")
  text = (pathlib.Path(workdir) / "report.md").read_text()
  assert "gaussian_histogram: the noisy vote histograms of 60 queries" in text
  assert "teachers' noiseless vote shares reaches" in text


@pytest.mark.integration
def test_dgd_with_released_class_counts(finished_dgd_copy):
  """queries.aggregator='gaussian_class_count' on a DeepInversion pool: the queries stage
  keeps, per query, the noisy count of the votes for the class its sample was inverted for,
  the ledger charges sensitivity 1, and the student learns ``class_count_targets``."""
  npz_file, workdir, _ = finished_dgd_copy
  for stage in ("generator", "vae", "queries", "student"):
    shutil.rmtree(pathlib.Path(workdir) / stage, ignore_errors=True)
  config = tiny_configs.dgd(npz_file)
  config.generator.update(synthesis="inversion", num_synthetic=96, oversample=1.0,
                          inversion_batch_size=32, inversion_steps=10, synthetic_student_steps=5)
  config.queries.update(aggregator="gaussian_class_count", plan="auto", num_queries=60)
  config.privacy.max_epsilon = 3.0
  config.student.diagnose_noiseless = True
  report = pipeline.run(config, workdir)
  q = dict(np.load(pathlib.Path(workdir) / "queries" / "queries.npz"))
  votes = np.load(pathlib.Path(workdir) / "queries" / "votes.npy")
  assert q["counts"].shape == (60,) and "histograms" not in q
  # inverted 32 a batch, the classes dealt in turn within each batch
  np.testing.assert_array_equal(q["labels"], q["indices"] % 32 % 10)
  np.testing.assert_array_equal(q["labels"], pool.classes(config, 96, 10)[q["indices"]])
  sigma = report["stages"]["queries"]["noise_scale"]
  noise = q["counts"] - votes[np.arange(60), q["labels"]]
  assert 0.5 * sigma < np.std(noise) < 1.5 * sigma
  assert 2.99 < report["epsilon"] <= 3.0 and not report["epsilon_is_data_dependent"]
  assert "gaussian_class_count" in report["covers"]["covered"]
  result = report["stages"]["queries"]
  assert result["asked_class_is_plurality"] == pytest.approx(
      np.mean(q["labels"] == votes.argmax(1)))
  assert "noisy_label_agreement_with_plurality" not in result
  ctx = pipeline.open_run(workdir, "student")
  _, targets, _, _ = student_stage.labelled_split(ctx, pool.load(ctx))
  np.testing.assert_allclose(targets, student.class_count_targets(
      q["counts"], q["labels"], config.num_teachers, 10), rtol=1e-6)
  student_result = report["stages"]["student"]
  assert student_result["num_labelled"] == 60
  assert 0 <= student_result["student_accuracy_noiseless_labels"] <= 1
  text = (pathlib.Path(workdir) / "report.md").read_text()
  assert "gaussian_class_count: the noisy count of 60 queries' votes" in text
  assert "teachers' noiseless counts reaches" in text


@pytest.mark.integration
def test_refit_rounds_ask_teachers_refit_from_the_released_histograms(finished_dgd_copy):
  """queries.refits = 1: the histograms come in two rounds of random samples, the second
  answered by teachers that share a student of the first round's release (its last layer refit
  per partition), so their votes differ from the run's teachers'; the epsilon is that of the
  same count of histograms at the same sigma in one round, and the student learns both."""
  npz_file, workdir, _ = finished_dgd_copy
  for stage in ("queries", "student"):
    shutil.rmtree(pathlib.Path(workdir) / stage)
  config = tiny_configs.dgd(npz_file)
  config.queries.update(aggregator="gaussian_histogram", plan="auto", num_queries=60, refits=1)
  config.student.ensemble = 1
  config.privacy.max_epsilon = 3.0
  report = pipeline.run(config, workdir)
  result = report["stages"]["queries"]
  assert result["refits"] == 1 and len(result["top_vote_share_by_round"]) == 2
  q = dict(np.load(pathlib.Path(workdir) / "queries" / "queries.npz"))
  votes = np.load(pathlib.Path(workdir) / "queries" / "votes.npy")
  assert q["histograms"].shape == (60, 10) and (votes.sum(1) == config.num_teachers).all()
  ctx = pipeline.open_run(workdir, "queries")
  params, predict, _ = artefacts.load_teachers(ctx)
  x_pool = pool.load(ctx)
  run_teachers = ensemble.vote_histograms(predict, params, x_pool[q["indices"]], 10)
  np.testing.assert_array_equal(votes[:30], run_teachers[:30])  # round 1: the run's teachers
  assert not np.array_equal(votes[30:], run_teachers[30:])  # round 2: the refit ones
  assert os.path.isdir(pathlib.Path(workdir) / "queries" / "checkpoints" / "refit_student_1")
  one_round = config.copy_and_resolve_references()
  one_round.queries.refits = 0
  plan = dgd_plan.releases(one_round)[-1]
  assert plan.noise_scale == pytest.approx(result["noise_scale"]) and plan.queries == 60
  assert 2.99 < report["epsilon"] <= 3.0
  assert report["stages"]["student"]["num_labelled"] == 60


@pytest.mark.integration
def test_student_ensemble_is_distilled_and_the_released_student_is_the_last_fit(
    finished_dgd_copy):
  """student.ensemble = 2 with one self-training round: two members learn the released
  labels from keys of their own, a fresh student their mean distribution, one round after it;
  the report gives the ensemble's and the members' accuracies, and the student the loaders
  return (the audit's) is the last fit, whose accuracy the report states."""
  npz_file, workdir, _ = finished_dgd_copy
  shutil.rmtree(pathlib.Path(workdir) / "student")
  config = tiny_configs.dgd(npz_file)
  config.student.update(ensemble=2, self_training=1)
  report = pipeline.run(config, workdir)
  result = report["stages"]["student"]
  assert len(result["member_test_accuracies"]) == 2
  assert (result["ensemble"], result["released_fit"]) == (2, "_self_training_1")
  assert 0 <= result["ensemble_test_accuracy"] <= 1
  assert len(result["test_accuracy_by_self_training_round"]) == 2  # distilled, then round 1
  assert "Student: distilled from 2 students" in (pathlib.Path(workdir) / "report.md").read_text()
  logged = [json.loads(l) for l in (pathlib.Path(workdir) / "metrics.jsonl").read_text()
            .splitlines()]
  fits = ["student", "student_member_1", "student_distilled", "student_self_training_1"]
  assert fits == [s for s in dict.fromkeys(m["stage"] for m in logged) if s in fits]
  stage = pathlib.Path(workdir) / "student"
  assert {"checkpoints", "checkpoints_member_1", "checkpoints_distilled",
          "checkpoints_self_training_1"} <= set(os.listdir(stage))
  ctx = pipeline.open_run(workdir, "student")
  model, params = artefacts.load_classifier(ctx, "student")
  x_eval, y_eval = pool.evaluation(ctx)
  assert train.accuracy(model.apply, params, x_eval, y_eval) == result["test_accuracy"]
  first, member = (jax.tree.leaves(train.load_params(str(stage / f), params))
                   for f in ("checkpoints", "checkpoints_member_1"))
  assert not all(np.allclose(a, b) for a, b in zip(first, member))  # keys of its own


def test_student_block_that_cannot_be_trained_is_refused_before_any_stage(
    npz_file, tmp_path):
  for field, value in (("ensemble", -1), ("self_training", -1)):
    config = tiny_configs.dgd(npz_file)
    config.student[field] = value
    with pytest.raises(ConfigError, match=f"config.student.{field}="):
      pipeline.run(config, str(tmp_path / f"{field}_{value}"))
    assert not os.path.exists(tmp_path / f"{field}_{value}" / "baseline")


# ---- A stage lives no longer than what it read ------------------------------------------------

@pytest.mark.integration
def test_a_finished_stage_is_reused_only_with_the_results_it_read(finished_dgd_copy):
  """rm -r queries recomputes the queries (the same key: the same answers) but the student,
  made from the removed ones, is refused until it is removed too; then it is made anew."""
  path, workdir, report = finished_dgd_copy
  config = tiny_configs.dgd(path)
  shutil.rmtree(os.path.join(workdir, "queries"))
  with pytest.raises(WorkdirConflictError,
                     match=r"student was made from other results of \['queries'\].*rm -r"):
    pipeline.run(config, workdir)
  assert os.path.exists(os.path.join(workdir, "queries", "result.json"))  # kept
  shutil.rmtree(os.path.join(workdir, "student"))
  again = pipeline.run(config, workdir)
  untimed = lambda r: {k: v for k, v in r.items() if not k.endswith("_seconds")}
  assert untimed(again["stages"]["queries"]) == untimed(report["stages"]["queries"])


@pytest.mark.integration
def test_a_workdir_stays_bound_to_its_data_without_data_json(tmp_path):
  """Other arrays at the same path, with data.json removed: every stage's own record of its
  data refuses them, and data.json is not rewritten with the new data's fingerprint."""
  from conftest import write_npz  # pylint: disable=g-import-not-at-top
  data = write_npz(tmp_path)
  workdir = str(tmp_path / "w")
  pipeline.run(tiny_configs.baseline(data), workdir)
  os.remove(os.path.join(workdir, "data.json"))
  write_npz(tmp_path, seed=7)  # other arrays, the same file
  with pytest.raises(WorkdirConflictError, match="baseline was made from other data"):
    pipeline.run(tiny_configs.baseline(data), workdir)
  assert not os.path.exists(os.path.join(workdir, "data.json"))


@pytest.mark.integration
def test_the_noise_key_once_drawn_from_is_kept(finished_dgd_copy, monkeypatch):
  """Once a stage drew from noise.key: a run without it is refused even where that stage's
  folder is gone (noise_draws.json recorded the draw), a damaged key is refused with a fix
  that holds, and a key removed while a run holds it is written back."""
  path, workdir, _ = finished_dgd_copy
  config = tiny_configs.dgd(path)
  key = os.path.join(workdir, "noise.key")
  with open(key, "rb") as f:
    secret = f.read()
  os.remove(key)
  for stage in ("queries", "student"):
    shutil.rmtree(os.path.join(workdir, stage))
  with pytest.raises(WorkdirConflictError, match=r"missing, but stages \['queries'\]"):
    pipeline.run(config, workdir)
  assert not os.path.exists(os.path.join(workdir, "queries"))
  with open(key, "wb") as f:
    f.write(b"12345")
  os.chmod(key, 0o600)
  with pytest.raises(WorkdirConflictError, match="5 bytes.*restore that file from a backup"):
    pipeline.run(config, workdir)
  with open(key, "wb") as f:
    f.write(secret)
  spec = methods.STAGES["queries"]

  def removing_the_key(ctx):
    os.remove(key)  # while the run holds the secret
    return spec.run(ctx)

  monkeypatch.setitem(methods.STAGES, "queries", dataclasses.replace(spec, run=removing_the_key))
  pipeline.run(config, workdir)
  with open(key, "rb") as f:
    assert f.read() == secret
  assert os.stat(key).st_mode & 0o777 == 0o600
  monkeypatch.setitem(methods.STAGES, "queries", spec)
  pipeline.run(config, workdir)  # a rerun resumes: every stage reused


def test_more_teachers_than_examples_is_refused_before_anything_trains(npz_file, tmp_path):
  config = tiny_configs.dgd(npz_file)  # 512 private examples
  config.num_teachers = 513
  with pytest.raises(ConfigError, match="num_teachers=513 is more than the 512 training "
                                        "examples.*num_teachers <= 512"):
    pipeline.run(config, str(tmp_path / "w"))
  assert not os.path.exists(tmp_path / "w" / "baseline")
