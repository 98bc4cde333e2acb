r"""Does the student gain from its own hard pseudo-labels of the unlabelled pool?

Question: DGD labels only the queried part of its pool. Does a fresh student trained on the
released labels plus the first student's argmax pseudo-labels of the rest of the pool (all of
them, or only the confident ones) beat the first student?
Answer: no. On the generator preset's run (first student 70.49%): with every pseudo-label
69.64% / 70.06% (500 / 1500 steps), with those of confidence >= 0.9 (46% of the pool)
67.87% / 69.13%. The next student relearns the first one's errors as targets. (The shipped
``student.self_training`` trains on the last student's distributions instead; it gains at
eps 1 only: RESULTS.md, "Label propagation, self-training, the noisy histogram".)
Feeds: RESULTS.md, DGD, "Query plan and student" (the self-training rows).

Post-processing of the released labels only (no epsilon). Trains the run's student
(``student_training.train_student``, without label propagation or self-training) on the released
labels, labels the rest of the pool with its argmax, then trains fresh students on the
labelled samples plus the pseudo-labelled ones whose confidence is at least each threshold, for
the run's step count and three times it, and prints each accuracy on the run's evaluation
split. Reads the workdir only; checkpoints go to a temporary folder.

  python experiments/self_training_probe.py --workdir=workdirs/quickstart_cpu
"""
from __future__ import annotations

import os
import tempfile

from absl import app, flags
import jax
import numpy as np

from dgd_jax.plan import artefacts
from dgd_jax.plan import pool
from dgd_jax.plan import student_fit
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.stages import student as student_stage
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD (or PATE) run.")
_THRESHOLDS = flags.DEFINE_list("thresholds", ["0.0", "0.9"], "Confidence thresholds of the "
                                "pseudo-labels kept.")
flags.mark_flag_as_required("workdir")


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  config = ctx.config
  config.student.self_training = 0  # one student per fit: the rounds are this probe's own
  x_pool = pool.load(ctx)
  x_s, y_s, x_u, _ = student_stage.labelled_split(ctx, x_pool)
  x_eval, y_eval = pool.evaluation(ctx)
  vae = (artefacts.load_vae(ctx, x_pool.shape[1:]) if student_fit.uses_vae(config.student)
         else (None, None))
  folder = tempfile.mkdtemp()
  steps = config.student.num_steps

  def fit(x, y, name, num_steps):
    config.student.num_steps = num_steps
    model, rounds, _ = student_fit.train_student(ctx, vae, x, y, x_u, name,
                                                os.path.join(folder, name))
    return model, rounds[-1], train.accuracy(model.apply, rounds[-1], x_eval, y_eval)

  model, params, accuracy = fit(x_s, y_s, "round0", steps)
  print(f"round 0 (released labels only): {accuracy:.4f}", flush=True)
  probs = np.asarray(jax.nn.softmax(train.logits(model.apply, params, x_u)))
  confidence, pseudo = probs.max(1), probs.argmax(1).astype(np.int32)
  for threshold in map(float, _THRESHOLDS.value):
    keep = confidence >= threshold
    for num_steps in (steps, 3 * steps):
      _, _, accuracy = fit(np.concatenate([x_s, x_u[keep]]), np.concatenate([y_s, pseudo[keep]]),
                           f"round1_{threshold}_{num_steps}", num_steps)
      print(f"round 1, confidence >= {threshold} ({keep.mean():.2f} of the pool kept), "
            f"{num_steps} steps: {accuracy:.4f}", flush=True)


if __name__ == "__main__":
  app.run(main)
