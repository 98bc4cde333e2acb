"""Self-training probe on a finished DGD workdir (development tool for issue 16): does the
unlabelled synthetic pool help through the student's own pseudo-labels? Post-processing of the
released labels only (no epsilon); it writes checkpoints to a temporary folder and student
curves to the workdir's metrics, so run it on a copy.

Trains the student stage's student on the released labels (round 0, the stage's own result),
labels the unlabelled pool with its argmax, then trains fresh students on the labelled samples
plus the pseudo-labelled ones whose confidence is at least each threshold, for the stage's
step count and three times it. Prints each test accuracy.

  cp -r workdirs/quickstart_cpu /tmp/qs && python launch/self_training_probe.py /tmp/qs
"""
from __future__ import annotations

import os
import sys
import tempfile

import jax
import numpy as np

from dgd_jax import methods, pool, train
from dgd_jax.artefacts import load_vae
from dgd_jax.configs import dgd as dgd_config
from dgd_jax.core import Context
from dgd_jax.data import load_private
from dgd_jax.stages.student import labelled_split, train_student
from dgd_jax.workdir import Workdir

THRESHOLDS = (0.0, 0.9)


def main(path: str, preset: str = "fashion_mnist,cpu") -> None:
  config = dgd_config.get_config(preset)
  data = load_private(config)
  workdir = Workdir(path)
  stage = workdir.stage("student", config, methods.config_keys("student", config))
  ctx = Context(config, workdir, stage, lambda: data, {})
  x_pool = pool.load(ctx)
  x_s, y_s, x_u, _ = labelled_split(ctx, x_pool)
  x_eval, y_eval = pool.evaluation(ctx)
  vae = load_vae(ctx, x_pool.shape[1:])
  folder = tempfile.mkdtemp()
  steps = config.student.num_steps

  def fit(x, y, name, num_steps):
    config.student.num_steps = num_steps
    model, rounds = train_student(ctx, vae, x, y, x_u, name, os.path.join(folder, name))
    params = rounds[-1]
    return model, params, train.accuracy(model.apply, params, x_eval, y_eval)

  model, params, accuracy = fit(x_s, y_s, "round0", steps)
  print(f"round 0 (released labels only): {accuracy:.4f}", flush=True)
  probs = np.asarray(jax.nn.softmax(train.logits(model.apply, params, x_u)))
  confidence, pseudo = probs.max(1), probs.argmax(1).astype(np.int32)
  for threshold in THRESHOLDS:
    keep = confidence >= threshold
    for num_steps in (steps, 3 * steps):
      _, _, accuracy = fit(np.concatenate([x_s, x_u[keep]]), np.concatenate([y_s, pseudo[keep]]),
                           f"round1_{threshold}_{num_steps}", num_steps)
      print(f"round 1, confidence >= {threshold} ({keep.mean():.2f} of the pool kept), "
            f"{num_steps} steps: {accuracy:.4f}", flush=True)


if __name__ == "__main__":
  main(*sys.argv[1:])
