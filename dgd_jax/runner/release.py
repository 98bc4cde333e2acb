"""``<workdir>/release/``: what a run's epsilon lets a user publish, and nothing else.

Everything else in a workdir is private: the noise key, the votes, the teachers, the baseline,
the synthetic inputs, checkpoints, metrics and the full report, whose noiseless diagnostics
are functions of the private data. The release holds

* ``report.json`` and ``report.md``: the run's report without any noiseless statistic
  (``methods.noiseless``: dropped, and named under ``withheld``), without the non-private
  stages' results, the audit's statistics or the timings;
* ``model.msgpack``: the released model's parameters (flax msgpack; read them without the
  workdir with ``flax.serialization.msgpack_restore(open(path, 'rb').read())``), for a method
  with a DP release and a finished released model (``Method.released_model``);
* the pictures of the quantities left in that report (e.g. the student's training curve, a
  DPDFD generator's samples).

A run whose privacy audit failed releases nothing (the folder is removed).
"""
from __future__ import annotations

import copy
import os
import shutil

from flax import serialization

from dgd_jax.plan.context import Context
from dgd_jax.runtime.workdir import Workdir
from dgd_jax.runner import methods
from dgd_jax.runner import report as report_lib
from dgd_jax.runtime.files import atomic_write, makedirs

FOLDER = "release"
MODEL = "model.msgpack"
# report.json fields that are never released: the audit's statistics on the private set and
# the stages' timings.
PRIVATE_FIELDS = ("audit", "audit_check", "stage_seconds", "wall_seconds")


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


def public_report(config, report: dict) -> dict:
  """``report`` without what its epsilon does not cover: every noiseless statistic
  (``report['noiseless']``, named under ``withheld``), the non-private stages' results, the
  headline of a method whose headline model has no DP guarantee, the audit and the timings."""
  out = copy.deepcopy(report)
  withheld = {_withhold(out, path): what
              for path, what in (report.get("noiseless") or {}).items()}
  method = methods.method(config)
  if method.privacy_stage is None or f"stages.{method.headline_stage}" in withheld:
    out["test_accuracy"] = None  # a model without a DP guarantee
  for field in PRIVATE_FIELDS + tuple(methods.NOISELESS_FIELDS):  # also where None
    out.pop(field, None)
  note = methods.noiseless_note(report["noiseless"]) if report.get("noiseless") else None
  if "covers" in out:
    out["covers"]["not_covered"] = [n for n in out["covers"]["not_covered"] if n != note]
  out["privacy"].pop("not_covered", None)
  out["noiseless"] = {}
  out["withheld"] = dict(sorted(withheld.items()))
  return out


def _withheld_lines(public: dict) -> list[str]:
  return ["## Withheld from this release", "",
          "Noiseless functions of the private data or the teachers' votes stay in the private "
          "workdir (its report.json names them) and are not published here:", ""] + [
              f"- {path}: {what}" for path, what in public["withheld"].items()] + [""]


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
      and method.headline_stage in ctx.results):
    params = method.released_model(ctx)
    data = serialization.msgpack_serialize(serialization.to_state_dict(params))
    atomic_write(os.path.join(folder, MODEL), lambda f: f.write(data), binary=True)
    public["model"] = {"file": MODEL, "format": "flax msgpack: "
                       "flax.serialization.msgpack_restore(open(path, 'rb').read())",
                       "stage": method.headline_stage}
  for result in public.get("stages", {}).values():  # the pictures the report still shows
    for k, v in result.items():
      if k.endswith("_png") and isinstance(v, str) and os.path.exists(os.path.join(wd.path, v)):
        makedirs(os.path.dirname(os.path.join(folder, v)))
        shutil.copyfile(os.path.join(wd.path, v), os.path.join(folder, v))
  report_lib.write(folder, public, extra=_withheld_lines(public) if public["withheld"] else [])
  return folder
