"""The front page's commands run as written: every fenced shell command of
README.md is checked without training. A ``python -m dgd_jax.<module>`` command's flags must
be ones the module defines (its ``--help``), its config argument must load through the config
file, and each ``--config.<field>=<value>`` / ``--set=<field>=...`` must name a field of that
config; the privacy planner's commands run whole. Launcher scripts must exist and parse
(``bash -n``). The Python snippet writes its npz, which the loader reads. Every config argument
quoted in README.md loads, and no document links to a file that is not in the repository.
"""
from __future__ import annotations

import functools
import importlib
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = ("README.md", "RESULTS.md", "PRIVACY.md", "BUILD.md", "docs/ARCHITECTURE.md",
        "docs/PERFORMANCE.md", "docs/CLI.md")


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return f.read()


def fenced(text: str, languages=("bash", "sh", "")) -> list[str]:
  """The commands of the fenced blocks in ``languages``: continuation lines joined, comments
  and blank lines dropped."""
  commands = []
  for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
    if lang not in languages:
      continue
    body = body.replace("\\\n", " ")
    for line in body.splitlines():
      line = re.sub(r"\s+#.*$", "", line).strip()
      if line and not line.startswith("#"):
        commands.append(line)
  return commands


def readme_commands() -> list[str]:
  return [part.strip() for c in fenced(_read("README.md"), ("bash", "sh"))
          for part in c.split("&&")]


@functools.cache
def module_help(module: str) -> str:
  """``python -m <module> --help`` (absl prints the module's flags and exits 1)."""
  run = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=False)
  assert run.returncode in (0, 1), run.stderr[-2000:]
  return run.stdout + run.stderr


def load_config(spec: str):
  """``<file>.py:<argument>`` (under dgd_jax/configs/) through its get_config."""
  file, _, arg = spec.partition(":")
  module = importlib.import_module(f"dgd_jax.configs.{os.path.basename(file)[:-3]}")
  return module.get_config(arg)


def check_field(config, dotted: str, value: str | None = None) -> None:
  node = config
  for name in dotted.split("."):
    assert name in node, f"{dotted}: no field {name!r} in the config"
    node = node[name]
  if value is not None and isinstance(node, (bool, int, float)) and "," not in value:
    if isinstance(node, bool):
      assert value.lower() in ("true", "false", "0", "1"), (dotted, value)
    else:
      float(value)


def check_python_module(argv: list[str]) -> None:
  module, args = argv[2], argv[3:]
  help_text = module_help(module)
  config = None
  for arg in args:
    if not arg.startswith("--"):
      continue  # a subcommand (bench teachers)
    name, _, value = arg[2:].partition("=")
    if name == "config":
      config = load_config(value)
    elif name.startswith("config."):
      assert config is not None, f"{arg} before --config"
      check_field(config, name[len("config."):], value)
    elif name == "set":
      fields, _, _ = value.partition("=")
      for field in fields.split(","):
        check_field(config, field)
    else:
      assert re.search(rf"--(\[no\])?{re.escape(name)}\b", help_text), (
          f"python -m {module} has no flag --{name}")


def test_readme_has_the_quick_start_and_own_data_early_and_stays_short():
  text = _read("README.md")
  lines = text.splitlines()
  assert len(lines) <= 260
  def line_of(s):
    return next(i for i, l in enumerate(lines) if s in l)
  assert line_of("## What each method's epsilon covers") < line_of("%")  # before any number
  assert line_of("## Quick start") < 80 and line_of("## Your own data") < 110
  assert "frontier.png" in text and "dpsgd.py" in text and "npz:" in text


@pytest.mark.integration
@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_as_written(command, tmp_path):
  argv = shlex.split(command)
  if argv[:2] == ["bash", "launch/quickstart.sh"] or argv[0] == "bash":
    script = os.path.join(ROOT, argv[1])
    assert os.path.isfile(script), argv[1]
    subprocess.run(["bash", "-n", script], check=True)
  elif argv[:2] == ["python", "-m"] and argv[2].startswith("dgd_jax"):
    check_python_module(argv)
    if argv[2] == "dgd_jax.privacy":  # cheap: run it whole
      run = subprocess.run([sys.executable] + argv[1:], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, check=True)
      assert "epsilon" in run.stdout
  elif argv[0] == "python" and argv[1].startswith("examples/"):
    assert os.path.isfile(os.path.join(ROOT, argv[1])), argv[1]  # run by test_examples.py
  elif argv[0].startswith("python3") and argv[1:3] == ["-m", "venv"]:
    pass  # creates the environment this test runs in
  elif argv[0] == "pip":
    extras = re.search(r"\[([\w,]+)\]", command).group(1).split(",")
    setup = _read("setup.cfg")
    for extra in extras:
      assert re.search(rf"^{extra} =", setup, re.M), extra
  elif argv[0] == ".":
    pass  # source the environment
  else:
    pytest.fail(f"README command of an unknown kind: {command}")


@pytest.mark.integration
def test_readme_privacy_planner_gives_the_quoted_noise():
  """'prints the least noise those 4,000 releases need within eps 10 (sigma 44.71...)'."""
  command = next(c for c in readme_commands() if "--target_epsilon=10" in c)
  run = subprocess.run([sys.executable] + shlex.split(command)[1:], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=True)
  sigma = float(re.search(r"min --noise_scale = ([\d.]+)", run.stdout).group(1))
  assert round(sigma, 2) == 44.71
  assert "(sigma 44.71," in _read("README.md")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  return tmp_path


@pytest.mark.integration
def test_readme_npz_example_end_to_end_without_training(in_tmp):
  """The snippet's file is read by the npz loader, and the README's own-data command's config
  names it: 8,000 private images, 10,000 test images."""
  fmnist = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
  # As every real-data test: a missing dataset fails loudly rather than skipping.
  assert os.path.exists(fmnist), ("Fashion-MNIST IDX files missing: apt-get install "
                                  "dataset-fashion-mnist (.ci/run does this).")
  from dgd_jax.data import loaders
  snippet = "\n".join(re.findall(r"^```python\n(.*?)^```", _read("README.md"), re.M | re.S))
  exec(compile(snippet, "README.md", "exec"), {"__name__": "readme"})  # pylint: disable=exec-used
  command = next(c for c in readme_commands() if "npz:" in c)
  spec = re.search(r"--config=(\S+)", command).group(1)
  config = load_config(spec)
  dataset = loaders.load_dataset(config.dataset)
  assert (len(dataset.x_train), len(dataset.x_test)) == (8000, 10000)


def test_every_config_argument_quoted_in_readme_loads():
  specs = set(re.findall(r"`(?:dgd_jax/configs/)?(\w+\.py:[\w:./,-]+)", _read("README.md")))
  specs = {s for s in specs if "..." not in s}
  assert len(specs) >= 15
  for spec in sorted(specs):
    load_config(spec)


@pytest.mark.parametrize("doc", DOCS)
def test_docs_link_only_to_files_in_the_repository(doc):
  text = _read(doc)
  base = os.path.dirname(os.path.join(ROOT, doc))
  for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
    if re.match(r"\w+://", target):
      continue
    assert os.path.exists(os.path.join(base, target)), f"{doc} links to missing {target}"


def test_every_test_name_the_documents_cite_exists():
  """A test a document cites as the check of a claim (`test_...`, a parametrised id allowed)
  is defined in tests/; a cited file tests/test_*.py exists."""
  defined = set()
  for name in os.listdir(os.path.join(ROOT, "tests")):
    if name.endswith(".py"):
      defined |= set(re.findall(r"^def (test_\w+)", _read(f"tests/{name}"), re.M))
  for doc in DOCS:
    text = _read(doc)
    files = set(re.findall(r"tests/(test_\w+)\.py", text))
    for path in files:
      assert os.path.exists(os.path.join(ROOT, "tests", f"{path}.py")), (doc, path)
    cited = set(re.findall(r"`(test_\w+)(?:\[[^\]`]*\])?`", text)) - files
    assert cited <= defined, (doc, sorted(cited - defined))



def _glance_table() -> dict[str, dict[int, str]]:
  """README's "Results at a glance" table: row label -> {1, 3, 10: the cell's text}."""
  text = _read(README).split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
  rows = [line.strip().strip("|").split(" | ") for line in text.splitlines()
          if line.startswith("| ") and not line.startswith("| method")]
  return {r[0].strip(): dict(zip((1, 3, 10), (c.strip() for c in r[1:4]))) for r in rows}


def test_the_readme_table_and_the_committed_measured_cells_agree():
  """Every cell of docs/measured.csv (the frontier picture's numbers) stands in its README row
  and column with its epsilon and accountant, and every README cell's first number is one of
  them."""
  from dgd_jax.cli import compare  # pylint: disable=g-import-not-at-top
  cells = compare.read_measured(os.path.join(ROOT, "docs", "measured.csv"))
  table = _glance_table()
  for c in cells:
    text = table[c["readme_row"]][int(c["column"])]
    m = re.search(re.escape(c["accuracy_percent"]) + r"%(?: at ([\d.]+))?(?: `(\w+)`)?", text)
    assert m, (c["readme_row"], c["column"], c["accuracy_percent"], text)
    if m.group(1):
      assert float(m.group(1)) == c["epsilon"], (c, text)
    else:  # the cell names only its row: the epsilon is the column's
      assert abs(c["epsilon"] - int(c["column"])) <= 0.01 * int(c["column"]), (c, text)
    assert m.group(2) in (None, c["accountant"]), (c, text)
  for label, row in table.items():
    for column, text in row.items():
      first = re.search(r"(\d+\.\d+)%", text)
      if first:
        assert any(c["readme_row"] == label and int(c["column"]) == column
                   and c["accuracy_percent"] == first.group(1) for c in cells), (label, column)
