"""The accountants alone: what an epsilon buys, and which noise a plan needs.

  python examples/accountant.py [--teachers=250 --epsilon=10]

Nothing is trained: every number is a function of the plan (the noise, the count of
releases, delta and the neighbouring relation), computed by dp-accounting.
"""
import argparse

import dgd_jax
from dgd_jax import privacy


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--teachers", type=int, default=250)
  p.add_argument("--epsilon", type=float, default=10.0)
  p.add_argument("--delta", type=float, default=1e-5)
  args = p.parse_args()

  # 1. The epsilon of a fixed plan, under every accountant (PATE 2017's LNMax, 1,000 labels).
  plan = [privacy.LNMaxQueries(noise_scale=40.0, queries=1000)]
  for accountant in ("advanced_composition", "moments_accountant", "rdp", "pld"):
    report = dgd_jax.epsilon(plan, delta=args.delta, accountant=accountant)
    print(f"LNMax b=40, 1000 queries: {accountant:>20} epsilon {report.epsilon:.3f}")

  # 2. The least GNMax noise for 4,000 noisy histograms within the budget.
  sigma = privacy.min_noise(privacy.HistogramQueries(1.0, 4000), args.epsilon, args.delta, "pld")
  print(f"4000 Gaussian histograms at epsilon {args.epsilon:g}: sigma {sigma:.2f}")

  # 3. The most queries a noise buys, and the plan the planner would choose before any vote.
  most = privacy.max_queries(privacy.GNMaxQueries(40.0, 1), args.epsilon, args.delta, "rdp")
  print(f"GNMax sigma 40 at epsilon {args.epsilon:g}: {most} queries")
  best = dgd_jax.plan_queries(args.teachers, 10, args.epsilon, delta=args.delta)
  print(f"plan for {args.teachers} teachers: {best.aggregator} noise {best.noise_scale:g}, "
        f"{best.num_queries} queries, expected label accuracy {best.label_accuracy:.3f}, "
        f"epsilon {best.epsilon:.3f}")


if __name__ == "__main__":
  main()
