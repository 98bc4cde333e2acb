r"""Reference values of tensorflow/privacy's research/pate_2018 (core.py, smooth_sensitivity.py)
for tests/test_smooth_sensitivity.py, written to tests/data/pate2018_reference.json.

  git --git-dir=<mirror of tensorflow/privacy> archive HEAD research/pate_2018 | tar -x -C /tmp
  PYTHONPATH=<a folder with sympy> .venv/bin/python experiments/pate2018_reference_vectors.py \
      --reference_dir=/tmp/research/pate_2018 --out=tests/data/pate2018_reference.json

The reference modules need numpy, scipy, absl and (for the C5/C6 check) sympy. Every input is
stored beside its output, so the test evaluates dgd_jax's functions on exactly these inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

NUM_TEACHERS = 250
NUM_CLASSES = 10


def histograms() -> list[list[int]]:
  """Vote histograms of 250 teachers over 10 classes: unanimous, near-unanimous, a clear
  majority, a close race, a tie, a flat one, and six drawn from a seeded Dirichlet."""
  fixed = [
      [250, 0, 0, 0, 0, 0, 0, 0, 0, 0],
      [240, 5, 3, 2, 0, 0, 0, 0, 0, 0],
      [180, 30, 20, 10, 5, 5, 0, 0, 0, 0],
      [120, 100, 10, 10, 5, 5, 0, 0, 0, 0],
      [100, 100, 50, 0, 0, 0, 0, 0, 0, 0],
      [25, 25, 25, 25, 25, 25, 25, 25, 25, 25],
      [60, 50, 40, 30, 20, 20, 10, 10, 5, 5],
  ]
  rng = np.random.default_rng(37)
  drawn = []
  for alpha in (0.05, 0.1, 0.2, 0.5, 1.0, 3.0):
    p = rng.dirichlet(np.full(NUM_CLASSES, alpha))
    drawn.append(rng.multinomial(NUM_TEACHERS, p).tolist())
  return fixed + drawn


def git_commit(reference_dir: str) -> str | None:
  try:
    return subprocess.run(["git", "-C", reference_dir, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--reference_dir", required=True,
                      help="an extracted copy of tensorflow/privacy's research/pate_2018")
  parser.add_argument("--commit", default=None, help="the reference's commit, recorded as is")
  parser.add_argument("--out", default="tests/data/pate2018_reference.json")
  args = parser.parse_args()
  sys.path.insert(0, os.path.abspath(args.reference_dir))
  import core  # pylint: disable=import-outside-toplevel
  import smooth_sensitivity as ss  # pylint: disable=import-outside-toplevel

  votes = histograms()
  orders = [1.5, 2.0, 5.0, 10.0, 16.5, 20.0, 32.0, 50.0, 100.0, 250.0]
  sigmas = [20.0, 40.0, 100.0]
  out = {"source": "tensorflow/privacy research/pate_2018 (core.py, smooth_sensitivity.py)",
         "commit": args.commit or git_commit(args.reference_dir),
         "num_teachers": NUM_TEACHERS, "votes": votes, "orders": orders}

  out["log_q"] = [{"sigma": s, "values": [float(core.compute_logq_gaussian(np.array(v, float), s))
                                          for v in votes]} for s in sigmas]
  out["rdp_gaussian"] = [
      {"sigma": s, "log_q": lq, "values": core.rdp_gaussian(lq, s, np.array(orders)).tolist()}
      for s in sigmas for lq in [-1e-3, -0.5, -2.0, -5.0, -20.0, -60.0, -300.0]]
  out["threshold_rdp"] = [
      {"threshold": t, "sigma1": s1, "max_count": m,
       "log_pr_answered": float(core.compute_logpr_answered(t, s1, np.array([m, 0.0]))),
       "values": core.compute_rdp_threshold(core.compute_logpr_answered(t, s1, np.array(
           [m, 0.0])), s1, np.array(orders)).tolist()}
      for t, s1 in [(200.0, 150.0), (300.0, 200.0), (150.0, 50.0)]
      for m in [0, 60, 150, 200, 230, 250]]
  ss_orders = [5.0, 10.0, 16.5, 32.0]
  out["log_q0"], out["log_q1"], out["q_bounds"], out["local_sensitivity"] = [], [], [], []
  out["gnmax_local_sensitivities"] = []
  for s in [20.0, 40.0]:
    for o in ss_orders:
      out["log_q0"].append({"sigma": s, "order": o, "value": float(ss.compute_logq0_gnmax(s, o))})
      out["log_q1"].append({"sigma": s, "order": o, "num_classes": NUM_CLASSES,
                            "value": float(ss._compute_logq1(s, o, NUM_CLASSES))})  # pylint: disable=protected-access
      for lq in [-0.5, -3.0, -10.0, -40.0]:
        out["local_sensitivity"].append({
            "sigma": s, "order": o, "num_classes": NUM_CLASSES, "log_q": lq,
            "value": float(ss._compute_local_sens_gnmax(lq, s, NUM_CLASSES, o))})  # pylint: disable=protected-access
      for v in votes if o in (10.0, 16.5) else []:
        out["gnmax_local_sensitivities"].append({
            "sigma": s, "order": o, "votes": v,
            "values": ss.compute_local_sensitivity_bounds_gnmax(
                np.array(v, float), NUM_TEACHERS, s, o).tolist()})
    for q in [1e-30, 1e-10, 1e-4, 0.01, 0.3, 0.8]:
      out["q_bounds"].append({
          "sigma": s, "q": q, "num_classes": NUM_CLASSES,
          "lower": float(ss._compute_bl_gnmax(q, s, NUM_CLASSES)),  # pylint: disable=protected-access
          "upper": float(ss._compute_bu_gnmax(q, s, NUM_CLASSES))})  # pylint: disable=protected-access
  out["threshold_rdp_by_count"], out["threshold_local_sensitivities"] = [], []
  for t, s1 in [(200.0, 150.0), (150.0, 50.0)]:
    for o in [10.0, 16.5]:
      out["threshold_rdp_by_count"].append({
          "threshold": t, "sigma1": s1, "order": o,
          "values": ss._compute_rdp_list_threshold(NUM_TEACHERS, t, s1, o).tolist()})  # pylint: disable=protected-access
      for v in votes if o == 16.5 else []:
        out["threshold_local_sensitivities"].append({
            "threshold": t, "sigma1": s1, "order": o, "votes": v,
            "values": ss.compute_local_sensitivity_bounds_threshold(
                np.array(v, float), NUM_TEACHERS, t, s1, o).tolist()})
  rng = np.random.default_rng(5)
  arrays = [rng.exponential(size=250).tolist(), np.linspace(0.0, 3.0, 250).tolist(),
            [0.0] * 249 + [7.0]]
  out["discounted_max"] = [{"beta": b, "ls": a, "value": float(ss.compute_discounted_max(
      b, np.array(a)))} for b in [0.0, 0.01, 0.0303, 0.2] for a in arrays]
  out["gnss_rdp"] = [{"beta": b, "sigma_ss": s, "order": o,
                      "value": float(ss.compute_rdp_of_smooth_sensitivity_gaussian(b, s, o))}
                     for b, o in [(0.0, 5.0), (0.01, 16.5), (0.0182, 16.5), (0.003, 100.0),
                                  (0.049, 10.0)] for s in [0.5, 3.0, 20.0]]
  out["conditions"] = [{"sigma": s, "num_classes": NUM_CLASSES, "order": o,
                        "value": [bool(c) for c in ss.check_conditions(s, NUM_CLASSES, o)]}
                       for s in [20.0, 40.0] for o in ss_orders]
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(out, f)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
