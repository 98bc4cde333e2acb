"""Synthesis probe on a finished DGD workdir (development diagnostic for issue 16, not a
release: it reads the teachers without noise and prints nothing a run publishes).

For the workdir's synthetic set and for DeepInversion sets made with each JSON point of
``generative.invert`` settings, prints on NUM samples: how often the teachers' plurality
agrees with the baseline's label, the teachers' mean top vote share, the share of saturated
pixels, and synthetic -> real: a width-0.5 student (500 Adam steps of 128) trained on the
samples with the baseline's labels, and with the teachers' plurality labels, evaluated on the
real test set.

  python launch/synthesis_probe.py --workdir=workdirs/quickstart_cpu '{"w_stats": 10}' \
      '{"w_stats": 10, "jitter": 2}'
"""
from __future__ import annotations

import functools
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import artefacts, ensemble, generative, methods, train
from dgd_jax.configs import dgd as dgd_config
from dgd_jax.core import Context
from dgd_jax.data import load_private
from dgd_jax.workdir import Workdir, load_array

NUM = 3000  # samples per source
INVERSION = dict(steps=200, learning_rate=0.1, batch_size=250, w_stats=3.0, w_tv=0.0,
                 jitter=1, mirror=False)  # a point's defaults


def main(argv: list[str]) -> None:
  path = next(a.split("=", 1)[1] for a in argv if a.startswith("--workdir="))
  config = dgd_config.get_config("fashion_mnist,cpu")
  data = load_private(config)
  workdir = Workdir(path, writer=False)

  def ctx(name):
    stage = workdir.stage(name, config, methods.config_keys(name, config))
    return Context(config, workdir, stage, lambda: data, {})

  # lax.conv, as the generator stage's DeepInversion (models/classifier.py)
  baseline, baseline_params = artefacts.load_classifier(ctx("baseline"), "baseline",
                                                        lowering="conv")
  teachers, predict, _ = artefacts.load_teachers(ctx("teachers"))
  targets = generative.layer_statistics(baseline.apply, baseline_params, data.x_train)

  # One model, optimizer and jitted step for every student: the step traces once.
  model = artefacts.classifier(config, data.num_classes).clone(width=0.5)
  cfg = train.FitConfig(num_steps=500, batch_size=128, learning_rate=1e-3)
  tx = train.optimizer(cfg)
  step = jax.jit(functools.partial(train.train_step, batch_size=cfg.batch_size))

  def real_accuracy(x, y):  # a width-0.5 student on (x, y), on the real test set
    state = train.create_train_state(model, tx, jax.random.key(0), data.image_shape)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    for i in range(cfg.num_steps):
      state, _ = step(state, jax.random.key(7 + i), xj, yj)
    return train.accuracy(model.apply, state.params, data.x_test, data.y_test)

  def report(name, x):
    named = train.predict(baseline.apply, baseline_params, x).astype(np.int32)
    votes = ensemble.vote_histograms(predict, teachers, x, data.num_classes)
    plurality = votes.argmax(1).astype(np.int32)
    print(json.dumps(dict(
        source=name, n=len(x), plurality_eq_baseline=round(float(np.mean(plurality == named)), 3),
        top_vote_share=round(float(votes.max(1).mean() / config.num_teachers), 3),
        saturated=round(float(np.mean(np.abs(x) > 0.98)), 3),
        real_baseline_labels=real_accuracy(x, named),
        real_plurality_labels=real_accuracy(x, plurality))), flush=True)

  report("workdir synthetic set", load_array(f"{path}/generator/synthetic.npy")[:NUM])
  for point in (a for a in argv if not a.startswith("--")):
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
  main(sys.argv[1:])
