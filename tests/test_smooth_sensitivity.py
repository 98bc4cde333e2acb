"""PATE 2018's smooth-sensitivity analysis against tensorflow/privacy's reference code.

The reference vectors in tests/data/pate2018_reference.json were made by
experiments/pate2018_reference_vectors.py, which imports tensorflow/privacy's
research/pate_2018/core.py and smooth_sensitivity.py (the commit is stored in the file) and
evaluates them on fixed vote histograms of 250 teachers over 10 classes and fixed parameters;
every input is stored beside its output. Each test evaluates dgd_jax's function on the same
inputs and asserts agreement to 1e-9 (absolute and relative).
"""
import json
import math
import os

import numpy as np
import pytest

from dgd_jax import privacy
from dgd_jax.privacy import pate2018
from dgd_jax.privacy import smooth_sensitivity as ss
from dgd_jax.runtime.errors import ConfigError

with open(os.path.join(os.path.dirname(__file__), "data", "pate2018_reference.json")) as _f:
  REF = json.load(_f)
N = REF["num_teachers"]
ORDERS = np.array(REF["orders"])


def close(actual, expected):
  np.testing.assert_allclose(np.asarray(actual, float), np.asarray(expected, float),
                             rtol=1e-9, atol=1e-9)


def test_log_q_matches_compute_logq_gaussian():
  for case in REF["log_q"]:
    close([ss.log_q(v, case["sigma"]) for v in REF["votes"]], case["values"])
    close(pate2018.gnmax_log_q(np.array(REF["votes"]), case["sigma"]), case["values"])


def test_gnmax_data_dependent_rdp_matches_rdp_gaussian():
  for case in REF["rdp_gaussian"]:
    ours = np.minimum(pate2018.gnmax_rdp(case["sigma"], ORDERS),
                      pate2018.theorem6_rdp(
                          case["log_q"], case["sigma"] * math.sqrt(-case["log_q"]) + 1,
                          (case["sigma"] * math.sqrt(-case["log_q"]) + 1) / case["sigma"] ** 2,
                          case["sigma"] * math.sqrt(-case["log_q"]),
                          math.sqrt(-case["log_q"]) / case["sigma"], ORDERS))
    close(ours, case["values"])


def test_threshold_bounds_match_compute_rdp_threshold():
  for case in REF["threshold_rdp"]:
    close(ss.threshold_rdp_theorem6(case["log_pr_answered"], case["sigma1"], ORDERS),
          case["values"])
  for case in REF["threshold_rdp_by_count"]:
    close(ss.threshold_rdp_by_count(N, case["threshold"], case["sigma1"], case["order"],
                                    bound="theorem6"), case["values"])


def test_exact_threshold_bound_never_exceeds_the_reference_bound():
  for case in REF["threshold_rdp_by_count"]:
    exact = ss.threshold_rdp_by_count(N, case["threshold"], case["sigma1"], case["order"])
    assert np.all(exact <= np.asarray(case["values"]) + 1e-12)


def test_q0_q1_and_the_one_vote_bounds_on_q():
  for case in REF["log_q0"]:
    close(ss.log_q0(case["sigma"], case["order"]), case["value"])
  for case in REF["log_q1"]:
    close(ss.log_q1(case["sigma"], case["order"], case["num_classes"]), case["value"])
  for case in REF["q_bounds"]:
    close(ss.q_lower(case["q"], case["sigma"], case["num_classes"]), case["lower"])
    close(ss.q_upper(case["q"], case["sigma"], case["num_classes"]), case["upper"])


def test_gnmax_local_sensitivity_algorithm3():
  for case in REF["local_sensitivity"]:
    close(ss.gnmax_local_sensitivity(case["log_q"], case["sigma"], case["num_classes"],
                                     case["order"]), case["value"])


def test_gnmax_local_sensitivities_at_distance_d():
  for case in REF["gnmax_local_sensitivities"]:
    close(ss.gnmax_local_sensitivities(case["votes"], N, case["sigma"], case["order"]),
          case["values"])


def test_threshold_local_sensitivities_at_distance_d():
  for case in REF["threshold_local_sensitivities"]:
    by_count = ss.threshold_rdp_by_count(N, case["threshold"], case["sigma1"], case["order"],
                                         bound="theorem6")
    close(ss.threshold_local_sensitivities(int(round(max(case["votes"]))), by_count),
          case["values"])


def test_discounted_max_and_gnss_rdp():
  for case in REF["discounted_max"]:
    close(ss.discounted_max(case["beta"], case["ls"]), case["value"])
  for case in REF["gnss_rdp"]:
    close(ss.gnss_rdp(case["beta"], case["sigma_ss"], case["order"]), case["value"])
  with pytest.raises(ConfigError, match="outside"):
    ss.gnss_rdp(0.05, 1.0, 10.0)  # 1 / (2 beta) = 10


def test_conditions_c5_c6_as_the_reference_finds_them():
  assert any(not all(c["value"]) for c in REF["conditions"])  # the vectors hold a failure
  for case in REF["conditions"]:
    assert list(ss.check_conditions(case["sigma"], case["num_classes"], case["order"])) == \
        case["value"], case


def test_release_refuses_orders_where_c5_c6_fail():
  votes = np.array([REF["votes"][2]] * 3, float)
  with pytest.raises(ConfigError, match="C5/C6"):
    ss.choose_from_votes(votes, None, None, 20.0, 1e-5, order=32.0)
  with pytest.raises(ConfigError, match="C5/C6"):
    ss.release_confident_gnmax(votes, None, None, 20.0, 1e-5,
                               ss.SmoothSensitivityPlan(32.0, 0.01, 5.0, "config"))


@pytest.mark.integration
def test_release_composes_the_gnss_cost_and_its_noise():
  votes = np.array(REF["votes"], float)
  answered = votes.max(axis=1) >= 150
  chosen = ss.choose_from_votes(votes, 200.0, 150.0, 40.0, 1e-5, answered=answered)
  r = ss.release_confident_gnmax(votes, 200.0, 150.0, 40.0, 1e-5, chosen, answered=answered,
                                 rng=np.random.default_rng(0))
  assert r.answered == int(answered.sum()) and r.charged == "answered"
  assert r.source == "votes" and not r.dp_release  # chosen from the votes: a diagnostic
  rdp, ls = ss.confident_gnmax_terms(votes, 200.0, 150.0, 40.0, r.order, answered)
  close(r.rdp, rdp)
  close(r.smooth_sensitivity, ss.discounted_max(r.beta, ls))
  # the headline's conversion at the order (Balle et al. 2020 Thm. 21, dp-accounting's)
  close(r.epsilon_before, rdp + math.log1p(-1 / r.order)
        - (math.log(1e-5) + math.log(r.order)) / (r.order - 1))
  close(r.epsilon, r.epsilon_before + ss.gnss_rdp(r.beta, r.sigma_ss, r.order))
  close(r.std, r.smooth_sensitivity * r.sigma_ss)
  assert r.order * r.beta < 0.5 and r.gnss_rdp > 0
  # Charging GNMax on every query costs more than on the answered ones.
  every = ss.release_confident_gnmax(votes, 200.0, 150.0, 40.0, 1e-5, chosen,
                                     rng=np.random.default_rng(0))
  assert every.rdp > r.rdp
  with pytest.raises(ConfigError, match="k = 1"):
    ss.release_confident_gnmax(votes, 200.0, 150.0, 40.0, 1e-5, chosen, teachers_changed=2)


@pytest.mark.integration
def test_quick_start_votes_cost_what_tensorflow_privacy_expects():
  """tensorflow/privacy's smooth_sensitivity_table.py on the quick start's first 300 vote
  histograms gives 1.546 -> 1.816 +- 0.179: the cost expected over the threshold bits, classic
  conversion. One run's cost depends on its own (secret) bits, so the check averages PATE
  2018's vote-chosen analysis over 12 fixed draws of the bits; standard error about 0.03."""
  votes = np.load(os.path.join(os.path.dirname(__file__), "data", "quickstart_votes_300.npy"))
  costs = []
  for seed in range(12):
    noise = np.random.default_rng(seed).standard_normal(votes.shape[0])
    bits = votes.max(axis=1) + 150.0 * noise >= 200.0  # Confident-GNMax's threshold step
    terms = (votes, 200.0, 150.0, 40.0, 1e-5)
    d = ss.release_confident_gnmax(*terms, ss.choose_from_votes(*terms, answered=bits),
                                   answered=bits, rng=np.random.default_rng(0))
    costs.append(d.rdp + math.log(1e5) / (d.order - 1) + d.gnss_rdp)  # Mironov Prop. 3
    assert d.epsilon < costs[-1]  # the improved conversion the headline uses is smaller
  assert abs(np.mean(costs) - 1.816) <= 0.1


def _neighbour(votes: np.ndarray) -> np.ndarray:
  """The votes with one teacher moved on every query: from the top class to the next."""
  moved = votes.copy()
  rows = np.arange(len(votes))
  top = votes.argmax(axis=1)
  moved[rows, top] -= 1
  moved[rows, (top + 1) % votes.shape[1]] += 1
  return moved


@pytest.mark.integration
def test_fixed_parameters_do_not_move_with_a_neighbouring_vote_set():
  """PATE 2018's vote-chosen beta and sigma_ss move when one teacher changes its vote on every
  query (so releasing with them is not DP); the public plan's are fixed before the votes, the
  release at them follows Thm. 23's formulas, and the composed headline is the same upper
  bound on both neighbours."""
  votes = np.array(REF["votes"], float)
  other = _neighbour(votes)
  args = (200.0, 150.0, 40.0, 1e-5)
  order = ss.choose_from_votes(votes, *args).order
  a, b = (ss.choose_from_votes(v, *args, order=order) for v in (votes, other))
  assert (a.beta, a.sigma_ss) != (b.beta, b.sigma_ss)  # the bug: parameters read the votes
  plan = ss.plan_release(len(votes), N, votes.shape[1], *args)
  assert plan.source == "plan" and plan.dp_release
  record = privacy.ConfidentGNMaxQueries(200.0, 150.0, 40.0, len(votes))
  headline = privacy.PrivacyLedger([record, privacy.SmoothSensitivityCost(
      plan.order, plan.beta, plan.sigma_ss, plan.source)]).epsilon(1e-5, "smooth_sensitivity")
  assert headline.order == plan.order
  for v in (votes, other):
    r = ss.release_confident_gnmax(v, *args, plan, rng=np.random.default_rng(0))
    assert (r.order, r.beta, r.sigma_ss, r.dp_release) == (plan.order, plan.beta, plan.sigma_ss,
                                                           True)
    lam, beta, sigma = plan.order, plan.beta, plan.sigma_ss
    cost = (lam * math.exp(2 * beta) / sigma ** 2
            + (beta * lam - 0.5 * math.log(1 - 2 * lam * beta)) / (lam - 1))  # Thm. 23
    close(r.gnss_rdp, cost)
    _, ls = ss.confident_gnmax_terms(v, 200.0, 150.0, 40.0, lam, np.ones(len(v), bool))
    smooth = max(math.exp(-beta * d) * ls[d] for d in range(len(ls)))  # Sec. 4.2
    close(r.smooth_sensitivity, smooth)
    close(r.std, smooth * sigma)
    # at lam the data-independent RDP bounds the data-dependent one: the headline, their
    # improved conversion, holds on both neighbours
    bound = record.rdp(np.array([lam]))[0] + cost
    assert r.rdp + r.gnss_rdp <= bound
    close(headline.epsilon, privacy.improved_epsilon(np.array([lam]), np.array([bound]),
                                                     1e-5)[0])
  # Released with the vote-chosen parameters it is refused as a ledger record.
  with pytest.raises(ConfigError, match="diagnostic"):
    privacy.SmoothSensitivityCost(a.order, a.beta, a.sigma_ss, a.source)


def test_the_ledger_composes_the_release_at_its_order_only():
  record = privacy.GNMaxQueries(40.0, 300)
  cost = privacy.SmoothSensitivityCost(12.5, 0.02, 6.0, "config")
  book = privacy.PrivacyLedger([record, cost])
  report = book.epsilon(1e-5, "smooth_sensitivity")
  lam = np.array([12.5])
  expected, _ = privacy.improved_epsilon(lam, record.rdp(lam) + cost.cost(), 1e-5)
  close(report.epsilon, expected)
  assert set(book.epsilons(1e-5)) == {"smooth_sensitivity"}  # no other accountant can hold it
  with pytest.raises(ConfigError, match="above the maximum"):
    book.check_budget(expected - 1e-6, 1e-5, "smooth_sensitivity")
  assert book.check_budget(expected + 1e-6, 1e-5, "smooth_sensitivity").epsilon == report.epsilon
  with pytest.raises(ConfigError, match="outside"):
    privacy.SmoothSensitivityCost(12.5, 0.05, 6.0, "config")  # 1/(2 beta) = 10 < 12.5


def _ss(votes, beta, order, threshold, sigma1, sigma2):
  """SS_beta of a Confident-GNMax run's data-dependent RDP, GNMax charged on every query."""
  _, ls = ss.confident_gnmax_terms(votes, threshold, sigma1, sigma2, order,
                                   np.ones(len(votes), bool))
  return ss.discounted_max(beta, ls)


def _neighbours(votes, rng, count):
  """Vote sets where one teacher changed its vote on every query (k = 1): random moves, and
  the adversarial ones (every query's vote moved from its top class to its runner-up, or
  from the runner-up to the top; a query's smallest count gains)."""
  out = []
  order = np.argsort(-votes, axis=1, kind="stable")
  rows = np.arange(len(votes))
  for src, dst in ((order[:, 0], order[:, 1]), (order[:, 1], order[:, 0]),
                   (order[:, 0], order[:, -1])):
    moved = votes.copy()
    ok = moved[rows, src] > 0
    moved[rows[ok], src[ok]] -= 1
    moved[rows[ok], dst[ok]] += 1
    out.append(moved)
  for _ in range(count):
    moved = votes.copy()
    for i in rows:
      src = rng.choice(np.flatnonzero(moved[i] > 0))
      dst = rng.choice([c for c in range(votes.shape[1]) if c != src])
      moved[i, src] -= 1
      moved[i, dst] += 1
    out.append(moved)
  return out


@pytest.mark.parametrize("sigma1, sigma2, order, case", [
    (5.0, 5.0, 5.0, "random"), (5.0, 5.0, 5.0, "near_plateau"), (5.0, 40.0, 10.0, "reference"),
    (150.0, 40.0, 10.0, "reference")])
def test_summed_smooth_sensitivity_is_beta_smooth(sigma1, sigma2, order, case):
  """SS_beta(x) <= e^beta SS_beta(y) for neighbouring vote sets x, y (the property Thm. 23
  needs), at orders where C5/C6 hold (the release refuses the others). A sum of per-query
  local sensitivities at distance exactly d is not: one query may peak at d and another at
  d' (the running maximum, ``ss.within``, makes it one)."""
  rng = np.random.default_rng(0)
  beta = 0.02
  if case == "reference":  # 250 teachers, 10 classes
    votes = np.array(REF["votes"], float)[:12]
  elif case == "random":
    votes = np.stack([rng.multinomial(20, rng.dirichlet(np.ones(4) * 0.5)) for _ in range(12)])
  else:  # top counts a few votes off the plateau, at several distances
    votes = np.array([[20 - t, t, 0, 0] for t in (0, 1, 2, 3, 4, 5, 6, 8)], float)
  votes = votes.astype(float)
  assert ss.conditions_hold(sigma2, votes.shape[1], order) == (True, True)
  threshold = 0.6 * votes[0].sum()
  here = _ss(votes, beta, order, threshold, sigma1, sigma2)
  for y in _neighbours(votes, rng, 6):
    there = _ss(y, beta, order, threshold, sigma1, sigma2)
    assert here <= math.exp(beta) * there * (1 + 1e-9), (here, there)
    assert there <= math.exp(beta) * here * (1 + 1e-9), (here, there)


def test_a_query_sensitivity_bound_covers_every_dataset_within_the_distance():
  """``within``: the bound at d is the largest at any distance <= d, so it never decreases."""
  ls = np.array([0.3, 0.1, 0.5, 0.2, 0.2])
  np.testing.assert_array_equal(ss.within(ls), [0.3, 0.3, 0.5, 0.5, 0.5])
  for row in np.array(REF["votes"], float)[:5]:
    a = ss.within(ss.gnmax_local_sensitivities(row, N, 40.0, 10.0))
    assert (np.diff(a) >= 0).all()


def test_released_value_over_secret_keys_has_thm23_mean_and_spread():
  """At fixed votes and parameters, the released value over secret keys is
  epsilon + SS sigma_ss N(0, 1): its mean is ``epsilon``, its standard deviation ``std``,
  normally distributed; no two keys release the same value. The 200 keys are fixed secrets
  (``NoiseSource(secret)``), so the statistical checks see one sample on every run instead of
  failing on one run in a few hundred; ``NoiseSource.fresh`` keys release values of their own."""
  import hashlib
  from scipy import stats
  from dgd_jax.privacy.noise import NoiseSource
  votes = np.array(REF["votes"], float)[:6]
  plan = ss.SmoothSensitivityPlan(order=10.0, beta=0.02, sigma_ss=3.0, source="config")
  release = lambda source: ss.release_confident_gnmax(
      votes, 200.0, 150.0, 40.0, 1e-5, plan, rng=source.rng("smooth_sensitivity")).released
  first = ss.release_confident_gnmax(votes, 200.0, 150.0, 40.0, 1e-5, plan)
  keys = [NoiseSource(hashlib.sha256(b"test secret %d" % i).digest()) for i in range(200)]
  assert all(k.is_secret for k in keys)
  values = np.array([release(k) for k in keys])
  assert first.std == pytest.approx(first.smooth_sensitivity * 3.0) and first.std > 0
  z = (values - first.epsilon) / first.std
  assert abs(z.mean()) < 4 / math.sqrt(len(z)) and z.std() == pytest.approx(1.0, rel=0.15)
  assert stats.kstest(z, "norm").pvalue > 1e-3
  assert len(np.unique(values)) == len(values)
  fresh = np.array([release(NoiseSource.fresh()) for _ in range(20)])
  assert len(np.unique(np.concatenate([values, fresh]))) == len(values) + len(fresh)
  # the hardened sampler (noise.numpy_normal), not one standard_normal draw
  from dgd_jax.privacy import noise  # pylint: disable=g-import-not-at-top
  hardened = first.epsilon + first.std * noise.numpy_normal(keys[0].rng("smooth_sensitivity"))
  assert values[0] == hardened
  assert values[0] != first.epsilon + first.std * keys[0].rng(
      "smooth_sensitivity").standard_normal()
