"""The registry: every stage (``STAGES``) and every method (``METHODS``) in one place. The
pipeline, the report, the sweep and the budget guard read it; adding a method is one
``Method`` record here plus its own modules (docs/ARCHITECTURE.md).
"""
from __future__ import annotations

from dgd_jax import privacy
from dgd_jax.plan import artefacts
from dgd_jax.plan import dgd as dgd_plan
from dgd_jax.plan import dpdfd as dpdfd_plan
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import pool
from dgd_jax.plan import query_checks
from dgd_jax.plan.context import BASE_KEYS, NOISE_KEY, Config, Method, StageSpec, config_slice
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.stages import (audit, baseline, dpdfd, dpsgd, generator, ldp, queries, student,
                            teachers, vae)

STAGES: dict[str, StageSpec] = {
    "baseline": StageSpec(baseline.run, baseline.config_keys, precheck=baseline.check,
                          programs=baseline.programs),
    "teachers": StageSpec(teachers.run, teachers.CONFIG_KEYS, multiprocess=True,
                          precheck=teachers.check, programs=teachers.programs),
    "teacher_sweep": StageSpec(teachers.run_sweep, teachers.SWEEP_KEYS, multiprocess=True,
                               precheck=teachers.check, programs=teachers.sweep_programs),
    "generator": StageSpec(generator.run, generator.CONFIG_KEYS, requires=("baseline",),
                           programs=generator.programs),
    "vae": StageSpec(vae.run, vae.CONFIG_KEYS, requires=pool.requires, programs=vae.programs),
    "queries": StageSpec(queries.run, queries.CONFIG_KEYS,
                         requires=lambda c: ("teachers",) + pool.requires(c),
                         # the queries compose a private baseline's steps (baseline.check)
                         precheck=lambda c: (baseline.check(c), query_checks.check(c)),
                         programs=queries.programs),
    "student": StageSpec(student.run, student.CONFIG_KEYS, requires=student.requires,
                         precheck=student.check, programs=student.programs),
    "dpdfd": StageSpec(dpdfd.run, dpdfd.CONFIG_KEYS, requires=dpdfd.requires,
                       programs=dpdfd.programs),
    "dpdfd_samples": StageSpec(dpdfd.run_samples, requires=("dpdfd",),
                               programs=dpdfd.sample_programs),
    "ldp": StageSpec(ldp.run, ldp.CONFIG_KEYS, requires=("baseline",), programs=ldp.programs),
    "dpsgd": StageSpec(dpsgd.run, dpsgd.CONFIG_KEYS, precheck=dpsgd.check,
                       programs=dpsgd.programs),
    # The audit attacks the models the method's own run trains.
    "audit": StageSpec(audit.run, audit.CONFIG_KEYS,
                       requires=lambda c: audit.requires(plan_stages(c)),
                       precheck=lambda c: audit.check(c, plan_stages(c)),
                       programs=lambda c, data: audit.programs(c, data, plan_stages(c))),
}
# Stages any method can run after its own when asked (``--stages``); never by default.
OPTIONAL_STAGES = ("audit",)

_TEACHERS_NOTE = (
    "Teachers are trained on the private data without noise and must never be released. The "
    "ensemble accuracies here are evaluations on the test set, not releases; labels released "
    "to a student are accounted when queried.")

QUERIES_COVER = "{aggregator} answers to {num_queries} label queries of the teacher ensemble"
_DGD_NOTE = ("The epsilon covers the teachers' noisy answers to the student's label queries "
             "only. " + privacy.TEACHER_EXCLUSIONS + " " + privacy.FIXED_INPUTS_NOTE)
_DGD_PRIVATE_BASELINE_NOTE = (
    "End-to-end accounted DGD (private baseline): the baseline is trained with DP-SGD "
    "(replace-one neighbours) and its steps are composed with the teachers' noisy label answers "
    "in one dp-accounting PLD, so the epsilon covers everything the student saw: the generator "
    "trained against the private baseline (or the samples inverted from it), its synthetic "
    "data and the VAE are post-processing (settings that read private data without noise, "
    "such as statistics matching, are refused). The teachers are trained without noise and "
    "must never be released. " + privacy.FIXED_INPUTS_NOTE)

_DPDFD_NOTE = (
    "The epsilon covers the DPDFD student and generator: they see the sensitive model only "
    "through A_{C,sigma} (DPDFD Eq. 4), so both are post-processing of the noisy releases. The "
    "sensitive model (the baseline or the teachers) is trained without noise and must never be "
    "released. Direct training (dpdfd.teacher='private_data', privacy_unit 'label') is LABEL DP "
    "only: it back-propagates through the private inputs without noise, so its epsilon "
    "protects the labels, not the examples.")
_DPDFD_SYNTHETIC_NOTE = (
    " Here the inputs are not a DPDFD generator's but the generator stage's synthetic set "
    "(dpdfd.inputs='synthetic'), inverted from the baseline, which is trained on the private "
    "data without noise (statistics matching also reads the private set's activations): the "
    "synthetic set, and so the student's inputs, carry no differential-privacy guarantee and "
    "are NOT covered, as in DGD. The teachers' noisy answers on it are. "
    + privacy.FIXED_INPUTS_NOTE)

_STATISTICS_NOTE = (
    "generator.w_stats > 0: the generator also matches per-channel statistics of the "
    "baseline's activations on the private training set (computed without noise); like the "
    "baseline, they are not covered.")
# Stages whose every result is a noiseless function of the private data: what models trained on
# it without noise (or attacks on them) measured or made; what each is.
NONPRIVATE_STAGES = {
    "baseline": "the baseline, trained on the private data without noise",
    "teachers": "the teachers, each trained on its partition without noise",
    "teacher_sweep": "the sweep's teachers, trained without noise",
    "generator": "the synthetic set and its measures, made against the non-private baseline",
    "vae": "the VAE's fit to the unlabelled pool (DGD: the synthetic set)",
    "ldp": "BASE and the robust teacher, trained on the private data without noise (the "
           "client's local_epsilon and parameters are public functions of the config)",
    "audit": "the empirical attacks' statistics on the private training set",
}
# Fields of the other stages' results, and of report.json's top level, that are noiseless
# functions of the private data or the teachers' votes: server diagnostics, never releases.
NOISELESS_FIELDS = {
    "baseline_accuracy": "the non-private baseline's test accuracy",
    "student_accuracy_noiseless_labels": "the student trained on the teachers' noiseless "
                                         "plurality or vote shares",
    "noisy_label_agreement_with_plurality": "how often a released label is the teachers' "
                                            "noiseless plurality",
    "asked_class_is_plurality": "how often the class a count was asked for is the teachers' "
                                "plurality",
    "label_accuracy_vs_baseline": "the released labels' agreement with the non-private "
                                  "baseline's labels",
    "top_vote_share_by_round": "the teachers' mean top vote share in each round of queries",
    "epsilons_data_dependent": "the epsilons of the data-dependent accountants",
    "teacher_accuracy": "the sensitive model's test accuracy (trained without noise)",
    "noiseless_student": "the diagnostic student trained on the teachers' noiseless labels: "
                         "its checkpoints and its training curves (metrics.jsonl, TensorBoard)",
    "smooth_sensitivity": "beside its released value: the exact data-dependent epsilon "
                          "(rdp, epsilon_before, epsilon), its smooth sensitivity and std, and "
                          "the diagnostic release at parameters chosen from the votes",
}
# Noiseless fields that hold a DP release inside them: the parts a release may publish.
RELEASED_PARTS = {
    "smooth_sensitivity": ("released", "order", "beta", "sigma_ss", "gnss_rdp", "delta",
                           "source", "dp_release", "charged", "queries", "answered"),
}


def noiseless(report: dict) -> dict[str, str]:
  """Every noiseless function of the private data or the votes in a report (its ``stages``
  and top level): path -> what it is. None is a DP release; none is covered."""
  out = {}
  for name, result in report.get("stages", {}).items():
    if name in NONPRIVATE_STAGES:
      out[f"stages.{name}"] = f"every field: {NONPRIVATE_STAGES[name]}"
      continue
    for field in result:
      if field in NOISELESS_FIELDS:
        out[f"stages.{name}.{field}"] = NOISELESS_FIELDS[field]
    if (result.get("privacy") or {}).get("data_dependent_accountants"):
      out[f"stages.{name}.privacy"] = (
          "the epsilons of " + ", ".join(result["privacy"]["data_dependent_accountants"])
          + " (data-dependent accountants, flagged in details)")
  for field, value in report.items():
    if value not in (None, {}, []) and field != "stages" and (field in NOISELESS_FIELDS
                                                    or field in NONPRIVATE_STAGES):
      out[field] = NOISELESS_FIELDS.get(field) or f"every field: {NONPRIVATE_STAGES[field]}"
  return dict(sorted(out.items()))  # as report.json (sorted keys) holds it


def noiseless_note(found: dict[str, str]) -> str:
  """report.json's not-covered note naming every noiseless diagnostic a run holds."""
  return ("Noiseless diagnostics in this report: functions of the private data or the "
          "teachers' votes computed without noise, not DP releases and not covered by any "
          "epsilon: " + "; ".join(f"{path} ({what})" for path, what in found.items()) + ".")


_SMOOTH_SENSITIVITY_NOTE = (
    "queries.smooth_sensitivity: the smooth-sensitivity release of the data-dependent epsilon "
    "(PATE 2018 Sec. 4) is composed into the headline (accountant smooth_sensitivity), its "
    "order, beta and sigma_ss fixed before any vote; the exact values printed beside it (the "
    "epsilon before the release, the expected epsilon, the smooth sensitivity) and the "
    "diagnostic release at parameters chosen from the votes are not DP releases and are not "
    "covered.")
_RAW_POOL_NOTE = (
    "pool.source='train': the student's unlabelled pool is the private training set itself "
    "(a stand-in for public data, DGD Fig. 4 and 7). The student sees those images without "
    "noise, so this run's student has no differential-privacy guarantee for them.")


def _uncovered_inputs(config: Config, results: dict) -> list[str]:
  """What reaches a run's released model or diagnostics without noise, beyond its method's
  note: a pool of private images, private-set statistics in the generator, and what a
  smooth-sensitivity release publishes beside its value (the report adds ``noiseless_note``)."""
  return (([_RAW_POOL_NOTE] if config.get("pool", {}).get("source") == "train" else [])
          + ([_STATISTICS_NOTE] if config.get("generator", {}).get("w_stats", 0) > 0 else [])
          + ([_SMOOTH_SENSITIVITY_NOTE] if config.get("queries", {}).get("smooth_sensitivity")
             else []))


_TRAIN_POOL_WITHHELD = (
    "The student's unlabelled pool is the private training set (pool.source='train'), seen "
    "without noise: a public pool (PATE's pool.source='public') or DGD's private_baseline "
    "makes it releasable.")


def _student_withheld(config: Config) -> str:
  """Why a DGD or PATE student is withheld: a pool the epsilon does not cover (the private
  set, or synthetic inputs made without DP; baseline.check refuses every private-baseline
  setting that bypasses the noise)."""
  if config.pool.source == "train":
    return _TRAIN_POOL_WITHHELD
  if config.pool.source == "synthetic" and "dpsgd" not in config.get("baseline", {}):
    return ("The epsilon covers the label answers only, and the student also learns from "
            "synthetic inputs made with a baseline trained on the private data without "
            "noise: end-to-end accounted DGD (the private_baseline preset, e.g. "
            "dgd.py:<data>,cpu,private_baseline) makes it releasable.")
  return ""


def _dpdfd_model_withheld(config: Config) -> str:
  """Why a DPDFD student is withheld: label DP only, or inputs not covered."""
  if config.dpdfd.teacher == "private_data":
    return ("Direct training (dpdfd.teacher='private_data') is label DP only: the student "
            "back-propagates through the private images without noise; a sensitive model "
            "queried through A_{C,sigma} (dpdfd.py:<data>,cpu) makes it releasable.")
  if dpdfd_plan.uses_synthetic(config):
    return ("The student's inputs are the generator stage's synthetic set "
            "(dpdfd.inputs='synthetic'), inverted from a baseline trained on the private data "
            "without noise: Algorithm 1's own generator (dpdfd.inputs='generator', as in "
            "dpdfd.py:<data>,cpu) makes it releasable.")
  return ""


def _student(ctx) -> dict:
  """The released student's parameters (DGD, PATE)."""
  return artefacts.load_classifier(ctx, "student")[1]


def _classifier(block: str | None):
  """``Method.released_module`` of a classifier the run builds for ``block``: the images."""
  return lambda config, k: (artefacts.classifier(config, k, block), None, "the scaled images")


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("baseline", ("baseline",), headline_stage="baseline",
           model_withheld=lambda c: (
               "The baseline is trained on the private data without noise (no "
               "differential-privacy guarantee): DP-SGD (dpsgd.py:<data>) trains a releasable "
               "model."),
           privacy_note=(
        "Trained on the private training set without noise: no differential-privacy "
        "guarantee (epsilon = infinity). Do not release it as a private model.")),
    Method("teachers", ("teachers",), privacy_note=_TEACHERS_NOTE),
    Method("teacher_sweep", ("teacher_sweep",), privacy_note=_TEACHERS_NOTE),
    Method("dgd", ("baseline", "teachers", "generator", "vae", "queries", "student"),
           headline_stage="student", privacy_stage="queries", releases=dgd_plan.releases,
           uncovered=_uncovered_inputs, released_model=_student,
           released_module=_classifier("student"),
           model_withheld=_student_withheld,
           neighbours=dgd_plan.neighbours, covers=QUERIES_COVER, privacy_note=lambda c: (
               _DGD_PRIVATE_BASELINE_NOTE if "dpsgd" in c.baseline else _DGD_NOTE),
           # baseline.check refuses every private-baseline setting that bypasses the noise
           audited=lambda c: ("baseline", "student") if "dpsgd" in c.baseline else ()),
    Method("pate", ("teachers", "vae", "queries", "student"), headline_stage="student",
           privacy_stage="queries", releases=dgd_plan.releases, neighbours=dgd_plan.neighbours,
           uncovered=_uncovered_inputs, released_model=_student,
           released_module=_classifier("student"),
           model_withheld=_student_withheld,
           covers=QUERIES_COVER,
           privacy_note=(
               "The epsilon covers the teachers' noisy answers to the student's label "
               "queries. The student's unlabelled pool is assumed public (here: the head of "
               "the test split), and the teachers must never be released."),
           audited=lambda c: ("student",) if c.pool.source == "public" else ()),
    Method("dpdfd", ("baseline", "teachers", "generator", "dpdfd", "dpdfd_samples"),
           headline_stage="dpdfd", privacy_stage="dpdfd", releases=dpdfd_plan.releases,
           uncovered=_uncovered_inputs,
           released_model=lambda ctx: artefacts.load_dpdfd(
               ctx, ctx.config.dpdfd.self_training)[1],
           released_module=_classifier(None),
           model_withheld=_dpdfd_model_withheld, neighbours=dpdfd_plan.neighbours,
           covers="{num_steps} DPDFD steps (A_{{C,sigma}} releases)",
           default_stages=lambda c: (("dpdfd",) if c.dpdfd.teacher == "private_data"
                                     or dpdfd_plan.uses_synthetic(c) else ("dpdfd_samples",)),
           privacy_note=lambda c: _DPDFD_NOTE + (_DPDFD_SYNTHETIC_NOTE
                                                 if dpdfd_plan.uses_synthetic(c) else "")),
    Method("ldp", ("baseline", "ldp"), headline_stage="ldp",
           model_withheld=lambda c: (
               "The robust teacher is trained on the private data without noise: the LDP "
               "guarantee is the client's local epsilon on what it sends, not a model's; "
               "DP-SGD (dpsgd.py:<data>) trains a releasable model."),
           privacy_note=(
        "local_epsilon is the client's local (pure) epsilon per transformed sample "
        "(Algorithm 1). BASE and the robust teacher are trained on the private data without "
        "noise: no differential-privacy guarantee for the teacher side.")),
    Method("dpsgd", ("dpsgd",), headline_stage="dpsgd", privacy_stage="dpsgd",
           releases=dpsgd_plan.releases, neighbours=dpsgd_plan.neighbours,
           released_model=lambda ctx: artefacts.load_dpsgd(ctx)[1],
           released_module=dpsgd_plan.released_module, privacy_note=(
               "The epsilon covers the released model: DP-SGD's every step (a noisy sum of "
               "clipped per-example gradients on a Poisson sample) is accounted, and the model "
               "is their post-processing. Not covered: hyper-parameter tuning on the same "
               "private data."),
           audited=lambda c: ("dpsgd",)),
)}


def method(config: Config) -> Method:
  if config.method not in METHODS:
    raise ConfigError(f"config.method={config.method!r}; known methods: {sorted(METHODS)}.")
  return METHODS[config.method]


def model_withheld(config: Config) -> str:
  """Why ``<workdir>/release/`` holds no model for this config (``Method.model_withheld``), or
  "" where the epsilon covers everything its headline model learnt from (or it has none)."""
  m = method(config)
  if m.headline_stage is None:
    return ""
  return m.model_withheld(config) or (
      "" if m.privacy_stage else "The method makes no differential-privacy release.")


def requirements(name: str, config: Config) -> tuple[str, ...]:
  requires = STAGES[name].requires
  return requires(config) if callable(requires) else requires


def config_keys(name: str, config: Config) -> tuple[str, ...]:
  """The config fields stage ``name``'s artefacts depend on: the base keys, its own blocks
  and, transitively, those of the stages whose artefacts it reads."""
  keys = list(BASE_KEYS)
  for required in requirements(name, config):
    keys += config_keys(required, config)
  own = STAGES[name].config_keys
  return tuple(dict.fromkeys(keys + list(own(config) if callable(own) else own)))


def stage_slice(name: str, config: Config) -> dict:
  """The part of ``config`` stage ``name``'s artefacts depend on (``config_keys``), as its
  stage.json records it."""
  return config_slice(config, config_keys(name, config))


def draws_noise(name: str, config: Config) -> bool:
  """Whether stage ``name`` itself draws secret noise (``NOISE_KEY`` among its own keys)."""
  own = STAGES[name].config_keys
  return NOISE_KEY in (own(config) if callable(own) else own)


def plan_stages(config: Config, stages: tuple[str, ...] | None = None) -> tuple[str, ...]:
  """The requested stages (default: the method's ``default_stages``, else its last stage)
  and every stage they need, in the method's order (e.g. DGD with ``pool.source='train'``
  needs no generator)."""
  m = method(config)
  stages = stages or (m.default_stages or (lambda c: m.stages[-1:]))(config)
  order = m.stages + OPTIONAL_STAGES
  unknown = [n for n in stages if n not in order]
  if unknown:
    raise ConfigError(f"Unknown stages {unknown} for method {m.name!r}; it has {list(order)}.")
  needed, todo = set(), list(stages)
  while todo:
    name = todo.pop()
    if name not in needed:
      needed.add(name)
      todo.extend(requirements(name, config))
  return tuple(n for n in order if n in needed)
