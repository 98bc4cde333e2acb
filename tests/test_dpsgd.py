"""DP-SGD on jax-privacy: the record's sampling and events, the accountant against published and
independent values, calibration, clipping, ScatterNet features, the planner CLI, the budget
guard and a tiny end-to-end run on a real Fashion-MNIST slice."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_privacy import accounting as jp_accounting
from jax_privacy import batch_selection

from dgd_jax import privacy
from dgd_jax.cli.audit import audit_run
from dgd_jax.configs import dgd as dgd_config_file
from dgd_jax.configs import dpsgd as dpsgd_config_file
from dgd_jax.data import load_dataset
from dgd_jax.models import dpsgd as dpsgd_models
from dgd_jax.models import scattering
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.stages import baseline as baseline_stage
from dgd_jax.training import dpsgd

import tiny_configs
from conftest import make_images
from report_checks import assert_noiseless_named

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


# ---- the record: sampling and accounting from one object ------------------------------------

def test_batch_selection_is_the_sampling_the_accountant_composes():
  record = privacy.DpsgdSteps(2.0, batch_size=100, dataset_size=1000, steps=400, norm_bound=0.5)
  strategy = record.batch_selection()
  event = record.event()
  # Plain Poisson sampling: no cycles, no truncation (those need other events).
  assert type(strategy) is batch_selection.CyclicPoissonSampling
  assert strategy.cycle_length == 1 and strategy.truncated_batch_size is None
  assert isinstance(event, dp_accounting.SelfComposedDpEvent)
  assert isinstance(event.event, dp_accounting.PoissonSampledDpEvent)
  assert strategy.iterations == event.count == record.steps
  assert strategy.sampling_prob == event.event.sampling_probability == 0.1
  assert event.event.event == dp_accounting.GaussianDpEvent(2.0)
  # What the trainer draws (dpsgd.batches) is that strategy: every example in each
  # step with probability q, independently.
  drawn = dpsgd.batches(record, 1000, np.random.default_rng(0), multiple=64)
  assert len(drawn) == record.steps
  counts = np.zeros(1000)
  sizes = []
  for b in drawn:
    assert len(b) % 64 == 0
    real = b[b >= 0]
    assert len(np.unique(real)) == len(real)
    counts[real] += 1
    sizes.append(len(real))
  assert abs(np.mean(sizes) - 100) < 4 * np.sqrt(100 * 0.9 / 400)
  assert abs(counts.mean() / record.steps - 0.1) < 0.005
  # The clipped sum's sensitivity jax-privacy states under the record's relation is C.
  grad_fn = dpsgd.clipped_grad(lambda p, x: jnp.sum(p * x), l2_clip_norm=0.5)
  assert grad_fn.sensitivity(record.neighboring_relation) == record.norm_bound
  assert record.neighboring_relation == dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def test_ledger_equals_jax_privacy_dpsgd_accountant():
  record = privacy.DpsgdSteps(4.05, 8192, 60000, 293)
  eps = privacy.PrivacyLedger([record]).epsilons(1e-5)
  params = jp_accounting.DpParams(noise_multipliers=4.05, num_samples=60000, delta=1e-5,
                                  batch_size=8192)
  for name, cfg in (("rdp", jp_accounting.RdpAccountantConfig(
      orders=list(privacy.DEFAULT_RDP_ORDERS))), ("pld", jp_accounting.PldAccountantConfig())):
    reference = jp_accounting.DpsgdTrainingAccountant(cfg).compute_epsilon(293, params)
    assert eps[name].epsilon == pytest.approx(reference, rel=1e-9)
  assert eps["pld"].epsilon < eps["rdp"].epsilon < eps["rdp_classic"].epsilon


def test_published_reference_values():
  # Abadi et al. 2016 Sec. 5.2: q = 0.01, sigma = 4, T = 10000, delta = 1e-5 -> eps 1.26 by the
  # moments accountant (= RDP at integer orders, classic conversion).
  ledger = privacy.PrivacyLedger([privacy.DpsgdSteps(4.0, 600, 60000, 10000)],
                                 orders=np.arange(2, 64))
  assert ledger.epsilon(1e-5, "rdp_classic").epsilon == pytest.approx(1.26, abs=0.005)
  # TF Privacy's MNIST tutorial: N 60000, batch 256, sigma 1.1, 60 epochs -> eps 3.01.
  ledger = privacy.PrivacyLedger([privacy.DpsgdSteps(1.1, 256, 60000, 14063)],
                                 orders=np.arange(2, 64))
  assert ledger.epsilon(1e-5, "rdp_classic").epsilon == pytest.approx(3.01, abs=0.01)
  # q = 1: no subsampling, T Gaussians = one Gaussian of multiplier sigma / sqrt(T).
  full = privacy.PrivacyLedger([privacy.DpsgdSteps(3.0, 100, 100, 9)]).epsilon(1e-5, "rdp")
  gauss = privacy.PrivacyLedger([privacy.GNMaxQueries(np.sqrt(2.0), 1)]).epsilon(1e-5, "rdp")
  assert full.epsilon == pytest.approx(gauss.epsilon, rel=1e-9)  # both multiplier 1


@pytest.mark.integration
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_round_trip(accountant):
  template = privacy.DpsgdSteps(1.0, 512, 20000, 200)
  noise = privacy.dpsgd_noise_multiplier(template, 2.0, 1e-5, accountant)
  eps = privacy.epsilon_of(template.with_noise(noise), 1e-5, accountant)
  assert eps <= 2.0
  assert eps == pytest.approx(2.0, rel=1e-3)


def test_bad_records_are_refused():
  with pytest.raises(ConfigError, match="exceeds dataset_size"):
    privacy.DpsgdSteps(1.0, 2000, 1000, 10)
  with pytest.raises(ConfigError, match="norm_bound"):
    privacy.DpsgdSteps(1.0, 10, 1000, 10, norm_bound=0.0)
  with pytest.raises(ConfigError, match="poisson"):
    privacy.DpsgdSteps(1.0, 10, 1000, 10, sampling="shuffle")
  with pytest.raises(ConfigError, match="neighbouring relations"):  # part 2 composes them
    privacy.PrivacyLedger([privacy.DpsgdSteps(1.0, 10, 1000, 10),
                           privacy.GNMaxQueries(40.0, 10)]).epsilons(1e-5)


def test_replace_one_dpsgd_composes_with_label_queries_by_dp_accounting():
  """Issue 19 part 2: DGD's private baseline (DP-SGD under replace-one) and its GNMax label
  queries in one ledger: one PLD composition, equal to dp-accounting's REPLACE_ONE accountant on
  the same events (GNMax's shift sqrt(2) = 2 x its per-contribution multiplier), not a sum."""
  steps = privacy.DpsgdSteps(2.0, 500, 10000, 200, neighbours="replace_one")
  votes = privacy.GNMaxQueries(40.0, 300)
  both = privacy.PrivacyLedger([steps, votes]).epsilons(1e-5)
  assert "rdp" not in both and "rdp_classic" not in both  # no replace-one Poisson RDP
  reference = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE,
                                              value_discretization_interval=1e-4)
  reference.compose(steps.event())
  # Under REPLACE_ONE dp-accounting doubles a Gaussian's shift: multiplier 2 x sigma / sqrt(2).
  reference.compose(dp_accounting.GaussianDpEvent(2 * 40.0 / np.sqrt(2)), 300)
  assert both["pld"].epsilon == pytest.approx(reference.get_epsilon(1e-5), rel=1e-6)
  alone = [privacy.PrivacyLedger([r]).epsilon(1e-5, "pld").epsilon for r in (steps, votes)]
  assert max(alone) < both["pld"].epsilon < sum(alone)
  # Replace-one costs more than add/remove for the same steps (a sampled step moves 2C).
  add_remove = privacy.PrivacyLedger([privacy.DpsgdSteps(2.0, 500, 10000, 200)])
  assert add_remove.epsilon(1e-5, "pld").epsilon < alone[0]
  assert steps.l2_sensitivity == 2.0 * steps.norm_bound


# ---- clipping ---------------------------------------------------------------------------------

@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_clipped_per_example_gradients_match_a_hand_computation():
  model = dpsgd_models.ScatterLinear(num_classes=3, groups=1)
  x = jax.random.normal(jax.random.key(0), (5, 2, 2, 3))
  y = jnp.array([0, 1, 2, 1, 0])
  params = model.init(jax.random.key(1), x[:1])
  clip = 0.05
  grad_fn = dpsgd.clipped_grad(dpsgd._loss(model), l2_clip_norm=clip, batch_argnums=(1, 2),
                               return_grad_norms=True)
  key = jax.random.key(2)  # the dropout key: unused by a model without dropout
  total, aux = jax.jit(grad_fn)(params, x, y, key)
  by_hand, norms = None, []
  one_grad = jax.jit(jax.grad(dpsgd._loss(model)))
  for i in range(5):  # one example at a time, clipped by hand
    g = one_grad(params, x[i:i + 1], y[i:i + 1], key)
    norm = float(jnp.sqrt(sum(jnp.sum(v ** 2) for v in jax.tree.leaves(g))))
    norms.append(norm)
    g = jax.tree.map(lambda v, n=norm: v * min(1.0, clip / n), g)
    by_hand = g if by_hand is None else jax.tree.map(jnp.add, by_hand, g)
  np.testing.assert_allclose(aux.grad_norms, norms, rtol=1e-5)
  assert min(norms) > clip  # every example was clipped: the sum has norm <= 5 C
  for a, b in zip(jax.tree.leaves(total), jax.tree.leaves(by_hand)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
  assert float(jnp.sqrt(sum(jnp.sum(v ** 2) for v in jax.tree.leaves(total)))) <= 5 * clip + 1e-6


@pytest.mark.integration
def test_closed_form_linear_clipping_equals_jax_privacy():
  # ScatterNet + linear's ghost-clipped sum against jax-privacy's clipped_grad on the same
  # model: some examples clipped, some not, two padded; the same norms, losses and sum.
  model = dpsgd_models.ScatterLinear(num_classes=4, groups=3)
  x = jax.random.normal(jax.random.key(0), (8, 3, 3, 6))
  y = jnp.array([0, 1, 2, 3, 0, 1, 2, 3])
  params = model.init(jax.random.key(1), x[:1])
  params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(jax.random.key(2), p.shape),
                        params)
  padding = jnp.array([False] * 6 + [True] * 2)
  fast = dpsgd.clipped_grad_of(model, 9.0, microbatch_size=4)
  reference = dpsgd.clipped_grad(dpsgd._loss(model), l2_clip_norm=9.0,
                                 batch_argnums=(1, 2), return_values=True,
                                 return_grad_norms=True)
  assert fast.fn.sensitivity(privacy.DpsgdSteps(1.0, 4, 8, 1).neighboring_relation) == 9.0
  key = jax.random.key(3)
  got, got_aux = jax.jit(fast.fn)(params, fast.inputs(x), y, key, is_padding_example=padding)
  want, want_aux = jax.jit(reference)(params, x, y, key, is_padding_example=padding)
  norms = np.asarray(want_aux.grad_norms)
  assert (norms[:6] > 9.0).any() and (norms[:6] < 9.0).any()  # both branches of the clip
  np.testing.assert_allclose(got_aux.grad_norms, want_aux.grad_norms, rtol=1e-5)
  np.testing.assert_allclose(got_aux.values, want_aux.values, rtol=1e-5)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  # An affine group norm has parameters of its own: jax-privacy's generic path.
  affine = dpsgd_models.ScatterLinear(num_classes=4, groups=3, norm_affine=True)
  affine_params = affine.init(jax.random.key(1), x[:1])
  generic_grad = dpsgd.clipped_grad_of(affine, 9.0, 4)
  generic, _ = generic_grad.fn(affine_params, generic_grad.inputs(x), y, key)
  assert set(generic["params"]) == {"GroupNorm_0", "Dense_0"}


@pytest.mark.integration
def test_scatter_linear_is_a_softmax_layer_on_non_affine_group_norm():
  # Tramer & Boneh's group norm has no learnt scale or shift: the only parameters are the
  # head's, and an example's gradient is (softmax - onehot) x [normalised features; 1].
  x = jax.random.normal(jax.random.key(0), (2, 2, 2, 6))
  model = dpsgd_models.ScatterLinear(num_classes=3, groups=2)
  params = model.init(jax.random.key(1), x[:1])
  assert set(params["params"]) == {"Dense_0"}
  affine = dpsgd_models.ScatterLinear(num_classes=3, groups=2, norm_affine=True)
  assert "GroupNorm_0" in affine.init(jax.random.key(1), x[:1])["params"]
  g = x.reshape(2, 2, 2, 2, 3)  # (example, h, w, group, channel in group)
  z = (g - g.mean(axis=(1, 2, 4), keepdims=True)) / jnp.sqrt(
      g.var(axis=(1, 2, 4), keepdims=True) + 1e-6)
  z = z.reshape(2, -1)
  grad = jax.grad(dpsgd._loss(model))(params, x[1:], jnp.array([2]),
                                      jax.random.key(0))["params"]["Dense_0"]
  p = jax.nn.softmax(z[1] @ params["params"]["Dense_0"]["kernel"]
                     + params["params"]["Dense_0"]["bias"])
  r = p - jax.nn.one_hot(2, 3)
  np.testing.assert_allclose(grad["kernel"], jnp.outer(z[1], r), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(grad["bias"], r, rtol=1e-4, atol=1e-6)


# ---- ScatterNet features ----------------------------------------------------------------------

def test_scattering_shape_filters_and_invariance():
  psi, phi, _ = scattering.filter_bank(28)
  assert psi.shape == (16, 36, 36) and scattering.num_channels() == 81
  np.testing.assert_allclose(psi[:, 0, 0], 0.0, atol=1e-6)  # wavelets have zero mean
  assert phi[0, 0] == pytest.approx(1.0, abs=1e-6)  # the low-pass keeps the mean
  rng = np.random.default_rng(0)
  images = np.zeros((4, 28, 28, 1), np.float32)
  images[:, 8:20, 10:18] = rng.uniform(0.5, 1.0, (4, 12, 8, 1))
  feats = scattering.features(images, chunk=3)
  assert feats.shape == (4, 7, 7, 81) and np.isfinite(feats).all()
  # Data-independent: an image's features do not depend on the rest of the batch.
  np.testing.assert_allclose(scattering.features(images[2:3]), feats[2:3], atol=1e-5)
  # Stable to a one-pixel shift: the features move far less than the pixels do.
  shifted = np.roll(images, 1, axis=2)
  pixel_change = np.linalg.norm(shifted - images) / np.linalg.norm(images)
  feature_change = (np.linalg.norm(scattering.features(shifted) - feats)
                    / np.linalg.norm(feats))
  assert feature_change < 0.5 * pixel_change


def test_scattering_features_of_the_same_bytes_are_computed_once():
  rng = np.random.default_rng(1)
  images = rng.uniform(0, 1, (3, 28, 28, 1)).astype(np.float32)
  first = scattering.features(images)
  assert scattering.features(images.copy()) is first and not first.flags.writeable
  np.testing.assert_array_equal(first, np.asarray(scattering.scatter(jnp.asarray(images))))
  other = images.copy()
  other[0, 0, 0, 0] += 0.5  # one pixel more: computed afresh
  assert scattering.features(other) is not first
  assert not np.array_equal(scattering.features(other)[0], first[0])
  for k in range(scattering.FEATURES_KEPT):  # the oldest results make room
    scattering.features(images + k + 1)
  assert scattering.features(images) is not first
  np.testing.assert_array_equal(scattering.features(images), first)


# ---- planner CLI ------------------------------------------------------------------------------

def planner(*args):
  return subprocess.run([sys.executable, "-m", "dgd_jax.privacy", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.integration
def test_planner_cli():
  base = ["--mechanism=dpsgd", "--batch_size=8192", "--dataset_size=60000", "--steps=293",
          "--delta=1e-5", "--json"]
  out = planner(*base, "--noise_scale=4.05", "--sampling=poisson")
  assert out.returncode == 0, out.stderr
  report = json.loads(out.stdout)
  ledger = privacy.PrivacyLedger([privacy.DpsgdSteps(4.05, 8192, 60000, 293)])
  assert report["steps"] == 293
  for name in ("rdp", "pld"):
    assert report["epsilons"][name] == pytest.approx(ledger.epsilon(1e-5, name).epsilon,
                                                     rel=1e-12)
  assert report["releases"][0]["neighbours"] == "add_or_remove_one"
  out = planner(*base, "--target_epsilon=3")
  assert out.returncode == 0, out.stderr
  report = json.loads(out.stdout)
  assert report["calibration"]["solve_for"] == "noise_multiplier"
  assert report["calibration"]["accountant"] == "pld"  # the planners' default
  assert report["epsilons"]["pld"] <= 3.0
  assert report["epsilons"]["pld"] == pytest.approx(3.0, rel=1e-3)
  out = planner(*base, "--noise_scale=1", "--sampling=shuffle")
  assert out.returncode != 0 and "poisson" in out.stderr


# ---- the stage through the pipeline -------------------------------------------------------------

@pytest.fixture(scope="module")
def fashion_slice(tmp_path_factory):
  """512 training and 1000 test images of the real Fashion-MNIST, as an npz dataset (1000, so
  the test accuracy of one draw of the secret noise is measured to about 0.015)."""
  data = load_dataset(f"idx:{FASHION_MNIST_DIR}")
  to_uint8 = lambda x: np.round((x[..., 0] + 1.0) * 127.5).astype(np.uint8)
  path = os.path.join(tmp_path_factory.mktemp("fmnist"), "slice.npz")
  np.savez(path, x_train=to_uint8(data.x_train[:512]), y_train=data.y_train[:512],
           x_test=to_uint8(data.x_test[:1000]), y_test=data.y_test[:1000])
  return path


def tiny(data_file: str, arg: str = ""):
  config = dpsgd_config_file.get_config(f"npz:{data_file},eps3{arg}")
  # One padded shape (every Poisson batch of about 128 pads to 256): one trace.
  config.dpsgd.update(num_steps=25, batch_size=128, microbatch_size=256)
  config.log_every = 5
  return config


def test_configs_and_presets():
  default = dpsgd_config_file.get_config("fashion_mnist,eps3")
  assert default.dpsgd.model == "scatternet_linear" and default.privacy.max_epsilon == 3.0
  assert default.privacy.accountant == "pld" and not default.dpsgd.norm_affine
  assert dpsgd_config_file.get_config("fashion_mnist,eps1,cnn").dpsgd.model == "cnn"
  assert dpsgd_config_file.get_config("fashion_mnist,eps10").privacy.max_epsilon == 10.0
  with pytest.raises(ConfigError):
    dpsgd_config_file.get_config("fashion_mnist,eps1,eps3")


@pytest.mark.parametrize("size, model, batch, steps", [
    (60000, "", 8192, 293), (60000, ",cnn", 2048, 1172),  # Tramer & Boneh's recipes
    (8000, "", 1092, 294), (1500, "", 205, 293), (1500, ",cnn", 51, 1177)])
def test_presets_keep_their_sampling_rate_and_epochs_on_any_size(size, model, batch, steps):
  """The presets' batch is round(q N) at the recipe's q = B / 60,000 and their steps ceil(40
  epochs N / batch), from the public N (``private_size`` here, so no data is read); the
  rule's fields are consumed into the numbers, idempotently."""
  config = dpsgd_config_file.get_config(f"fashion_mnist,eps3{model}")
  config.private_size = size
  resolved = dpsgd_plan.with_schedule(config)
  assert (resolved.dpsgd.batch_size, resolved.dpsgd.num_steps) == (batch, steps)
  assert resolved.dpsgd.sampling_rate == resolved.dpsgd.epochs == 0.0
  assert f"batch {batch} = round(" in resolved.dpsgd_schedule_chosen
  assert dpsgd_plan.with_schedule(resolved) is resolved
  record = dpsgd_plan.release(resolved, 1.0)
  assert record.dataset_size == size and abs(record.batch_size / size - config.dpsgd.sampling_rate
                                             ) <= 0.5 / size
  assert config.dpsgd.batch_size == 0  # the preset itself is unchanged


def test_a_schedule_that_cannot_be_derived_or_used_is_refused():
  config = dpsgd_config_file.get_config("fashion_mnist,eps3")
  config.private_size = 8000
  with pytest.raises(ConfigError, match="plan.checks.run_config"):
    dpsgd_plan.check(config)  # unresolved
  bad = config.copy_and_resolve_references()
  bad.dpsgd.sampling_rate = 0.0
  with pytest.raises(ConfigError, match="sampling_rate=0.0"):
    dpsgd_plan.with_schedule(bad)
  bad = config.copy_and_resolve_references()
  bad.dpsgd.epochs = 0.0
  with pytest.raises(ConfigError, match="epochs=0.0"):
    dpsgd_plan.with_schedule(bad)
  bad = config.copy_and_resolve_references()
  bad.dpsgd.batch_size = 8192  # set by hand, over N
  resolved = dpsgd_plan.with_schedule(bad)
  assert "batch 8192 (set)" in resolved.dpsgd_schedule_chosen
  with pytest.raises(ConfigError, match="exceeds"):
    dpsgd_plan.release(resolved, 1.0)


@pytest.mark.integration
def test_the_preset_plans_on_1500_images_of_a_users_own(tmp_path):
  """A user's 1,500 images: the eps-3 preset plans its derived schedule and calibrates its noise
  to the budget (pipeline.checked_plan, the budget guard included) without a hand-set batch."""
  rng = np.random.default_rng(2)
  x_train, y_train = make_images(rng, 1500)
  x_test, y_test = make_images(rng, 100)
  path = tmp_path / "mine.npz"
  np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
  plan = pipeline.checked_plan(dpsgd_config_file.get_config(f"npz:{path},eps3"))
  config = plan.config
  assert plan.stages == ("dpsgd",)
  assert (config.dpsgd.batch_size, config.dpsgd.num_steps) == (205, 293)
  noise = dpsgd_plan.noise_multiplier(config)
  epsilon = privacy.epsilon_of(dpsgd_plan.release(config, noise), 1e-5, "pld")
  assert 2.9 < epsilon <= 3.0


@pytest.mark.integration
def test_end_to_end_on_a_real_fashion_mnist_slice(fashion_slice, tmp_path):
  config = tiny(fashion_slice)
  report = pipeline.run(config, str(tmp_path / "run"))
  stage = report["stages"]["dpsgd"]
  assert report["method"] == "dpsgd" and stage["num_steps"] == 25
  assert assert_noiseless_named(str(tmp_path / "run"))["noiseless"] == {}  # all covered
  assert report["test_accuracy"] > 0.5  # chance is 0.1
  assert report["accountant"] == "pld" and report["delta"] == 1e-5  # calibrated under PLD
  assert report["epsilon"] <= 3.0 and report["epsilon"] == pytest.approx(3.0, rel=1e-3)
  assert set(report["epsilons"]) >= {"rdp", "pld"} and report["epsilons"]["rdp"] > 3.0
  assert report["privacy"]["neighbours"].startswith("add/remove-one")
  record = privacy.DpsgdSteps(stage["noise_multiplier"], 128, 512, 25, 0.1)
  assert report["epsilon"] == pytest.approx(
      privacy.PrivacyLedger([record]).epsilon(1e-5, "pld").epsilon, rel=1e-12)
  assert any("hyper-parameter tuning" in n for n in report["covers"]["not_covered"])
  assert "DP-SGD steps" in report["covers"]["covered"]
  assert os.path.exists(tmp_path / "run" / "report.md")
  # The audit attacks the released model and holds its empirical bound to the same steps'
  # replace-one epsilon (its test is replace-one; the headline is add/remove-one).
  audited = audit_run(str(tmp_path / "run"), {"splits": 2, "examples": 100,
                                              "inversion_steps": 2})
  check = audited["audit_check"]["dpsgd"]
  replace_one = privacy.PrivacyLedger([dataclasses.replace(record, neighbours="replace_one")])
  assert check["passed"] and check["allowed"] == pytest.approx(
      replace_one.epsilon(1e-5, "pld").epsilon, rel=1e-9)
  assert check["allowed"] > report["epsilons"]["pld"]  # replace-one is the weaker relation
  assert 0.0 <= audited["audit"]["epsilon_lower_bound"]["dpsgd"] < 1.0


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_tanh_cnn_convolutions_and_shapes():
  """The end-to-end model: im2col convolutions equal lax.conv; 28x28 -> K logits."""
  x = jax.random.normal(jax.random.key(0), (2, 13, 13, 3))
  conv = dpsgd_models.Conv(5, 4, 2, 1)
  p = conv.init(jax.random.key(1), x)
  reference = jax.lax.conv_general_dilated(
      x, p["params"]["kernel"], (2, 2), [(1, 1), (1, 1)],
      dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["params"]["bias"]
  np.testing.assert_allclose(jax.jit(conv.apply)(p, x), reference, rtol=1e-5, atol=1e-5)
  model = dpsgd_models.TanhCNN()
  params = jax.eval_shape(model.init, jax.random.key(2), jnp.zeros((1, 28, 28, 1)))
  assert jax.eval_shape(model.apply, params, jnp.zeros((3, 28, 28, 1))).shape == (3, 10)
  assert sum(v.size for v in jax.tree.leaves(params)) == 26010


@pytest.mark.parametrize("field, value, message", [
    ("norm_bound", 0.0, "norm_bound"),
    ("batch_size", 5000, "exceeds dataset_size"),
    ("sampling", "shuffle", "poisson"),
    ("model", "resnet", "model"),
])
def test_bad_input_is_refused_before_anything_is_written(fashion_slice, tmp_path, field, value,
                                                         message):
  config = tiny(fashion_slice)
  config.dpsgd[field] = value
  with pytest.raises(ConfigError, match=message):
    pipeline.run(config, str(tmp_path / "bad"))
  assert not os.path.exists(tmp_path / "bad")


@pytest.mark.integration
def test_budget_guard(fashion_slice, tmp_path):
  config = tiny(fashion_slice)
  config.dpsgd.noise = 0.5  # far too little noise for eps 3
  with pytest.raises(ConfigError, match="above the maximum epsilon 3"):
    pipeline.run(config, str(tmp_path / "over"))
  assert not os.path.exists(tmp_path / "over")
  config.privacy.max_epsilon = float("inf")  # no budget to calibrate the noise to
  config.dpsgd.noise = 0.0
  with pytest.raises(ConfigError, match="max_epsilon, which is inf"):
    plan_checks.budget_guard(config, methods.method(config))


def test_sampling_rate_is_stated_with_a_public_size(monkeypatch):
  """q = B / N with N a config value (config.private_size), not read from the private set: a
  neighbour under add/remove-one is sampled at the same q."""
  config = dpsgd_config_file.get_config("fashion_mnist,eps3")
  config.private_size = 20000

  def refuse(_):
    raise AssertionError("the plan read the private set's size")

  monkeypatch.setattr(dpsgd_plan, "private_size", refuse)
  record = dpsgd_plan.release(config, 1.0)
  assert record.dataset_size == 20000
  assert record.batch_size == round(20000 * config.dpsgd.sampling_rate) == 2731
  assert record.sampling_probability == record.batch_size / 20000
  assert dpsgd_plan.public_size(config, read=19999) == 20000


# ---- DGD with a DP-SGD baseline, one composed epsilon ----------------------------------------

@pytest.mark.integration
@pytest.mark.slow  # a whole tiny DGD up to the queries: about a minute alone, more when shared
def test_dgd_private_baseline_composes_baseline_and_queries(npz_file, tmp_path):


  config = tiny_configs.dgd_private_baseline(npz_file)
  private = dgd_config_file.get_config(f"npz:{npz_file},cpu,private_baseline")
  assert private.generator.w_stats == 0.0 and private.queries.plan == "fixed"
  report = pipeline.run(config, str(tmp_path / "dgd"), stages=("queries",))
  stage = report["stages"]["queries"]
  kinds = [r["mechanism"] for r in stage["privacy"]["releases"]]
  assert kinds == ["dpsgd", "gnmax"]
  assert stage["privacy"]["releases"][0]["neighbours"] == "replace_one"
  baseline = report["stages"]["baseline"]
  record = privacy.DpsgdSteps(baseline["noise_multiplier"], 64, 512, config.baseline.num_steps,
                              1.0, neighbours="replace_one")
  composed = privacy.PrivacyLedger([record, privacy.GNMaxQueries(40.0, 50)])
  assert report["epsilon"] == pytest.approx(composed.epsilon(1e-5, "pld").epsilon, rel=1e-9)
  assert report["epsilon"] <= config.privacy.max_epsilon
  assert report["epsilon"] == pytest.approx(config.privacy.max_epsilon, rel=1e-3)  # calibrated
  assert "rdp" not in report["epsilons"]
  assert "everything the student saw" in report["privacy"]["note"]
  assert "DP-SGD steps" in report["covers"]["covered"]


@pytest.mark.parametrize("field, value, message", [
    ("generator.w_stats", 0.1, r"generator.w_stats > 0 .*--config.generator.w_stats=0"),
    ("pool.source", "train", r"pool.source='train' .*--config.pool.source=synthetic"),
])
@pytest.mark.integration
def test_private_baseline_refuses_every_setting_that_bypasses_the_noise(npz_file, tmp_path,
                                                                        field, value, message):
  """End-to-end DGD claims an epsilon for everything the student saw: a setting that reads the
  private set without noise on the way to the student is refused before anything runs, naming
  the setting and the fix."""
  config = dgd_config_file.get_config(f"npz:{npz_file},cpu,private_baseline")
  block, name = field.split(".")
  config[block][name] = value
  with pytest.raises(ConfigError, match=message):
    pipeline.run(config, str(tmp_path / "bad"))
  assert not os.path.exists(tmp_path / "bad")
  config[block][name] = dgd_config_file.get_config(f"npz:{npz_file},cpu,private_baseline")[
      block][name]
  baseline_stage.check(config)  # the preset itself passes
