"""The registry (methods.py) and the layering it stands on: every module imports only its own
layer or lower ones of docs/ARCHITECTURE.md's layer table, stages never each other; no import
cycle; every stage takes a typed Context; planning works for every method; a new method is one
record plus its own module."""
from __future__ import annotations

import ast
import inspect
import math
import os

import numpy as np
import pytest

import dgd_jax
from dgd_jax import privacy
from dgd_jax.configs import baseline as baseline_config
from dgd_jax.configs import common
from dgd_jax.configs import dpdfd as dpdfd_config
from dgd_jax.configs import dpsgd as dpsgd_config
from dgd_jax.configs import ldp as ldp_config
from dgd_jax.configs import teacher_sweep as teacher_sweep_config
from dgd_jax.configs import teachers as teachers_config
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan.context import Context, Method, StageSpec
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runner import sweep
from dgd_jax.runtime.errors import ConfigError

import tiny_configs

PACKAGE = os.path.dirname(dgd_jax.__file__)


def _modules() -> dict[str, str]:
  """dgd_jax's module names -> file paths."""
  out = {}
  for root, _, files in os.walk(PACKAGE):
    for f in files:
      if f.endswith(".py"):
        rel = os.path.relpath(os.path.join(root, f), os.path.dirname(PACKAGE))[:-3]
        name = rel.replace(os.sep, ".").removesuffix(".__init__")
        out[name] = os.path.join(root, f)
  return out


def _imports(path: str, modules: dict[str, str]) -> set[str]:
  """The dgd_jax modules a file imports, anywhere in it (deferred imports included)."""
  out = set()
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.Import):
      out |= {a.name for a in node.names if a.name in modules}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for a in node.names:
        full = f"{node.module}.{a.name}"
        out.add(full if full in modules else node.module)
  return {m for m in out if m in modules}


ARCHITECTURE = os.path.join(os.path.dirname(PACKAGE), "docs", "ARCHITECTURE.md")


def _layers() -> list[tuple[str, list[str]]]:
  """docs/ARCHITECTURE.md's layer table, top layer first: (layer, module patterns), a pattern
  being a module under dgd_jax ('train') or a package and everything in it ('privacy.*')."""
  text = open(ARCHITECTURE).read()
  table = text[text.index("<!-- layers -->"):text.index("<!-- /layers -->")]
  rows = [line.strip().strip("|").split("|") for line in table.splitlines()
          if line.startswith("| ") and not line.startswith("| layer")]
  return [(layer.strip(), [m.strip(" `") for m in modules.split(",")])
          for layer, modules in rows]


def _layer_of(modules: dict[str, str]) -> dict[str, int]:
  """Each module's layer (0 the bottom); an exact name outranks a package pattern."""
  layers = _layers()
  depth = {}
  for height, (_, patterns) in enumerate(reversed(layers)):
    for p in patterns:
      depth[p] = height
  out = {}
  for name in modules:
    short = name.removeprefix("dgd_jax").lstrip(".") or "dgd_jax"
    matches = [p for p in depth if p == short or (p.endswith(".*") and
               (short == p[:-2] or short.startswith(p[:-1])))]
    exact = [p for p in matches if p == short]
    assert len(exact or matches) == 1, f"{name}: listed {exact or matches or 'nowhere'} in " \
                                       "docs/ARCHITECTURE.md's layer table"
    out[name] = depth[(exact or matches)[0]]
  return out


def test_the_layer_table_lists_every_module_once_and_nothing_else():
  modules = _modules()
  layer_of = _layer_of(modules)
  assert set(layer_of) == set(modules)
  shorts = {n.removeprefix("dgd_jax").lstrip(".") or "dgd_jax" for n in modules}
  for _, patterns in _layers():
    for p in patterns:  # no stale entry
      assert p in shorts or (p.endswith(".*") and p[:-2] in shorts), p


def test_each_module_imports_only_its_own_layer_or_lower_ones():
  modules = _modules()
  layer_of = _layer_of(modules)
  names = [layer for layer, _ in reversed(_layers())]
  bad = [f"{name} ({names[layer_of[name]]}) imports {m} ({names[layer_of[m]]})"
         for name, path in modules.items() for m in sorted(_imports(path, modules))
         if layer_of[m] > layer_of[name]]
  assert not bad, "\n".join(bad)


# The config-free library: docs/ARCHITECTURE.md's library folders.
LIBRARY = ("audit", "training", "synthesis", "labelling", "runtime", "privacy", "models")


def test_the_library_folders_never_read_a_config():
  """No library module imports ml_collections or a config file, takes or names a ``config``
  or builds a settings object ``from_config``: what a config makes of the library is
  plan/'s."""
  bad = []
  for name, path in _modules().items():
    if name.split(".")[1:2] and name.split(".")[1] in LIBRARY:
      for node in ast.walk(ast.parse(open(path).read())):
        imported = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(m.startswith(("ml_collections", "dgd_jax.configs")) for m in imported):
          bad.append(f"{name} imports {imported}")
        if isinstance(node, ast.arg) and node.arg == "config":
          bad.append(f"{name} takes a config")
        if isinstance(node, ast.Name) and node.id == "config":
          bad.append(f"{name} reads 'config' (line {node.lineno})")
        if isinstance(node, ast.FunctionDef) and node.name == "from_config":
          bad.append(f"{name} defines from_config (line {node.lineno})")
  assert not bad, "\n".join(bad)
  assert {m.split(".")[1] for m in _modules() if m.count(".")} >= set(LIBRARY)


def test_stages_import_neither_each_other_nor_the_pipeline():
  modules = _modules()
  forbidden = {f"dgd_jax.runner.{m}" for m in ("pipeline", "methods", "sweep", "report")}
  for name, path in modules.items():
    if name.startswith("dgd_jax.stages."):
      imported = _imports(path, modules)
      bad = {m for m in imported if m in forbidden or m.startswith("dgd_jax.stages")}
      assert not bad, f"{name} imports {sorted(bad)}"


def _folder(name: str, path: str) -> str:
  """The folder (first package under dgd_jax) a module at ``path`` lives in; 'dgd_jax' for
  the flat ones."""
  parts = name.split(".")
  return parts[1] if len(parts) > 2 or (len(parts) == 2 and path.endswith("__init__.py")) \
      else "dgd_jax"


def test_no_two_folders_import_each_other():
  """Folders form a directed graph without a tie: where one folder imports another, the
  other imports nothing from it (each arrow points down the house)."""
  modules = _modules()
  arrows: dict[tuple[str, str], list[str]] = {}
  for name, path in modules.items():
    for m in _imports(path, modules):
      a, b = _folder(name, path), _folder(m, modules[m])
      if a != b:
        arrows.setdefault((a, b), []).append(f"{name} -> {m}")
  ties = [f"{a} <-> {b}: {arrows[a, b]} and {arrows[b, a]}"
          for a, b in arrows if a < b and (b, a) in arrows]
  assert not ties, "\n".join(ties)


def test_no_import_cycle():
  modules = _modules()
  graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
  state = {}

  def visit(name, path):
    state[name] = "open"
    for nxt in sorted(graph[name]):
      if state.get(nxt) == "open":
        raise AssertionError(f"import cycle: {' -> '.join(path + [name, nxt])}")
      if nxt not in state:
        visit(nxt, path + [name])
    state[name] = "done"

  for name in sorted(graph):
    if name not in state:
      visit(name, [])


def test_every_stage_takes_a_typed_context():
  for name, spec in methods.STAGES.items():
    first = next(iter(inspect.signature(spec.run).parameters.values()))
    assert first.annotation in (Context, "Context"), name


def test_every_method_names_registered_stages_in_a_valid_order(npz_file):
  for m in methods.METHODS.values():
    assert set(m.stages) <= set(methods.STAGES), m.name
    assert m.headline_stage in m.stages + (None,), m.name
    assert m.privacy_stage in m.stages + (None,), m.name
    assert (m.privacy_stage is None) == (m.releases is None), m.name
  config = tiny_configs.dgd(npz_file)
  order = methods.plan_stages(config)
  for i, name in enumerate(order):  # every stage comes after the stages it reads
    assert set(methods.requirements(name, config)) <= set(order[:i]), name


def test_the_vae_is_trained_only_when_the_student_reads_it(npz_file):
  """Eq. 6 is the student's only reader of the VAE (stages/student.py): with its weights at 0
  the VAE stage is not planned, with any of them on it is, before the queries' student."""
  config = tiny_configs.dgd(npz_file)
  assert "vae" not in methods.plan_stages(config)
  for weight in ("w_normal", "w_tangent", "w_entropy"):
    on = tiny_configs.dgd(npz_file)
    on.student[weight] = 0.1
    order = methods.plan_stages(on)
    assert "vae" in order and order.index("vae") < order.index("student"), weight
  assert methods.plan_stages(config, ("vae",))[-1] == "vae"  # still there when asked for


def test_config_slices_include_the_inputs_slices(npz_file):
  config = tiny_configs.dgd(npz_file)
  student = methods.config_keys("student", config)
  for name in ("queries", "vae", "teachers", "generator", "baseline"):
    assert set(methods.config_keys(name, config)) <= set(student), name


def test_a_calibrated_private_baseline_is_not_reused_at_another_budget(npz_file):
  """The private baseline's noise is calibrated to the budget it shares with the queries:
  its slice (and so the generator's) changes with either, while the plain baseline's
  does not."""
  from dgd_jax.configs import dgd as dgd_config_file
  from dgd_jax.runtime.files import fingerprint

  def slices(arg, **privacy):
    config = dgd_config_file.get_config(f"npz:{npz_file},{arg}")
    config.privacy.update(privacy)
    return {n: fingerprint(methods.stage_slice(n, config))
            for n in ("baseline", "generator")}

  private = slices("cpu,private_baseline")
  assert slices("cpu,private_baseline", max_epsilon=3.0) != private
  assert slices("cpu,eps3,private_baseline")["baseline"] != private["baseline"]
  assert slices("cpu") == slices("cpu", max_epsilon=3.0)


def _all_method_configs(npz_file):
  teachers = teachers_config.get_config(f"npz:{npz_file},cpu")
  teachers.num_teachers = 4
  dpsgd = dpsgd_config.get_config(f"npz:{npz_file},eps3")
  dpsgd.dpsgd.batch_size = 128  # of the fixture's 512 examples
  return {
      "baseline": baseline_config.get_config(f"npz:{npz_file},cpu"),
      "teachers": teachers,
      "teacher_sweep": teacher_sweep_config.get_config(f"npz:{npz_file},cpu"),
      "dgd": tiny_configs.dgd(npz_file),
      "pate": tiny_configs.pate(npz_file),
      "dpdfd": dpdfd_config.get_config(f"npz:{npz_file},cpu,direct"),
      "ldp": ldp_config.get_config(f"npz:{npz_file},cpu"),
      "dpsgd": dpsgd,
  }


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_accounting_only_sweep_works_for_every_method(npz_file, tmp_path):
  """Each grid point's row is the epsilon of that point's releases (the method record's, on
  the point's config, accounted by hand here), under every accountant, for the claimed
  relation with the largest one, a column per relation; nothing is trained."""
  configs = _all_method_configs(npz_file)
  assert set(configs) == set(methods.METHODS)
  deltas, moved = (1e-5, 1e-7), set()
  for name, config in configs.items():
    m = methods.METHODS[name]
    if m.releases is None:
      rows = sweep.run(config, str(tmp_path / name), [(("seed",), [(0,), (1,)])],
                       accounting_only=True)
      assert [r["epsilon"] for r in rows] == [math.inf, math.inf], name
      assert not [d for d in os.listdir(tmp_path / name) if d.startswith("seed=")], name
      continue
    rows = sweep.run(config, str(tmp_path / name), [(("privacy.delta",), [(d,) for d in deltas])],
                     accounting_only=True)
    assert len(rows) == 2, name
    # the relation columns are under the config's accountant (its data-independent one)
    accountant = config.privacy.accountant
    accountant = "rdp" if accountant in privacy.DATA_DEPENDENT_ONLY else accountant
    for row, delta in zip(rows, deltas):
      # the config a run at this point uses ('auto' plans for its delta)
      point = plan_checks.run_config(common.with_overrides(config, {"privacy.delta": delta}))
      relations = m.neighbours(point)
      ledgers = {r: privacy.PrivacyLedger(m.releases(point, r)) for r in relations}
      by_relation = {r: ledger.epsilon(delta, accountant, data_dependent=False).epsilon
                     for r, ledger in ledgers.items()}
      assert {k for k in row if k.startswith("epsilon[")} == {
          f"epsilon[{r}]" for r in relations}, name
      for r, eps in by_relation.items():
        assert 0 < eps < math.inf and row[f"epsilon[{r}]"] == pytest.approx(eps), (name, r)
      headline = max(by_relation, key=by_relation.get)
      assert row["neighbours"] == headline and row["rdp"] == pytest.approx(ledgers[
          headline].epsilon(delta, "rdp", data_dependent=False).epsilon), name
    if rows[1]["rdp"] != pytest.approx(rows[0]["rdp"]):
      moved.add(name)
    assert not [d for d in os.listdir(tmp_path / name) if d.startswith("delta=")], name
  # a sweep that ignored its axis would fail above: the uncalibrated methods' epsilon moves
  assert {"dgd", "pate"} <= moved, moved


# A toy method, in the test's own "module": a stage that fits class means and releases them
# once through a Gaussian mechanism (accounted as one GNMax-like Gaussian release).
TOY_SIGMA = 5.0


def toy_run(ctx: Context) -> dict:
  data = ctx.dataset
  x = data.x_train.reshape(len(data.x_train), -1)
  means = np.stack([x[data.y_train == k].mean(0) for k in range(data.num_classes)])
  x_test = data.x_test.reshape(len(data.x_test), -1)
  predicted = np.argmin(((x_test[:, None] - means[None]) ** 2).sum(-1), -1)
  ledger = privacy.PrivacyLedger(toy_releases(ctx.config))
  return {"test_accuracy": float(np.mean(predicted == data.y_test)), "num_steps": 1,
          "privacy": privacy.relations_json({"replace_one": ledger}, ctx.config.privacy.delta,
                                            ctx.config.privacy.accountant)}


def toy_releases(config, neighbours: str = "replace_one") -> list:
  return [privacy.GNMaxQueries(TOY_SIGMA, 1, neighbours=neighbours)]


@pytest.mark.integration
def test_a_toy_method_is_one_record_plus_its_own_module(npz_file, tmp_path, monkeypatch):
  monkeypatch.setitem(methods.STAGES, "toy", StageSpec(toy_run, ("toy",)))
  monkeypatch.setitem(methods.METHODS, "toy", Method(
      "toy", ("toy",), privacy_note="Toy: covers the one noisy release.",
      covers="{num_steps} Gaussian release of the class means",
      headline_stage="toy", privacy_stage="toy", releases=toy_releases))
  config = baseline_config.get_config(f"npz:{npz_file},cpu")
  config.method = "toy"
  config.toy = {"unused": 0}
  config.privacy = {"delta": 1e-5, "accountant": "rdp", "max_epsilon": float("inf"),
                    "allow_large_delta": False}
  report = pipeline.run(config, str(tmp_path / "t"))
  assert report["method"] == "toy" and 0 <= report["test_accuracy"] <= 1
  expected = privacy.PrivacyLedger(toy_releases(config)).epsilon(1e-5, "rdp").epsilon
  assert report["epsilon"] == pytest.approx(expected) and report["accountant"] == "rdp"
  assert report["covers"]["not_covered"][0] == "Toy: covers the one noisy release."
  md = (tmp_path / "t" / "report.md").read_text()
  assert md.count("Toy: covers the one noisy release.") == 1  # the note once
  # The budget guard reads the same records before anything runs.
  config.privacy.max_epsilon = expected / 2
  with pytest.raises(ConfigError, match="above the maximum epsilon"):
    pipeline.run(config, str(tmp_path / "u"))
  assert not (tmp_path / "u" / "toy").exists()


def test_report_md_states_dgds_exclusions_once(finished_dgd):
  """The method's note says what DGD's epsilon leaves out, in the one text the release
  records also end with (``privacy.TEACHER_EXCLUSIONS``, for the privacy command); report.md
  says it once, in the note, and shows the records without it."""
  _, workdir, _ = finished_dgd
  md = open(os.path.join(workdir, "report.md"), encoding="utf-8").read()
  assert md.count(privacy.TEACHER_EXCLUSIONS) == 1
  assert md.count("the VAE trained on them") == 1
  assert "- Covers the noisy label answers only." in md  # the record, without them
