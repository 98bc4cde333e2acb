"""DPDFD: the mechanism A_{C,sigma} (Eq. 4), the loss pieces, Algorithm 1 end to end."""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.configs import dpdfd as dpdfd_config
from dgd_jax.plan.context import Context, noise_source
from dgd_jax.runtime.workdir import Stage, Workdir
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.synthesis import dpdfd

import tiny_configs
from report_checks import assert_noiseless_named


def test_normalised_rows_have_norm_c_over_one_plus_e_over_norm():
  g = jax.random.normal(jax.random.key(0), (16, 10)) * jnp.arange(1, 17)[:, None]
  c, e = 1e-3, 1e-2
  norms = jnp.linalg.norm(g, axis=-1)
  bounded = dpdfd.bound(g, c, "per_sample", stability=e)
  np.testing.assert_allclose(jnp.linalg.norm(bounded, axis=-1), c / (1 + e / norms),
                             rtol=1e-6)
  batch = dpdfd.bound(g, c, "batch", stability=e)  # Eq. 4 as printed: the whole-batch norm
  np.testing.assert_allclose(jnp.linalg.norm(batch), c / (1 + e / jnp.linalg.norm(g)),
                             rtol=1e-6)
  clipped = dpdfd.bound(g, 2.5, "clip")
  np.testing.assert_allclose(jnp.linalg.norm(clipped, axis=-1),
                             jnp.minimum(norms, 2.5), rtol=1e-6)


def test_mechanism_without_noise_is_the_mean_normalised_gradient():
  g_bar = dpdfd.bound(jax.random.normal(jax.random.key(1), (8, 10)), 1.0, "per_sample")
  chex.assert_trees_all_close(dpdfd.mechanism(jax.random.key(2), g_bar, 0.0, 1.0),
                              g_bar / 8)
  stack = jnp.stack([g_bar, 2 * g_bar, 3 * g_bar])  # three teachers (Sec. 4.4)
  chex.assert_trees_all_close(dpdfd.mechanism(jax.random.key(2), stack, 0.0, 1.0),
                              (6 * g_bar) / (3 * 8), rtol=1e-6)
  noisy = dpdfd.mechanism(jax.random.key(3), jnp.zeros((4000, 10)), 2.0, 0.5)
  assert float(jnp.std(noisy * 4000)) == pytest.approx(1.0, rel=0.02)  # std = sigma * C


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_output_gradients_are_per_example_rows():
  s = jax.random.normal(jax.random.key(4), (5, 10))
  t = jax.random.normal(jax.random.key(5), (5, 10))
  g = dpdfd.output_gradients("kd", s, t)
  for i in range(5):  # row i depends on example i alone
    gi = jax.grad(lambda r: jnp.sum(dpdfd.kd_loss(r[None], t[i:i + 1])))(s[i])
    np.testing.assert_allclose(g[i], gi, rtol=1e-5, atol=1e-7)
  assert float(dpdfd.dkd_loss(t, t).max()) == pytest.approx(0.0, abs=1e-5)  # equal: no loss


def test_generator_loss_terms_by_hand():
  logits = jnp.array([[2.0, 0.0], [0.0, 1.0]])
  features = jnp.array([[3.0, 4.0], [0.0, 0.0]])
  p = jax.nn.softmax(logits)
  one_hot = -(jnp.log(p[0, 0]) + jnp.log(p[1, 1])) / 2
  pbar = p.mean(0)
  expected = one_hot + 0.5 * jnp.sum(pbar * jnp.log(pbar)) - 2.0 * (5.0 + 0.0) / 2
  assert float(dpdfd.generator_loss(logits, features, 0.5, 2.0)) == pytest.approx(
      float(expected), rel=1e-6)


def tiny(npz_file, arg=""):
  config = dpdfd_config.get_config(f"npz:{npz_file},cpu{arg}")
  config.baseline.num_steps = 40
  config.baseline.batch_size = 32
  config.dpdfd.update(num_steps=10, batch_size=16, features=8, num_synthetic=40)
  config.log_every = 5
  if "ensemble" in arg:
    config.num_teachers = 3
    config.teachers.num_steps = 10
  if "generator" in config:  # the ensemble's synthetic inputs: 160 inverted samples
    config.generator.update(num_synthetic=160, inversion_steps=3, inversion_batch_size=40)
  return config


@pytest.mark.integration
def test_dpdfd_end_to_end(npz_file, tmp_path):
  report = pipeline.run(tiny(npz_file), str(tmp_path / "d"))
  assert report["method"] == "dpdfd" and report["steps"] == 10 and report["queries"] is None
  assert "stages.dpdfd.teacher_accuracy" in assert_noiseless_named(
      str(tmp_path / "d"))["noiseless"]
  assert set(report["stage_seconds"]) == {"baseline", "dpdfd", "dpdfd_samples"}
  result = report["stages"]["dpdfd"]
  planned = privacy.PrivacyLedger([privacy.DpdfdSteps(
      result["noise_multiplier"], "multiplier", 1e-3, 16, 10)]).epsilon(1e-5, "rdp")
  assert report["epsilon"] == pytest.approx(planned.epsilon) and planned.epsilon <= 10.0
  assert planned.epsilon > 9.9  # the least noise that fits the eps10 budget
  assert report["accountant"] == "rdp" and report["delta"] == 1e-5
  assert result["teacher_accuracy"] == report["baseline_accuracy"]
  x = np.load(tmp_path / "d" / "dpdfd_samples" / "synthetic.npy")
  assert x.shape == (40, 28, 28, 1)


@pytest.mark.integration
def test_dpdfd_ensemble_replay_and_budget_guard(npz_file, tmp_path):
  config = tiny(npz_file, ",ensemble,generator,eps1")
  config.dpdfd.update(replay_epochs=2, reference="uniform")
  report = pipeline.run(config, str(tmp_path / "e"), stages=("dpdfd",))
  assert set(report["stage_seconds"]) == {"teachers", "dpdfd"}
  result = report["stages"]["dpdfd"]
  steps = privacy.DpdfdSteps(result["noise_multiplier"], "multiplier", 1e-3, 16, 10,
                             num_teachers=3, analysis="disjoint_teachers",
                             teachers_disjoint=True)  # the B T = 160 rows, nothing more
  assert report["epsilon"] == pytest.approx(  # replay reuses them: no extra epsilon
      privacy.PrivacyLedger([steps]).epsilon(1e-5, "rdp").epsilon, rel=1e-12)
  assert report["epsilon"] <= 1.0
  assert result["replay_epochs"] == 2 and 0 <= result["test_accuracy_before_replay"] <= 1
  assert (tmp_path / "e" / "dpdfd" / "replay_checkpoints" / "20").is_dir()  # 2 x 160 / 16
  direct = tiny(npz_file, ",direct")
  direct.dpdfd.replay_epochs = 1  # its rows are private examples: refused before training
  with pytest.raises(ConfigError, match="replay_epochs=1"):
    pipeline.run(direct, str(tmp_path / "d"))
  assert not (tmp_path / "d").exists()
  config = tiny(npz_file, ",ensemble,generator")
  config.dpdfd.self_training = 1  # no replay to self-train after
  with pytest.raises(ConfigError, match="needs dpdfd.replay_epochs > 0"):
    pipeline.run(config, str(tmp_path / "t"))
  assert not (tmp_path / "t").exists()
  config = tiny(npz_file)
  config.dpdfd.noise = 1.0
  with pytest.raises(ConfigError, match="above the maximum epsilon 10"):
    pipeline.run(config, str(tmp_path / "g"))
  assert not (tmp_path / "g").exists()


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_ensemble_queries_each_synthetic_sample_once(npz_file, tmp_path):
  config = tiny(npz_file, ",ensemble,eps10")
  d = config.dpdfd
  assert (d.inputs, d.reference, config.generator.synthesis) == ("synthetic", "uniform",
                                                                 "inversion")
  assert d.num_steps * d.batch_size <= config.generator.num_synthetic  # the preset: 62 x 64
  d.update(replay_epochs=1, self_training=1, num_steps=5)  # 80 of the 160 samples queried
  report = pipeline.run(config, str(tmp_path / "s"))
  # the default stages: no DPDFD generator, so no samples stage
  assert set(report["stage_seconds"]) == {"baseline", "teachers", "generator", "dpdfd"}
  result = report["stages"]["dpdfd"]
  steps = privacy.DpdfdSteps(result["noise_multiplier"], "multiplier", 1e-3, 16, 5,
                             num_teachers=3, analysis="disjoint_teachers",
                             teachers_disjoint=True)  # B T = 80 rows, one per sample
  assert report["epsilon"] == pytest.approx(
      privacy.PrivacyLedger([steps]).epsilon(1e-5, "pld").epsilon, rel=1e-9)
  assert report["accountant"] == "pld" and report["epsilon"] <= 10.0
  assert any("NOT covered" in n for n in report["covers"]["not_covered"])
  rounds = result["test_accuracy_by_self_training_round"]  # the replayed, the self-trained
  assert len(rounds) == 2 and rounds[-1] == result["test_accuracy"]
  # the replay reads the 80 released rows, self-training all 160 samples (queried or not)
  assert (tmp_path / "s" / "dpdfd" / "replay_checkpoints" / "5").is_dir()  # 80 / 16
  assert (tmp_path / "s" / "dpdfd" / "replay_checkpoints_1" / "10").is_dir()  # 160 / 16
  with pytest.raises(ConfigError, match="dpdfd_samples stage samples Algorithm 1"):
    pipeline.run(config, str(tmp_path / "s"), stages=("dpdfd_samples",))
  config.dpdfd.num_steps = 11  # 176 rows of a 160-sample set: refused before any release
  with pytest.raises(ConfigError, match="Lower num_steps to 10"):
    pipeline.run(config, str(tmp_path / "s2"))


@pytest.mark.integration
def test_synthetic_step_releases_the_rows_in_order(npz_file):
  from dgd_jax.data import load_private
  from dgd_jax.stages import dpdfd as stage
  config = tiny(npz_file, ",ensemble")
  config.dpdfd.replay_epochs = 1
  data = load_private(config)
  student, state, cfg = stage._states(Context(config, None, None, lambda: data, {}), 0.0)
  state = state.replace(generator=None)
  synthetic = jax.random.uniform(jax.random.key(3), (160,) + data.image_shape)
  teacher = lambda x: jnp.stack([jnp.sum(x, (1, 2, 3))[:, None] * jnp.arange(10.0) / 100,
                                 -jnp.mean(x, (1, 2, 3))[:, None] * jnp.arange(10.0)])
  step = jax.jit(dpdfd.synthetic_step, static_argnums=(3, 4, 5))
  for t in range(3):
    state, _ = step(state, jax.random.key(t), synthetic, teacher, student.apply, cfg)
  np.testing.assert_array_equal(state.released_x[:48], synthetic[:48])  # rows t B .. (t+1) B
  g = jnp.stack([dpdfd.output_gradients("kd", jnp.zeros((48, 10)), t)
                 for t in teacher(synthetic[:48])])
  expected = -cfg.gamma * jnp.sum(dpdfd.bound(g, cfg.norm_bound, "per_sample"), 0) / (2 * 16)
  np.testing.assert_allclose(state.released_y[:48], expected, rtol=1e-3, atol=1e-5)
  assert not np.any(state.released_y[48:])


@pytest.mark.integration
def test_dpdfd_never_reads_private_training_data(npz_file, tmp_path):
  """The stage releases the same student, test accuracy and ledger when nothing private but
  the baseline can be read (training arrays that raise, the dataset file gone) as in an
  ordinary run: Algorithm 1 queries the teacher only."""
  import os  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  from dgd_jax.data import load_dataset  # pylint: disable=g-import-not-at-top
  from dgd_jax.stages import dpdfd as stage  # pylint: disable=g-import-not-at-top
  config = tiny(npz_file)
  baseline = pipeline.run(config, str(tmp_path / "b"), stages=("baseline",))
  shutil.copytree(tmp_path / "b", tmp_path / "d")
  ordinary = pipeline.run(config, str(tmp_path / "b"))["stages"]["dpdfd"]
  real = load_dataset(f"npz:{npz_file}")

  TestSetOnly = tiny_configs.without_training_data(real)
  os.rename(npz_file, f"{npz_file}.away")  # a read of the private set from disk fails too
  try:
    wd = Workdir(str(tmp_path / "d"))
    s = Stage(wd, "dpdfd", methods.stage_slice("dpdfd", config))
    s.begin()
    result = stage.run(Context(config, wd, s, TestSetOnly, baseline["stages"],
                               noise_source(wd, config.noise_seed, [])))  # the run's key
  finally:
    os.rename(f"{npz_file}.away", npz_file)
  assert result["num_steps"] == ordinary["num_steps"] == config.dpdfd.num_steps
  for k in ("test_accuracy", "teacher_accuracy", "noise_multiplier", "privacy"):
    assert result[k] == ordinary[k], k


@pytest.mark.integration
def test_direct_training_on_private_data(npz_file, tmp_path):
  config = tiny(npz_file, ",direct")
  assert config.dpdfd.teacher == "private_data" and config.privacy.dpdfd_analysis == "direct"
  report = pipeline.run(config, str(tmp_path / "d"))
  assert set(report["stage_seconds"]) == {"dpdfd"}  # no teacher, no generator, no samples
  sigma = report["stages"]["dpdfd"]["noise_multiplier"]
  assert report["stages"]["dpdfd"]["privacy_unit"] == "label"  # label DP only
  assert report["privacy"]["unit"] == "label"
  # T = 10 steps, each a Gaussian of sensitivity 2C and std sigma C on B = 16 of the N = 512
  # private examples drawn without replacement: SampledWithoutReplacement(512, 16,
  # GaussianDpEvent(sigma / 2)) x 10.
  record = privacy.DpdfdSteps(sigma, "multiplier", 1e-3, 16, 10, analysis="direct",
                              dataset_size=512)
  direct = privacy.PrivacyLedger([record]).epsilon(1e-5, "rdp")
  assert report["epsilon"] == pytest.approx(direct.epsilon) and direct.epsilon <= 10.0
  assert direct.epsilon > 9.9  # the least noise that fits the eps10 budget
  import dp_accounting
  from dp_accounting.rdp import rdp_privacy_accountant as rdp
  from dgd_jax.privacy import events
  event = dp_accounting.SampledWithoutReplacementDpEvent(512, 16,
                                                        dp_accounting.GaussianDpEvent(sigma / 2))
  accountant = rdp.RdpAccountant(list(events.orders_for([event], privacy.DEFAULT_RDP_ORDERS)),
                                 dp_accounting.NeighboringRelation.REPLACE_ONE)
  accountant.compose(event, 10)
  assert direct.epsilon == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)


@pytest.mark.integration
def test_uniform_reference_releases_depend_on_the_teachers_only(npz_file):
  from dgd_jax.data import load_private
  from dgd_jax.stages import dpdfd as stage
  config = tiny(npz_file)
  config.dpdfd.replay_epochs = 1  # the stage's states then keep the B T = 160 released rows
  data = load_private(config)
  student, state, _ = stage._states(Context(config, None, None, lambda: data, {}), 0.0)
  make = lambda seed: state.replace(
      params=student.init(jax.random.key(seed), jnp.zeros((1,) + data.image_shape)))
  teacher = lambda x: jnp.stack([jnp.sum(x, (1, 2, 3))[:, None] * jnp.arange(10.0) / 100,
                                 -jnp.mean(x, (1, 2, 3))[:, None] * jnp.arange(10.0)])  # n = 2
  import dataclasses
  from dgd_jax.plan import dpdfd as dpdfd_plan
  cfg = dataclasses.replace(dpdfd_plan.step_settings(config.dpdfd, 0.0),
                            reference="uniform")
  key = jax.random.key(7)
  step = jax.jit(dpdfd.step, static_argnums=(2, 3, 4))
  a, _ = step(make(1), key, teacher, student.apply, cfg)
  b, _ = step(make(2), key, teacher, student.apply, cfg)  # another student, same draws
  x = a.released_x[:16]
  np.testing.assert_array_equal(x, b.released_x[:16])  # the generator's batch, kept
  # Line 9 at zero logits, no noise: y = -gamma (1/(n B)) sum_j C g_j / ||g_j||, g_j = dL_T/ds at 0
  g = jnp.stack([dpdfd.output_gradients("kd", jnp.zeros((16, 10)), t) for t in teacher(x)])
  expected = -cfg.gamma * jnp.sum(dpdfd.bound(g, cfg.norm_bound, "per_sample"), 0) / (2 * 16)
  np.testing.assert_allclose(a.released_y[:16], expected, rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(b.released_y[:16], expected, rtol=1e-3, atol=1e-5)
  assert not np.any(a.released_y[16:])  # only the first step's rows are written

