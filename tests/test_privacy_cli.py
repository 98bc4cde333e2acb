"""The planner CLI, `python -m dgd_jax.privacy`, run as a user runs it (one subprocess per case)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

import dgd_jax
from dgd_jax import api
from dgd_jax import privacy
from dgd_jax.privacy import checks
from dgd_jax.runtime.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def planner(*args):
  return subprocess.run([sys.executable, "-m", "dgd_jax.privacy", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=120, check=False)


DPDFD = ["--mechanism=dpdfd", "--noise_scale=100", "--noise_convention=multiplier",
         "--norm_bound=1e-3", "--batch_size=64", "--queries=1000", "--json"]
CONFIDENT = ["--mechanism=confident_gnmax", "--threshold=200", "--sigma1=150", "--noise_scale=40"]
# Planner runs shared by the tests below, started together (each is one interpreter start-up).
RUNS = {
    "dpdfd_default": DPDFD,
    "dpdfd_theorem3": DPDFD + ["--dpdfd_analysis=theorem3"],
    "dpdfd_disjoint_eps10": [
        "--mechanism=dpdfd", "--noise_convention=multiplier", "--norm_bound=1e-3",
        "--batch_size=64", "--queries=1500", "--num_teachers=250",
        "--dpdfd_analysis=disjoint_teachers", "--teachers_disjoint", "--target_epsilon=10",
        "--accountant=rdp", "--json"],
    "dpdfd_overlapping_eps10": [
        "--mechanism=dpdfd", "--noise_convention=multiplier", "--norm_bound=1e-3",
        "--batch_size=64", "--queries=1500", "--num_teachers=250", "--target_epsilon=10",
        "--accountant=rdp", "--json"],
    "dpdfd_disjoint_unchecked": DPDFD + ["--num_teachers=250",
                                         "--dpdfd_analysis=disjoint_teachers"],
    "dpdfd_direct": DPDFD + ["--noise_scale=1", "--dpdfd_analysis=direct",
                             "--dataset_size=60000"],
    "confident_answered": CONFIDENT + ["--queries=1000", "--answered=600"],
    "confident_mask": CONFIDENT + ["--votes={votes}", "--answered_mask={mask}", "--json"],
    "votes_table": ["--mechanism=lnmax", "--noise_scale=20", "--votes={votes}"],
    "eps1_calibration": ["--mechanism=lnmax", "--noise_scale=40", "--target_epsilon=1",
                         "--vae_eps1=0.01", "--accountant=rdp", "--json"],
    "tiny_scale": ["--mechanism=lnmax", "--noise_scale=1e-3", "--queries=10", "--json"],
    "no_query_fits": ["--mechanism=lnmax", "--noise_scale=1", "--target_epsilon=0.5",
                      "--accountant=rdp"],
    "answered_with_target": CONFIDENT + ["--answered=600", "--target_epsilon=5"],
    "fractional_votes": ["--mechanism=lnmax", "--noise_scale=20", "--votes={fractional}"],
    "stable_replace_one": ["--mechanism=gnmax", "--noise_scale=40", "--queries=300",
                           "--teachers_changed=2", "--json"],
    # The quick start's first 300 vote histograms (tests/data/quickstart_votes_300.npy: 250
    # teachers of workdirs/quickstart_cpu on its first 300 queried synthetic samples).
    "quickstart_ss": CONFIDENT + ["--votes={quickstart}", "--delta=1e-5",
                                  "--smooth_sensitivity", "--json"],
    "quickstart_ss_fixed": CONFIDENT + ["--votes={quickstart}", "--smooth_sensitivity",
                                        "--ss_order=12", "--ss_beta=0.03", "--ss_sigma=5",
                                        "--json"],
    "quickstart_ss_text": CONFIDENT + ["--votes={quickstart}", "--smooth_sensitivity"],
    "quickstart_filter": CONFIDENT + ["--votes={quickstart}", "--delta=1e-5",
                                      "--filter_epsilon=2", "--json"],
    "quickstart_filter_seeded": CONFIDENT + ["--votes={quickstart}", "--delta=1e-5",
                                             "--filter_epsilon=2", "--json", "--noise_seed=3"],
    "quickstart_filter_seeded_again": CONFIDENT + [
        "--votes={quickstart}", "--delta=1e-5", "--filter_epsilon=2", "--json",
        "--noise_seed=3"],
    "filter_stops": ["--mechanism=gnmax", "--noise_scale=40", "--votes={votes}",
                     "--filter_epsilon=0.5", "--json"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  folder = tmp_path_factory.mktemp("planner")
  rng = np.random.default_rng(0)
  votes = np.zeros((40, 10), dtype=np.int64)
  votes[:, 0] = rng.integers(120, 250, size=40)
  votes[:, 1] = 250 - votes[:, 0]
  np.save(folder / "votes.npy", votes)
  np.save(folder / "mask.npy", votes[:, 0] >= 200)
  np.save(folder / "fractional.npy", votes / 250.0)
  paths = {name: folder / f"{name}.npy" for name in ("votes", "mask", "fractional")}
  paths["quickstart"] = os.path.join(REPO, "tests", "data", "quickstart_votes_300.npy")
  procs = {name: subprocess.Popen(
      [sys.executable, "-m", "dgd_jax.privacy", *(a.format(**paths) for a in args)], cwd=REPO,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, args in RUNS.items()}
  out = {}
  for name, proc in procs.items():
    stdout, stderr = proc.communicate(timeout=300)
    out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
  return out


def ok_json(result):
  assert result.returncode == 0, result.stderr
  return json.loads(result.stdout)


@pytest.mark.integration
def test_human_table_replays_dgd_table_one():
  result = planner("--mechanism=lnmax", "--noise_scale=40", "--queries=27", "--delta=1e-5")
  assert result.returncode == 0, result.stderr
  rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
          if line.split() and line.split()[0] in ("advanced_composition", "moments_accountant",
                                                  "rdp", "rdp_classic", "pld")}
  assert set(rows) == {"advanced_composition", "moments_accountant", "rdp", "rdp_classic", "pld"}
  assert rows["advanced_composition"][1] == "1.314194"
  assert rows["rdp"][1:4] == ["0.977543", "1e-05", "21"]
  assert rows["pld"][1] == "0.917949"
  assert "Not covered by these epsilons" in result.stdout
  assert "the generator trained against it" in result.stdout


@pytest.mark.integration
def test_json_output():
  result = planner("--mechanism=lnmax", "--noise_scale=40", "--queries=1300", "--json")
  assert result.returncode == 0, result.stderr
  out = json.loads(result.stdout)
  assert out["delta"] == 1e-5 and out["mechanism"] == "lnmax" and out["queries"] == 1300
  assert set(out["epsilons"]) == {"advanced_composition", "moments_accountant", "rdp",
                                  "rdp_classic", "pld"}
  assert round(out["epsilons"]["advanced_composition"], 6) == 11.900666
  assert round(out["epsilons"]["rdp"], 6) == 9.341662
  assert round(out["epsilons"]["pld"], 6) == 8.700105
  for name, detail in out["details"].items():
    assert detail["accountant"] == name and detail["delta"] == 1e-5
    assert not detail["data_dependent"]
  assert out["data_dependent_accountants"] == []


@pytest.mark.integration
def test_votes_give_flagged_data_dependent_epsilons(tmp_path):
  votes = np.tile([240, 5, 5, 0, 0, 0, 0, 0, 0, 0], (100, 1))
  path = tmp_path / "votes.npy"
  np.save(path, votes)
  result = planner("--mechanism=lnmax", "--noise_scale=20", f"--votes={path}", "--json")
  assert result.returncode == 0, result.stderr
  out = json.loads(result.stdout)
  assert out["queries"] == 100 and out["data_dependent"]
  assert out["details"]["moments_accountant"]["data_dependent"]
  assert "DATA-DEPENDENT" in out["details"]["moments_accountant"]["note"]
  assert out["epsilons"]["moments_accountant"] < out["data_independent_epsilons"][
      "moments_accountant"] == pytest.approx(5.302585092994046, rel=1e-9)
  assert out["epsilons"]["rdp_data_dependent"] <= out["epsilons"]["rdp"]
  # moments_accountant keeps its PATE 2017 meaning (data-dependent with --votes), and every key of
  # "epsilons" that depends on the votes is named.
  assert out["data_dependent_accountants"] == ["moments_accountant", "rdp_data_dependent",
                                               "rdp_classic_data_dependent"]
  assert all(out["details"][name]["data_dependent"] == (name in out["data_dependent_accountants"])
             for name in out["epsilons"])


@pytest.mark.integration
def test_target_epsilon_calibrates_queries_and_noise():
  result = planner("--mechanism=lnmax", "--noise_scale=40", "--target_epsilon=1",
                   "--accountant=rdp", "--json")
  assert result.returncode == 0, result.stderr
  out = json.loads(result.stdout)
  assert out["calibration"]["max_queries"] == 28 and out["queries"] == 28
  assert out["epsilons"]["rdp"] <= 1.0
  result = planner("--mechanism=gnmax", "--queries=100", "--target_epsilon=1",
                   "--accountant=rdp_classic")
  assert result.returncode == 0, result.stderr
  assert "min --noise_scale = 69.30433" in result.stdout


@pytest.mark.integration
def test_the_cli_and_python_planners_share_one_default_accountant():
  # issue 80: 2,000 GNMax answers at eps 3 planned by both without naming an accountant
  result = planner("--mechanism=gnmax", "--queries=2000", "--target_epsilon=3", "--json")
  out = ok_json(result)
  assert out["calibration"]["accountant"] == api.ACCOUNTANT == "pld"
  sigma = dgd_jax.noise_for("gnmax", 2000, 3.0)
  assert out["calibration"]["min_noise"] == pytest.approx(sigma, rel=1e-6)
  assert sigma == pytest.approx(87.95, abs=0.01)  # rdp's conversion needs 94.44
  assert out["epsilons"]["pld"] <= 3.0


@pytest.mark.parametrize("args, message", [
    (["--mechanism=lnmax", "--noise_scale=0", "--queries=27"], "must be a finite number > 0"),
    (["--mechanism=laplace", "--noise_scale=40", "--queries=27"], "unknown mechanism 'laplace'"),
    (["--mechanism=lnmax", "--noise_scale=40", "--queries=1300", "--max_epsilon=10",
      "--accountant=advanced_composition"], "above the maximum epsilon 10"),
    # issue 79: a delta of 1/N or more given N, and epsilon flags that are no budget
    (["--mechanism=dpsgd", "--dataset_size=100", "--delta=0.05", "--noise_scale=3",
      "--batch_size=10", "--steps=10"],
     "delta=0.05 is at least 1/N = 1/100: a guarantee with delta >= 1/N allows publishing one "
     "private example outright. Pass a delta below 1/N (e.g. 0.001), or, knowingly, "
     "--allow_large_delta (the output then warns)."),
    (["--mechanism=dpsgd", "--dataset_size=100", "--delta=0.05", "--batch_size=10",
      "--steps=10", "--target_epsilon=1"], "1/N = 1/100"),
    (["--mechanism=lnmax", "--noise_scale=40", "--target_epsilon=nan"],
     "--target_epsilon=nan is not a privacy budget: it must be a finite number > 0"),
    (["--mechanism=lnmax", "--noise_scale=40", "--queries=10", "--max_epsilon=-1"],
     "--max_epsilon=-1.0 is not a privacy budget"),
    (["--mechanism=gnmax", "--noise_scale=40", "--queries=10", "--max_epsilon=inf"],
     "--max_epsilon=inf is not a privacy budget"),
])
@pytest.mark.integration
def test_bad_input_exits_with_a_message_and_no_traceback(args, message):
  result = planner(*args)
  assert result.returncode == 1
  assert message in result.stderr and result.stderr.startswith("error: ")
  assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.integration
def test_human_table_marks_data_dependent_rows(runs):
  result = runs["votes_table"]
  assert result.returncode == 0, result.stderr
  plan, independent = result.stdout.split("Data-independent (DP guarantees of the plan")
  marked = {line.split()[0] for line in plan.splitlines() if "[DATA-DEPENDENT]" in line}
  assert marked == {"moments_accountant", "rdp_data_dependent", "rdp_classic_data_dependent"}
  assert "[DATA-DEPENDENT]" not in independent.split("Not covered")[0]


@pytest.mark.parametrize("run, analysis, rdp", [
    ("dpdfd_default", "whole_batch", 35.651754019056256),
    ("dpdfd_theorem3", "theorem3", 35.651754019056256),
])
@pytest.mark.integration
def test_dpdfd_analyses(runs, run, analysis, rdp):
  out = ok_json(runs[run])
  assert out["releases"][0]["analysis"] == analysis
  assert out["epsilons"]["rdp"] == pytest.approx(rdp, rel=1e-9)
  assert ("dpdfd_theorem3" in out["epsilons"]) == (analysis == "theorem3")
  if analysis == "theorem3":
    note = out["details"]["dpdfd_theorem3"]["note"]
    assert "the paper's claim (Theorem 3)" in note
    assert out["epsilons"]["dpdfd_theorem3"] == pytest.approx(rdp, rel=1e-9)
  else:  # the code's per-row noise: B T = 64000 releases of 2C (multiplier 100 / 2)
    assert out["releases"][0]["gaussian_releases"] == 64000
    assert "64000 x GaussianDpEvent(50)" in out["details"]["rdp"]["note"]
  assert any("n times too small" in note for note in out["not_covered"])


@pytest.mark.integration
def test_dpdfd_ensemble_calibration_uses_the_disjoint_analysis(runs):
  # 250 teachers on disjoint shards, eps 10, T = 1500: B T releases of 2C need sigma ~328; the
  # explicit overlapping option (2nC) needs n = 250 times more.
  disjoint = ok_json(runs["dpdfd_disjoint_eps10"])
  overlapping = ok_json(runs["dpdfd_overlapping_eps10"])
  sigma = disjoint["calibration"]["min_noise"]
  assert sigma == pytest.approx(328.18, rel=1e-4) and disjoint["epsilons"]["rdp"] <= 10
  assert overlapping["calibration"]["min_noise"] == pytest.approx(250 * sigma, rel=1e-6)
  refused = runs["dpdfd_disjoint_unchecked"]
  assert refused.returncode == 1 and "may overlap" in refused.stderr


@pytest.mark.integration
def test_dpdfd_direct_plan_is_subsampled_and_label_dp(runs):
  out = ok_json(runs["dpdfd_direct"])
  release = out["releases"][0]
  assert release["privacy_unit"] == "label" and release["dataset_size"] == 60000
  assert "SampledWithoutReplacementDpEvent(64 of 60000" in out["details"]["rdp"]["note"]
  assert "pld" not in out["epsilons"]
  assert any("LABEL DP ONLY" in note for note in out["not_covered"])


@pytest.mark.integration
def test_confident_gnmax_charges_every_query_in_the_guarantees(runs):
  # The plan for 1000 queries, every GNMax answer charged (the library, in-process).
  plan = privacy.PrivacyLedger([privacy.ConfidentGNMaxQueries(200.0, 150.0, 40.0, 1000)])
  plan = {name: r.epsilon for name, r in plan.epsilons(1e-5).items()}
  # --answered: the table's guarantees are the plan's; the realised cost is flagged.
  answered = runs["confident_answered"]
  assert answered.returncode == 0, answered.stderr
  table, independent = answered.stdout.split("Data-independent (DP guarantees of the plan")
  rows = {line.split()[0]: line for line in table.splitlines() if line.split()}
  for name in ("rdp", "rdp_classic", "pld"):
    assert float(rows[name].split()[1]) == pytest.approx(plan[name], abs=1e-6), name
    assert name in independent
  assert "[DATA-DEPENDENT] REALISED" in rows["rdp_answered_only"]
  assert float(rows["rdp_answered_only"].split()[1]) < plan["rdp"]
  assert "rdp_answered_only" not in independent
  assert "baseline" in answered.stdout and "synthetic data" in answered.stdout
  # --votes with --answered_mask: data-independent epsilons as if all 40 queries were answered.
  out = ok_json(runs["confident_mask"])
  assert out["data_dependent"] and out["queries"] == 40
  assert out["data_dependent_accountants"] == ["rdp_data_dependent", "rdp_classic_data_dependent",
                                               "rdp_answered_only"]
  assert out["epsilons"]["rdp_answered_only"] < out["epsilons"]["rdp_data_dependent"]
  assert "not a DP guarantee" in out["details"]["rdp_answered_only"]["note"]
  assert out["data_independent_epsilons"]["rdp"] == out["epsilons"]["rdp"]


@pytest.mark.integration
def test_smooth_sensitivity_release_of_the_quick_start_votes(runs):
  """The release and PATE 2018's vote-chosen diagnostic on the quick start's votes, threshold
  bits drawn from a secret key (their cost against tensorflow/privacy's is checked over fixed
  draws in test_smooth_sensitivity.py); ours converts as the headline does (improved), which is
  smaller than the classic conversion."""
  out = ok_json(runs["quickstart_ss"])
  d = out["smooth_sensitivity"]["diagnostic"]  # PATE 2018's analysis: vote-chosen parameters
  assert d["queries"] == 300 and d["charged"] == "answered" and not d["dp_release"]
  classic = d["rdp"] + math.log(1e5) / (d["order"] - 1) + d["gnss_rdp"]  # Mironov Prop. 3
  assert d["epsilon"] < classic
  for s in (d, out["smooth_sensitivity"]):
    assert s["epsilon"] == pytest.approx(s["epsilon_before"] + s["gnss_rdp"])
    assert s["std"] == pytest.approx(s["smooth_sensitivity"] * s["sigma_ss"])
    assert 0 < s["beta"] < 1 / (2 * s["order"]) and s["conditions"] == {"C5": True, "C6": True}
  s = out["smooth_sensitivity"]  # the release: parameters from the public plan
  assert s["source"] == "plan" and s["dp_release"]
  assert set(out["epsilons"]) == {"smooth_sensitivity"} | set(out["data_dependent_accountants"])
  assert out["epsilons"]["smooth_sensitivity"] > s["gnss_rdp"]
  fixed = ok_json(runs["quickstart_ss_fixed"])["smooth_sensitivity"]
  assert (fixed["order"], fixed["beta"], fixed["sigma_ss"], fixed["source"]) == (
      12.0, 0.03, 5.0, "config")
  text = runs["quickstart_ss_text"]
  assert text.returncode == 0, text.stderr
  assert "a DP release (Thm. 23)" in text.stdout and "NOT a DP release" in text.stdout
  assert "the public plan (--ss_consensus=0.5, never the votes)" in text.stdout


@pytest.mark.integration
def test_filter_over_the_quick_start_votes(runs):
  """The threshold bits are drawn from a secret key (--noise_seed: reproducibly): the answered
  count is Confident-GNMax's, sum_i P(max_i + N(0, 150^2) >= 200) in expectation."""
  out = ok_json(runs["quickstart_filter"])
  f = out["filter"]
  assert (f["queries"], f["asked"], f["stop_reason"]) == (300, 300, "queries")
  top = np.load(os.path.join(REPO, "tests", "data", "quickstart_votes_300.npy")).max(axis=1)
  p = 1 - scipy.stats.norm.cdf((200 - top) / 150.0)
  assert abs(f["answered"] - p.sum()) < 4 * np.sqrt(np.sum(p * (1 - p)))
  seeded, again = (ok_json(runs[k])["filter"]
                   for k in ("quickstart_filter_seeded", "quickstart_filter_seeded_again"))
  assert seeded == again  # the same noise_seed, the same draws
  assert f["spent_rdp"] <= f["budget_rdp"]
  assert out["epsilons"]["renyi_filter"] == pytest.approx(2.0, abs=1e-9)
  assert "renyi_filter" not in out["data_dependent_accountants"]
  stops = ok_json(runs["filter_stops"])["filter"]  # GNMax: every query charged
  assert stops["stop_reason"] == "budget" and stops["asked"] == stops["answered"] < 40


@pytest.mark.integration
def test_seeded_draws_say_so_on_every_epsilon(runs):
  """--noise_seed makes the filter's threshold draws public: the output says NOT A PRIVATE
  RELEASE on every epsilon; a secret draw's does not."""
  seeded, secret = (ok_json(runs[k]) for k in ("quickstart_filter_seeded", "quickstart_filter"))
  assert seeded["private_release"] is False and seeded["noise"]["noise_seed"] == 3
  for detail in seeded["details"].values():
    assert not detail["private_release"]
    assert detail["note"].startswith("NOT A PRIVATE RELEASE: the noise follows from "
                                     "--noise_seed=3.")
  assert secret["private_release"] is True and not secret["noise"]["reproducible"]
  assert all("private_release" not in d and "NOT A PRIVATE" not in d["note"]
             for d in secret["details"].values())
  assert {k: v["epsilon"] for k, v in seeded["details"].items()} == seeded["epsilons"]


@pytest.mark.integration
def test_a_large_delta_is_accepted_with_the_flag_and_warned():
  args = ["--mechanism=dpsgd", "--dataset_size=100", "--delta=0.05", "--noise_scale=3",
          "--batch_size=10", "--steps=10", "--allow_large_delta"]
  text = planner(*args)
  assert text.returncode == 0, text.stderr
  assert text.stdout.startswith("Warning: delta = 0.05 is at least 1/N = 1/100 (allowed by "
                                "--allow_large_delta)")
  out = ok_json(planner(*args, "--json"))
  assert out["warnings"] == [text.stdout.splitlines()[0][len("Warning: "):]]
  below = ok_json(planner(*args[:2], "--delta=0.005", *args[3:6], "--json"))
  assert "warnings" not in below and "private_release" not in below  # nothing drawn


@pytest.mark.integration
def test_calibration_counts_vae_eps1(runs):
  out = ok_json(runs["eps1_calibration"])
  assert out["calibration"]["max_queries"] == 27 and out["queries"] == 27
  assert out["epsilons"]["rdp"] <= 1.0  # 0.977543 + 0.01
  assert out["epsilons"]["rdp"] == pytest.approx(0.977543 + 0.01, abs=1e-6)


@pytest.mark.integration
def test_tiny_laplace_scale_gives_finite_epsilons(runs):
  out = ok_json(runs["tiny_scale"])
  assert all(19990 < value < float("inf") for name, value in out["epsilons"].items()
             if name != "advanced_composition")


@pytest.mark.parametrize("run, messages", [
    ("no_query_fits", ["no query fits in --target_epsilon=0.5", "a single query alone gives "
                       "epsilon 2.00282 (rdp"]),
    ("answered_with_target", ["--answered/--answered_mask is the realised outcome of a finished "
                              "run", "drop it to calibrate"]),
])
@pytest.mark.integration
def test_calibration_errors_exit_1_with_a_message(runs, run, messages):
  result = runs[run]
  assert result.returncode == 1 and result.stdout == ""
  assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
  for message in messages:
    assert message in result.stderr


@pytest.mark.integration
def test_a_bad_votes_file_exits_1_naming_the_file(runs):
  result = runs["fractional_votes"]
  assert result.returncode == 1 and result.stdout == ""
  assert result.stderr.startswith("error: --votes ") and "Traceback" not in result.stderr
  assert "fractional.npy' contains fractional counts" in result.stderr
  assert "pass the raw whole counts" in result.stderr


GOOD_VOTES = np.array([[240, 5, 5], [100, 100, 50], [0, 0, 250]])


@pytest.mark.parametrize("array, message", [
    (GOOD_VOTES / 250, "contains fractional counts (first 0.96 at [query, class] = (0, 0))"),
    (GOOD_VOTES - 10, "contains negative counts (first at [query, class] = (0, 1))"),
    (np.array([[240, 5, 5], [100, 100, 49]]), "rows with different totals (query 0: 250 votes, "
     "query 1: 249)"),
    (np.zeros((3, 4), np.int64), "has no votes (every row sums to 0)"),
    (GOOD_VOTES > 50, "holds a boolean array"),
    (GOOD_VOTES.astype(np.complex128), "holds complex numbers (complex128)"),
    (np.array([["a", "b"], ["c", "d"]]), "holds <U1 values; pass numeric vote counts"),
    (GOOD_VOTES[0], "has shape (3,); it must be 2-D [queries, classes]"),
    (GOOD_VOTES[None], "has shape (1, 3, 3); it must be 2-D [queries, classes]"),
    (np.zeros((0, 10), np.int64), "has shape (0, 10); it needs at least 1 query (row)"),
    (GOOD_VOTES[:, :1], "has shape (3, 1); it needs at least 1 query (row) and 2 classes"),
    (np.array([[240.0, np.nan, 5]]), "contains NaN or infinite counts"),
])
def test_votes_file_refusals_name_the_file_and_the_reason(tmp_path, array, message):
  path = tmp_path / "votes.npy"
  np.save(path, array)
  with pytest.raises(ConfigError) as e:
    checks.votes_file(str(path))
  assert str(e.value).startswith(f"--votes {str(path)!r} ") and message in str(e.value)


def test_votes_file_refuses_npz_and_unreadable_files(tmp_path):
  np.savez(tmp_path / "votes.npz", votes=GOOD_VOTES)
  with pytest.raises(ConfigError, match="is an .npz archive; pass a .npy file"):
    checks.votes_file(str(tmp_path / "votes.npz"))
  (tmp_path / "text.npy").write_text("240,5,5\n")
  with pytest.raises(ConfigError, match="cannot read --votes .*pass a .npy file"):
    checks.votes_file(str(tmp_path / "text.npy"))
  with pytest.raises(ConfigError, match="cannot read --votes"):
    checks.votes_file(str(tmp_path / "missing.npy"))


@pytest.mark.parametrize("dtype", [np.int64, np.uint16, np.float32])
def test_votes_file_accepts_whole_counts_of_any_numeric_type(tmp_path, dtype):
  np.save(tmp_path / "votes.npy", GOOD_VOTES.astype(dtype))
  votes = checks.votes_file(str(tmp_path / "votes.npy"))
  assert votes.dtype == np.float64 and not votes.flags.writeable
  np.testing.assert_array_equal(votes, GOOD_VOTES)


@pytest.mark.integration
def test_teachers_changed_scales_the_sensitivity(runs):
  # The stable partition under replace-one: two teachers moved per change.
  out = ok_json(runs["stable_replace_one"])
  expected = privacy.PrivacyLedger([privacy.GNMaxQueries(40.0, 300, teachers_changed=2)])
  assert out["epsilons"]["pld"] == pytest.approx(expected.epsilon(1e-5, "pld").epsilon,
                                                 rel=1e-12)
  assert out["teachers_changed"] == 2 and out["neighbours"] == "replace_one"
  assert any("at most 2 teacher" in n for n in out["not_covered"])
