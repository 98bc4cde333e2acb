"""The privacy audit: attack statistics, attacks on known-leaky and unseen data, the
command end to end."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest

import tiny_configs
from dgd_jax.cli.audit import audit_run
from dgd_jax.configs import dgd as dgd_config
from dgd_jax.models.classifier import Classifier
from dgd_jax.audit import attacks
from dgd_jax.audit import canaries
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError, PrivacyAuditError, WorkdirConflictError
from dgd_jax.stages import audit as audit_stage
from dgd_jax.training import train

TINY_AUDIT = {"splits": 3, "examples": 64, "inversion_steps": 20, "inversion_batch": 4}


def test_auc_counts_pairs_and_ties():
  rng = np.random.default_rng(0)
  m, n = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 30).astype(float)
  pairs = (m[:, None] > n[None]).mean() + 0.5 * (m[:, None] == n[None]).mean()
  assert attacks.auc(m, n) == pytest.approx(pairs)
  assert attacks.auc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
  assert attacks.auc(np.array([0.0, 1.0]), np.array([2.0, 3.0])) == 0.0


def test_tpr_at_fpr_uses_the_strict_threshold():
  nonmembers = np.arange(100.0)  # 1% FPR: only scores above 99 count
  assert attacks.tpr_at_fpr(np.array([99.0, 99.5, 100.0, 5.0]), nonmembers) == 0.5


def fit_classifier(x, y, steps, tmp_path, name):
  model = Classifier(width=0.25)
  cfg = train.FitConfig(num_steps=steps, batch_size=32, learning_rate=3e-3, log_every=steps)
  state = train.create_train_state(model, train.optimizer(cfg), jax.random.key(0), x.shape[1:])
  state = train.fit(state, x, y, jax.random.key(1), cfg, str(tmp_path / name), name)
  return model.apply, state.params


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_attack_finds_members_of_an_overfit_model_and_not_of_an_unseen_one(tmp_path):
  # Noise images with random labels: a model can only memorise them.
  rng = np.random.default_rng(0)
  x = rng.uniform(-1, 1, (384, 28, 28, 1)).astype(np.float32)
  y = rng.integers(0, 10, 384).astype(np.int32)
  members, nonmembers, other = slice(0, 128), slice(128, 256), slice(256, 384)
  overfit = fit_classifier(x[members], y[members], 300, tmp_path, "overfit")
  unseen = fit_classifier(x[other], y[other], 300, tmp_path, "unseen")
  results = {}
  for name, (apply_fn, params) in (("overfit", overfit), ("unseen", unseen)):
    scores = (attacks.loss_scores(apply_fn, params, x[members], y[members]),
              attacks.loss_scores(apply_fn, params, x[nonmembers], y[nonmembers]))
    results[name] = attacks.membership(lambda r, s=scores: s, splits=5, examples=100, seed=0)
  assert results["overfit"]["auc"] > 0.95, results["overfit"]
  assert results["overfit"]["tpr_at_1pct_fpr"] > 0.2
  assert abs(results["unseen"]["auc"] - 0.5) < 0.1, results["unseen"]
  # jax-privacy's auditor: clearly above 0 for the memorising model, near 0 for the other.
  assert results["overfit"]["epsilon_lower_bound"] > 1.0, results["overfit"]
  assert results["unseen"]["epsilon_lower_bound"] < 0.3, results["unseen"]
  assert results["unseen"]["examples_per_side"] == 100 and len(
      results["unseen"]["auc_per_split"]) == 5


def test_similarity_identifies_reconstructions_close_to_their_class_mean():
  rng = np.random.default_rng(0)
  means = rng.normal(size=(4, 8, 8, 1))
  s = attacks.similarity(means + 0.1 * rng.normal(size=means.shape), means)
  assert s["classes_identified"] == 4 and s["correlation_with_own_class_mean"] > 0.9
  shuffled = attacks.similarity(means[::-1], means)
  assert shuffled["classes_identified"] == 0


@pytest.mark.integration
def test_inversion_raises_the_target_class_probability():
  model = Classifier(width=0.25)
  params = model.init(jax.random.key(0), np.zeros((1, 28, 28, 1)))
  target = 3
  before = jax.nn.softmax(model.apply(params, np.zeros((1, 28, 28, 1))))[0, target]
  x = attacks.invert_classes(model.apply, params, [target], (28, 28, 1), jax.random.key(1),
                           steps=30, batch=4)[0]
  after = jax.nn.softmax(model.apply(params, x))[:, target]
  assert x.shape == (4, 28, 28, 1) and np.all(np.abs(x) <= 1)
  assert float(after.mean()) > float(before) + 0.3, (before, after)


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_audit_command_on_a_finished_dgd_run(finished_dgd_copy):
  _, workdir, _ = finished_dgd_copy
  report = audit_run(workdir, TINY_AUDIT)
  a = report["audit"]
  assert set(a["membership_auc"]) == {"baseline", "teacher", "student"}
  assert all(0.0 <= v <= 1.0 for v in a["membership_auc"].values())
  assert a["membership"]["teacher"]["splits"] == 3  # one teacher per split
  assert a["inversion"]["prior"] == "generator"
  assert set(a["inversion_similarity"]) == {"baseline", "student"}
  assert os.path.exists(os.path.join(workdir, a["inversion_png"]))
  with open(os.path.join(workdir, "report.json")) as f:
    assert json.load(f)["audit"]["membership_auc"] == a["membership_auc"]
  with open(os.path.join(workdir, "report.md")) as f:
    text = f.read()
  assert "## Privacy audit" in text
  # DGD's default epsilon covers the labels only: one sentence on what the student showed
  assert ("Uncovered path: the epsilon does not cover the student. The epsilon covers the "
          "label answers only" in text and "On the student the audit found " in text)
  assert audit_run(workdir, TINY_AUDIT)["audit"] == a  # a second call reuses the stage
  with pytest.raises(WorkdirConflictError, match="To audit with other settings, remove"):
    audit_run(workdir, {**TINY_AUDIT, "splits": 2})
  assert os.path.exists(os.path.join(workdir, a["inversion_png"]))  # nothing lost


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_audit_of_pate_uses_the_held_out_split_and_the_pixel_prior(npz_file, tmp_path):
  workdir = str(tmp_path / "run")
  pipeline.run(tiny_configs.pate(npz_file), workdir)
  a = audit_run(workdir, TINY_AUDIT)["audit"]
  assert set(a["membership_auc"]) == {"teacher", "student"}  # PATE has no baseline
  assert a["inversion"]["prior"] == "pixel"
  # Non-members: the 32 test examples outside the student's public pool.
  assert a["membership"]["student"]["examples_per_side"] == 32
  with open(os.path.join(workdir, "report.json")) as f:
    check = json.load(f)["audit_check"]
  assert set(check) == {"student"} and check["student"]["passed"]  # PATE covers its student


@pytest.mark.integration
def test_a_bound_above_the_stated_epsilon_fails_loudly(finished_dgd_copy, monkeypatch):
  """A lower bound above what the epsilon allows is a bug: the report says so and the run
  fails (here the bound is faked, on a PATE-like check of a DGD run's student)."""
  _, workdir, _ = finished_dgd_copy
  monkeypatch.setitem(methods.METHODS, "dgd", dataclasses.replace(
      methods.METHODS["dgd"], audited=lambda c: ("student",)))
  monkeypatch.setattr(attacks, "epsilon_lower_bound", lambda *a, **k: 1e6)
  with pytest.raises(PrivacyAuditError, match="student's empirical epsilon lower bound 1e"):
    audit_run(workdir, TINY_AUDIT)
  with open(os.path.join(workdir, "report.md")) as f:
    assert "AUDIT FAILED: the student's" in f.read()


@pytest.mark.integration
def test_audit_refuses_unfinished_or_foreign_workdirs(npz_file, tmp_path):
  with pytest.raises(WorkdirConflictError, match="config.json does not exist"):
    audit_run(str(tmp_path / "nothing"), {})
  workdir = str(tmp_path / "run")
  config = tiny_configs.dgd(npz_file)
  pipeline.run(config, workdir, ("baseline",))
  with pytest.raises(WorkdirConflictError, match=r"stages \['teachers', 'generator', 'student'"
                     r"\] are not finished"):
    audit_run(workdir, {})
  assert not os.path.exists(os.path.join(workdir, "audit"))
  with pytest.raises(ConfigError, match="no baseline, teachers, student or DP-SGD model"):
    sweep = tiny_configs.dgd(npz_file)
    sweep.method = "teacher_sweep"
    sweep.audit = {"prior": "auto"}
    pipeline.run(sweep, str(tmp_path / "sweep"), ("audit",))


def test_inverted_samples_give_the_pixel_prior_and_refuse_the_generator_prior():
  """DeepInversion trains no generator: 'auto' picks the pixel prior, 'generator' is refused."""
  config = dgd_config.get_config("fashion_mnist,cpu")
  assert config.generator.synthesis == "inversion"
  planned = ("baseline", "teachers", "generator", "vae", "queries", "student")
  assert not audit_stage.trains_generator(config, planned)
  assert audit_stage.trains_generator(dgd_config.get_config("fashion_mnist,cpu,generator"),
                                      planned)
  config.audit = {"prior": "generator"}
  with pytest.raises(ConfigError, match="trains no generator .*synthesis='inversion'"):
    audit_stage.check(config, planned + ("audit",))


def test_one_run_bound_is_zero_for_chance_and_large_for_separated_scores():
  rng = np.random.default_rng(0)
  included = canaries.inclusion(1000, rng)
  assert 400 < included.sum() < 600
  chance = canaries.one_run_bound(rng.normal(size=1000), included, 1e-5)
  separated = canaries.one_run_bound(rng.normal(size=1000) + 100.0 * included, included, 1e-5)
  assert chance["one_run"] == chance["one_run_fdp"] == 0.0 and abs(chance["auc"] - 0.5) < 0.05
  assert separated["auc"] == 1.0 and 4.5 < separated["one_run"] < separated["one_run_fdp"]
  with pytest.raises(ValueError, match="canaries both in and out"):
    canaries.one_run_bound(np.zeros(3), np.ones(3, bool), 1e-5)


def test_the_dirac_score_is_the_subsampled_gaussian_log_likelihood_ratio():
  z, q, s = np.array([-1.0, 0.0, 0.5, 2.0]), 0.1, 1.5
  gauss = lambda x, mu: np.exp(-(x - mu) ** 2 / (2 * s * s))
  expected = np.log(((1 - q) * gauss(z, 0.0) + q * gauss(z, 1.0)) / gauss(z, 0.0))
  np.testing.assert_allclose(canaries.dirac_llr(z, q, s), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_the_canary_audit_of_dpsgd_stays_below_its_claim_and_catches_a_broken_noise(
    npz_file, tmp_path, monkeypatch):
  """Issue 81: one-run audits with 1,000 gradient canaries of a tiny DP-SGD run at eps 3. With
  the real mechanism the lower bound stays at or below the claimed epsilon; with the noise
  divided by 100 (a test-only hook on jax-privacy's privatizer) it exceeds the claim, the
  audit fails loudly and release/ is removed. Neither audit reaches release/. The real one is
  as strong as the exact mechanism simulated (its AUC), which catches too much noise too."""
  from test_dpsgd import tiny as tiny_dpsgd  # pylint: disable=g-import-not-at-top
  from jax_privacy import noise_addition  # pylint: disable=g-import-not-at-top
  run, broken = str(tmp_path / "run"), str(tmp_path / "broken")
  pipeline.run(tiny_dpsgd(npz_file), run)
  shutil.copytree(run, broken)
  report = audit_run(run, {**TINY_AUDIT, "canaries": 1000})
  c = report["audit"]["canaries"]
  assert c["canaries"] == 1000 and 400 < c["included"] < 600
  assert c["claimed_epsilon"] == pytest.approx(3.0, abs=1e-3) and c["neighbours"] == (
      "add_or_remove_one")
  assert 0.0 <= max(c["one_run"], c["one_run_fdp"]) <= c["claimed_epsilon"]
  # as strong as the exact mechanism simulated: neither more nor less noise than claimed
  assert abs(c["auc"] - c["simulated"]["auc"]) < 0.08
  assert report["audit_check"]["canaries"]["passed"]
  with open(os.path.join(run, "report.md")) as f:
    assert "One-run canary audit of DP-SGD's model (gradient (Dirac) canaries" in f.read()
  with open(os.path.join(run, "release", "report.json")) as f:
    assert "audit" not in json.load(f)
  real = noise_addition.gaussian_privatizer
  monkeypatch.setattr(noise_addition, "gaussian_privatizer",
                      lambda stddev, prng_key: real(stddev=stddev / 100, prng_key=prng_key))
  with pytest.raises(PrivacyAuditError, match="canaries's empirical epsilon lower bound"):
    audit_run(broken, {**TINY_AUDIT, "canaries": 1000})
  with open(os.path.join(broken, "report.json")) as f:
    c = json.load(f)["audit"]["canaries"]
  assert c["auc"] > 0.99 and max(c["one_run"], c["one_run_fdp"]) > c["claimed_epsilon"]
  assert c["simulated"]["auc"] < 0.9  # the claim's own mechanism cannot do that
  assert not os.path.exists(os.path.join(broken, "release"))


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_the_canary_audit_of_dgd_end_to_end_audits_its_private_baseline(
    npz_file, tmp_path, monkeypatch):
  """DGD's private baseline: its DP-SGD steps run again with 1,000 gradient canaries, held
  against those steps' own add/remove-one epsilon by Steinke et al.'s bound (about 4.7 at
  most with 1,000 canaries, so the budget is 3); with the noise divided by 100 it exceeds it.
  Its GNMax labels get vote canaries of their own. A run without a release the canary audit
  knows is refused it before anything runs."""
  from jax_privacy import noise_addition  # pylint: disable=g-import-not-at-top
  run, broken = str(tmp_path / "run"), str(tmp_path / "broken")
  config = tiny_configs.dgd_private_baseline(npz_file)
  config.privacy.max_epsilon = 3.0  # its steps' claim below Steinke et al.'s saturation
  pipeline.run(config, run)
  shutil.copytree(run, broken)
  audit = audit_run(run, {**TINY_AUDIT, "canaries": 1000})["audit"]
  c, labels = audit["canaries"], audit["label_canaries"]
  assert c["audited"] == "DGD's private baseline, its DP-SGD steps alone"
  assert labels["audited"] == "the label release (50 gnmax answers)"  # its own coins
  assert 0.0 <= labels["epsilon_lower_bound"] <= labels["claimed_epsilon"]
  assert 0.0 <= max(c["one_run"], c["one_run_fdp"]) <= c["claimed_epsilon"]
  assert abs(c["auc"] - c["simulated"]["auc"]) < 0.08
  real = noise_addition.gaussian_privatizer
  monkeypatch.setattr(noise_addition, "gaussian_privatizer",
                      lambda stddev, prng_key: real(stddev=stddev / 100, prng_key=prng_key))
  with pytest.raises(PrivacyAuditError, match="canaries's empirical epsilon lower bound"):
    audit_run(broken, {**TINY_AUDIT, "canaries": 1000})
  plain = str(tmp_path / "plain")
  pipeline.run(tiny_configs.baseline(npz_file), plain)
  with pytest.raises(ConfigError, match="canary audit runs for DP-SGD steps .* label "
                                        "releases, DPDFD's steps and the LDP client, none "
                                        "of which this 'baseline' run has"):
    audit_run(plain, {**TINY_AUDIT, "canaries": 1000})


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("aggregator", ["gaussian_histogram", "gaussian_class_count"])
def test_the_vote_canary_audit_of_dgds_counts_release(aggregator, npz_file, tmp_path,
                                                      monkeypatch):
  """DGD's label release of noisy histograms or counts: 1,000 vote canaries through the run's
  aggregator stay below its replace-one epsilon and match the exact Gaussian simulated; the
  noise divided by 100 (a test-only hook on the sampler) exceeds it."""
  from dgd_jax.privacy import noise  # pylint: disable=g-import-not-at-top
  config = tiny_configs.dgd(npz_file)
  if aggregator == "gaussian_class_count":  # a count for the class each sample was made for
    config.generator.update(synthesis="inversion", num_synthetic=96, oversample=1.0,
                            inversion_batch_size=32, inversion_steps=30,
                            synthetic_student_steps=20)
  config.queries.update(aggregator=aggregator, noise_scale=8.0, num_queries=50)
  run, broken = str(tmp_path / "run"), str(tmp_path / "broken")
  pipeline.run(config, run)
  shutil.copytree(run, broken)
  report = audit_run(run, {**TINY_AUDIT, "canaries": 1000})
  c = report["audit"]["canaries"]
  assert c["audited"] == f"the label release (50 {aggregator} answers)"
  assert c["claimed_epsilon"] == pytest.approx(
      report["stages"]["queries"]["privacy"]["by_neighbours"]["replace_one"]["epsilons"][
          report["accountant"]])
  assert 0.0 <= max(c["one_run"], c["one_run_fdp"]) <= c["claimed_epsilon"]
  assert abs(c["auc"] - c["simulated"]["auc"]) < 0.08 and report["audit_check"]["canaries"][
      "passed"]
  real = noise.normal
  monkeypatch.setattr(noise, "normal", lambda key, shape, *a: real(key, shape, *a) / 100)
  with pytest.raises(PrivacyAuditError, match="canaries's empirical epsilon lower bound"):
    audit_run(broken, {**TINY_AUDIT, "canaries": 1000})


def test_a_vote_canary_moves_one_vote_and_alone_breaks_a_tie():
  included = np.array([True, False, True, False])
  for teachers, classes in ((5, 10), (250, 10), (7, 2), (8, 2)):
    rows = canaries.vote_rows(included, teachers, classes)
    assert (rows.sum(1) == teachers).all() and (rows >= 0).all()
    assert np.abs(rows[0] - rows[1]).sum() == 2  # in and out: one vote moved (replace-one)
    assert (np.argmax(rows, 1) == [1, 0, 1, 0]).all() or teachers % 2 == 0 and classes == 2
  scores = canaries.vote_scores("labels", np.array([[1, 0, -1], [1, 2, 0]]), None)
  np.testing.assert_array_equal(scores, [2, -1, -1])  # labels 1 minus labels 0, per canary
  values = np.array([[[0.0, 2.0], [3.0, 1.0]]])  # [q, m, K]
  np.testing.assert_array_equal(canaries.vote_scores("histograms", None, values), [2, -2])


def test_a_non_gaussian_mechanism_is_held_to_the_bound_valid_for_any_mechanism():
  """jax-privacy's f-DP bound assumes a Gaussian trade-off curve: on the exact pure eps-2 LDP
  client it can exceed 2 (seeds 1 and 3 do), so only Steinke et al.'s is held against a
  non-Gaussian claim; for a Gaussian mechanism the larger of the two is."""
  rng = np.random.default_rng(3)
  included = canaries.inclusion(1000, rng)
  scores = canaries.simulated_client_scores(included, 1.0, 0.01, 784, rng)
  laplace = audit_stage._bounds(scores, scores, included, 1e-5, gaussian=False)
  assert laplace["one_run_fdp"] > 2.0 >= laplace["epsilon_lower_bound"] == laplace["one_run"]
  gauss = canaries.simulated_gaussian_sums(included, 1.0, 1.0, rng)
  normal = audit_stage._bounds(gauss, gauss, included, 1e-5, gaussian=True)
  assert normal["epsilon_lower_bound"] == max(normal["one_run"], normal["one_run_fdp"]) > 0


def test_the_simulated_client_sends_what_the_client_sends():
  """The exact sampler simulated (the audit's reference) and the client's transform agree on
  the distribution of a canary's value sent (grid units): its mean and spread, in and out."""
  from dgd_jax.privacy import local  # pylint: disable=g-import-not-at-top
  from dgd_jax.training import ldp  # pylint: disable=g-import-not-at-top
  included = canaries.inclusion(20000, np.random.default_rng(0))
  x = canaries.client_canaries(included, (28, 28, 1), 1.0)
  sent = np.asarray(ldp.transform(jax.random.key(1), x, 1.0, 0.01, 1.0)).reshape(-1)[:20000]
  real = sent * local.LDP_GRID
  sim = canaries.simulated_client_scores(included, 1.0, 0.01, 784, np.random.default_rng(2))
  for side in (included, ~included):
    assert abs(real[side].mean() - sim[side].mean()) < 12  # 4 standard errors (std ~ 380)
    assert abs(real[side].std() - sim[side].std()) < 15


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("arg", ["", ",plus"])
def test_the_vote_canary_audit_of_pates_labels(arg, npz_file, tmp_path, monkeypatch):
  """PATE's LNMax labels and PATE+'s Confident-GNMax (its threshold low enough that the tied
  canary queries are answered): 1,000 vote canaries stay below the labels' data-independent
  epsilon for one moved vote; the sampler's noise divided by 100 exceeds it. LNMax is held to
  Steinke et al.'s bound alone (a Laplace trade-off curve)."""
  from dgd_jax.privacy import noise  # pylint: disable=g-import-not-at-top
  config = tiny_configs.pate(npz_file, arg)
  if arg:
    config.queries.threshold = 1.0  # 4 teachers: a tie's top count is 2
  run, broken = str(tmp_path / "run"), str(tmp_path / "broken")
  pipeline.run(config, run)
  shutil.copytree(run, broken)
  c = audit_run(run, {**TINY_AUDIT, "canaries": 1000})["audit"]["canaries"]
  name = "confident_gnmax" if arg else "lnmax"
  assert c["audited"] == f"the label release (40 {name} answers)"
  assert c["gaussian_tradeoff"] == bool(arg) and c["accountant"] == "rdp"
  assert 0.0 <= c["epsilon_lower_bound"] <= c["claimed_epsilon"]
  assert abs(c["auc"] - c["simulated"]["auc"]) < 0.08
  sampler = "normal" if arg else "laplace"
  real = getattr(noise, sampler)
  monkeypatch.setattr(noise, sampler, lambda key, shape, *a: real(key, shape, *a) / 100)
  with pytest.raises(PrivacyAuditError, match="canaries's empirical epsilon lower bound"):
    audit_run(broken, {**TINY_AUDIT, "canaries": 1000})
  with open(os.path.join(broken, "report.json")) as f:
    c = json.load(f)["audit"]["canaries"]
  assert c["auc"] > 0.99 and c["simulated"]["epsilon_lower_bound"] <= c["claimed_epsilon"]


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_the_canary_audit_of_dpdfd_and_of_the_ldp_client(npz_file, tmp_path, monkeypatch):
  """DPDFD's noisy rows at eps 1 and the LDP client's features at its local epsilon 2 per
  feature: 1,000 canaries each stay below the claim and match the exact mechanism; the
  noise divided by 100 (DPDFD) or removed (the client's integer noise) exceeds it."""
  from dgd_jax.privacy import noise  # pylint: disable=g-import-not-at-top
  from dgd_jax.training import ldp  # pylint: disable=g-import-not-at-top
  from test_dpdfd import tiny as tiny_dpdfd  # pylint: disable=g-import-not-at-top
  runs = {"dpdfd": tiny_dpdfd(npz_file, ",eps1"), "ldp": tiny_configs.ldp(npz_file)}
  for name, config in runs.items():
    run = str(tmp_path / name)
    pipeline.run(config, run)
    shutil.copytree(run, run + "_broken")
    key = "canaries" if name == "dpdfd" else "client_canaries"
    c = audit_run(run, {**TINY_AUDIT, "canaries": 1000})["audit"][key]
    assert c["claimed_epsilon"] == pytest.approx(1.0 if name == "dpdfd" else 2.0, abs=1e-6)
    assert 0.0 <= c["epsilon_lower_bound"] <= c["claimed_epsilon"]
    assert abs(c["auc"] - c["simulated"]["auc"]) < 0.08
  real = noise.normal
  monkeypatch.setattr(noise, "normal", lambda key, shape, *a: real(key, shape, *a) / 100)
  monkeypatch.setattr(ldp, "grid_noise", lambda key, shape, sigma: jax.numpy.zeros(
      shape, jax.numpy.int32))
  for name in runs:
    with pytest.raises(PrivacyAuditError, match="canaries's empirical epsilon lower bound"):
      audit_run(str(tmp_path / name) + "_broken", {**TINY_AUDIT, "canaries": 1000})
