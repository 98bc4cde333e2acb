r"""Where do the teachers agree: on real images, on the synthetic pool, on its stable part?

Question: with 50 teachers the release's signal at sigma 44.71 is the teachers' agreement on
the queried samples. How much lower is it on the synthetic pool than on real test images, and
does the generator stage's stable-sample rule (``stable_samples``: the baseline's confidence
after a 2-pixel shift) find the samples they agree on?
Answer: on 8,000 private images (seed 0) the mean top vote share is 0.80 on real test images
and 0.573 on the pool; the most stable half of the pool has 0.597, the most stable quarter
0.622: a small lever beside the gap to real images.
Feeds: RESULTS.md, "Teachers trained with mixup (the CPU presets now)".

A development diagnostic, not a release: it reads the teachers' votes without noise and prints
nothing a run publishes. It prints the mean top vote share of the run's teachers on the first
``--num_test`` real test images, on the whole pool, on the most stable half and quarter of the
pool (``stable_samples``), and on the pool by the baseline's class.

  python experiments/pool_agreement_probe.py \
      --workdir=workdirs/inv_8k_s0/inversion_steps=200_inversion_learning_rate=0.1
"""
from __future__ import annotations

import json

from absl import app, flags
import jax
import numpy as np

from dgd_jax.plan import artefacts
from dgd_jax.plan import pool
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.stages.generator import stable_samples
from dgd_jax.training import ensemble
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
flags.mark_flag_as_required("workdir")
_NUM_TEST = flags.DEFINE_integer("num_test", 2000, "Real test images to count votes on.")
_BLUR = flags.DEFINE_list("blur", [], "Gaussian blur widths (pixels) of the pool to score too.")


def blurred(x: np.ndarray, sigma: float) -> np.ndarray:
  """x [N, H, W, C] convolved with a separable Gaussian of width ``sigma`` (edge padded)."""
  r = int(np.ceil(3 * sigma))
  g = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
  g /= g.sum()
  pad = np.pad(x, ((0, 0), (r, r), (r, r), (0, 0)), mode="edge")
  rows = sum(g[i] * pad[:, i:i + x.shape[1]] for i in range(2 * r + 1))
  return sum(g[i] * rows[:, :, i:i + x.shape[2]] for i in range(2 * r + 1)).astype(x.dtype)


def top_share(votes: np.ndarray) -> np.ndarray:
  return votes.max(1) / votes.sum(1)


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  data, k = ctx.dataset, ctx.dataset.num_classes
  x = pool.load(ctx)
  params, predict, _ = artefacts.load_teachers(ctx)
  pool_votes = ensemble.vote_histograms(predict, params, x, k)
  share = top_share(pool_votes)
  real = top_share(ensemble.vote_histograms(predict, params, data.x_test[:_NUM_TEST.value], k))
  baseline, baseline_params = artefacts.load_classifier(ctx, "baseline")
  logits = train.logits(baseline.apply, baseline_params, x)
  out = {"real_test": round(float(real.mean()), 3), "pool": round(float(share.mean()), 3)}
  for fraction in (2, 4):
    keep = stable_samples(baseline, baseline_params, x, logits, len(x) // fraction, k,
                          jax.random.key(1))
    out[f"stable_1/{fraction}"] = round(float(share[keep].mean()), 3)
  names = logits.argmax(1)
  out["pool_by_baseline_class"] = [round(float(share[names == c].mean()), 3) for c in range(k)]
  for sigma in map(float, _BLUR.value):  # the same pool blurred: agreement, and on what
    xb = blurred(x, sigma)
    votes = ensemble.vote_histograms(predict, params, xb, k)
    out[f"blur_{sigma}"] = {
        "pool": round(float(top_share(votes).mean()), 3),
        "plurality_is_baseline_class": round(float(np.mean(votes.argmax(1) == names)), 3),
        "baseline_class_kept": round(float(np.mean(
            train.logits(baseline.apply, baseline_params, xb).argmax(1) == names)), 3)}
  out["plurality_is_baseline_class"] = round(float(np.mean(pool_votes.argmax(1) == names)), 3)
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  app.run(main)
