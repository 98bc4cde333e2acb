"""DPDFD accounting: each analysis equals dp-accounting's composition of the events it
names, built by hand here; the bounds the analyses use hold for the code's ``bound``; the
disjoint-teacher analysis is refused for overlapping teachers; the direct step's sampling is the
sampling the event accounts."""
from __future__ import annotations

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp
from dp_accounting.rdp.rdp_privacy_accountant import (  # pylint: disable=protected-access
    _compute_rdp_sample_wor_gaussian_scalar as wor_rdp)

from dgd_jax import privacy
from dgd_jax.configs import dpdfd as dpdfd_config
from dgd_jax.privacy import dpdfd, events
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.plan import dpdfd as dpdfd_plan
from dgd_jax.stages import dpdfd as stage
from dgd_jax.synthesis import dpdfd as algorithm

DELTA = 1e-5
REL = 1e-9
ORDERS = list(privacy.DEFAULT_RDP_ORDERS)
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


def by_hand(event, orders=ORDERS):
  """dp-accounting's RDP epsilon of ``event`` at DELTA (improved conversion)."""
  accountant = dp_rdp.RdpAccountant(list(orders), REPLACE_ONE)
  accountant.compose(event)
  return accountant.get_epsilon(DELTA)


# (record kwargs, hand-built event): sigma = 300 (multiplier, std = 300 C), C = 1e-3, B = 64,
# T = 500. Each release's noise multiplier is std / sensitivity.
SIGMA, C, B, T = 300.0, 1e-3, 64, 500
ANALYSES = [
    # One teacher, per-sample rows (each < C, any may move): B T releases of 2C.
    (dict(), dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA / 2), B * T)),
    # One teacher, batch normalisation (||G_bar||_F < C): T releases of 2C.
    (dict(normalization="batch"),
     dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA / 2), T)),
    # n = 3 teachers, nothing assumed: B T releases of 2nC.
    (dict(num_teachers=3),
     dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA / 6), B * T)),
    # n = 4 teachers, batch normalisation over the stack: T releases of 2 sqrt(n) C.
    (dict(num_teachers=4, normalization="batch"),
     dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA / 4), T)),
    # n = 250 teachers on disjoint shards, replace-one: B T releases of 2C.
    (dict(num_teachers=250, analysis="disjoint_teachers", teachers_disjoint=True),
     dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA / 2), B * T)),
    # Theorem 3 (the paper's claim), n = 2: n B T releases of 2C.
    (dict(num_teachers=2, analysis="theorem3"),
     dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA / 2), 2 * B * T)),
]


@pytest.mark.parametrize("kwargs, event", ANALYSES)
def test_each_analysis_equals_dp_accounting_of_its_events(kwargs, event):
  release = privacy.DpdfdSteps(SIGMA, "multiplier", C, B, T, **kwargs)
  reports = privacy.PrivacyLedger([release]).epsilons(DELTA)
  assert reports["rdp"].epsilon == pytest.approx(by_hand(event), rel=REL)
  count = event.count
  multiplier = event.event.noise_multiplier
  # PLD: the composition of `count` Gaussians of multiplier m is one Gaussian of m / sqrt(count).
  exact = dp_accounting.get_epsilon_gaussian(multiplier / math.sqrt(count), DELTA, tol=1e-12)
  assert reports["pld"].epsilon == pytest.approx(exact, rel=1e-9)
  assert release.describe()["gaussian_releases"] == count


def test_sampled_without_replacement_curve_is_dp_accountings_per_order():
  """The cached integer-order CGFs interpolated at fractional orders give dp-accounting's own
  per-order RDP to the bit, and q = 1 its closed form."""
  orders = [1.5, 2.0, 2.5, 10.3, 33.0, 63.5, 96.0]
  for n, b, sigma in ((60000, 64, 1.0), (1000, 250, 0.7), (64, 64, 2.0)):
    event = dp_accounting.SampledWithoutReplacementDpEvent(n, b,
                                                           dp_accounting.GaussianDpEvent(sigma))
    want = [wor_rdp(b / n, sigma, o) for o in orders]
    np.testing.assert_array_equal(events.sampled_wor_gaussian_rdp(event, orders), want)


@pytest.mark.integration
def test_direct_analysis_is_t_sampled_without_replacement_gaussians():
  sigma, n, b, t = 1.0, 60000, 64, 1500
  release = privacy.DpdfdSteps(sigma, "multiplier", C, b, t, analysis="direct", dataset_size=n)
  event = dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
      source_dataset_size=n, sample_size=b,
      event=dp_accounting.GaussianDpEvent(sigma / 2)), t)  # std sigma C, sensitivity 2C
  orders = events.orders_for([event], ORDERS)
  reports = privacy.PrivacyLedger([release]).epsilons(DELTA)
  assert reports["rdp"].epsilon == pytest.approx(by_hand(event, orders), rel=REL)
  # The classic conversion reads the same curve (dp-accounting's own RDP, per order).
  accountant = dp_rdp.RdpAccountant(list(orders), REPLACE_ONE)
  accountant.compose(event)
  classic = min(accountant._rdp + math.log(1 / DELTA) / (np.array(orders) - 1))  # pylint: disable=protected-access
  assert reports["rdp_classic"].epsilon == pytest.approx(classic, rel=REL)
  assert "pld" not in reports  # dp-accounting's PLD has no sampling-without-replacement event
  # The sub-grid only drops orders: the full grid could only be lower, never below by much.
  full = by_hand(event)
  assert full <= reports["rdp"].epsilon <= 1.05 * full
  # Amplification: far below the T unsampled releases of 2C.
  unsampled = by_hand(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma / 2),
                                                        t))
  assert reports["rdp"].epsilon < unsampled / 10
  assert release.describe()["privacy_unit"] == "label"
  with pytest.raises(ConfigError, match="dataset_size"):
    privacy.DpdfdSteps(sigma, "multiplier", C, b, t, analysis="direct").event()
  with pytest.raises(ConfigError, match="smaller than batch_size"):
    privacy.DpdfdSteps(sigma, "multiplier", C, b, t, analysis="direct", dataset_size=32)


@pytest.mark.integration
def test_the_code_bounds_are_the_sensitivities_the_analyses_use():
  # per-sample rows: each < C, matrix < sqrt(B) C; batch: matrix < C; ensemble, per-sample: each
  # teacher's row < C; ensemble, batch over the [n, B, K] stack: sum over teachers < sqrt(n) C.
  # Up to float32 rounding (relative 1e-6; the stability constant e = 1e-8 is below it).
  tol = 1 + 1e-6
  key = jax.random.key(0)
  for i in range(5):
    g = (jax.random.normal(jax.random.fold_in(key, i), (4, 16, 10))
         * jnp.exp(jax.random.normal(jax.random.fold_in(key, 100 + i), (4, 16, 1))))
    rows = algorithm.bound(g[0], C, "per_sample")
    assert float(jnp.max(jnp.linalg.norm(rows, axis=-1))) < C * tol
    assert float(jnp.max(jnp.linalg.norm(algorithm.bound(g[0], C, "clip"), axis=-1))) < C * tol
    assert float(jnp.linalg.norm(algorithm.bound(g[0], C, "batch"))) < C * tol
    assert float(jnp.max(jnp.linalg.norm(algorithm.bound(g, C, "per_sample"), axis=-1))) < C * tol
    stack = algorithm.bound(g, C, "batch").sum(axis=0)
    assert float(jnp.linalg.norm(stack)) < math.sqrt(4) * C * tol
  # Tight: n equal stacks reach sqrt(n) C.
  same = jnp.tile(jax.random.normal(key, (1, 16, 10)), (4, 1, 1))
  assert float(jnp.linalg.norm(algorithm.bound(same, C, "batch", 0.0).sum(0))) == pytest.approx(
      2 * C, rel=1e-5)
  # The mechanism draws one independent noise entry per row and class (per-row releases): the
  # rows of a zero input are uncorrelated.
  noisy = algorithm.mechanism(key, jnp.zeros((2, 20000)), 1.0, 1.0) * 2
  assert abs(float(jnp.corrcoef(noisy)[0, 1])) < 0.03


def test_disjoint_analysis_is_refused_for_overlapping_teachers():
  disjoint = [np.arange(0, 10), np.arange(10, 20), np.arange(20, 30)]
  overlapping = [np.arange(0, 10), np.arange(5, 15), np.arange(20, 30)]
  assert dpdfd.shards_disjoint(disjoint) and not dpdfd.shards_disjoint(overlapping)
  with pytest.raises(ConfigError, match="may overlap"):
    privacy.DpdfdSteps(SIGMA, "multiplier", C, B, T, num_teachers=3,
                       analysis="disjoint_teachers",
                       teachers_disjoint=dpdfd.shards_disjoint(overlapping))
  with pytest.raises(ConfigError, match="per-sample normalisation"):
    privacy.DpdfdSteps(SIGMA, "multiplier", C, B, T, num_teachers=3, analysis="disjoint_teachers",
                       normalization="batch", teachers_disjoint=True)
  # Overlapping teachers keep the explicit 2nC option: n^2 times the disjoint RDP.
  orders = np.array(ORDERS)
  np.testing.assert_allclose(
      privacy.DpdfdSteps(SIGMA, "multiplier", C, B, T, num_teachers=3).rdp(orders),
      9 * privacy.DpdfdSteps(SIGMA, "multiplier", C, B, T, num_teachers=3,
                             analysis="disjoint_teachers", teachers_disjoint=True).rdp(orders),
      rtol=1e-12)


def test_stage_grants_disjoint_only_on_checked_shards(monkeypatch, npz_file):
  config = dpdfd_config.get_config(f"npz:{npz_file},cpu,ensemble")
  config.num_teachers = 4
  assert config.privacy.dpdfd_analysis == "disjoint_teachers"
  record = dpdfd_plan.release(config, 300.0)
  assert record.teachers_disjoint and record.analysis == "disjoint_teachers"
  assert record.describe()["l2_sensitivity"] == pytest.approx(2 * config.dpdfd.norm_bound)
  # Shards that overlap (as bagging would deal them) are refused.
  monkeypatch.setattr(dpdfd_plan, "config_shards",
                      lambda config, x, y: [np.arange(10)] * config.num_teachers)
  with pytest.raises(ConfigError, match="may overlap"):
    dpdfd_plan.release(config, 300.0)
  # An analysis that does not describe the sensitive model is refused.
  config.privacy.dpdfd_analysis = "direct"
  with pytest.raises(ConfigError, match="does not describe"):
    dpdfd_plan.release(config, 300.0)


@pytest.mark.integration
def test_direct_step_samples_what_the_event_accounts(monkeypatch, npz_file):
  config = dpdfd_config.get_config(f"npz:{npz_file},cpu,direct")
  config.dpdfd.batch_size = 16
  n = 512  # the npz fixture's training set
  record = dpdfd_plan.release(config, 2.0)
  sampled = record.event().event
  assert isinstance(sampled, dp_accounting.SampledWithoutReplacementDpEvent)
  assert (sampled.source_dataset_size, sampled.sample_size) == (n, 16)
  assert record.event().count == config.dpdfd.num_steps
  # The step draws through sample_indices with N = len(x) and B = batch_size ...
  calls = []
  real = algorithm.sample_indices

  def recording(key, dataset_size, batch_size):
    calls.append((dataset_size, batch_size))
    return real(key, dataset_size, batch_size)

  monkeypatch.setattr(algorithm, "sample_indices", recording)
  student, state, cfg = stage._states(  # pylint: disable=protected-access
      type("Ctx", (), {"config": config, "dataset": type("D", (), {
          "image_shape": (28, 28, 1), "num_classes": 10})(),
          "key": lambda self, p: jax.random.key(0)})(), 2.0)
  x = jnp.zeros((n, 28, 28, 1))
  y = jnp.zeros((n,), jnp.int32)
  jax.jit(lambda s, k: algorithm.direct_step(s, k, x, y, student.apply, cfg))(
      state.replace(generator=None), jax.random.key(1))  # traced once: records N and B
  assert calls == [(sampled.source_dataset_size, sampled.sample_size)]
  # ... which draws B distinct indices, each example included with probability B / N.
  draws = np.asarray(jax.vmap(lambda k: real(k, 40, 8))(jax.random.split(jax.random.key(2),
                                                                            2000)))
  assert all(len(set(row)) == 8 for row in draws) and draws.min() >= 0 and draws.max() < 40
  freq = np.bincount(draws.ravel(), minlength=40) / 2000
  assert np.all(np.abs(freq - 8 / 40) < 0.05)
  # Every pair included with probability B(B-1) / (N(N-1)): uniform subsets, not just marginals.
  pair = np.mean([(0 in row) and (1 in row) for row in draws])
  assert pair == pytest.approx(8 * 7 / (40 * 39), abs=0.02)


# ---- the single-teacher limit (PRIVACY.md) -----------------------------------------------------


def test_information_bound_arithmetic():
  # B T C^2 / (2 std^2): sigma = 328.18 (multiplier), B = 64, T = 1500 -> under half a nat.
  info = dpdfd.information_nats(328.18 * C, C, 64, 1500)
  assert info == pytest.approx(64 * 1500 / (2 * 328.18 ** 2), rel=1e-12)
  assert info == pytest.approx(0.445674, rel=1e-5)
  assert dpdfd.information_nats(41.0 * C, C, 64, 1500, "batch") == pytest.approx(
      1500 / (2 * 41.0 ** 2), rel=1e-12)
  # I = mu^2 / 8 with mu = 2 sqrt(B T) / sigma, the GDP parameter of the B T releases of 2C.
  assert info == pytest.approx((2 * math.sqrt(64 * 1500) / 328.18) ** 2 / 8, rel=1e-12)


def test_matches_mgf_is_the_fixed_point_mgf():
  # K = 3, a bijective guess: M = 0, 1, 3 fixed points with probabilities 2/6, 3/6, 1/6.
  for lam in (0.1, 1.0, 3.0):
    exact = (2 + 3 * math.exp(lam) + math.exp(3 * lam)) / 6
    assert math.exp(dpdfd._log_matches_mgf(lam, 3)) == pytest.approx(exact, rel=1e-12)  # pylint: disable=protected-access


@pytest.mark.integration
def test_accuracy_bound_arithmetic():
  k = 10
  assert dpdfd.accuracy_bound(0.0, k) == pytest.approx(0.1, abs=1e-6)  # no information: chance
  assert dpdfd.accuracy_bound(math.log(math.factorial(k)), k) == 1.0  # the whole relabelling
  # The bound is the minimum over lam: no lam on a grid gives less, and the minimiser is found.
  info = 0.44567359163070874  # eps 10 (rdp), delta 1e-5: sigma 328.18, B = 64, T = 1500
  got = dpdfd.accuracy_bound(info, k)
  grid = [(info + dpdfd._log_matches_mgf(lam, k)) / (lam * k)  # pylint: disable=protected-access
          for lam in np.exp(np.linspace(-5, 4, 20001))]
  assert got <= min(grid) + 1e-9 and got == pytest.approx(min(grid), rel=1e-6)
  assert got == pytest.approx(0.20832, abs=1e-4)
  # Below the Poisson(1) bound K a <= m with m log m - m + 1 = I (the K -> infinity MGF), and
  # close to it for many classes.
  from scipy import optimize
  m = optimize.brentq(lambda m: m * math.log(m) - m + 1 - info, 1.0, 50.0)
  assert got <= m / k
  assert dpdfd.accuracy_bound(info, 1000) == pytest.approx(m / 1000, rel=1e-4)
  # Inverse: the information needed for Table 1's 83.86% on FMNIST.
  needed = dpdfd.information_needed(0.8386, k)
  assert dpdfd.accuracy_bound(needed, k) == pytest.approx(0.8386, rel=1e-6)
  assert needed == pytest.approx(10.658, abs=1e-3)
  assert dpdfd.information_needed(0.05, k) == 0.0


def test_single_teacher_caps_at_the_papers_budgets():
  # Calibrated single-teacher runs (B = 64, T = 1500, delta 1e-5, rdp) and their caps.
  template = privacy.DpdfdSteps(1.0, "multiplier", C, 64, 1500)
  caps = {}
  for eps in (1.0, 10.0):
    sigma = privacy.min_noise(template, eps, DELTA, "rdp")
    caps[eps] = dpdfd.accuracy_bound(dpdfd.information_nats(sigma * C, C, 64, 1500), 10)
  assert caps[1.0] == pytest.approx(0.1126, abs=2e-4)
  assert caps[10.0] == pytest.approx(0.2083, abs=2e-4)
  # 83.86% needs I >= 10.66 nats: sigma <= 67.1, i.e. epsilon >= 85 (rdp) / 81 (pld).
  sigma = math.sqrt(64 * 1500 / (2 * dpdfd.information_needed(0.8386, 10)))
  reports = privacy.PrivacyLedger([template.with_noise(sigma)]).epsilons(DELTA)
  assert reports["rdp"].epsilon == pytest.approx(85.07, abs=0.05)
  assert reports["pld"].epsilon == pytest.approx(81.19, abs=0.05)
  # The elementary bound for (eps, delta)-DP w.r.t. the whole teacher: e^eps / K + delta.
  assert dpdfd.elementary_accuracy_bound(1.0, DELTA, 10) == pytest.approx(math.e / 10 + DELTA)
  assert dpdfd.elementary_accuracy_bound(1.0, DELTA, 1000) == pytest.approx(0.0027283, rel=1e-4)
  assert dpdfd.elementary_accuracy_bound(10.0, DELTA, 10) == 1.0
