r"""Which synthetic set do the teachers label best: DGD's generator or DeepInversion?

Question: DGD's noisy labels are the teachers' plurality on synthetic samples. On which
samples does that plurality teach a student most about real images: the run's own synthetic
set, or DeepInversion sets (``generative.invert``) made with given priors?
Answer: DeepInversion with statistics matching w 10 and jitter 1 (the CPU presets' synthesis):
on 3,000 samples the teachers' plurality labels teach a width-0.5 student 76.96% on the real
test set, against 71.68% on the generator's samples; the teachers agree with each other more
on inverted samples. TV, more jitter, fewer steps or w 30 stay within 0.6 points.
Feeds: RESULTS.md, DGD, "Synthesis: DeepInversion against DGD's generator".

A development diagnostic, not a release: it reads the teachers without noise and prints
nothing a run publishes. For the run's synthetic set and for a DeepInversion set made with
each JSON point of ``generative.invert`` settings (``INVERSION`` holds a point's defaults), it
prints on NUM samples: how often the teachers' plurality agrees with the baseline's label, the
teachers' mean top vote share, the share of saturated pixels, and synthetic -> real: a
width-0.5 classifier (``train.fit``, 500 Adam steps of 128) trained on the samples with the
baseline's labels, and with the teachers' plurality labels, scored on the real test set.

  python experiments/synthesis_probe.py --workdir=workdirs/quickstart_cpu '{"w_stats": 10}' \
      '{"w_stats": 10, "jitter": 2}'
"""
from __future__ import annotations

import itertools
import json
import os
import tempfile
import time

from absl import app, flags, logging
import jax
import numpy as np

import dgd_jax
from dgd_jax.synthesis import generative
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
flags.mark_flag_as_required("workdir")

NUM = 3000  # samples per source
INVERSION = dict(steps=200, learning_rate=0.1, batch_size=250, w_stats=3.0, w_tv=0.0,
                 jitter=1, mirror=False)  # a point's defaults
STUDENT = train.FitConfig(num_steps=500, batch_size=128, learning_rate=1e-3)


def main(argv):
  logging.set_verbosity(logging.INFO)
  run = dgd_jax.open_run(_WORKDIR.value, "generator")
  config, data = run.config, run.data
  # lax.conv, as the generator stage's DeepInversion (models/classifier.py)
  baseline, baseline_params = run.classifier("baseline", lowering="conv")
  targets = generative.layer_statistics(baseline.apply, baseline_params, data.x_train)
  model = run.new_classifier(width=0.5)
  folder, sources = tempfile.mkdtemp(), itertools.count()

  def real_accuracy(x, y, name):  # a width-0.5 classifier on (x, y), on the real test set
    state = train.create_train_state(model, train.optimizer(STUDENT), jax.random.key(0),
                                     data.image_shape)
    state = train.fit(state, x, y, jax.random.key(7), STUDENT, os.path.join(folder, name), name)
    return train.accuracy(model.apply, state.params, data.x_test, data.y_test)

  def report(name, x):
    named = train.predict(baseline.apply, baseline_params, x).astype(np.int32)
    votes = run.votes(x)
    plurality = votes.argmax(1).astype(np.int32)
    tag = f"source_{next(sources)}"  # its students' checkpoint folders
    print(json.dumps(dict(
        source=name, n=len(x), plurality_eq_baseline=round(float(np.mean(plurality == named)), 3),
        top_vote_share=round(float(votes.max(1).mean() / config.num_teachers), 3),
        saturated=round(float(np.mean(np.abs(x) > 0.98)), 3),
        real_baseline_labels=real_accuracy(x, named, f"{tag}_baseline"),
        real_plurality_labels=real_accuracy(x, plurality, f"{tag}_plurality"))), flush=True)

  report("the run's synthetic set", run.synthetic()[:NUM])
  for point in argv[1:]:
    p = {**INVERSION, **json.loads(point)}
    priors = generative.Priors(w_stats=p["w_stats"], w_tv=p["w_tv"], jitter=p["jitter"],
                               mirror=p["mirror"])
    t = time.time()
    x, _ = generative.invert(jax.random.key(0), NUM, p["batch_size"], p["steps"],
                             p["learning_rate"], data.num_classes, data.image_shape,
                             baseline.apply, baseline_params, priors, targets)
    print(f"{point}: {time.time() - t:.0f} s of inversion", flush=True)
    report(point, x)


if __name__ == "__main__":
  app.run(main)
