"""report.json and report.md: what a run produced, with accuracies as fractions in [0, 1]."""
from __future__ import annotations

import os

from dgd_jax.workdir import plain, write_json, write_text

# What each method's epsilon covers. The baseline is trained on the private data without
# noise and so has no differential-privacy guarantee.
PRIVACY_NOTES = {
    "baseline": "Trained on the private training set without noise: no differential-privacy "
                "guarantee (epsilon = infinity). Do not release it as a private model.",
    "teachers": "Teachers are trained on the private data without noise and must never be "
                "released. The ensemble accuracies here are evaluations on the test set, "
                "not releases; labels released to a student are accounted when queried.",
}
PRIVACY_NOTES["teacher_sweep"] = PRIVACY_NOTES["teachers"]
PRIVACY_NOTES["dpdfd"] = (
    "The epsilon covers the DPDFD student and generator: they see the sensitive model only "
    "through A_{C,sigma} (DPDFD Eq. 4), so both are post-processing of the noisy releases. "
    "The sensitive model (the baseline or the teachers) is trained without noise and must "
    "never be released. Direct training (dpdfd.teacher='private_data', privacy_unit 'label') "
    "is LABEL DP only: it back-propagates through the private inputs without noise, so its "
    "epsilon protects the labels, not the examples.")
PRIVACY_NOTES["ldp"] = (
    "local_epsilon is the client's local (pure) epsilon per transformed sample (Algorithm 1). "
    "BASE and the robust teacher are trained on the private data without noise: no "
    "differential-privacy guarantee for the teacher side.")
PRIVACY_NOTES["pate"] = (
    "The epsilon covers the teachers' noisy answers to the student's label queries. The "
    "student's unlabelled pool is assumed public (here: the head of the test split), and the "
    "teachers must never be released.")
PRIVACY_NOTES["dgd"] = (
    "The epsilon covers the teachers' noisy answers to the student's label queries only. The "
    "baseline (trained on private data without noise), the generator trained against it, the "
    "synthetic set and the VAE carry no differential-privacy guarantee, and the student also "
    "learns from the synthetic set: none of them is covered.")
PRIVACY_NOTES["dgd_private_baseline"] = (
    "End-to-end accounted DGD (private baseline): the baseline is trained with DP-SGD "
    "(replace-one neighbours) and its steps are composed with the teachers' noisy label answers "
    "in one dp-accounting PLD, so the epsilon covers everything the student saw: the generator "
    "trained against the private baseline, its synthetic data and the VAE are post-processing "
    "(statistics matching, which reads private data, is off). The teachers are trained without "
    "noise and must never be released.")


def _note(config) -> str:
  """The method's privacy note (DGD with a DP-SGD baseline has its own)."""
  if config.method == "dgd" and "dpsgd" in config.get("baseline", {}):
    return PRIVACY_NOTES["dgd_private_baseline"]
  return PRIVACY_NOTES[config.method]


STATISTICS_NOTE = (
    "generator.w_stats > 0: the generator also matches per-channel statistics of the "
    "baseline's activations on the private training set (computed without noise); like the "
    "baseline, they are not covered.")
DIAGNOSTICS_NOTE = (
    "Diagnostics computed by the server and not released: the student trained on the "
    "teachers' noiseless plurality (student_accuracy_noiseless_labels) and the agreement of "
    "the noisy labels with the plurality and with the baseline.")
RAW_POOL_NOTE = (
    "pool.source='train': the student's unlabelled pool is the private training set itself "
    "(a stand-in for public data, DGD Fig. 4 and 7). The student sees those images without "
    "noise, so this run's student has no differential-privacy guarantee for them.")
PRIVACY_NOTES["dpsgd"] = (
    "The epsilon covers the released model: DP-SGD's every step (a noisy sum of clipped "
    "per-example gradients on a Poisson sample) is accounted, and the model is their "
    "post-processing. Not covered: hyper-parameter tuning on the same private data.")
# Stage results that report.json also shows at its top level.
TOP_LEVEL = ("generator", "vae", "ldp", "audit")
# The stage whose test accuracy is the method's headline.
HEADLINE_STAGE = {"baseline": "baseline", "dgd": "student", "pate": "student",
                  "dpdfd": "dpdfd", "ldp": "ldp", "dpsgd": "dpsgd"}
# The stage whose result holds the method's privacy ledger.
PRIVACY_STAGE = {"dgd": "queries", "pate": "queries", "dpdfd": "dpdfd", "dpsgd": "dpsgd"}


def _privacy(config, results: dict) -> dict:
  """Headline epsilon (``config.privacy.accountant``: data-independent for DGD and DPDFD,
  PATE's data-dependent bound for PATE) and the rest, from the method's ledger."""
  stage = results[PRIVACY_STAGE[config.method]]
  p = stage["privacy"]
  independent = p.get("data_independent_epsilons", p["epsilons"])
  accountant = config.privacy.accountant
  data_dependent = accountant in p["data_dependent_accountants"]
  return {
      "queries": stage.get("num_queries"),
      "steps": stage.get("num_steps") if "num_queries" not in stage else None,
      "delta": p["delta"],
      "epsilon": (p["epsilons"] if data_dependent else independent)[accountant],
      "accountant": accountant,
      "epsilon_is_data_dependent": data_dependent,
      "epsilons": independent,
      "epsilons_data_dependent": {k: p["epsilons"][k] for k in p["data_dependent_accountants"]},
      # The LDP client's own (local, pure) epsilon per sample it sends, where there is one.
      "ldp_local_epsilon": stage.get("ldp_local_epsilon"),
      "covers": {"covered": stage.get("covered") or (f"{p['releases'][0]['mechanism']} answers to "
                             f"{stage['num_queries']} label queries of the teacher ensemble"
                             if "num_queries" in stage else
                             f"{stage['num_steps']} DPDFD steps (A_{{C,sigma}} releases)"),
                 "not_covered": [_note(config)] + p["not_covered"]
                                + ([RAW_POOL_NOTE] if config.get("pool", {}).get("source")
                                   == "train" else [])
                                + ([STATISTICS_NOTE] if config.get("generator", {}).get(
                                    "w_stats", 0) > 0 else [])
                                + ([DIAGNOSTICS_NOTE] if "student_accuracy_noiseless_labels"
                                   in results.get("student", {}) else [])},
  }


def build(config, results: dict) -> dict:
  headline = results.get(HEADLINE_STAGE.get(config.method, config.method), {})
  report = {
      "method": config.method,
      "dataset": config.dataset,
      "preset": config.preset,
      "test_accuracy": headline.get("test_accuracy"),
      "baseline_accuracy": results.get("baseline", {}).get("test_accuracy"),
      "privacy": {"epsilon": None, "delta": None, "accountant": None,
                  "note": _note(config)},
      **{name: results[name] for name in TOP_LEVEL if name in results},
      # Label diagnostics (not releases): what the label noise costs the student.
      **{k: stage[k] for stage in (results.get("student", {}), results.get("queries", {}))
         for k in ("student_accuracy_noiseless_labels", "noisy_label_agreement_with_plurality",
                   "label_accuracy_vs_baseline") if k in stage},
      "stage_seconds": {k: r.get("stage_seconds") for k, r in results.items()},
      "wall_seconds": sum(r.get("stage_seconds") or 0.0 for r in results.values()),
      "stages": results,
      "config": plain(config),
  }
  if PRIVACY_STAGE.get(config.method) in results:
    report.update(_privacy(config, results))
    report["privacy"] = {k: report[k] for k in ("epsilon", "delta", "accountant")}
    report["privacy"]["note"] = _note(config)
    unit = results[PRIVACY_STAGE[config.method]].get("privacy_unit")
    if unit:  # DPDFD: 'label' for direct training (label DP only), else 'example'
      report["privacy"]["unit"] = unit
  return report


def _audit_lines(a: dict) -> list[str]:
  """report.md's audit table: membership inference and model inversion per model."""
  lines = ["## Privacy audit (empirical attacks)", "",
           "| model | membership AUC | AUC 2.5-97.5% over splits | TPR at 1% FPR | splits x "
           "examples per side | inversion: correlation with own class mean | classes "
           "identified |", "|---|---|---|---|---|---|---|"]
  for name, m in a["membership"].items():
    inv = a["inversion"].get(name)
    lines.append(
        f"| {name} | {m['auc']:.3f} | {m['auc_interval'][0]:.3f}-{m['auc_interval'][1]:.3f} "
        f"| {m['tpr_at_1pct_fpr']:.3f} | {m['splits']} x {m['examples_per_side']} | "
        + (f"{inv['correlation_with_own_class_mean']:.3f} | {inv['classes_identified']}/"
           f"{inv['num_classes']} |" if inv else "- | - |"))
  lines += ["", f"Loss-threshold membership inference (0.5 = chance); model inversion with "
            f"the {a['inversion']['prior']} prior. An empirical check, not a guarantee.", ""]
  return lines


def _plan_lines(plan: dict) -> list[str]:
  """report.md's query plan: the chosen candidate and why (query_plan.choose)."""
  c = plan["chosen"]
  lines = ["## Query plan", "",
           f"Chosen automatically for the target epsilon: {c['aggregator']} with noise "
           f"{c['noise_scale']:g}, {c['num_queries']} queries (the most clean-equivalent labels "
           f"Q kappa^2 on an assumed vote histogram with top-class share "
           f"{plan['assumed_consensus']:g}; no votes are read to choose).", "",
           "| aggregator | noise | queries | expected label accuracy | epsilon | "
           "clean-equivalent labels |", "|---|---|---|---|---|---|"]
  for x in plan["candidates"]:
    lines.append(f"| {x['aggregator']} | {x['noise_scale']:g} | {x['num_queries']} | "
                 f"{x['expected_label_accuracy']:.3f} | {x['epsilon']:.3f} | "
                 f"{x['clean_equivalent_labels']:.0f} |")
  return lines + [""]


def write(workdir: str, report: dict) -> None:
  write_json(os.path.join(workdir, "report.json"), report)
  lines = [f"# dgd_jax report: {report['method']} on {report['dataset']} "
           f"({report['preset']} preset)", ""]
  if report["test_accuracy"] is not None:
    lines += [f"**Test accuracy: {100 * report['test_accuracy']:.2f}%**", ""]
  if report["privacy"]["epsilon"] is not None:
    lines += [f"**Privacy: epsilon = {report['privacy']['epsilon']:.4g} at delta = "
              f"{report['privacy']['delta']:g} ({report['privacy']['accountant']} accountant, "
              + ("DATA-DEPENDENT, " if report["epsilon_is_data_dependent"] else "")
              + (f"{report['queries']} queries" if report["queries"] is not None else
               f"{report['steps']} steps") + ").** Other accountants: "
              + ", ".join(f"{k} {v:.4g}" for k, v in report["epsilons"].items())
              + ". Not covered: " + " ".join(report["covers"]["not_covered"]), ""]
  if report.get("ldp_local_epsilon") is not None:
    lines += [f"**Client side: local epsilon = {report['ldp_local_epsilon']:.6g} per query "
              "sample** (pure, LDP Algorithm 1: masking + Laplace noise before it leaves the "
              "client).", ""]
  if "student_accuracy_noiseless_labels" in report:
    lines += [f"Diagnostic (not released): the same student on the teachers' noiseless "
              f"plurality reaches {100 * report['student_accuracy_noiseless_labels']:.2f}%.", ""]
  if report.get("audit"):
    lines += _audit_lines(report["audit"])
  if report["stages"].get("queries", {}).get("plan"):
    lines += _plan_lines(report["stages"]["queries"]["plan"])
  lines += ["## Privacy", "", report["privacy"]["note"], "", "## Stages", "",
            "| stage | result |", "|---|---|"]
  pictures = []
  for name, result in report["stages"].items():
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in result.items() if k not in ("table", "privacy", "membership",
                                                              "inversion", "plan"))
    lines.append(f"| {name} | {shown} |")
    pictures += [(k, v) for k, v in result.items() if k.endswith("_png")]
  if pictures:
    lines += ["", "## Pictures", ""]
    lines += [f"![{k}]({v})" for k, v in pictures]
  write_text(os.path.join(workdir, "report.md"), "\n".join(lines) + "\n")
