r"""How many labels each PATE 2018 accounting buys at a budget, on recorded votes.

Question: on the quick start's vote histograms (250 teachers, 2852 synthetic queries), how many
Confident-GNMax (200, 150, 40) labels, and how clean, does each accounting buy at eps 1, 3, 10:
the data-independent plan (every query charged), the Renyi filter (GNMax charged only when
answered; a DP guarantee), the smooth-sensitivity release of the data-dependent epsilon (the
longest prefix of queries whose expected released epsilon fits, at PATE 2018's vote-chosen
parameters: a diagnostic, not a DP release), and plain GNMax sigma 40?
Answer: at eps 1 and 3 the filter answers about 2.6 times the labels of the plan (eps 1: 44
against 17; eps 3: 325 against 122) at 87-89% agreement with the plurality, against GNMax's 48
and 358 labels at 79-80%; at eps 10 the pool runs out first (1026 answered).
Feeds: RESULTS.md, "PATE 2018 accounting: labels per budget".

Accounting only: no student is trained; the labels' agreement with the plurality vote stands
in for their quality.

  .venv/bin/python experiments/pate2018_accounting.py \
      --votes=workdirs/quickstart_cpu/queries/votes.npy --epsilons=1,3,10

The threshold bits and GNMax noise are drawn once (numpy, --seed) and shared by every row.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import dgd_jax
from dgd_jax import privacy
from dgd_jax.privacy import renyi_filter, smooth_sensitivity


def agreement(votes, aggregator, scale, rng) -> float:
  """Share of noisy-argmax answers (GNMax std or LNMax Laplace scale) equal to the plurality."""
  draw = rng.laplace if aggregator == "lnmax" else rng.standard_normal
  noisy = votes + scale * draw(size=votes.shape)
  return float(np.mean(noisy.argmax(1) == votes.argmax(1))) if len(votes) else float("nan")


def ss_prefix(votes, passed, threshold, sigma1, sigma2, epsilon, delta) -> tuple[int, dict]:
  """The longest prefix whose expected smooth-sensitivity-released epsilon is <= epsilon
  (bisection; the released epsilon grows with the prefix)."""
  def release(n):  # PATE 2018's analysis: parameters chosen from the votes (a diagnostic)
    terms = (votes[:n], threshold, sigma1, sigma2, delta)
    chosen = smooth_sensitivity.choose_from_votes(*terms, answered=passed[:n])
    return smooth_sensitivity.release_confident_gnmax(*terms, chosen, answered=passed[:n],
                                                      rng=np.random.default_rng(0))
  lo, hi = 0, len(votes)
  if release(hi).epsilon <= epsilon:
    return hi, release(hi).to_json()
  while hi - lo > max(1, len(votes) // 200):
    mid = (lo + hi) // 2
    if release(mid).epsilon <= epsilon:
      lo = mid
    else:
      hi = mid
  return lo, release(lo).to_json() if lo else {}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--votes", required=True)
  parser.add_argument("--epsilons", default="1,3,10")
  parser.add_argument("--threshold", type=float, default=200.0)
  parser.add_argument("--sigma1", type=float, default=150.0)
  parser.add_argument("--sigma2", type=float, default=40.0)
  parser.add_argument("--delta", type=float, default=1e-5)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  votes = np.load(args.votes).astype(np.float64)
  rng = np.random.default_rng(args.seed)
  passed = votes.max(1) + args.sigma1 * rng.standard_normal(len(votes)) >= args.threshold
  t, s1, s2, delta = args.threshold, args.sigma1, args.sigma2, args.delta
  n_teachers, n_classes = int(votes[0].sum()), votes.shape[1]
  rows = []
  for eps in (float(e) for e in args.epsilons.split(",")):
    one = privacy.ConfidentGNMaxQueries(t, s1, s2, 1)
    plan = min(privacy.max_queries(one, eps, delta, "rdp"), len(votes))
    order = renyi_filter.filter_order(eps, delta, "confident_gnmax", s2, s1)
    run = privacy.FilteredQueries(s2, len(passed), eps, delta, order, t, s1).run_filter(passed)
    ss_n, ss = ss_prefix(votes, passed, t, s1, s2, eps, delta)
    gnmax = min(privacy.max_queries(privacy.GNMaxQueries(s2, 1), eps, delta, "rdp"), len(votes))
    auto = dgd_jax.plan_queries(n_teachers, n_classes, eps, delta=delta, max_queries=len(votes),
                                 accountant="rdp")
    for name, asked, answered_mask, sigma, note in [
        ("confident_gnmax plan (rdp, every query charged)", plan, passed[:plan], s2, {}),
        ("confident_gnmax under the Renyi filter", run.asked, run.answered, s2,
         {"stop_reason": run.stop_reason, "order": run.order}),
        ("confident_gnmax, smooth-sensitivity release", ss_n, passed[:ss_n], s2,
         {f"ss_{k}": ss.get(k) for k in ("epsilon", "std", "order", "beta")}),
        (f"gnmax sigma {s2:g} plan (rdp)", gnmax, np.ones(gnmax, bool), s2, {}),
        (f"auto plan: {auto.aggregator} {auto.noise_scale:g} (rdp)", auto.num_queries,
         np.ones(auto.num_queries, bool), auto.noise_scale, {})]:
      answered = votes[:asked][answered_mask]
      aggregator = auto.aggregator if name.startswith("auto") else "gnmax"
      quality = agreement(answered, aggregator, sigma, np.random.default_rng(args.seed + 1))
      rows.append({"epsilon": eps, "accounting": name, "asked": int(asked),
                   "answered": int(answered_mask.sum()),
                   "agreement_with_plurality": quality, **note})
      print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
  main()
