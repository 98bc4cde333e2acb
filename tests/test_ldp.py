"""LDP client transform (Algorithm 1) and robust teachers (Algorithm 2, Eq. 3)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dgd_jax import privacy
from dgd_jax.configs import ldp as ldp_config
from dgd_jax.models.classifier import Classifier
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


@pytest.mark.integration
def test_noise_scale_is_b_over_sigma():
  x = jnp.zeros((2000, 28, 28, 1))
  for sigma in (1.0, 5.0):
    noisy = ldp.transform(jax.random.key(0), x, sigma, 0.0, b=1.0)
    # Laplace(b): mean |X| = b.
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
  config = ldp_config.get_config(f"npz:{npz_file},cpu,ldp5")
  config.baseline.update(num_steps=40, batch_size=32)
  config.ldp.update(num_steps=40, batch_size=32)
  config.log_every = 20
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
  import tiny_configs
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
