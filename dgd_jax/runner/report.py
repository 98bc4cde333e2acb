"""report.json and report.md: what a run produced, with accuracies as fractions in [0, 1]."""
from __future__ import annotations

import dataclasses
import os

from dgd_jax import privacy
from dgd_jax.configs.common import SMOKE_STEPS
from dgd_jax.labelling import aggregation
from dgd_jax.plan import backbone
from dgd_jax.plan import queries as query_plan
from dgd_jax.privacy.ledger import DATA_DEPENDENT_WARNING, RELATION_NAMES
from dgd_jax.runner import methods
from dgd_jax.runtime import host
from dgd_jax.runtime.files import plain
from dgd_jax.runtime.workdir import write_report
from dgd_jax.stages.audit import CANARY_AUDITS

# Stage results that report.json also shows at its top level.
TOP_LEVEL = ("generator", "vae", "ldp", "audit")

def neighbours(p: dict, accountant: str) -> str:
  """The neighbouring datasets the run's epsilon holds for, each relation with its epsilon
  under ``accountant`` and, for teacher releases, how many teachers one change moves, from the
  privacy stage's ledger JSON (``privacy.relations_json``)."""
  parts = []
  for relation, r in p["by_neighbours"].items():
    eps = {**r["epsilons"], **r["epsilons_data_dependent"]}[accountant]
    moved = (f", one change moves up to {r['teachers_changed']} teacher(s)"
             if r["teachers_changed"] else "")
    name = RELATION_NAMES[relation].split(" (")[0]  # "replace-one", "add/remove-one"
    parts.append(f"{name} (epsilon {eps:.4g}{moved})")
  line = "; ".join(parts)
  if p.get("teachers_changed") and "add_or_remove_one" not in p["by_neighbours"]:
    line += (". Add/remove-one is not covered: the 'shuffle' partition re-deals every shard "
             "when an example is added or removed (teachers.partition='stable' covers it, and "
             "moves 2 teachers under replace-one)")
  return line


def _privacy(config, results: dict) -> dict:
  """Headline epsilon (``config.privacy.accountant``: data-independent, or a Renyi filter's
  budget; a data-dependent accountant only where a config asks for one) and the rest, from
  the method's ledger."""
  method = methods.method(config)
  stage = results[method.privacy_stage]
  p = stage["privacy"]
  independent = p.get("data_independent_epsilons", p["epsilons"])
  accountant = config.privacy.accountant
  data_dependent = accountant in p["data_dependent_accountants"]
  records, not_covered = _record_notes(p["not_covered"], data_dependent)
  return {
      "queries": stage.get("num_queries"),
      "steps": stage.get("num_steps") if "num_queries" not in stage else None,
      "delta": p["delta"],
      "epsilon": (p["epsilons"] if data_dependent else independent)[accountant],
      "accountant": accountant,
      "epsilon_is_data_dependent": data_dependent,
      "epsilons": independent,
      "epsilons_data_dependent": {k: p["epsilons"][k] for k in p["data_dependent_accountants"]},
      # The headline's relation (the largest epsilon), and every claimed relation's epsilon.
      "epsilon_neighbours": p["neighbours"],
      "epsilon_by_neighbours": {
          relation: {**r["epsilons"], **r["epsilons_data_dependent"]}[accountant]
          for relation, r in p["by_neighbours"].items()},
      # The LDP client's own (local, pure) epsilon per sample it sends, where there is one.
      "ldp_local_epsilon": stage.get("ldp_local_epsilon"),
      "covers": {"covered": stage.get("covered") or method.covers.format(**stage),
                 "records": records,
                 "not_covered": [method.note(config)] + not_covered
                                + method.uncovered(config, results)},
  }


def _record_notes(notes: list[str], data_dependent: bool) -> tuple[list[str], list[str]]:
  """The ledger's notes (``PrivacyLedger.not_covered``) split into what the records cover
  (their "Covers ..." sentences and the neighbouring relation) and what they leave out; the
  data-dependent warning belongs to a data-dependent headline only, and the records' teacher
  exclusions are the method note's, said once."""
  covered, not_covered = [], []
  for note in notes:
    if note == DATA_DEPENDENT_WARNING and not data_dependent:
      continue
    head, sep, tail = note.replace(privacy.TEACHER_EXCLUSIONS, "").strip().partition(
        "Not covered:")
    if head.startswith(("Covers", "Neighbours:")):
      covered.append(head.strip())
      head = ""
    if (head + sep + tail).strip():
      not_covered.append((head + sep + tail).strip())
  return covered, not_covered


def build(config, results: dict, noise: dict | None = None, warnings: list[str] = ()) -> dict:
  """report.json's content from the stage ``results``; ``noise``: where the run's DP noise
  came from (``NoiseSource.describe``); ``warnings``: report.md prints them under the
  headline (e.g. ``plan.checks.large_delta``)."""
  method = methods.method(config)
  headline = results.get(method.headline_stage, {})
  report = {
      "method": config.method,
      "dataset": config.dataset,
      "preset": config.preset,
      "smoke": config.get("smoke", False),
      "test_accuracy": headline.get("test_accuracy"),
      "baseline_accuracy": results.get("baseline", {}).get("test_accuracy"),
      "privacy": {"epsilon": None, "delta": None, "accountant": None,
                  "note": method.note(config)},
      **{name: results[name] for name in TOP_LEVEL if name in results},
      # Label diagnostics (not releases): what the label noise costs the student.
      **{k: stage[k] for stage in (results.get("student", {}), results.get("queries", {}))
         for k in ("student_accuracy_noiseless_labels", "noisy_label_agreement_with_plurality",
                   "label_accuracy_vs_baseline") if k in stage},
      # The ensemble size and who chose it (plan.checks.run_config).
      **({"num_teachers": config.num_teachers,
          "num_teachers_chosen": config.get("num_teachers_chosen")}
         if "num_teachers" in config else {}),
      # DP-SGD's batch and steps and how they came from the data's size (plan.checks.run_config).
      **({"dpsgd_schedule_chosen": config.dpsgd_schedule_chosen}
         if config.get("dpsgd_schedule_chosen") else {}),
      # where the DP noise came from: a secret key, or a public noise_seed (not private)
      "noise": noise,
      # why release/ holds no model ("": it holds the headline model; methods.model_withheld)
      "model_withheld": methods.model_withheld(config),
      "warnings": list(warnings),
      "stage_seconds": {k: r.get("stage_seconds") for k, r in results.items()},
      "wall_seconds": sum(r.get("stage_seconds") or 0.0 for r in results.values()),
      "stages": results,
      "software": host.software(),  # what produced these numbers
  }
  if method.privacy_stage in results:
    report.update(_privacy(config, results))
    report["privacy"] = {k: report[k] for k in ("epsilon", "delta", "accountant",
                                                "epsilon_by_neighbours")}
    report["privacy"]["neighbours"] = neighbours(
        results[method.privacy_stage]["privacy"], report["accountant"])
    report["privacy"]["note"] = method.note(config)
    unit = results[method.privacy_stage].get("privacy_unit")
    if unit:  # DPDFD: 'label' for direct training (label DP only), else 'example'
      report["privacy"]["unit"] = unit
  report["audit_check"] = audit_check(config, report)
  report["noiseless"] = methods.noiseless(report)  # server diagnostics: not covered
  if report["noiseless"]:  # the run's not-covered notes, or the privacy block's if it has none
    note = methods.noiseless_note(report["noiseless"])
    if "covers" in report:
      report["covers"]["not_covered"].append(note)
    else:
      report["privacy"]["not_covered"] = [note]
  if "covers" in report:  # a public backbone's weights cost no epsilon
    report["covers"]["covered"] += backbone.cost_note(config)
  report["config"] = plain(config)
  return report


def replace_one_epsilon(config, report: dict) -> tuple[float, str] | None:
  """The epsilon that bounds the audit's members-against-held-out test, a replace-one test,
  and what it is: the tightest data-independent epsilon of the releases accounted for
  replace-one neighbours; DP-SGD steps claimed for add/remove-one only re-accounted as
  replace-one (PLD, at the run's delta: not 2 x epsilon, whose delta would be
  (1 + e^eps) delta); None where neither applies (no check)."""
  p = report["stages"][methods.method(config).privacy_stage]["privacy"]
  if "replace_one" in p["by_neighbours"]:
    return (min(p["by_neighbours"]["replace_one"]["epsilons"].values()),
            "the tightest data-independent epsilon for replace-one neighbours")
  if {r["mechanism"] for r in p["releases"]} == {"dpsgd"}:
    steps = [dataclasses.replace(privacy.DpsgdSteps.from_json(r), neighbours="replace_one")
             for r in p["releases"]]
    return (privacy.PrivacyLedger(steps).epsilon(report["delta"], "pld").epsilon,
            "the same DP-SGD steps accounted for replace-one neighbours (pld)")
  return None


def audit_check(config, report: dict) -> dict:
  """Each audited model the run's epsilon covers whole (``Method.audited``): its empirical
  lower bound on epsilon against the replace-one epsilon of the run's releases
  (``replace_one_epsilon``). ``passed`` False is a bug."""
  audit = report.get("audit") or {}
  bounds = audit.get("epsilon_lower_bound", {})
  audited = [n for n in methods.method(config).audited(config) if n in bounds]
  bound = replace_one_epsilon(config, report) if audited and report.get("epsilons") else None
  out = {}
  if bound is not None:
    allowed, against = bound
    out = {name: {"epsilon_lower_bound": bounds[name], "allowed": allowed, "against": against,
                  "passed": bounds[name] <= allowed} for name in audited}
  for key in CANARY_AUDITS:  # the one-run canary audits, each against the claim it ran for
    if key in audit:
      c = audit[key]
      out[key] = {"epsilon_lower_bound": c["epsilon_lower_bound"],
                  "allowed": c["claimed_epsilon"],
                  "against": f"{c['against']} ({c['accountant']}, {c['neighbours']} "
                             "neighbours)",
                  "passed": c["epsilon_lower_bound"] <= c["claimed_epsilon"]}
  return out


def _audit_lines(a: dict, check: dict, withheld: str) -> list[str]:
  """report.md's audit table: membership inference, its epsilon lower bound and model
  inversion per model; a loud line for a bound above the stated epsilon; the canary audits;
  where the epsilon does not cover the student (``withheld``, why), what the attacks found."""
  failed = [n for n, c in check.items() if not c["passed"]]
  lines = ["## Privacy audit (empirical attacks)", ""]
  for name in failed:
    c = check[name]
    lines += [f"**AUDIT FAILED: the {name}'s empirical epsilon lower bound "
              f"{c['epsilon_lower_bound']:.3f} exceeds {c['allowed']:.3f}, {c['against']}. "
              "This is a privacy bug: do not release anything from this run.**", ""]
  for key in CANARY_AUDITS:
    if key in a:
      lines += _canary_lines(a[key])
  if withheld and "student" in a["membership"] and "student" not in check:
    lines += [_uncovered_line(a, withheld), ""]
  lines += ["| model | membership AUC | AUC central 95% range over splits | TPR at 1% FPR | "
            "epsilon lower bound | splits x examples per side | inversion: correlation with own "
            "class mean | classes identified |", "|---|---|---|---|---|---|---|---|"]
  for name, m in a["membership"].items():
    inv = a["inversion"].get(name)
    bound = f"{m['epsilon_lower_bound']:.3f}" + (
        f" (<= {check[name]['allowed']:.3f} allowed)" if name in check else "")
    lines.append(
        f"| {name} | {m['auc']:.3f} | {m['auc_interval'][0]:.3f}-{m['auc_interval'][1]:.3f} "
        f"| {m['tpr_at_1pct_fpr']:.3f} | {bound} | {m['splits']} x {m['examples_per_side']} | "
        + (f"{inv['correlation_with_own_class_mean']:.3f} | {inv['classes_identified']}/"
           f"{inv['num_classes']} |" if inv else "- | - |"))
  significance = next(iter(a["membership"].values()))["epsilon_lower_bound_significance"]
  lines += ["", f"Loss-threshold membership inference (0.5 = chance); the epsilon lower bound "
            f"(jax-privacy's Clopper-Pearson auditor, {1 - significance:.0%} confidence over "
            "the splits) treats each example's score as an independent trial and the "
            "dataset's train/test split as a random one, which one trained model only "
            f"approximates; model inversion with the {a['inversion']['prior']} prior. An "
            "empirical check, not a guarantee.", ""]
  return lines


def _uncovered_line(a: dict, withheld: str) -> str:
  """report.md's sentence on the student the epsilon does not cover: what the membership and
  inversion attacks found on it, held against no claim."""
  m, inv = a["membership"]["student"], a["inversion"].get("student")
  found = ("no membership leak the attack can measure" if m["epsilon_lower_bound"] == 0 else
           f"a membership leak of epsilon >= {m['epsilon_lower_bound']:.3f}")
  return (f"Uncovered path: the epsilon does not cover the student. {withheld} On the "
          f"student the audit found {found} (AUC {m['auc']:.3f}, TPR "
          f"{m['tpr_at_1pct_fpr']:.3f} at 1% FPR, natural training examples against held-out "
          "ones)"
          + (f" and an inversion correlation of {inv['correlation_with_own_class_mean']:.3f} "
             "with the private class means" if inv else "")
          + "; no canary of the private set was planted on this path, so this bounds nothing.")


def _canary_lines(c: dict) -> list[str]:
  """report.md's one-run canary audit: its bounds beside the claim, in one sentence."""
  lower = c["epsilon_lower_bound"]
  return [f"One-run canary audit of {c['audited']} ({c['kind']}; {c['canaries']} canaries, "
          f"{c['included']} included at random; {c['cost']}): epsilon lower bound **{lower:.3f}** "
          f"(Steinke et al. {c['one_run']:.3f}, f-DP {c['one_run_fdp']:.3f}"
          + ("" if c.get("gaussian_tradeoff", True) else
             ", the f-DP one for a Gaussian trade-off curve, which this mechanism's is not, so "
             "not held against the claim")
          + f"; each with {1 - c['significance']:.0%} confidence at delta {c['delta']:g}), "
          f"{lower / c['claimed_epsilon']:.0%} of the claimed epsilon "
          f"{c['claimed_epsilon']:.3f} ({c['accountant']}, {c['neighbours']}); attack AUC "
          f"{c['auc']:.3f}; the exact mechanism, simulated, gives "
          f"{c['simulated']['epsilon_lower_bound']:.3f} (AUC "
          f"{c['simulated']['auc']:.3f}). An audit diagnostic: a bound above the claim is a "
          "privacy bug.", ""]


def _plan_lines(plan: dict) -> list[str]:
  """report.md's query plan: the chosen candidate and why (query_plan.choose)."""
  c = plan["chosen"]
  row = aggregation.AGGREGATORS[c["aggregator"]]
  if row.planning == "least_noise":  # no trade-off to show (query_plan docstring)
    return ["## Query plan", "",
            f"{c['aggregator']}: {row.plan_text.format(c['num_queries'])}, "
            f"with the least noise that fits the target epsilon: sigma "
            f"{c['noise_scale']:g} (epsilon {c['epsilon']:.3f}; no votes are read to choose)"
            + (f"; chosen because {c['why']}." if "why" in c else "."), ""]
  lines = ["## Query plan", "",
           f"Chosen automatically for the target epsilon: {c['aggregator']} with noise "
           f"{c['noise_scale']:g}, {c['num_queries']} queries (the most clean-equivalent "
           f"labels Q kappa^{query_plan.KAPPA_EXPONENT:g} on an assumed vote histogram with "
           f"top-class share {plan['assumed_consensus']:g}; no votes are read to choose).", "",
           "| aggregator | noise | queries | expected label accuracy | epsilon | "
           "clean-equivalent labels |", "|---|---|---|---|---|---|"]
  for x in plan["candidates"]:
    lines.append(f"| {x['aggregator']} | {x['noise_scale']:g} | {x['num_queries']} | "
                 f"{x['expected_label_accuracy']:.3f} | {x['epsilon']:.3f} | "
                 f"{x['clean_equivalent_labels']:.0f} |")
  return lines + [""]


def _headline(report: dict) -> list[str]:
  """Accuracy, epsilon (delta, accountant, count), what the epsilon covers and for which
  neighbouring datasets."""
  lines = []
  noise = report.get("noise") or {}
  if noise.get("reproducible") and report["privacy"]["epsilon"] is not None:
    lines.append(f"**NOT A PRIVATE RELEASE: the noise was drawn from the public "
                 f"config.noise_seed={noise['noise_seed']}**, so anyone holding it can remove "
                 "the noise; the epsilon below holds only for noise nobody can regenerate "
                 "(leave noise_seed unset for a secret key).")
  lines += [f"**WARNING: {w}**" for w in report.get("warnings", [])]
  if report["test_accuracy"] is not None:
    baseline = report.get("baseline_accuracy")
    lines.append(f"**Test accuracy: {100 * report['test_accuracy']:.2f}%**"
                 + (f" (non-private baseline: {100 * baseline:.2f}%)"
                    if baseline is not None and report["method"] != "baseline" else ""))
  lines += _publish_lines(report)
  p = report["privacy"]
  if p["epsilon"] is not None:
    count = (f"{report['queries']} queries" if report["queries"] is not None
             else f"{report['steps']} steps")
    others = ", ".join(f"{k} {v:.4g}" for k, v in report["epsilons"].items()
                       if k != p["accountant"])
    lines.append(f"**Privacy: epsilon = {p['epsilon']:.4g} at delta = {p['delta']:g} "
                 f"({p['accountant']} accountant, "
                 + ("DATA-DEPENDENT, " if report["epsilon_is_data_dependent"] else "")
                 + f"{count}).** Other accountants: {others}.")
    lines.append(f"Covers: {report['covers']['covered']}; what it does not cover is listed "
                 "under Privacy.")
    lines.append(f"Neighbouring datasets: {p['neighbours']}.")
    lines += _pate2018_lines(report)
  else:
    lines.append("**Privacy: no differential-privacy guarantee** (see Privacy).")
  return [line + "  " for line in lines[:-1]] + lines[-1:] + [""]


def _publish_lines(report: dict) -> list[str]:
  """What ``<workdir>/release/`` may publish of this run's headline model, and why."""
  method = methods.METHODS[report["method"]]
  if method.headline_stage is None:
    return []
  if report.get("model_withheld"):
    return [f"**release/ withholds the {method.headline_stage} model, its accuracy and its "
            f"curves**: {report['model_withheld']}"]
  return [f"release/ publishes the {method.headline_stage} model (model.msgpack): the "
          "epsilon covers everything it learnt from."]


def _pate2018_lines(report: dict) -> list[str]:
  """Where a Renyi filter stopped the queries, and a smooth-sensitivity release of the
  data-dependent epsilon, with the data-dependent diagnostics beside them."""
  stage = report["stages"].get("queries", {})
  diagnostics = ", ".join(f"{k} {v:.4g}" for k, v in report.get("epsilons_data_dependent",
                                                                 {}).items())
  lines = []
  if "filter" in stage:
    f = stage["filter"]
    lines.append(f"Renyi filter (Feldman & Zrnic 2021; its epsilon is a DP guarantee, GNMax "
                 f"charged on answered queries only): {f['asked']} of {f['queries']} queries "
                 f"asked, {f['answered']} answered, stopped by the "
                 + ("budget" if f["stop_reason"] == "budget" else "end of the plan")
                 + (f". Data-dependent diagnostics (not DP releases): {diagnostics}"
                    if diagnostics else "") + ".")
  if "smooth_sensitivity" in stage:
    s = stage["smooth_sensitivity"]
    line = (f"Smooth-sensitivity release of the data-dependent epsilon (PATE 2018 Sec. 4, GNMax "
            f"charged on {s['charged']} queries): {s['released']:.4g}, a DP release: order "
            f"{s['order']:g}, beta {s['beta']:.4g} and sigma_ss {s['sigma_ss']:.4g} were fixed "
            f"before any vote (from the {s['source']}), and its (lambda, c)-RDP cost c = "
            f"{s['gnss_rdp']:.4g} (Thm. 23) is composed into the headline.")
    if "diagnostic" in s:  # the private report (release/ withholds these)
      d = s["diagnostic"]
      line += (
          f" The exact values beside it are diagnostics, not DP releases (not covered): "
          f"expected {s['epsilon']:.4g} +- {s['std']:.3g}, {s['epsilon_before']:.4g} before the "
          f"release. DIAGNOSTIC, not a DP release: PATE 2018's analysis choosing them from the "
          f"votes (order {d['order']:g}, beta {d['beta']:.4g}, sigma_ss {d['sigma_ss']:.4g}) "
          f"would have released {d['released']:.4g} (expected {d['epsilon']:.4g}).")
    lines.append(line)
  return lines


def _pictures(workdir: str, stages: dict) -> list[str]:
  """The pictures the stages drew; those not drawn (no matplotlib) are named, not linked."""
  found = [(k, v) for result in stages.values() for k, v in result.items()
           if k.endswith("_png") and isinstance(v, str)]
  drawn = [(k, v) for k, v in found if os.path.exists(os.path.join(workdir, v))]
  lines = ["## Pictures", ""] + [f"![{k}]({v})" for k, v in drawn] if drawn else []
  missing = [v for k, v in found if (k, v) not in drawn]
  if missing:
    lines += ["", "Not drawn (matplotlib is not installed; pip install 'dgd_jax[plots]'): "
              + ", ".join(missing) + "."]
  return lines


def markdown(workdir: str, report: dict, extra: list[str] = ()) -> str:
  """report.md's text for ``report`` in ``workdir`` (whose pictures it links); ``extra``: lines
  it adds before its stage table."""
  lines = [f"# dgd_jax report: {report['method']} on {report['dataset']} "
           f"({report['preset']} preset)", ""]
  if report.get("smoke"):
    lines += [f"**SMOKE RUN**: every schedule cut to {SMOKE_STEPS} step(s) at the preset's "
              "shapes; it shows the run works, its numbers mean nothing.", ""]
  lines += _headline(report)
  if report.get("ldp_local_epsilon") is not None:
    lines += [f"**Client side: local epsilon = {report['ldp_local_epsilon']:.6g} per query "
              "sample** (pure, LDP Algorithm 1: masking + Laplace noise before it leaves the "
              "client).", ""]
  if "num_teachers" in report:
    lines += [f"Teachers: {report['num_teachers_chosen']}." if report["num_teachers_chosen"]
              else f"Teachers: {report['num_teachers']}, as the config sets "
                   "(--config.num_teachers=0 chooses a count for the private set's size).", ""]
  if report.get("dpsgd_schedule_chosen"):
    lines += [f"DP-SGD schedule: {report['dpsgd_schedule_chosen']}.", ""]
  student = report["stages"].get("student", {})
  if "ensemble_test_accuracy" in student:  # student.ensemble > 1
    members = student["member_test_accuracies"]
    lines += [f"Student: distilled from {len(members)} students trained on the release "
              f"(post-processing): their ensemble reaches "
              f"{100 * student['ensemble_test_accuracy']:.2f}%, each of them "
              f"{100 * min(members):.2f} to {100 * max(members):.2f}%.", ""]
  if "student_accuracy_noiseless_labels" in report:
    aggregator = report["stages"].get("queries", {}).get("aggregator")
    row = aggregation.AGGREGATORS.get(aggregator)  # None: no queries stage (DPDFD)
    clean = row.noiseless if row else "plurality"
    lines += [f"Diagnostic (not released): the same student on the teachers' noiseless "
              f"{clean} reaches "
              f"{100 * report['student_accuracy_noiseless_labels']:.2f}%.", ""]
  if report.get("audit"):
    lines += _audit_lines(report["audit"], report.get("audit_check", {}),
                          report.get("model_withheld") or "")
  if report["stages"].get("queries", {}).get("plan"):
    lines += _plan_lines(report["stages"]["queries"]["plan"])
  lines += ["## Privacy", "", report["privacy"]["note"], ""]
  if report.get("noiseless") and not report.get("covers"):  # else listed under not covered
    lines += [methods.noiseless_note(report["noiseless"]), ""]
  if report.get("covers"):
    lines += ["Covered, release by release:", ""] + [
        f"- {n}" for n in report["covers"].get("records", [])] + [""]
    lines += ["Not covered by the epsilon:", ""]
    lines += [f"- {n}" for n in report["covers"]["not_covered"][1:]]  # [0]: the note above
    if report.get("epsilons_data_dependent") and not report["epsilon_is_data_dependent"]:
      lines += [f"- Data-dependent values ({', '.join(report['epsilons_data_dependent'])}) "
                "are in report.json as diagnostics: functions of the private votes, not "
                "guarantees."]
    lines += [""]
  lines += list(extra)
  lines += ["## Stages", "", "| stage | result |", "|---|---|"]
  for name, result in report["stages"].items():
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in result.items()
                      if k not in ("table", "privacy", "membership", "inversion", "plan")
                      and not k.endswith("_png"))
    lines.append(f"| {name} | {shown} |")
  if "software" in report:
    lines += ["", "Ran with " + ", ".join(f"{k} {v}" for k, v in report["software"].items()
                                          if v is not None) + "."]
  lines += [""] + _pictures(workdir, report["stages"])
  return "\n".join(lines) + "\n"


def write(workdir: str, report: dict, extra: list[str] = ()) -> None:
  """report.json and report.md (``markdown``) in ``workdir``."""
  write_report(workdir, report, markdown(workdir, report, extra))
