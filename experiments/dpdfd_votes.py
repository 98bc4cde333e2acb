r"""Which classes do the teachers see in DPDFD's inputs?

Question: DPDFD's ensemble conversion (Algorithm 1 with the teachers) stays near chance at
eps 10 although its released rows are informative. Is it the inputs: which classes does the
teachers' plurality span on the samples of Algorithm 1's generator, on a fresh generator, on
noise, against real images?
Answer: the inputs. The teachers vote class 8 (bag) for every one of 5,000 samples of the
trained generator in both runs (top vote share 1.00 and 0.81); freshly initialised DPDFD
generators give 84% and 98% bag, uniform noise 100%, real test images 10% (top share 0.84,
plurality 80.1% right). A generator fed back only by the student collapses to one class, so
the ensemble preset queries DGD's DeepInversion set instead, which spans the classes.
Feeds: RESULTS.md, "DPDFD" (why Algorithm 1's ensemble stays near chance at eps 10).

A development diagnostic, not a release: it reads the teachers without noise and prints
nothing a run publishes. For the real test images, the ``synthetic.npy`` files given,
freshly initialised DPDFD generators (``Run.dpdfd_generator``, seeds 0 and 1) and
uniform noise, it prints the teachers' mean top vote share, the mean margin between the top two
classes and the histogram of plurality classes.

  python experiments/dpdfd_votes.py --workdir=workdirs/dpdfd_ens_eps10 \
      workdirs/dpdfd_ens_eps10/dpdfd_samples/synthetic.npy
"""
from __future__ import annotations

from absl import app, flags, logging
import jax
import jax.numpy as jnp
import numpy as np

import dgd_jax
from dgd_jax.synthesis import generative

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished run with a teachers stage (e.g. "
                               "dgd_jax/configs/dpdfd.py:<dataset>,ensemble).")
flags.mark_flag_as_required("workdir")

NUM = 5000  # images per source


def main(argv):
  logging.set_verbosity(logging.INFO)
  run = dgd_jax.open_run(_WORKDIR.value, "teachers")
  config, data = run.config, run.data
  n, k = config.num_teachers, data.num_classes

  def report(name: str, x: np.ndarray) -> np.ndarray:
    votes = run.votes(x[:NUM])
    top = np.sort(votes, 1)[:, ::-1]
    print(f"{name}: top vote share {top[:, 0].mean() / n:.3f}, top-minus-second "
          f"{(top[:, 0] - top[:, 1]).mean():.1f} votes, plurality classes "
          f"{np.bincount(votes.argmax(1), minlength=k).tolist()}", flush=True)
    return votes

  votes = report("real test images", data.x_test)
  print(f"  plurality accuracy {np.mean(votes.argmax(1) == data.y_test[:NUM]):.4f}")
  for file in argv[1:]:
    report(file, np.load(file))
  if "dpdfd" in config:  # Algorithm 1's generator as a DPDFD run starts it
    d = config.dpdfd
    model = run.dpdfd_generator()
    for seed in (0, 1):
      variables = model.init(jax.random.key(seed), jnp.zeros((2, d.latent_dim)), train=False)
      x = generative.generate(model.apply, variables, jax.random.key(10 + seed), NUM,
                              d.batch_size, d.latent_dim)
      report(f"fresh DPDFD generator (seed {seed})", x)
  report("uniform noise in [0, 1)", np.random.default_rng(0).random((NUM,) + data.image_shape,
                                                                    np.float32))


if __name__ == "__main__":
  app.run(main)
