"""report.json and report.md: what a run produced, with accuracies as fractions in [0, 1]."""
from __future__ import annotations

import os

from dgd_jax.workdir import plain, write_json

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
PRIVACY_NOTES["dgd"] = (
    "Not yet a private release: the DGD student and its label queries are not built. The "
    "baseline (trained on private data without noise), the generator trained against it, the "
    "synthetic set and the VAE carry no differential-privacy guarantee; DGD's epsilon will "
    "cover the noisy label queries only.")
# Stage results that report.json also shows at its top level.
TOP_LEVEL = ("generator", "vae")


def build(config, results: dict) -> dict:
  headline = results.get(config.method, {})
  return {
      "method": config.method,
      "dataset": config.dataset,
      "preset": config.preset,
      "test_accuracy": headline.get("test_accuracy"),
      "privacy": {"epsilon": None, "delta": None, "accountant": None,
                  "note": PRIVACY_NOTES[config.method]},
      **{name: results[name] for name in TOP_LEVEL if name in results},
      "stages": results,
      "config": plain(config),
  }


def write(workdir: str, report: dict) -> None:
  write_json(os.path.join(workdir, "report.json"), report)
  lines = [f"# dgd_jax report: {report['method']} on {report['dataset']} "
           f"({report['preset']} preset)", ""]
  if report["test_accuracy"] is not None:
    lines += [f"**Test accuracy: {100 * report['test_accuracy']:.2f}%**", ""]
  lines += ["## Privacy", "", report["privacy"]["note"], "", "## Stages", "",
            "| stage | result |", "|---|---|"]
  pictures = []
  for name, result in report["stages"].items():
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in result.items() if k != "table")
    lines.append(f"| {name} | {shown} |")
    pictures += [(k, v) for k, v in result.items() if k.endswith("_png")]
  if pictures:
    lines += ["", "## Pictures", ""]
    lines += [f"![{k}]({v})" for k, v in pictures]
  with open(os.path.join(workdir, "report.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
