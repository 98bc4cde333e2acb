r"""How much does label propagation over the pool add, and what bounds it?

Question: with few released labels (a small private set, 50 teachers, 114 queries), how much
does spreading them over the synthetic pool by label propagation give the student, from the
noisy labels and from the noiseless plurality, and what does the pool allow at most?
Answer: on workdirs/s8k50, 3 GNMax draws: the 114 queried samples alone 45.45 / 48.85 /
45.29%, the pool labelled by propagation 62.07 / 64.44 / 54.84% (+13.9 points on average);
from the noiseless plurality 52.64% -> 65.62%; the baseline's labels of the whole pool, a
ceiling that would leak the baseline, 74.96%.
Feeds: RESULTS.md, "DGD on a small private set: 8,000 images, 50 teachers (ablation)".

Label-propagation probe on a finished DGD workdir (a development diagnostic, not a release:
it reads the teachers' stored vote histograms without noise and prints nothing a run
publishes).

For each noise draw (GNMax with the workdir's sigma on its queried samples' votes) it trains
the preset's student on: the noisy labels of the queried samples alone (what DGD does without
``student.propagation``), and the whole synthetic pool labelled by ``propagation.propagate``
from those labels; then the same from the noiseless plurality (no privacy: what the label noise
costs), and, as the pool's ceiling, from the baseline's labels of every synthetic sample (no
privacy either: training on them would leak the baseline, RESULTS.md).

  python experiments/propagation_probe.py --workdir=workdirs/s8k50 \
      --config_arg=fashion_mnist,cpu --draws=3
"""
from __future__ import annotations

import os
import tempfile

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax.configs import dgd as dgd_config
from dgd_jax.data import load_dataset
from dgd_jax.labels import propagation
from dgd_jax.plan import student_fit
from dgd_jax.plan.artefacts import QUERIES, SYNTHETIC, SYNTHETIC_LABELS, VOTES, classifier, fit_config
from dgd_jax.runtime import progress
from dgd_jax.runtime.workdir import load_array, read_json
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD workdir.")
_CONFIG_ARG = flags.DEFINE_string("config_arg", "fashion_mnist,cpu", "dgd.py's argument.")
_DRAWS = flags.DEFINE_integer("draws", 3, "GNMax noise draws (seeds 0, 1, ...).")
_NEIGHBOURS = flags.DEFINE_integer("neighbours", 10, "k of the k-NN graph.")
flags.mark_flag_as_required("workdir")


def main(argv):
  del argv
  progress.setup_cli_logging()
  wd = _WORKDIR.value
  config = dgd_config.get_config(_CONFIG_ARG.value)
  test = load_dataset(config.dataset)
  x = load_array(os.path.join(wd, "generator", SYNTHETIC))
  named = load_array(os.path.join(wd, "generator", SYNTHETIC_LABELS))  # the baseline's labels
  with np.load(os.path.join(wd, "queries", QUERIES)) as q:
    idx = q["indices"]
  votes = load_array(os.path.join(wd, "queries", VOTES)).astype(np.float64)  # PRIVATE
  sigma = read_json(os.path.join(wd, "queries", "result.json"))["noise_scale"]
  features = propagation.features(x)
  model = classifier(config, test.num_classes, "student", lowering="conv")
  cfg = fit_config(config, "student")

  def accuracy(xs, ys):  # the preset's student on (xs, ys), scored on the real test set
    state = train.create_train_state(model, train.optimizer(cfg), jax.random.key(7),
                                     xs.shape[1:])
    step = student_fit.make_step(model, None, None, jnp.asarray(xs), jnp.asarray(ys),
                                   jnp.asarray(xs[:1]), config.student)
    state = train.run_steps(state, step, jax.random.key(8), cfg, tempfile.mkdtemp(), "probe")
    return train.accuracy(model.apply, state.params, test.x_test, test.y_test)

  def both(labels):  # (queried samples alone, the pool by propagation)
    p, reached = propagation.propagate(features, idx, labels, test.num_classes,
                                       _NEIGHBOURS.value)
    return (accuracy(x[idx], labels.astype(np.int32)),
            accuracy(x[reached], p[reached].argmax(1).astype(np.int32)))

  print(f"{len(idx)} queries, sigma {sigma:g}")
  for draw in range(_DRAWS.value):
    noisy = (votes + sigma * np.random.default_rng(draw).standard_normal(votes.shape)).argmax(1)
    alone, spread = both(noisy)
    print(f"draw {draw}: noisy labels agree with the plurality "
          f"{np.mean(noisy == votes.argmax(1)):.3f}; queried alone {alone:.2%}, "
          f"propagated {spread:.2%}", flush=True)
  alone, spread = both(votes.argmax(1))
  print(f"noiseless plurality: queried alone {alone:.2%}, propagated {spread:.2%}")
  print(f"baseline's labels of the whole pool (leaks the baseline): "
        f"{accuracy(x, named.astype(np.int32)):.2%}")


if __name__ == "__main__":
  app.run(main)
