"""What every finished run's report must say of its noiseless statistics: the check the tiny
end-to-end run of each method calls on its report."""
from __future__ import annotations

import json
import os
import struct

import jax
import ml_collections
import numpy as np
import pytest
from flax import serialization
from tensorboardX.proto import event_pb2

import dgd_jax
from dgd_jax.plan import pool
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime import host

# Words in a field's name that mark a function of the teachers' votes or of a non-private model
# (outside the ledger JSON, whose data-dependent accountants it flags itself): such a field must
# be one methods.NOISELESS_FIELDS names, so a new one cannot slip into a report unnamed.
HINTS = ("plurality", "vote", "noiseless", "agreement", "vs_baseline", "data_dependent",
         "smooth_sensitivity", "teacher_accuracy")


# Maps keyed by accountant name (``smooth_sensitivity`` among them), not fields.
ACCOUNTANT_MAPS = ("epsilons", "epsilon_by_neighbours")


def _leaves(value, path: str):
  """(path, key, value) of every dict entry below ``value``: not into the ledger's JSON, whose
  data-dependent entries are flagged there, an accountant-keyed map, or a registered
  noiseless field (named whole)."""
  if isinstance(value, dict):
    for k, v in value.items():
      here = f"{path}.{k}" if path else k
      if k == "privacy" and isinstance(v, dict) and "data_dependent_accountants" in v:
        continue
      yield here, k, v
      if k not in ACCOUNTANT_MAPS and k not in methods.NOISELESS_FIELDS:
        yield from _leaves(v, here)


def assert_noiseless_named(workdir: str) -> dict:
  """Every noiseless statistic in ``workdir``'s report.json is in its ``noiseless`` map and
  named by a not-covered note in report.json and report.md; every field whose name hints at
  the votes or a non-private model is a registered noiseless field; it records the JAX
  version and backend that ran it (report.md too); and TensorBoard's event files hold its
  summary and the stages' logged curves (``assert_tensorboard``). Returns the report."""
  with open(os.path.join(workdir, "report.json")) as f:
    report = json.load(f)
  with open(os.path.join(workdir, "report.md")) as f:
    md = f.read()
  found = report["noiseless"]
  assert found == methods.noiseless(report), "report.json's noiseless map is stale"
  nonprivate = tuple(f"stages.{s}" for s in methods.NONPRIVATE_STAGES) + tuple(
      methods.NONPRIVATE_STAGES)
  for path, key, value in _leaves({k: v for k, v in report.items() if k != "config"}, ""):
    if (path.startswith(nonprivate) or value is None or isinstance(value, (bool, str))
        or value in ({}, [])):
      continue
    if key in methods.NOISELESS_FIELDS:
      assert path in found, f"{path} is a noiseless statistic the report does not name"
    elif any(h in key for h in HINTS) and key not in ("noiseless", "epsilon_is_data_dependent"):
      raise AssertionError(f"{path}: a field named like a function of the votes or a "
                           "non-private model, missing from methods.NOISELESS_FIELDS")
  for stage in report.get("stages", {}):
    if stage in methods.NONPRIVATE_STAGES:
      assert f"stages.{stage}" in found, stage
  notes = (report.get("covers") or {}).get("not_covered") or report["privacy"].get(
      "not_covered", [])
  note = methods.noiseless_note(found) if found else None
  if note:
    assert note in notes, "report.json's not-covered notes lack the noiseless note"
    assert note in md, "report.md lacks the noiseless note"
  assert report["software"]["jax"] == jax.__version__, report["software"]
  assert report["software"]["backend"] == jax.default_backend(), report["software"]
  assert f"jax {jax.__version__}" in md, "report.md does not say which jax ran"
  assert_tensorboard(workdir, report)
  assert_release(workdir, report)
  return report


def _files(folder: str) -> list[str]:
  return [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]


def assert_secret_kept(workdir: str, report: dict) -> None:
  """A run with a secret noise key keeps it in noise.key alone (owner-only): neither its bytes
  nor their hex appear in any other file of the workdir (reports, config, metrics,
  TensorBoard events, checkpoints) or in a file name."""
  path = os.path.join(workdir, "noise.key")
  noisy = {n for n in report["stages"]
           if methods.draws_noise(n, ml_collections.ConfigDict(report["config"]))}
  assert report["noise"]["drawn_on"] == (  # the platform of every secret draw
      {} if report["noise"]["reproducible"] else {n: host.noise_platform() for n in noisy})
  if report["noise"]["reproducible"]:
    assert not os.path.exists(path), "a reproducible run wrote a noise key"
    return
  assert {k: v for k, v in report["noise"].items() if k != "drawn_on"} == {
      "source": "secret_key", "reproducible": False, "private_release": True}, report["noise"]
  assert os.stat(path).st_mode & 0o777 == 0o600, oct(os.stat(path).st_mode)
  with open(path, "rb") as f:
    secret = f.read()
  assert len(secret) == 32
  forms = (secret, secret.hex().encode(), secret.hex().upper().encode())
  for name in _files(workdir):
    if name == path:
      continue
    assert not any(f.decode("latin-1") in name for f in forms[1:]), name
    with open(name, "rb") as f:
      data = f.read()
    assert not any(form in data for form in forms), f"{name} holds the noise key"


def _keys(value):
  """Every key below ``value`` that holds something (not None or empty)."""
  if isinstance(value, dict):
    for k, v in value.items():
      if v not in (None, {}, []):
        yield k
      yield from _keys(v)


def assert_release(workdir: str, report: dict) -> None:
  """``<workdir>/release/`` holds report.json, report.md, the released model (where the method
  has one) and pictures only: no noise key, votes, teachers, baseline, synthetic inputs or
  checkpoints; its report holds no noiseless statistic (each is named under ``withheld``) and
  no non-private stage's result."""
  assert_secret_kept(workdir, report)
  folder = os.path.join(workdir, "release")
  names = sorted(os.path.relpath(p, folder) for p in _files(folder))
  method = methods.METHODS[report["method"]]
  assert report["model_withheld"] == methods.model_withheld(
      ml_collections.ConfigDict(report["config"]))
  has_model = (bool(method.released_model) and method.headline_stage in report["stages"]
               and not report["model_withheld"])
  assert "report.json" in names and "report.md" in names, names
  assert ("model.msgpack" in names) == has_model, names
  others = [n for n in names if n not in ("report.json", "report.md", "model.msgpack")]
  assert all(n.endswith(".png") for n in others), others  # no .npy, .npz, .key, checkpoint
  for n in others:
    assert n.split(os.sep)[0] not in methods.NONPRIVATE_STAGES, n  # e.g. generator samples
  with open(os.path.join(folder, "report.json")) as f:
    public = json.load(f)
  assert public["noiseless"] == {} and public["noise"] == report["noise"]
  kept = set(report["stages"]) - set(methods.NONPRIVATE_STAGES)
  if report["model_withheld"] and method.headline_stage != method.privacy_stage:
    kept.discard(method.headline_stage)  # its accuracy, evaluations and curves
  assert set(public["stages"]) == kept
  for key in _keys({k: v for k, v in public.items() if k not in ("config", "withheld")}):
    assert key not in methods.NOISELESS_FIELDS or key == "smooth_sensitivity", key
  assert not {"audit", "audit_check", "stage_seconds", "wall_seconds"} & set(public)
  withheld = " ".join(public["withheld"])
  assert all(path in withheld for path in report["noiseless"]), public["withheld"]
  with open(os.path.join(folder, "report.md")) as f:
    md = f.read()
  assert "Diagnostic (not released)" not in md and "noiseless diagnostics" not in md.lower()
  if report["noiseless"]:
    assert "## Withheld from this release" in md
  assert_published_only(workdir, report, public, md)
  if has_model:
    with open(os.path.join(folder, "model.msgpack"), "rb") as f:
      params = serialization.msgpack_restore(f.read())  # no workdir, no template
    assert jax.tree.leaves(params) and all(
        isinstance(x, np.ndarray) for x in jax.tree.leaves(params))
    # applied as report.json's model entry says, from release/ alone: the headline's accuracy
    module, variables, prepare = dgd_jax.load_release(folder)
    x, y = _evaluation(workdir, method)
    pixels = np.round((x + 1.0) * 127.5).astype(np.uint8)  # as a user holds the images
    predicted = np.argmax(module.apply(variables, prepare(pixels)), -1)
    assert float(np.mean(predicted == y)) == pytest.approx(public["test_accuracy"], abs=1e-6)


def _evaluation(workdir: str, method) -> tuple[np.ndarray, np.ndarray]:
  """The test images and labels the run's headline accuracy is measured on."""
  ctx = pipeline.open_run(workdir, method.headline_stage)
  if method.headline_stage == "student":
    return pool.evaluation(ctx)
  return ctx.dataset.x_test, ctx.dataset.y_test


def _numbers(value):
  """Every float below ``value``."""
  if isinstance(value, dict):
    for v in value.values():
      yield from _numbers(v)
  elif isinstance(value, list):
    for v in value:
      yield from _numbers(v)
  elif isinstance(value, float):
    yield value


def assert_published_only(workdir: str, report: dict, public: dict, md: str) -> None:
  """What ``release/`` must not hold: a withheld model's accuracy, evaluations or curves; a
  data-dependent epsilon; a timing; a local path; a file others cannot read. And report.md's
  not-covered list holds no "Covers ..." or neighbouring-relation sentence."""
  folder = os.path.join(workdir, "release")
  method = methods.METHODS[report["method"]]
  withheld = report["model_withheld"]
  assert public["model_withheld"] == withheld
  if withheld and method.headline_stage:
    assert public["test_accuracy"] is None and public["model"] is None
    assert withheld in md and "release/ withholds" in md
    for name, result in public["stages"].items():
      assert "test_accuracy" not in result and not any(k.endswith("_png") for k in result), name
    assert not [n for n in _files(folder) if n.endswith(".png")
                and os.path.relpath(n, folder).split(os.sep)[0] == method.headline_stage]
  stage = report["stages"].get(method.privacy_stage or "", {})
  independent = set(_numbers(report.get("epsilons", {}))) | {
      eps for r in (stage.get("privacy") or {}).get("by_neighbours", {}).values()
      for eps in _numbers(r["epsilons"])}
  for eps in _numbers(report.get("epsilons_data_dependent", {})):
    assert eps in independent or eps not in set(_numbers(public)), eps
  assert public.get("epsilon_is_data_dependent") in (None, False)
  if public["privacy"].get("epsilon") is not None:
    assert public["privacy"]["epsilon"] in independent
  assert not [k for k in _keys(public) if k.endswith("_seconds")]
  local = {os.path.dirname(os.path.abspath(workdir)), os.path.expanduser("~")}
  data = report["config"]["dataset"].split(":", 1)[-1]
  if os.path.isabs(data):
    local.add(os.path.dirname(data))
  for name in _files(folder):
    if not name.endswith(".png") and not name.endswith(".msgpack"):
      with open(name) as f:
        text = f.read()
      assert not [p for p in local if p in text], (name, local)
    assert os.stat(name).st_mode & 0o777 == 0o644, (name, oct(os.stat(name).st_mode))
  assert os.stat(folder).st_mode & 0o777 == 0o755
  listed = md.split("Not covered by the epsilon:")[-1].split("\n## ")[0]
  assert not [line for line in listed.splitlines()
              if line.startswith(("- Covers", "- Neighbours:"))], listed


def events(folder: str) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of the scalars in a folder's TensorBoard event files (TFRecord
  frames: length, its CRC, an Event proto, its CRC), read without TensorBoard."""
  out = {}
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name), "rb") as f:
      data = f.read()
    i = 0
    while i < len(data):
      (length,) = struct.unpack("<Q", data[i:i + 8])
      event = event_pb2.Event.FromString(data[i + 12:i + 12 + length])
      i += 12 + length + 4
      for value in event.summary.value:
        out.setdefault(value.tag, {})[event.step] = value.simple_value
  return out


def assert_tensorboard(workdir: str, report: dict) -> None:
  """The summary (test accuracy, epsilon per accountant) and every stage's logged metrics, as
  metrics.jsonl holds them, are in ``<workdir>/tensorboard``."""
  root = os.path.join(workdir, "tensorboard")
  summary = events(os.path.join(root, "summary"))
  if report["test_accuracy"] is not None:
    np.testing.assert_allclose(summary["test_accuracy"][0], report["test_accuracy"], rtol=1e-6)
  for name, eps in (report.get("epsilons") or {}).items():
    np.testing.assert_allclose(summary[f"epsilon/{name}"][0], eps, rtol=1e-6)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    logged = [json.loads(line) for line in f if line.strip()]
  for stage in {r["stage"] for r in logged if "step" in r}:
    curves = events(os.path.join(root, stage))
    last = [r for r in logged if r["stage"] == stage and "step" in r][-1]
    for tag, value in last.items():
      if isinstance(value, (int, float)) and not isinstance(value, bool) and tag != "step":
        np.testing.assert_allclose(curves[tag][last["step"]], value, rtol=1e-5, atol=1e-6)
