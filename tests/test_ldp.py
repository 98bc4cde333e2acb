"""LDP client transform (Algorithm 1) and robust teachers (Algorithm 2, Eq. 3)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import tiny_configs
from dgd_jax import privacy
from dgd_jax.models.classifier import Classifier
from dgd_jax.privacy import discrete, local
from dgd_jax.runner import pipeline
from dgd_jax.training import ldp
from report_checks import assert_noiseless_named


@pytest.mark.parametrize("mu", [0.01, 0.1, 0.37])
def test_mask_has_exactly_ceil_n_mu_zeros(mu):
  x = jnp.ones((28, 28, 1))
  for seed in range(3):
    m = ldp.mask(jax.random.key(seed), x, mu)
    assert int(jnp.sum(m == 0)) == math.ceil(784 * mu)
  a, b = (ldp.mask(jax.random.key(s), x, mu) for s in (0, 1))
  assert not jnp.array_equal(a, b)  # placed at random


def test_bound_caps_the_infinity_norm():
  x = jnp.array([[0.5, -3.0], [0.2, 1.0]])
  np.testing.assert_allclose(ldp.linf_bound(x, 1.0), x / 3.0)
  np.testing.assert_allclose(ldp.linf_bound(x * 0.1, 1.0), x * 0.1)  # inside: unchanged


def _output_pmf(sigma: float, j: int) -> np.ndarray:
  """P(y | j) * 2^64 for y = -R..R, enumerated from the client's integer table (Python ints:
  an independent reading of clip(j + k, -R, R), not the code under test's)."""
  counts = [int(c) for c in local.ldp_noise_counts(sigma)]
  support, r = (len(counts) - 1) // 2, local.ldp_output_range(sigma)
  pmf = [0] * (2 * r + 1)
  for i, c in enumerate(counts):
    pmf[min(max(j + i - support, -r), r) + r] += c
  return np.array(pmf, dtype=object)


@pytest.mark.parametrize("preset", sorted(ldp.PRESETS))
def test_neighbouring_inputs_have_the_same_outputs(preset):
  """Mironov's float attack needs an output possible for x and impossible for x': here every
  y in [-R, R] has a count >= 1 for x = 0, 1/127.5 (grid points 0 and 2), -B and B alike."""
  sigma = ldp.PRESETS[preset][0]
  x = jnp.asarray([0.0, 1 / 127.5, -1.0, 1.0, 2 / 255 - 1, 1 - 2 / 255])
  np.testing.assert_array_equal(ldp.on_grid(x, 1.0), [0, 2, -255, 255, -253, 253])
  pmfs = [_output_pmf(sigma, j) for j in (0, 2, -255, 255)]
  for pmf in pmfs:
    assert sum(pmf) == 1 << 64 and min(pmf) >= 1
  # the ratio on that support is the realised epsilon's bound
  worst = max(max(a / b for a, b in zip(p, q)) for p in pmfs for q in pmfs)
  assert math.log(worst) <= local.ldp_feature_epsilon(sigma) + 1e-12


@pytest.mark.parametrize("preset", sorted(ldp.PRESETS))
def test_realised_epsilon_is_the_tables_and_just_above_the_ideal(preset):
  """The per-feature epsilon is the implemented table's exact max log-ratio: >= 2 sigma (sigma
  for inputs in [0, B]) and within 1e-8 of it; a brute-force max over every (j, j', y) agrees."""
  sigma = ldp.PRESETS[preset][0]
  eps, eps_pos = local.ldp_feature_epsilon(sigma), local.ldp_feature_epsilon(sigma, True)
  assert 2 * sigma <= eps <= 2 * sigma + 1e-8 and sigma <= eps_pos <= sigma + 1e-8
  assert privacy.ldp_local_epsilon(sigma, 784, 0.0, relation="feature") == eps
  assert privacy.ldp_local_epsilon(sigma, 784, 0.1) == 705 * eps
  if sigma == 5.0:  # R = 663: a (511, 1327) table of log-probabilities
    log_p = np.log(np.array([_output_pmf(sigma, j) for j in range(-255, 256)], float))
    brute = float((log_p.max(axis=0) - log_p.min(axis=0)).max())
    assert brute == pytest.approx(eps, abs=1e-9)


def test_a_corrupted_table_fails_the_epsilon_check():
  """The epsilon check reads the counts: a zero count makes an output impossible for some
  inputs (epsilon inf), a count moved elsewhere raises it above 2 sigma."""
  sigma = 5.0
  counts, r = local.ldp_noise_counts(sigma), local.ldp_output_range(sigma)
  support = (len(counts) - 1) // 2
  zero = counts.copy()
  zero[support + 400] = 0
  assert discrete.clipped_shift_epsilon(zero, (-255, 255), r) == math.inf
  moved = counts.copy()  # a tenth of P(k = 700) moved to k = 0
  part = counts[support + 700] // np.uint64(10)
  moved[support + 700] -= part
  moved[support] += part
  assert discrete.clipped_shift_epsilon(moved, (-255, 255), r) > 2 * sigma + 0.05


@pytest.mark.parametrize("preset", sorted(ldp.PRESETS))
def test_client_noise_follows_the_table(preset):
  """A fixed key's 10^6 draws of the client's integer noise against c_k / 2^64 (chi-square on
  the bins with >= 50 expected, the tails pooled), and the sent values on the grid in [-R, R]."""
  sigma, mu = ldp.PRESETS[preset]
  counts = local.ldp_noise_counts(sigma)
  support, n = (len(counts) - 1) // 2, 1_000_000
  draws = np.asarray(ldp.grid_noise(jax.random.key(11, impl="rbg"), (n,), sigma)) + support
  expected = n * counts.astype(float) / 2.0 ** 64
  observed = np.bincount(draws, minlength=len(counts)).astype(float)
  keep = expected >= 50
  pooled_e = np.append(expected[keep], expected[~keep].sum())
  pooled_o = np.append(observed[keep], observed[~keep].sum())
  assert stats.chisquare(pooled_o, pooled_e).pvalue > 1e-3
  x = jax.random.uniform(jax.random.key(0), (16, 28, 28, 1), minval=-1, maxval=1)
  sent = np.asarray(ldp.transform(jax.random.key(1, impl="rbg"), x, sigma, mu))
  y = sent * 255
  np.testing.assert_allclose(y, np.round(y), atol=1e-3)
  assert np.abs(np.round(y)).max() <= local.ldp_output_range(sigma)


@pytest.mark.integration
def test_noise_scale_is_b_over_sigma():
  x = jnp.zeros((2000, 28, 28, 1))
  for sigma in (1.0, 5.0):
    noisy = ldp.transform(jax.random.key(0), x, sigma, 0.0, b=1.0)
    # discrete Laplace(t) grid units, g = B / K: mean |X| = g 2q / (1 - q^2) ~ t g = B / sigma
    assert float(jnp.mean(jnp.abs(noisy))) == pytest.approx(1.0 / sigma, rel=0.01)


@pytest.mark.integration
def test_worst_perturbation_stays_in_the_ball_and_raises_the_loss():
  model = Classifier(num_classes=10, width=0.125)
  x = jax.random.uniform(jax.random.key(1), (8, 28, 28, 1), minval=-1, maxval=1)
  y = jnp.arange(8) % 10
  params = model.init(jax.random.key(2), x)
  loss = lambda inputs: optax.softmax_cross_entropy_with_integer_labels(
      model.apply(params, inputs), y).mean()
  r = ldp.worst_perturbation(loss, x, eta=0.5, steps=5)
  norms = jnp.sqrt(jnp.sum(r * r, axis=(1, 2, 3)))
  assert float(norms.max()) <= 0.5 + 1e-5
  assert float(loss(x + r)) > float(loss(x))


@pytest.mark.integration
def test_ldp_end_to_end(npz_file, tmp_path):
  config = tiny_configs.ldp(npz_file, ",ldp5")
  report = pipeline.run(config, str(tmp_path / "l"))
  assert "stages.ldp" in assert_noiseless_named(str(tmp_path / "l"))["noiseless"]
  result = report["ldp"]
  for key in ("base_clean_accuracy", "base_perturbed_accuracy", "robust_perturbed_accuracy"):
    assert 0 <= result[key] <= 1, key
  assert result["base_clean_accuracy"] == report["baseline_accuracy"]
  assert (result["sigma"], result["mu"]) == (5.0, 0.1)
  assert result["local_epsilon"] == pytest.approx(
      privacy.ldp_local_epsilon(5.0, 784, 0.1)) == (784 - 79) * 2 * 5.0
  assert (tmp_path / "l" / "ldp" / "samples.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_pate_student_from_an_ldp_client(npz_file, tmp_path):
  config = tiny_configs.pate(npz_file, ",ldp5")
  assert config.queries.client == "ldp" and config.ldp.robust_teachers
  report = pipeline.run(config, str(tmp_path / "p"))
  queries = report["stages"]["queries"]
  assert queries["ldp_local_epsilon"] == pytest.approx(privacy.ldp_local_epsilon(5.0, 784, 0.1))
  assert report["epsilon"] > 0 and report["accountant"] == "rdp"  # a DP headline
  assert report["ldp_local_epsilon"] == queries["ldp_local_epsilon"]
  assert "Client side: local epsilon = 7050 per query sample" in (
      tmp_path / "p" / "report.md").read_text()
  plain = tiny_configs.pate(npz_file)
  plain_report = pipeline.run(plain, str(tmp_path / "q"))
  # The robust teachers differ from plain ones (Eq. 3), and the votes come from perturbed
  # queries: the histograms are not those of the plain run.
  assert not np.array_equal(np.load(tmp_path / "p" / "queries" / "votes.npy"),
                            np.load(tmp_path / "q" / "queries" / "votes.npy"))
  assert "ldp_local_epsilon" not in plain_report["stages"]["queries"]
