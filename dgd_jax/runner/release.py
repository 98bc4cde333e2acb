"""``<workdir>/release/``: what a run's epsilon lets a user publish, and nothing else.

Everything else in a workdir is private: the noise key, the votes, the teachers, the baseline,
the synthetic inputs, checkpoints, metrics and the full report, whose noiseless diagnostics
are functions of the private data. The release holds

* ``report.json`` and ``report.md``: the run's report without any noiseless statistic
  (``methods.noiseless``: dropped, and named under ``withheld``), without the non-private
  stages' results, the audit's statistics, the timings or local paths, and with a
  data-dependent headline epsilon replaced by the tightest data-independent one;
* ``model.msgpack``: the headline model's variables (flax msgpack; report.json's ``model``
  says which module applies them to which inputs, and ``dgd_jax.load_release`` does it),
  only where the run's epsilon covers everything that model learnt from
  (``methods.model_withheld`` is "");
  elsewhere the model, its accuracy and its curves are withheld, and the report says why and
  which configuration would make it releasable (``PUBLISH``: the table of every method);
* the pictures of the quantities left in that report (e.g. the student's training curve, a
  DPDFD generator's samples).

Its files are readable by all (0644). A run whose privacy audit failed releases nothing (the
folder is removed).
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import os
import re
import shutil

import flax.linen as nn
from flax import serialization

from dgd_jax.configs.common import with_overrides
from dgd_jax.models import adapter
from dgd_jax.plan.context import Context
from dgd_jax.privacy import ledger
from dgd_jax.runtime.workdir import Workdir
from dgd_jax.runner import methods
from dgd_jax.runner import report as report_lib
from dgd_jax.runtime.files import atomic_write, makedirs

FOLDER = "release"
MODEL = "model.msgpack"
# report.json fields that are never released: the audit's statistics on the private set and
# the stages' timings (every other ``*_seconds`` field is dropped too, ``_public``).
PRIVATE_FIELDS = ("audit", "audit_check", "stage_seconds", "wall_seconds")
# A privacy stage's fields that state its accounting, kept where its model is withheld.
ACCOUNTING_FIELDS = ("privacy", "privacy_unit", "num_queries", "answered", "num_steps",
                     "noise_multiplier", "noise_std", "noise_scale", "aggregator", "covered",
                     "ldp_local_epsilon")
# An absolute local path inside a string (e.g. "npz:/home/u/data.npz"); the release keeps its
# last part only. Not "add/remove-one" or "C / 2": a path starts after a space, ':', '=' or '('.
_PATH = re.compile(r"(?<![^\s:=(])/(?:[^\s/,;'\"()]+/)*([^\s/,;'\"()]+)/?")
FILE_MODE, FOLDER_MODE = 0o644, 0o755  # the one folder meant to be shared


def _withhold(report: dict, path: str) -> str:
  """Removes ``path`` ('a.b.c') from the nested ``report``, or all of it but its
  ``methods.RELEASED_PARTS``; returns what was withheld."""
  *parents, leaf = path.split(".")
  node = report
  for p in parents:
    node = node.get(p, {})
  if not isinstance(node, dict) or leaf not in node:
    return path
  parts = methods.RELEASED_PARTS.get(leaf)
  if parts is None:
    del node[leaf]
    return path
  node[leaf] = {k: v for k, v in node[leaf].items() if k in parts}
  return f"{path} (all but its released value and parameters)"


# What ``release/`` holds for each method: (method, config file and preset, config overrides).
# PRIVACY.md prints ``publish_table()`` and README.md's table says what each row's release/
# holds (tests/test_release.py checks both, and runs each row's tiny configuration).
PUBLISH = (
    ("DGD, every preset but private_baseline", "dgd.py:cpu", {}),
    ("DGD end to end", "dgd.py:cpu,private_baseline", {}),
    ("PATE / PATE+, every preset (public pool)", "pate.py:cpu", {}),
    ("PATE with the private set as pool", "pate.py:cpu", {"pool.source": "train"}),
    ("DPDFD (its own generator)", "dpdfd.py:cpu", {}),
    ("DPDFD ensemble (synthetic inputs)", "dpdfd.py:cpu,ensemble", {}),
    ("DPDFD direct (label DP)", "dpdfd.py:cpu,direct", {}),
    ("DP-SGD, every preset", "dpsgd.py:eps3", {}),
    ("LDP", "ldp.py:cpu", {}),
    ("baseline", "baseline.py:cpu", {}),
)


def publish_config(preset: str, overrides: dict, data: str = "npz:data.npz"):
  """The config of a ``PUBLISH`` row ('dgd.py:cpu,private_baseline') on ``data``."""
  module, arg = preset.split(":")
  config_file = importlib.import_module(f"dgd_jax.configs.{module.removesuffix('.py')}")
  return with_overrides(config_file.get_config(f"{data},{arg}"), overrides)


def publish_table() -> str:
  """The markdown table of ``PUBLISH``: what ``release/`` holds for each method and why."""
  lines = ["| method | config | `release/` holds | why |", "|---|---|---|---|"]
  for name, preset, overrides in PUBLISH:
    config = publish_config(preset, overrides)
    reason = methods.model_withheld(config)
    shown = f"`{preset.replace(':', ':<data>,')}`" + "".join(
        f" `{k}={v}`" for k, v in overrides.items())
    holds = ("the report and the model (`model.msgpack`), its accuracy and curves"
             if not reason else "the report and its epsilon; the model is withheld"
             if methods.method(config).privacy_stage
             else "the report only (no central DP release); the model is withheld")
    lines.append(f"| {name} | {shown} | {holds} | "
                 f"{reason or 'the epsilon covers everything the model learnt from'} |")
  return "\n".join(lines) + "\n"


def _reads(name: str, stage: str, config) -> bool:
  """Whether stage ``name`` is ``stage`` or reads its artefacts, directly or not."""
  return name == stage or any(_reads(r, stage, config)
                              for r in methods.requirements(name, config))


def _withhold_model(config, out: dict) -> dict[str, str]:
  """Removes from ``out`` the headline model's accuracy, evaluations and curves, and every
  stage that reads the model, keeping a privacy stage's accounting; returns what it withheld."""
  method = methods.method(config)
  out["test_accuracy"] = None
  what = (f"the {method.headline_stage} model's accuracy, evaluations and curves: the model "
          "is withheld (model_withheld says why)")
  withheld = {}
  for name in list(out.get("stages", {})):
    if not _reads(name, method.headline_stage, config):
      continue
    if name == method.privacy_stage:
      out["stages"][name] = {k: v for k, v in out["stages"][name].items()
                             if k in ACCOUNTING_FIELDS}
      withheld[f"stages.{name} (all but its accounting)"] = what
    else:
      del out["stages"][name]
      withheld[f"stages.{name}"] = what
  return withheld


def _independent_headline(report: dict, p: dict) -> dict[str, str]:
  """Replaces a data-dependent headline epsilon in ``report`` by the tightest data-independent
  one of the same releases (each accountant's bound holds, so their least does); ``p``: the
  privacy stage's ledger JSON. Returns what it withheld."""
  accountant = report["accountant"]
  if not report.get("epsilon_is_data_dependent"):
    return {}
  worst = {a: max(r["epsilons"][a] for r in p["by_neighbours"].values())
           for a in report["epsilons"]}
  best = min(worst, key=worst.get)
  by_neighbours = {rel: r["epsilons"][best] for rel, r in p["by_neighbours"].items()}
  report.update(epsilon=worst[best], accountant=best, epsilon_is_data_dependent=False,
                epsilon_by_neighbours=by_neighbours,
                epsilon_neighbours=max(by_neighbours, key=by_neighbours.get))
  report["privacy"].update(epsilon=worst[best], accountant=best,
                           neighbours=report_lib.neighbours(p, best),
                           epsilon_by_neighbours=by_neighbours)
  report["covers"]["not_covered"] = [
      n for n in report["covers"]["not_covered"]
      if n not in (ledger.DATA_DEPENDENT_WARNING, ledger.REALISED_WARNING)]
  return {f"privacy.epsilon ({accountant})": (
      f"the run's headline under the data-dependent accountant {accountant}, a function of the "
      f"private votes; the release states the tightest data-independent epsilon ({best})")}


# Config fields that hold a local path, maybe after a 'npz:' or 'idx:' prefix.
PATH_FIELDS = ("dataset", "data_dir", "manual_dir", "checkpoint")


def _last_part(value: str) -> str:
  """A path field's value with its local path cut to the last part."""
  prefix, sep, path = value.partition(":") if ":" in value else ("", "", value)
  return prefix + sep + os.path.basename(path.rstrip("/")) if os.path.isabs(path) else value


def _public(value):
  """``value`` without timings (``*_seconds``) and with every absolute path cut to its last
  part (``PATH_FIELDS``, and ``_PATH`` in any other string)."""
  if isinstance(value, dict):
    return {k: _public(_last_part(v) if k in PATH_FIELDS and isinstance(v, str) else v)
            for k, v in value.items() if not str(k).endswith("_seconds")}
  if isinstance(value, list):
    return [_public(v) for v in value]
  if isinstance(value, str):
    return _PATH.sub(r"\1", value)
  if isinstance(value, float) and not math.isfinite(value):
    return repr(value)  # standard JSON: "inf" (a budget guard off), not Infinity
  return value


def public_report(config, report: dict) -> dict:
  """``report`` without what its epsilon does not cover: every noiseless statistic
  (``report['noiseless']``, named under ``withheld``), the non-private stages' results, a
  data-dependent headline epsilon, the headline model's accuracy and curves where the epsilon
  does not cover everything it learnt from (``methods.model_withheld``), the audit, the
  timings and local paths."""
  out = copy.deepcopy(report)
  withheld = {_withhold(out, path): what
              for path, what in (report.get("noiseless") or {}).items()}
  method = methods.method(config)
  out["model_withheld"] = methods.model_withheld(config)
  if out["model_withheld"]:
    withheld.update(_withhold_model(config, out))
  out["model"] = None  # write() names the file it publishes
  if method.privacy_stage in report.get("stages", {}) and "epsilons" in out:
    withheld.update(_independent_headline(out, report["stages"][method.privacy_stage]["privacy"]))
  for field in PRIVATE_FIELDS + tuple(methods.NOISELESS_FIELDS):  # also where None
    out.pop(field, None)
  note = methods.noiseless_note(report["noiseless"]) if report.get("noiseless") else None
  if "covers" in out:
    out["covers"]["not_covered"] = [n for n in out["covers"]["not_covered"] if n != note]
  out["privacy"].pop("not_covered", None)
  out["noiseless"] = {}
  out["withheld"] = dict(sorted(withheld.items()))
  return _public(out)


def _withheld_lines(public: dict) -> list[str]:
  return ["## Withheld from this release", "",
          "Noiseless functions of the private data or the teachers' votes stay in the private "
          "workdir (its report.json names them) and are not published here:", ""] + [
              f"- {path}: {what}" for path, what in public["withheld"].items()] + [""]


def module_text(module) -> str:
  """``module`` as the one-line Python expression that builds it (a Flax module's fields)."""
  values = {f.name: getattr(module, f.name) for f in dataclasses.fields(module)
            if f.name not in ("parent", "name")}
  fields = ", ".join(f"{k}={module_text(v) if isinstance(v, nn.Module) else repr(v)}"
                     for k, v in values.items())
  return f"{type(module).__module__}.{type(module).__qualname__}({fields})"


def model_entry(method, config, num_classes: int, image_shape: tuple) -> dict:
  """report.json's ``model``: the file, and exactly how to apply it without the workdir."""
  module, _, read = method.released_module(config, num_classes)
  entry = {"file": MODEL, "stage": method.headline_stage, "num_classes": num_classes,
           "image_shape": list(image_shape),
           "format": ("flax msgpack of the variables dict: variables = "
                      "flax.serialization.msgpack_restore(open('model.msgpack', 'rb').read()); "
                      "logits = module.apply(variables, inputs)"),
           "module": module_text(module),
           "inputs": (f"float32 [batch, {', '.join(map(str, image_shape))}] images scaled from "
                      "uint8 as x / 127.5 - 1; the module reads " + read),
           "load": ("module, variables, prepare = dgd_jax.load_release('<this folder>'); "
                    "logits = module.apply(variables, prepare(uint8_images))")}
  if isinstance(module, adapter.WithFeatures):
    entry["module_note"] = (
        "your module runs inside dgd_jax.models.WithFeatures, as the run trained it: its "
        "BatchNorm layers as group norms (per example, over its positions and up to 32 channel "
        "groups; no batch_stats); its parameter tree is your module's own")
  return entry


def write(config, wd: Workdir, report: dict, ctx: Context) -> str | None:
  """Writes ``<workdir>/release/`` (module docstring) from the run's ``report``; ``ctx``
  reads the released model. Returns the folder, or None where the audit failed (then no
  release exists)."""
  folder = os.path.join(wd.path, FOLDER)
  shutil.rmtree(folder, ignore_errors=True)  # only what this run's report allows
  if any(not c["passed"] for c in report.get("audit_check", {}).values()):
    return None
  makedirs(folder)
  public = public_report(config, report)
  method = methods.method(config)
  if (method.privacy_stage in ctx.results and method.released_model
      and method.headline_stage in ctx.results and not public["model_withheld"]):
    params = method.released_model(ctx)
    data = serialization.msgpack_serialize(serialization.to_state_dict(params))
    atomic_write(os.path.join(folder, MODEL), lambda f: f.write(data), binary=True)
    public["model"] = model_entry(method, config, ctx.dataset.num_classes,
                                  ctx.dataset.image_shape)
  for result in public.get("stages", {}).values():  # the pictures the report still shows
    for k, v in result.items():
      if k.endswith("_png") and isinstance(v, str) and os.path.exists(os.path.join(wd.path, v)):
        makedirs(os.path.dirname(os.path.join(folder, v)))
        shutil.copyfile(os.path.join(wd.path, v), os.path.join(folder, v))
  report_lib.write(folder, public, extra=_withheld_lines(public) if public["withheld"] else [])
  for root, folders, files in os.walk(folder):  # readable by all: the folder to share
    for name in folders:
      os.chmod(os.path.join(root, name), FOLDER_MODE)
    for name in files:
      os.chmod(os.path.join(root, name), FILE_MODE)
  os.chmod(folder, FOLDER_MODE)
  return folder
