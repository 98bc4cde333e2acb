"""The config argument's grammar (configs.common.parse_arg): every config file accepts its own
tokens, in either form, and refuses anything else in one line naming the valid tokens."""
from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys

import pytest

from dgd_jax.configs import common
from dgd_jax.runtime.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG_FILES = sorted(p.name for p in (REPO / "dgd_jax" / "configs").glob("*.py")
                      if p.name not in ("__init__.py", "common.py"))


def get_config(file: str, arg: str):
  return importlib.import_module(f"dgd_jax.configs.{file.removesuffix('.py')}").get_config(arg)


def refusal(file: str, arg: str) -> str:
  with pytest.raises(ConfigError) as e:
    get_config(file, arg)
  message = str(e.value)
  assert "\n" not in message
  return message


def test_every_config_file_states_its_grammar():
  assert set(common.grammars()) == set(CONFIG_FILES)


def test_an_unknown_budget_is_refused_with_the_valid_ones():
  message = refusal("dgd.py", "fashion_mnist,cpu,eps5")
  assert "unknown token 'eps5'" in message
  assert "budget eps10|eps3|eps1" in message


def test_a_misspelt_preset_names_the_closest_match():
  message = refusal("pate.py", "fashion_mnist,cpuu")
  assert "unknown token 'cpuu' (did you mean 'cpu'?)" in message
  assert "preset paper|cpu" in message


def test_two_budgets_are_refused():
  assert "two values of budget, 'eps1' and 'eps3'" in refusal("dgd.py", "fashion_mnist,eps1,eps3")
  assert "two values of budget" in refusal("dpsgd.py", "fashion_mnist,eps10,eps1")
  assert "two values of preset" in refusal("dgd.py", "fashion_mnist,cpu,standard")


def test_a_flag_of_another_method_names_its_file():
  assert "unknown token 'ensemble' (it belongs to dpdfd.py)" in refusal(
      "dgd.py", "fashion_mnist,cpu,ensemble")
  assert "it belongs to dgd.py" in refusal("pate.py", "fashion_mnist,private_baseline")


def test_the_dataset_is_the_first_token_only():
  assert get_config("baseline.py", "mnist,cpu").dataset == "mnist"
  assert get_config("baseline.py", "").dataset == common.DEFAULT_DATASET
  assert "the dataset is the first token only" in refusal("baseline.py", "fashion_mnist,mnist")
  assert "start with the dataset, e.g. 'fashion_mnist,cpu,eps1'" in refusal("dgd.py", "cpu,eps1")


def test_a_flag_without_the_token_it_needs_is_refused():
  assert "'generator' needs 'ensemble'" in refusal("dpdfd.py", "fashion_mnist,generator")
  assert get_config("dpdfd.py", "fashion_mnist,ensemble,generator").dpdfd.inputs == "generator"
  assert "two values of teacher" in refusal("dpdfd.py", "fashion_mnist,ensemble,direct")


def outcome(file: str, arg: str):
  """The config as a dict, or the type of the error refusing it."""
  try:
    return get_config(file, arg).to_dict()
  except ConfigError as e:
    return type(e)


def as_pair(grammar: common.Grammar, token: str) -> str:
  slot = next((c.name for c in grammar.slots if token in c.values), None)
  return f"{slot}={token}" if slot else f"{token}=true"


@pytest.mark.parametrize("file", CONFIG_FILES)
def test_key_value_pairs_mean_the_same_as_tokens(file):
  grammar = common.grammars()[file]
  for token in grammar.tokens():
    needed = [n for t, n in grammar.requires if t == token]
    positional = outcome(file, ",".join(["mnist", token] + needed))
    pairs = outcome(file, ",".join([as_pair(grammar, t) for t in [token] + needed]
                                   + ["dataset=mnist"]))
    assert positional == pairs, (file, token)
    if token in grammar.flags:
      assert outcome(file, f"mnist,{token}=false") == outcome(file, "mnist"), (file, token)
  assert get_config(file, "dataset=mnist,smoke=true").smoke


def test_key_value_pairs_are_checked():
  assert "unknown key 'budgt' (did you mean 'budget'?)" in refusal("dgd.py", "mnist,budgt=eps1")
  assert "unknown budget 'eps5'" in refusal("dgd.py", "dataset=mnist,budget=eps5")
  assert "plus=true or plus=false" in refusal("dgd.py", "mnist,plus=maybe")
  assert "two datasets" in refusal("dgd.py", "mnist,dataset=fashion_mnist")


def test_the_catalog_names_every_file_with_its_tokens():
  catalog = common.catalog()
  for file, grammar in common.grammars().items():
    line = next(l for l in catalog.splitlines() if l.strip().startswith(file))
    assert all(token in line for token in grammar.tokens()), file


def _run(*args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=120, check=False)


@pytest.mark.integration
@pytest.mark.parametrize("module", ["dgd_jax.main", "dgd_jax.sweep"])
def test_the_command_line_refuses_a_bad_argument_in_one_line(module, tmp_path):
  result = _run("-m", module, "--config=dgd_jax/configs/dgd.py:fashion_mnist,cpu,eps5",
                f"--workdir={tmp_path}", "--set=seed=1")
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert "'eps5'" in lines[0] and "eps10|eps3|eps1" in lines[0]
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize("override,expected", [
    ("--config.seedd=1", "--config.seedd: the config has no field 'seedd' (did you mean 'seed'?)"),
    ("--config.student.mixupp=1", "(did you mean 'student.mixup'?)"),
    ("--config.seed=x", "--config.seed=x: invalid literal for int()"),
])
@pytest.mark.integration
def test_a_bad_override_is_refused_in_one_line(override, expected, tmp_path):
  result = _run("-m", "dgd_jax.main", "--config=dgd_jax/configs/dgd.py:fashion_mnist,cpu",
                override, f"--workdir={tmp_path}")
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and expected in lines[0], result.stderr
  assert not os.listdir(tmp_path)


@pytest.mark.integration
def test_help_lists_every_config_file():
  result = _run("-m", "dgd_jax.main", "--help")  # absl's --help exits 1
  assert "Traceback" not in result.stderr, result.stderr
  for file, grammar in common.grammars().items():
    assert file in result.stdout
    assert grammar.describe() in result.stdout
