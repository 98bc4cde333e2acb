"""How much a finished teachers stage agrees on DPDFD inputs (development diagnostic for issue
18, not a release: it reads the teachers without noise and prints nothing a run publishes).

For the real test images, the ``synthetic.npy`` files given, freshly initialised DPDFD
generators and uniform noise, prints the teachers' mean top vote share, the mean margin between
the top two classes and the histogram of plurality classes. A conversion can only teach the
classes its inputs' plurality spans.

  python launch/dpdfd_votes.py --workdir=workdirs/dpdfd_ens_eps10 \
      workdirs/dpdfd_ens_eps10/dpdfd_samples/synthetic.npy
"""
from __future__ import annotations

import sys

import jax
import numpy as np

from dgd_jax import artefacts, ensemble, generative, methods
from dgd_jax.configs import dpdfd as dpdfd_config
from dgd_jax.core import Context
from dgd_jax.data import load_private
from dgd_jax.stages import dpdfd as dpdfd_stage
from dgd_jax.workdir import Workdir, load_array

NUM = 5000  # images per source


def main(argv: list[str]) -> None:
  path = next(a.split("=", 1)[1] for a in argv if a.startswith("--workdir="))
  config = dpdfd_config.get_config("fashion_mnist,cpu,ensemble,eps10")
  data = load_private(config)
  workdir = Workdir(path, writer=False)
  stage = workdir.stage("teachers", config, methods.config_keys("teachers", config))
  params, predict, _ = artefacts.load_teachers(Context(config, workdir, stage, lambda: data, {}))
  n, k = config.num_teachers, data.num_classes

  def report(name: str, x: np.ndarray) -> np.ndarray:
    votes = ensemble.vote_histograms(predict, params, x[:NUM], k)
    top = np.sort(votes, 1)[:, ::-1]
    print(f"{name}: top vote share {top[:, 0].mean() / n:.3f}, top-minus-second "
          f"{(top[:, 0] - top[:, 1]).mean():.1f} votes, plurality classes "
          f"{np.bincount(votes.argmax(1), minlength=k).tolist()}", flush=True)
    return votes

  votes = report("real test images", data.x_test)
  print(f"  plurality accuracy {np.mean(votes.argmax(1) == data.y_test[:NUM]):.4f}")
  for file in (a for a in argv if not a.startswith("--")):
    report(file, load_array(file))
  d = config.dpdfd
  for seed in (0, 1):  # the generator a DPDFD run starts from, sampled as its samples stage does
    config.seed = seed
    _, state, _ = dpdfd_stage._states(Context(config, workdir, stage, lambda: data, {}), 0.0)
    x = generative.generate(state.generator, jax.random.key(10 + seed), NUM, d.batch_size,
                            d.latent_dim)
    report(f"fresh DPDFD generator (seed {seed})", x)
  report("uniform noise", np.random.default_rng(0).random((NUM,) + data.image_shape,
                                                          np.float32))


if __name__ == "__main__":
  main(sys.argv[1:])
