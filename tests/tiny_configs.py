"""Tiny configs of the methods, for tests that run the pipeline end to end in seconds, and a
dataset stand-in whose private training arrays cannot be read."""
from __future__ import annotations

from dgd_jax.configs import baseline as baseline_config_file
from dgd_jax.configs import dgd as dgd_config_file
from dgd_jax.configs import ldp as ldp_config_file
from dgd_jax.configs import pate as pate_config_file

PATE_POOL = 96  # of the npz fixture's 128 test examples; the last 32 evaluate


def baseline(data_file: str):
  """The baseline alone: 30 steps of 16."""
  config = baseline_config_file.get_config(f"npz:{data_file},cpu")
  config.baseline.update(num_steps=30, batch_size=16)
  config.log_every = 5
  return config


def dgd_generative(data_file: str):
  """DGD up to the VAE: baseline, generator (256 synthetic samples), VAE. DGD's generator, not
  the CPU presets' DeepInversion (tests/test_pipeline.py runs that one)."""
  config = dgd_config_file.get_config(f"npz:{data_file},cpu,generator")
  config.baseline.num_steps = 40
  config.baseline.batch_size = 32
  config.generator.update(rounds=2, iterations_per_round=5, batch_size=32, features=8,
                          num_synthetic=256, decay_every=1)
  config.vae.update(num_steps=20, batch_size=32, features=8, latent_dim=8)
  config.log_every = 5
  return config


def dgd_inversion(data_file: str):
  """DGD's baseline and DeepInversion's synthetic set: 3 batches of 32 images, 30 Adam steps
  each, and a 20-step synthetic student."""
  config = dgd_generative(data_file)
  config.generator.update(synthesis="inversion", num_synthetic=96, oversample=1.0,
                          inversion_batch_size=32, inversion_steps=30,
                          synthetic_student_steps=20)
  return config


def dgd(data_file: str):
  """The whole of DGD: 4 teachers, 50 queries, a 30-step student."""
  config = dgd_generative(data_file)
  config.num_teachers = 4
  config.teachers.num_steps = 20
  config.queries.update(plan="fixed", aggregator="lnmax", noise_scale=40.0, num_queries=50)
  config.student.update(num_steps=30, batch_size=16)
  return config


def dgd_private_baseline(data_file: str):
  """``dgd`` end to end: its baseline by DP-SGD (the private_baseline preset's, batches of 64),
  no statistics matching, 50 GNMax answers accounted with it under PLD."""
  config = dgd(data_file)
  config.baseline.dpsgd = dgd_config_file.get_config(
      f"npz:{data_file},cpu,private_baseline").baseline.dpsgd
  config.baseline.dpsgd.update(batch_size=64, microbatch_size=128)
  config.generator.w_stats = 0.0
  config.privacy.accountant = "pld"
  config.queries.update(aggregator="gnmax", noise_scale=40.0, num_queries=50)
  return config


def ldp(data_file: str, arg: str = ""):
  """LDP: the baseline and the robust teacher, 40 steps of 32 each."""
  config = ldp_config_file.get_config(f"npz:{data_file},cpu{arg}")
  config.baseline.update(num_steps=40, batch_size=32)
  config.ldp.update(num_steps=40, batch_size=32)
  config.log_every = 20
  return config


def pate(data_file: str, arg: str = ""):
  """PATE: 4 teachers, a 96-example public pool, 40 queries, a 20-step student."""
  config = pate_config_file.get_config(f"npz:{data_file},cpu{arg}")
  config.num_teachers = 4
  config.teachers.num_steps = 20
  config.pool.size = PATE_POOL
  config.queries.num_queries = 40
  config.vae.update(num_steps=10, batch_size=32, features=8, latent_dim=8)
  config.student.update(num_steps=20, batch_size=16)
  config.log_every = 10
  return config


def without_training_data(real, y_test=None):
  """A dataset class like ``real`` whose private training arrays raise when read (the test
  split stays; ``y_test`` replaces its labels, e.g. with a guarded array)."""

  class TestSetOnly:
    x_test, num_classes, image_shape = real.x_test, real.num_classes, real.image_shape

    @property
    def x_train(self):
      raise AssertionError("the stage read the private training images")

    @property
    def y_train(self):
      raise AssertionError("the stage read the private training labels")

  TestSetOnly.y_test = real.y_test if y_test is None else y_test
  return TestSetOnly
