"""experiments/: research scripts headed by their question, answer and RESULTS.md section,
reading finished runs through the public API (``dgd_jax.open_run``);
launch/ holds launchers only."""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import dgd_jax
from dgd_jax.plan import artefacts
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import WorkdirConflictError
from dgd_jax.runtime.files import read_json
from dgd_jax.training.student import uses_vae

REPO = pathlib.Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((REPO / "experiments").glob("*.py"))
# Test-data generators (tests/data), not research questions: no RESULTS.md section to feed.
GENERATORS = {"pate2018_reference_vectors.py"}
RESEARCH = [p for p in EXPERIMENTS if p.name not in GENERATORS]
ENV = dict(os.environ, JAX_PLATFORMS="cpu")
# A research script's own run on the shared tiny finished run: the research tier, CI's fourth
# (docs/PERFORMANCE.md, "Test tiers"): bash launch/test.sh -m research.
def research_run(test):
  return pytest.mark.research(pytest.mark.slow(pytest.mark.integration(test)))


LIBRARY = ("privacy", "training", "synthesis", "labelling", "models", "audit")  # config-free


def public(module: str) -> bool:
  """Whether a research script may import ``module``: anything outside dgd_jax, dgd_jax's
  public names (``dgd_jax.__all__``) and the config-free library folders."""
  parts = module.split(".")
  return parts[0] != "dgd_jax" or len(parts) == 1 or parts[1] in LIBRARY or (
      len(parts) == 2 and parts[1] in dgd_jax.__all__)


def run_experiment(script: str, *flags: str) -> str:
  """experiments/``script`` run with ``flags`` in a subprocess; its stdout, once it exits 0."""
  result = subprocess.run([sys.executable, f"experiments/{script}", *flags], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stdout


def mtimes(workdir: str) -> dict:
  """Every path under ``workdir`` -> its modification time: equal before and after a read."""
  return {p: os.stat(p).st_mtime_ns for p in pathlib.Path(workdir).rglob("*")}


def docstring(path: pathlib.Path) -> str:
  return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_launch_holds_only_launchers():
  assert sorted(p.suffix for p in (REPO / "launch").iterdir()) == [".sh"] * len(
      list((REPO / "launch").iterdir()))


@pytest.mark.parametrize("path", RESEARCH, ids=[p.name for p in RESEARCH])
def test_a_research_script_is_headed_by_its_question_answer_and_section(path):
  text = docstring(path)
  for field in ("Question:", "Answer:", "Feeds: RESULTS.md"):
    assert f"\n{field}" in text, (path.name, field)
  section = text.split("Feeds: RESULTS.md", 1)[1].split("\n\n", 1)[0]
  quoted = section.split('"')[1::2]
  headings = {line.lstrip("#").strip() for line in (REPO / "RESULTS.md").read_text().splitlines()
              if line.startswith("#")}
  assert quoted and all(q in headings for q in quoted), (path.name, quoted)


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.name for p in EXPERIMENTS])
def test_a_script_uses_the_public_api_and_the_library_alone(path):
  """A research script reads runs through the public API (``dgd_jax``: ``open_run``, ``Run``)
  and calls the config-free library folders; never the plan, the runner, a stage, a driver,
  a config or the runtime beneath them."""
  imported = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      imported |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
  internal = sorted(m for m in imported if not public(m))
  assert not internal, (path.name, internal)


def test_results_stays_a_summary():
  """RESULTS.md holds per method the headline table, the ablations as tables and what binds,
  not a log of every probe: at most 800 lines."""
  lines = (REPO / "RESULTS.md").read_text().count("\n")
  assert lines <= 800, lines


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_every_experiment_answers_help():
  """All at once (each imports JAX for seconds): --help prints the script's docstring."""
  runs = {p.name: subprocess.Popen([sys.executable, str(p), "--help"], cwd=REPO, env=ENV,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for p in EXPERIMENTS}
  for path in EXPERIMENTS:
    out, err = runs[path.name].communicate(timeout=180)
    assert "Traceback" not in err, (path.name, err)
    first = docstring(path).splitlines()[0] if path in RESEARCH else "usage"
    assert first in out, (path.name, out[:300])


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_open_run_reads_a_finished_run_and_writes_nothing(finished_dgd):
  """``pipeline.open_run``'s Context, and the public ``dgd_jax.open_run`` over it: what the
  research scripts read, each once; nothing in the workdir changes."""
  _, workdir, _ = finished_dgd
  before = mtimes(workdir)
  ctx = pipeline.open_run(workdir, "student")
  recorded = read_json(os.path.join(workdir, "config.json"))
  assert ctx.config.to_dict() == {k: v for k, v in recorded.items() if k != "format"}
  assert set(ctx.results) == set(methods.plan_stages(ctx.config))  # every stage finished
  assert ctx.stage.name == "student" and ctx.stage.done()
  queries = artefacts.load_queries(ctx)
  assert len(queries["indices"]) == ctx.config.queries.num_queries
  assert len(ctx.dataset.x_test) > 0
  ctx.log({"loss": 1.0})  # read-only: dropped
  run = dgd_jax.open_run(workdir)
  config, data = run.config, run.data
  teachers = run.teachers()
  assert run.teachers() is teachers and teachers.num_teachers == config.num_teachers
  pool = run.pool()
  votes = run.votes(pool[:5])
  assert votes.shape == (5, data.num_classes) and (votes.sum(1) == config.num_teachers).all()
  np.testing.assert_array_equal(run.votes(data.x_test[:5]), dgd_jax.teacher_votes(
      teachers, np.round((data.x_test[:5] + 1.0) * 127.5)))  # pixels, as the API takes them
  for stage in ("baseline", "student"):
    model, params = run.classifier(stage)
    assert model.apply(params, data.x_test[:2]).shape == (2, data.num_classes)
  assert run.new_classifier(width=0.5).width == 0.5
  np.testing.assert_array_equal(run.synthetic()[:len(pool)], pool)  # a synthetic pool
  vae, vae_params = run.vae()  # the VAE where Eq. 6 reads it, loaded once
  assert (vae is None) == (vae_params is None) == (not uses_vae(config.student))
  assert run.vae()[1] is vae_params
  after = mtimes(workdir)
  assert after == before


@pytest.mark.integration
def test_open_run_refuses_what_is_not_a_run(finished_dgd, tmp_path):
  with pytest.raises(WorkdirConflictError, match="is not the workdir of"):
    pipeline.open_run(str(tmp_path), "student")
  with pytest.raises(WorkdirConflictError, match="has no stage 'dpsgd'"):
    pipeline.open_run(finished_dgd[1], "dpsgd")


@research_run
def test_dpdfd_votes_runs_on_a_finished_run(finished_dgd):
  out = run_experiment("dpdfd_votes.py", f"--workdir={finished_dgd[1]}")
  assert "real test images: top vote share" in out
  assert "uniform noise in [0, 1): top vote share" in out


@research_run
def test_histogram_probe_trains_on_a_union_of_pools_with_every_sample_queried(finished_dgd):
  workdir = finished_dgd[1]
  out = run_experiment("histogram_probe.py", f"--workdir={workdir}", f"--pools={workdir}",
                       "--plans=10:99999:1", "--targets=baseline,clean", "--loss=brier")
  pool = len(artefacts.load_synthetic(pipeline.open_run(workdir, "student")))
  assert f"eps 10, {2 * pool} queries, sigma 1.00" in out, out
  assert "  baseline " in out and "  clean " in out, out


@research_run
def test_histogram_probe_shrinks_noisy_targets_towards_held_out_fold_predictions(finished_dgd):
  workdir = finished_dgd[1]
  out = run_experiment("histogram_probe.py", f"--workdir={workdir}", "--plans=10:99999:40",
                       "--targets=raw", "--loss=brier", "--crossfit=2", "--fold_steps=3")
  shrunk = next(line for line in out.splitlines() if "shrunk: w" in line)
  w = [float(v) for v in shrunk.split("[")[1].split("]")[0].split()]
  assert len(w) == 10 and all(0 <= v < 1 for v in w), shrunk
  # sigma 40 over the tiny run's few teachers: the raw shares are far noisier than the folds'
  mse, raw = shrunk.split("MSE ")[1].split(" (raw ")
  assert float(mse) < float(raw.rstrip(")")), shrunk
  assert "  raw " in out, out
