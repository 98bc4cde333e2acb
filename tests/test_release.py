"""``<workdir>/release/``: it publishes a model only where the run's epsilon covers everything the
model learnt from (``runner.release.PUBLISH``, the table README.md and PRIVACY.md print), and
nothing the epsilon does not cover (``report_checks.assert_release``)."""
from __future__ import annotations

import json
import os
import re

import pytest

import tiny_configs
from dgd_jax.runner import methods, pipeline, release
from dgd_jax.runner import report as report_lib
from presets import CPU_PRESETS, PRESETS
from report_checks import assert_noiseless_named
from test_dpdfd import tiny as tiny_dpdfd
from test_dpsgd import tiny as tiny_dpsgd

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_privacy_md_prints_the_publish_table():
  with open(os.path.join(_ROOT, "PRIVACY.md")) as f:
    assert release.publish_table() in f.read(), "PRIVACY.md: paste release.publish_table()"


def test_the_readme_table_says_what_each_row_releases():
  with open(os.path.join(_ROOT, "README.md")) as f:
    rows = [line for line in f.read().splitlines() if line.startswith("| ")]
  for name, preset, overrides in release.PUBLISH:
    config = f"`{preset.replace(':', ':<data>,')}`" + "".join(
        f" `{k}={v}`" for k, v in overrides.items())
    line = [r for r in rows  # a row without overrides: no override follows its config
            if config in r and (overrides or not r.split(config)[1].startswith(" `"))]
    assert len(line) == 1, (name, config, line)
    released = not methods.model_withheld(release.publish_config(preset, overrides))
    assert ("`model.msgpack`" in line[0].split(" | ")[-1]) == released, line[0]


def _flags(arg: str) -> set[str]:
  """A preset's tokens that change what it releases: not its dataset, size or budget."""
  return {t for t in arg.split(",")[1:] if t not in ("cpu", "paper", "standard")
          and not re.fullmatch(r"eps\d+", t)}


def _row(module: str, arg: str):
  """The ``PUBLISH`` row without overrides for the preset ``arg`` of ``module``: the one whose
  flags the preset has, the most of them."""
  fits = [(len(_flags("data," + p.split(":")[1])), p) for _, p, overrides in release.PUBLISH
          if p.startswith(f"{module}.py:") and not overrides
          and _flags("data," + p.split(":")[1]) <= _flags(arg)]
  return max(fits)[1] if fits else None


@pytest.mark.parametrize("module, arg", sorted(
    {(m, a) for m, a, _ in PRESETS} | {(m, f"fashion_mnist,{a}") for m, a in CPU_PRESETS}))
def test_every_preset_is_withheld_or_released_as_its_table_row_says(module, arg):
  from importlib import import_module  # pylint: disable=g-import-not-at-top
  row = _row(module, arg)
  config = import_module(f"dgd_jax.configs.{module}").get_config(arg)
  withheld = methods.model_withheld(config)
  if row is None:  # teachers alone: no headline model
    assert methods.method(config).headline_stage is None and withheld == ""
    return
  assert withheld == methods.model_withheld(release.publish_config(row, {})), (module, arg, row)


def test_public_paths_are_cut_to_their_last_part():
  cut = release._public  # pylint: disable=protected-access
  assert cut({"dataset": "npz:/home/u/my data/x.npz", "checkpoint": "/m/vit.npz"}) == {
      "dataset": "npz:x.npz", "checkpoint": "vit.npz"}
  assert cut({"d": "from npz:/home/u/x.npz", "m": "idx:/usr/share/fmnist/"}) == {
      "d": "from npz:x.npz", "m": "idx:fmnist"}
  for text in ("add/remove-one", "sigma C / 2", "1/N", "https://github.com/a/b"):
    assert cut(text) == text
  assert cut({"train_seconds": 1.0, "a": [{"stage_seconds": 2.0, "b": 1}]}) == {"a": [{"b": 1}]}


def _tiny(preset: str, overrides: dict, data: str):
  """The tiny config of each ``PUBLISH`` row."""
  module, arg = preset.split(":")
  if module == "dgd.py":
    config = (tiny_configs.dgd_private_baseline if "private_baseline" in arg
              else tiny_configs.dgd)(data)
  elif module == "pate.py":
    config = tiny_configs.pate(data)
  elif module == "dpdfd.py":
    config = tiny_dpdfd(data, arg.removeprefix("cpu"))
  elif module == "dpsgd.py":
    config = tiny_dpsgd(data)
  elif module == "ldp.py":
    config = tiny_configs.ldp(data)
  else:
    config = tiny_configs.baseline(data)
  for name, value in overrides.items():
    block, field = name.split(".")
    config[block][field] = value
  return config


# The rows whose tiny run no other test makes: CI's second tier runs these; the default suite's
# own tiny runs of the others (DGD, PATE, DPDFD, DP-SGD, LDP, the baseline) check their release/
# against model_withheld in report_checks.assert_release; -m slow runs every row here.
ONLY_HERE = ("DGD end to end", "PATE with the private set as pool",
             "DPDFD ensemble (synthetic inputs)", "DPDFD direct (label DP)")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("row", [
    pytest.param(r, marks=[pytest.mark.extended] if r[0] in ONLY_HERE else [], id=r[0])
    for r in release.PUBLISH])
def test_every_methods_release_holds_what_the_table_says(row, npz_file, tmp_path):
  _, preset, overrides = row
  expected = methods.model_withheld(release.publish_config(preset, overrides))
  config = _tiny(preset, overrides, npz_file)
  assert methods.model_withheld(config) == expected  # the tiny run is the row's case
  workdir = str(tmp_path / "run")
  pipeline.run(config, workdir)
  report = assert_noiseless_named(workdir)  # every check of release/ (report_checks)
  assert report["model_withheld"] == expected
  folder = os.path.join(workdir, "release")
  assert os.path.exists(os.path.join(folder, release.MODEL)) == (not expected), os.listdir(folder)
  with open(os.path.join(folder, "report.json")) as f:
    public = json.load(f)
  assert (public["test_accuracy"] is None) == bool(expected)
  if not expected:
    assert public["model"]["file"] == release.MODEL and public["test_accuracy"] is not None


def test_a_data_dependent_headline_is_replaced_by_the_tightest_data_independent_one(
    finished_dgd):
  _, workdir, _ = finished_dgd
  report = assert_noiseless_named(workdir)  # DGD's release/: its student withheld
  stage = report["stages"]["queries"]["privacy"]
  accountant = stage["data_dependent_accountants"][0]
  report = {**report, "accountant": accountant, "epsilon_is_data_dependent": True,
            "epsilon": stage["epsilons"][accountant]}
  report["privacy"] = {**report["privacy"], "accountant": accountant,
                       "epsilon": stage["epsilons"][accountant]}
  import ml_collections  # pylint: disable=g-import-not-at-top
  public = release.public_report(ml_collections.ConfigDict(report["config"]), report)
  best = min(report["epsilons"], key=report["epsilons"].get)
  assert public["accountant"] == best and public["epsilon"] == report["epsilons"][best]
  assert public["privacy"]["epsilon"] == report["epsilons"][best]
  assert not public["epsilon_is_data_dependent"]
  assert f"privacy.epsilon ({accountant})" in public["withheld"]
  assert repr(stage["epsilons"][accountant]) not in json.dumps(public)
  md = report_lib.markdown(workdir, public)
  assert "DATA-DEPENDENT" not in md and f"({best} accountant" in md
