r"""Do samples inverted from a robust baseline teach the student more?

Question: the standard preset's student, trained on the teachers' noiseless vote shares over
its DeepInversion pool, stops near 80.9% whatever the pool's size, the release or the
student (RESULTS.md, DGD, "The presets"), although the teachers' plurality is 85% on real
images: the pool's transfer to real images binds. Robust classifiers invert to
natural-looking images (Santurkar et al. 2019); does DeepInversion against a baseline trained
on perturbed inputs (Gaussian noise, or L2 PGD adversarial training) give a pool on which the
teachers' votes teach more?
Answer: no. On the standard preset's 1,200-step teachers (2,000 samples each), the more robust
the baseline, the more the teachers agree on its samples and the less their votes teach: the
run's own baseline 80.56% (top vote share 0.639), Gaussian noise 0.5: 80.44% (0.653), L2 PGD of
radius 0.5 / 1 / 2: 80.41% (0.681) / 79.99% (0.719) / 77.71% (0.767). The robust samples show
more garment shape, with stripes, and the baseline loses accuracy (87.28 / 85.74 / 82.63%).
Those PGD rows started at random in the ball and clipped to [-1, 1]; with ``ldp.worst_perturbation``
(from 0, unclipped: this script now) radius 1 gives 79.49% (0.762; baseline 85.24%).
Feeds: RESULTS.md, DGD, "The presets".

A development diagnostic, not a release: it reads the teachers without noise and prints
nothing a run publishes. It trains the run's baseline architecture and schedule on the private
training set with each minibatch perturbed (``--robust``), inverts ``--num`` samples from it
with the run's DeepInversion settings and the new baseline's feature statistics, and prints
the new baseline's test accuracy, the teachers' mean top vote share on the samples and the
real test accuracy of the run's student trained on the teachers' noiseless vote shares of
them (Brier score, as the student stage learns a histogram release). ``--robust=none``
inverts from the run's own baseline: the control at the same ``--num``.

  python experiments/robust_inversion_probe.py --workdir=workdirs/std_t1200/num_steps=1200 \
      --robust=pgd --radius=2 --num=2000
"""
from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax.plan import artefacts
from dgd_jax.plan import student_fit
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.synthesis import generative
from dgd_jax.training import ensemble
from dgd_jax.training import ldp
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
flags.mark_flag_as_required("workdir")
_ROBUST = flags.DEFINE_enum("robust", "pgd", ["none", "noise", "pgd"],
                            "How each baseline minibatch is perturbed: not (the run's own "
                            "baseline), Gaussian noise of std --radius, or L2 PGD of radius "
                            "--radius (--pgd_steps steps).")
_RADIUS = flags.DEFINE_float("radius", 2.0, "Noise std per pixel, or the L2 PGD radius "
                             "(pixels in [-1, 1]).")
_PGD_STEPS = flags.DEFINE_integer("pgd_steps", 3, "PGD steps per minibatch.")
_NUM = flags.DEFINE_integer("num", 2000, "Samples to invert.")
_STEPS = flags.DEFINE_integer("inversion_steps", 0, "Adam steps per inverted batch (0: the "
                              "run's generator.inversion_steps).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the baseline, the inversion and the student.")


def robust_baseline(ctx, model, key: jax.Array, folder: str):
  """The run's baseline architecture and schedule trained on minibatches perturbed per
  ``--robust`` (PGD: ``ldp.worst_perturbation``, L2 ascent from 0 as Madry et al. 2018);
  returns its parameters."""
  data, cfg = ctx.dataset, artefacts.fit_config(ctx.config, "baseline")
  radius, steps, robust = _RADIUS.value, _PGD_STEPS.value, _ROBUST.value

  def step(state, key, x, y):  # x, y arguments, not constants baked into the program
    k_batch, k_noise = jax.random.split(key)
    xb, yb = train.sample_batch(k_batch, x, y, cfg.batch_size)
    if robust == "noise":
      xb = jnp.clip(xb + radius * jax.random.normal(k_noise, xb.shape), -1, 1)
    else:
      xb = xb + ldp.worst_perturbation(
          lambda inputs: train.cross_entropy(state.apply_fn(state.params, inputs), yb), xb,
          radius, steps)
    return train.update(state, xb, yb)

  step = jax.jit(step, donate_argnums=0)
  x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
  init_key, run_key = jax.random.split(key)
  state = train.create_train_state(model, train.optimizer(cfg), init_key, data.image_shape)
  return train.run_steps(state, lambda s, k: step(s, k, x, y), run_key, cfg, folder,
                         "robust_baseline").params


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  config, data, g = ctx.config, ctx.dataset, ctx.config.generator
  folder, key = tempfile.mkdtemp(), jax.random.key(_SEED.value)
  t0 = time.time()
  model, params = artefacts.load_classifier(ctx, "baseline", lowering="conv")
  if _ROBUST.value != "none":
    params = robust_baseline(ctx, model, jax.random.fold_in(key, 1),
                             os.path.join(folder, "baseline"))
  print(f"baseline ({_ROBUST.value}, radius {_RADIUS.value:g}): "
        f"{train.accuracy(model.apply, params, data.x_test, data.y_test):.2%} "
        f"({time.time() - t0:.0f} s)", flush=True)

  t0 = time.time()
  targets = generative.layer_statistics(model.apply, params, data.x_train)  # PRIVATE
  priors = generative.GeneratorSettings.from_config(g).priors  # the generator stage's
  x, _ = generative.invert(jax.random.fold_in(key, 2), _NUM.value, g.inversion_batch_size,
                           _STEPS.value or g.inversion_steps, g.inversion_learning_rate,
                           data.num_classes, data.image_shape, model.apply, params, priors,
                           targets, mix=g.target_mix)
  np.save(os.path.join(folder, "samples.npy"), x)
  print(f"inverted {len(x)} samples ({time.time() - t0:.0f} s), saved in {folder}", flush=True)

  teachers, predict, _ = artefacts.load_teachers(ctx)
  votes = ensemble.vote_histograms(predict, teachers, x, data.num_classes)  # PRIVATE
  n = config.num_teachers
  print(f"teachers' mean top vote share {votes.max(1).mean() / n:.3f}", flush=True)
  t0 = time.time()
  student, rounds, _ = student_fit.train_student(
      ctx, (None, None), x, student_fit.shares(votes, n), x[:0], "probe",
      os.path.join(folder, "student"), brier=True)
  accuracy = train.accuracy(student.apply, rounds[-1], data.x_test, data.y_test)
  print(f"student on the noiseless vote shares: {accuracy:.2%} ({time.time() - t0:.0f} s)",
        flush=True)


if __name__ == "__main__":
  app.run(main)
