r"""Privacy planner: epsilon of planned (or recorded) teacher queries under every accountant.

  python -m dgd_jax.privacy --mechanism=lnmax --noise_scale=40 --queries=27 --delta=1e-5
  python -m dgd_jax.privacy --mechanism=lnmax --noise_scale=20 --votes=/tmp/votes.npy --json
  python -m dgd_jax.privacy --mechanism=gnmax --noise_scale=40 --target_epsilon=1 --delta=1e-5
  python -m dgd_jax.privacy --mechanism=confident_gnmax --threshold=200 --sigma1=150 \
      --noise_scale=40 --queries=1000
  python -m dgd_jax.privacy --mechanism=dpdfd --noise_scale=100 --noise_convention=multiplier \
      --norm_bound=1e-3 --batch_size=64 --queries=1000 [--dpdfd_normalization=batch]
  python -m dgd_jax.privacy --mechanism=dpdfd --noise_convention=multiplier --norm_bound=1e-3 \
      --batch_size=64 --queries=1500 --num_teachers=250 --dpdfd_analysis=disjoint_teachers \
      --teachers_disjoint --target_epsilon=10
  python -m dgd_jax.privacy --mechanism=dpsgd --noise_scale=3.65 --batch_size=8192 \
      --dataset_size=60000 --steps=293 [--sampling=poisson] --delta=1e-5 [--target_epsilon=3] --json
  python -m dgd_jax.privacy --mechanism=confident_gnmax --votes=votes.npy --threshold=200 \
      --sigma1=150 --noise_scale=40 --delta=1e-5 --smooth_sensitivity [--filter_epsilon=2] --json

``--target_epsilon`` calibrates: without ``--queries`` it gives the most queries (DPDFD: steps)
that fit, without the noise parameter the least noise; ``--vae_eps1`` counts towards the target.
``--max_epsilon`` refuses a plan above it. Every epsilon flag must be a finite number > 0.
Given ``--dataset_size`` (N), a ``--delta`` of 1/N or more is refused unless
``--allow_large_delta`` (the output then warns). With ``--votes``, ``--smooth_sensitivity`` releases
the data-dependent epsilon with noise scaled to its smooth sensitivity (PATE 2018 Sec. 4) at an
order, beta and sigma_ss fixed before the votes (``--ss_order``, ``--ss_beta``, ``--ss_sigma``,
or the public plan), composed with the queries (the ``smooth_sensitivity`` accountant), and
prints PATE 2018's vote-chosen release beside it as a diagnostic; and
``--filter_epsilon`` runs a Renyi filter over the queries in order (Feldman & Zrnic 2021); both
read the threshold bits of ``--answered_mask`` or, without it, draw them as Confident-GNMax
would, from a secret key (``--noise_seed`` makes those draws reproducible: not a private
release; its output then says so on every epsilon). Parses flags and calls the library; the
library never reads FLAGS.
"""
from __future__ import annotations

import json
import sys

import numpy as np
from absl import app, flags

from dgd_jax.runtime.errors import ConfigError, UserInputError
from dgd_jax.privacy import (calibrate, checks, conversion, dpdfd, ledger, noise, releases,
                             renyi_filter, smooth_sensitivity)

_MECHANISM = flags.DEFINE_string(
    "mechanism", None, f"One of {', '.join(releases.MECHANISMS)}.")
_NOISE_SCALE = flags.DEFINE_float(
    "noise_scale", None, "lnmax: Laplace scale b (= 1/gamma = 2/eps0); gnmax and the histogram "
    "mechanisms: Gaussian sigma; confident_gnmax: the answer's Gaussian sigma (sigma2); "
    "dpdfd: sigma in --noise_convention; dpsgd: the noise multiplier sigma (noise std sigma C on "
    "the sum of clipped gradients).")
_STEPS = flags.DEFINE_integer(
    "steps", None, "dpsgd: training steps T (each a Poisson sample of expected size "
    "--batch_size from --dataset_size examples).")
_SAMPLING = flags.DEFINE_string(
    "sampling", "poisson", "dpsgd: batch selection; the accountant supports 'poisson' only.")
_THRESHOLD = flags.DEFINE_float("threshold", None, "confident_gnmax: vote threshold T.")
_SIGMA1 = flags.DEFINE_float("sigma1", None, "confident_gnmax: threshold-step noise std.")
_QUERIES = flags.DEFINE_integer(
    "queries", None, "Number of queries (dpdfd: training steps T). Default with --votes: its rows.")
_ANSWERED = flags.DEFINE_integer(
    "answered", None, "confident_gnmax without --votes: how many queries of a finished run were "
    "answered. Realised (depends on the private votes): reported only as the data-dependent "
    "rdp_answered_only; every data-independent epsilon charges all --queries.")
_ANSWERED_MASK = flags.DEFINE_string(
    "answered_mask", None, "confident_gnmax with --votes: .npy boolean mask of the answered "
    "queries of a finished run (realised, as --answered).")
_DELTA = flags.DEFINE_float("delta", 1e-5, "delta of (epsilon, delta)-DP, in (0, 1); below 1/N "
                            "given --dataset_size (N).")
_ALLOW_LARGE_DELTA = flags.DEFINE_bool(
    "allow_large_delta", False, "Accept a --delta of 1/N or more (N: --dataset_size), which "
    "permits publishing a private example outright; the output then warns.")
_VOTES = flags.DEFINE_string(
    "votes", None, ".npy array of vote histograms [queries, classes] for the data-dependent "
    "analysis: whole, non-negative counts, every row summing to the number of teachers.")
_TARGET = flags.DEFINE_float(
    "target_epsilon", None, "Calibrate: most queries (no --queries) or least noise (no noise "
    "flag) meeting this epsilon under --accountant.")
_ACCOUNTANT = flags.DEFINE_string(
    "accountant", ledger.DEFAULT_ACCOUNTANT, "Accountant for calibration and --max_epsilon "
    f"(the Python planners' default too): one of {', '.join(ledger.ACCOUNTANTS)}.")
_MAX_EPSILON = flags.DEFINE_float(
    "max_epsilon", None, "Refuse (exit 1) if the planned epsilon under --accountant exceeds this.")
_NORM_BOUND = flags.DEFINE_float(
    "norm_bound", None, "dpdfd: gradient norm bound C; dpsgd: clip norm C (default 1; it scales "
    "the noise std, not the epsilon).")
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", None, "dpdfd: synthetic batch size B; dpsgd: expected Poisson batch size.")
_NUM_TEACHERS = flags.DEFINE_integer("num_teachers", 1, "dpdfd: number of teachers n.")
_TEACHERS_CHANGED = flags.DEFINE_integer(
    "teachers_changed", 1, "lnmax, gnmax, confident_gnmax and dpdfd's disjoint_teachers: k, how "
    "many teachers' shards one neighbouring change moves; the sensitivities scale by k. 1 for "
    "the default 'shuffle' partition under replace-one and the 'stable' one under "
    "add/remove-one; 2 for the 'stable' partition under replace-one "
    "(data.partitions.TEACHERS_CHANGED).")
_NEIGHBOURS = flags.DEFINE_string(
    "neighbours", None, "The neighbouring relation: 'replace_one' (default for the teacher "
    "mechanisms and dpdfd) or 'add_or_remove_one' (default for dpsgd).")
_NOISE_CONVENTION = flags.DEFINE_string(
    "noise_convention", None, "dpdfd (required): 'multiplier' (noise std = sigma * C, Eq. 4) or "
    "'std' (noise std = sigma, Theorem 3's reading).")
_ANALYSIS = flags.DEFINE_string(
    "dpdfd_analysis", dpdfd.DEFAULT_ANALYSIS, "dpdfd: 'whole_batch' (default: nothing assumed "
    "about the teachers; one teacher: B T releases of sensitivity 2C, T of 2C with "
    "--dpdfd_normalization=batch; n teachers: B T of 2nC, or T of 2 sqrt(n) C), "
    "'disjoint_teachers' (n teachers on disjoint shards, one change moving --teachers_changed = "
    "k of them: B T releases of 2kC; needs --teachers_disjoint), 'direct' (training on "
    "the private data, B of --dataset_size drawn without replacement per step: " + dpdfd.DIRECT_LABEL_DP + ") or 'theorem3' ("
    + dpdfd.THEOREM3_CONDITIONS + ").")
_TEACHERS_DISJOINT = flags.DEFINE_bool(
    "teachers_disjoint", False, "dpdfd: the n teachers are trained on pairwise disjoint shards "
    "(required by --dpdfd_analysis=disjoint_teachers).")
_DATASET_SIZE = flags.DEFINE_integer(
    "dataset_size", None, "dpdfd with --dpdfd_analysis=direct, and dpsgd: N, the private examples "
    "each step samples B from.")
_NORMALIZATION = flags.DEFINE_string(
    "dpdfd_normalization", dpdfd.DEFAULT_NORMALIZATION, "dpdfd: 'per_sample' (C g_i / (||g_i|| + "
    "e); default, valid for both) or 'batch' (C g_i / (||g||_2 + e), the whole batch's gradient "
    "norm, as Eq. 4 prints it).")
_VAE_EPS1 = flags.DEFINE_float(
    "vae_eps1", 0.0, "DGD's VAE latent-noise eps1 (pure DP, added to every accountant); DGD uses "
    "0.01.")
_MOMENT_ORDERS = flags.DEFINE_list(
    "moment_orders", [f"{l:g}" for l in conversion.DEFAULT_MOMENT_ORDERS],
    "Orders l of the PATE 2017 moments accountant.")
_SMOOTH = flags.DEFINE_bool(
    "smooth_sensitivity", False, "gnmax / confident_gnmax with --votes: release the data-"
    "dependent epsilon with Gaussian noise scaled to its smooth sensitivity (PATE 2018 Sec. 4, "
    "App. C); prints the epsilon before and after, the order, beta, SS and sigma_ss.")
_SS_ORDER = flags.DEFINE_float(
    "ss_order", None, "--smooth_sensitivity: the release's Renyi order lam, fixed before the "
    "votes (with --ss_beta and --ss_sigma; none of the three: the public plan, --ss_consensus).")
_SS_BETA = flags.DEFINE_float(
    "ss_beta", None, "--smooth_sensitivity: the smooth sensitivity's discount beta, in "
    "(0, 1/(2 lam)).")
_SS_SIGMA = flags.DEFINE_float(
    "ss_sigma", None, "--smooth_sensitivity: sigma_ss, the noise in multiples of the smooth "
    "sensitivity.")
_SS_CONSENSUS = flags.DEFINE_float(
    "ss_consensus", smooth_sensitivity.ASSUMED_CONSENSUS, "--smooth_sensitivity without "
    "--ss_order: the public plan chooses the parameters on histograms with this share of the "
    "teachers on the top class (never the votes).")
_SS_CHARGE = flags.DEFINE_string(
    "ss_charge", "answered", "--smooth_sensitivity: charge GNMax on the 'answered' queries "
    "(PATE 2018's accounting of a run) or on 'every' query.")
_FILTER = flags.DEFINE_float(
    "filter_epsilon", None, "gnmax / confident_gnmax with --votes: run a Renyi filter with this "
    "epsilon at --delta over the queries in order (GNMax charged only when answered); prints "
    "how many were asked and answered before it stopped, and the filtered run's epsilons.")
_FILTER_ORDER = flags.DEFINE_float(
    "filter_order", None, "--filter_epsilon: the Renyi order of the budget (default: the order "
    "admitting the most queries, from public parameters only).")
_NOISE_SEED = flags.DEFINE_integer(
    "noise_seed", -1, "The simulated threshold noise (no --answered_mask) and the "
    "smooth-sensitivity release's noise come from the operating system's entropy (-1); N >= 0 "
    "makes them reproducible from N, for tests: then the released value is NOT private.")
_JSON = flags.DEFINE_bool("json", False, "Print one JSON object instead of the table.")


def _load(path: str, what: str) -> np.ndarray:
  try:
    return np.load(path, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise ConfigError(f"cannot read {what} from {path!r} ({e}): pass a .npy file written with "
                      "numpy.save.") from None


def _plan(mechanism: str) -> tuple[releases.Release, dict]:
  """The release record the flags describe, calibrated when --target_epsilon is given."""
  votes = checks.votes_file(_VOTES.value) if _VOTES.value else None
  answered = (_load(_ANSWERED_MASK.value, "answered mask") if _ANSWERED_MASK.value
              else _ANSWERED.value)
  noise = _NOISE_SCALE.value
  count = _QUERIES.value
  if mechanism == "dpsgd":
    if _QUERIES.value is not None:
      raise ConfigError("dpsgd counts training steps: pass --steps, not --queries.")
    count = _STEPS.value
  elif _STEPS.value is not None:
    raise ConfigError(f"--steps is for --mechanism=dpsgd; {mechanism} counts --queries.")
  params = dict(queries=count, noise_scale=_NOISE_SCALE.value,
                threshold=_THRESHOLD.value, sigma1=_SIGMA1.value,
                votes=votes, answered=answered, norm_bound=_NORM_BOUND.value,
                batch_size=_BATCH_SIZE.value, num_teachers=_NUM_TEACHERS.value,
                noise_convention=_NOISE_CONVENTION.value, analysis=_ANALYSIS.value,
                normalization=_NORMALIZATION.value, teachers_disjoint=_TEACHERS_DISJOINT.value,
                dataset_size=_DATASET_SIZE.value, sampling=_SAMPLING.value,
                teachers_changed=_TEACHERS_CHANGED.value, neighbours=_NEIGHBOURS.value)
  if _TARGET.value is None:
    return releases.build_release(mechanism, **params), {}
  if votes is not None:
    raise ConfigError("--target_epsilon plans queries before any votes exist (data-independent):"
                      " drop --votes.")
  if answered is not None:
    raise ConfigError("--target_epsilon plans a run before it happens and charges every query; "
                      "--answered/--answered_mask is the realised outcome of a finished run: drop "
                      "it to calibrate, or pass --queries without --target_epsilon to see the "
                      "run's realised cost.")
  kwargs = dict(moment_orders=_moment_orders(), others=_pure_terms())
  if count is None:
    template = releases.build_release(mechanism, **{**params, "queries": 1})
    n = calibrate.max_queries(template, _TARGET.value, _DELTA.value, _ACCOUNTANT.value, **kwargs)
    if n == 0:
      one = calibrate.epsilon_of(template, _DELTA.value, _ACCOUNTANT.value, **kwargs)
      pure = sum(r.epsilon for r in kwargs["others"])
      fix = ("raise --target_epsilon or lower --vae_eps1, which alone uses it up" if pure >=
             _TARGET.value else f"raise --target_epsilon or the noise (--noise_scale)")
      including = f", including {pure:g} from --vae_eps1" if pure else ""
      raise ConfigError(
          f"no query fits in --target_epsilon={_TARGET.value:g}: a single query alone gives "
          f"epsilon {one:.6g} ({_ACCOUNTANT.value}, delta = {_DELTA.value:g}{including}). Fix: "
          f"{fix}.")
    calibration = {"solve_for": "queries", "target_epsilon": _TARGET.value,
                   "accountant": _ACCOUNTANT.value, "max_queries": n}
    return template.with_count(n), calibration
  if noise is None:
    template = releases.build_release(mechanism, **{**params, "noise_scale": 1.0})
    if mechanism == "dpsgd" and not kwargs["others"]:  # jax-privacy's calibration
      x = calibrate.dpsgd_noise_multiplier(template, _TARGET.value, _DELTA.value,
                                           _ACCOUNTANT.value)
    else:
      x = calibrate.min_noise(template, _TARGET.value, _DELTA.value, _ACCOUNTANT.value, **kwargs)
    calibration = {"solve_for": template.noise_field, "target_epsilon": _TARGET.value,
                   "accountant": _ACCOUNTANT.value, "min_noise": x}
    return template.with_noise(x), calibration
  raise ConfigError(f"--target_epsilon solves for --{'steps' if mechanism == 'dpsgd' else 'queries'}"
                    f" or --noise_scale: leave one of them unset.")


def _pure_terms() -> list[releases.PureDpRelease]:
  """The pure-DP terms the flags add to the ledger (DGD's eps1)."""
  if not _VAE_EPS1.value:
    return []
  return [releases.PureDpRelease(_VAE_EPS1.value, "dgd_vae_eps1",
                                 "DGD Sec. III-E latent noise 2c/eps1")]


def _moment_orders() -> np.ndarray:
  try:
    return np.array([float(x) for x in _MOMENT_ORDERS.value])
  except ValueError:
    raise ConfigError(f"--moment_orders={','.join(_MOMENT_ORDERS.value)} must be numbers, e.g. "
                      "1,2,3,4,5,6,7,8.") from None


def _table(title: str, reports: dict, delta: float) -> list[str]:
  lines = [title, "", f"{'accountant':<28} {'epsilon':>12} {'delta':>8} {'order':>7}  note"]
  for name, r in reports.items():
    order = "-" if r.order is None else f"{r.order:g}"
    note = r.note.replace(f". {ledger.DATA_DEPENDENT_WARNING}", "")
    flag = "[DATA-DEPENDENT] " if r.data_dependent else ""
    lines.append(f"{name:<28} {r.epsilon:>12.6f} {delta:>8.0e} {order:>7}  {flag}{note}")
  return lines


def _threshold_bits(release: releases.Release, rng: np.random.Generator) -> np.ndarray:
  """The threshold bits of the votes' queries: --answered_mask, or drawn as Confident-GNMax
  draws them, max_j n_j + N(0, sigma1^2) >= threshold (all True for GNMax)."""
  if isinstance(release, releases.GNMaxQueries):
    return np.ones(release.queries, bool)
  if isinstance(release.answered, np.ndarray):
    return release.answered
  votes = release.votes
  return votes.max(axis=1) + release.sigma1 * noise.numpy_normal(rng, (votes.shape[0],)) >= \
      release.threshold


def _pate2018(release: releases.Release, delta: float
              ) -> tuple[releases.Release, dict, list[releases.Release]]:
  """The filtered record (--filter_epsilon) and the smooth-sensitivity release
  (--smooth_sensitivity) of the votes' queries, with the release's own record for the ledger;
  (release, {}, []) when neither is asked for."""
  if _FILTER.value is None and not _SMOOTH.value:
    return release, {}, []
  if not isinstance(release, (releases.GNMaxQueries, releases.ConfidentGNMaxQueries)) or \
      release.votes is None:
    raise ConfigError("--filter_epsilon and --smooth_sensitivity need --mechanism=gnmax or "
                      "confident_gnmax and --votes.")
  if _FILTER.value is not None and _ANSWERED.value is not None:
    raise ConfigError("--filter_epsilon reads which queries passed the threshold: pass "
                      "--answered_mask (or neither, to draw them), not --answered.")
  source = noise.NoiseSource.of(_NOISE_SEED.value)
  bits = _threshold_bits(release, source.rng("threshold"))
  confident = isinstance(release, releases.ConfidentGNMaxQueries)
  threshold, sigma1, sigma2 = release.gnmax_parameters
  k = release.teachers_changed
  out, votes = {}, release.votes
  if _SMOOTH.value or (confident and not isinstance(release.answered, np.ndarray)):
    out["noise"] = source.describe()  # what the drawn threshold bits and release came from
  if _FILTER.value is not None:
    mechanism = "confident_gnmax" if confident else "gnmax"
    order = _FILTER_ORDER.value if _FILTER_ORDER.value is not None else (
        renyi_filter.filter_order(_FILTER.value, delta, mechanism, sigma2, sigma1,
                                  teachers_changed=k))
    plan = releases.FilteredQueries(sigma2, release.queries, _FILTER.value, delta, order,
                                    threshold, sigma1, teachers_changed=k,
                                    neighbours=release.neighbours)
    run = plan.run_filter(bits)
    release = plan.realise(run.asked, run.answered, run.stop_reason, votes)
    out["filter"] = {"epsilon": _FILTER.value, "queries": int(bits.size), **run.to_json()}
    votes, bits = votes[:run.asked], run.answered
  if _SMOOTH.value:
    checks.choice("ss_charge", _SS_CHARGE.value, smooth_sensitivity.CHARGES)
    if votes.shape[0] == 0:
      raise ConfigError("the filter asked no query: nothing to release.")
    plan = _ss_plan(votes, threshold, sigma1, sigma2, delta)
    answered = bits if _SS_CHARGE.value == "answered" else None
    terms = (votes, threshold, sigma1, sigma2, delta)
    ss = smooth_sensitivity.release_confident_gnmax(
        *terms, plan, answered=answered, rng=source.rng("smooth_sensitivity"),
        teachers_changed=k)
    chosen = smooth_sensitivity.choose_from_votes(*terms, answered=answered)
    diagnostic = smooth_sensitivity.release_confident_gnmax(  # the same draw, other parameters
        *terms, chosen, answered=answered, rng=source.rng("smooth_sensitivity"))
    out["smooth_sensitivity"] = {**ss.to_json(), "diagnostic": diagnostic.to_json(),
                                 "noise": source.describe()}
    cost = releases.SmoothSensitivityCost(plan.order, plan.beta, plan.sigma_ss, plan.source,
                                          neighbours=release.neighbours)
    return release, out, [cost]
  return release, out, []


def _ss_plan(votes, threshold, sigma1, sigma2, delta) -> smooth_sensitivity.SmoothSensitivityPlan:
  """The release's parameters: --ss_order/--ss_beta/--ss_sigma, or the public plan for the
  number of queries, teachers and classes (never the votes' values)."""
  given = (_SS_ORDER.value, _SS_BETA.value, _SS_SIGMA.value)
  if any(v is not None for v in given):
    if any(v is None for v in given):
      raise ConfigError("pass all of --ss_order, --ss_beta and --ss_sigma (the release's fixed "
                        "parameters), or none for the public plan.")
    return smooth_sensitivity.SmoothSensitivityPlan(*given, "config")
  return smooth_sensitivity.plan_release(
      int(votes.shape[0]), int(round(votes[0].sum())), int(votes.shape[1]), threshold, sigma1,
      sigma2, delta, _SS_CONSENSUS.value)


def _pate2018_lines(extra: dict) -> list[str]:
  lines = []
  if "filter" in extra:
    f = extra["filter"]
    lines += ["", f"Renyi filter, epsilon {f['epsilon']:g}: {f['asked']} of {f['queries']} "
                  f"queries asked, {f['answered']} answered; stopped: {f['stop_reason']} "
                  f"(RDP {f['spent_rdp']:.6g} of the budget {f['budget_rdp']:.6g} at order "
                  f"{f['order']:g})"]
  if "smooth_sensitivity" in extra:
    s = extra["smooth_sensitivity"]
    source = ("--ss_order, --ss_beta and --ss_sigma" if s["source"] == "config" else
              f"the public plan (--ss_consensus={_SS_CONSENSUS.value:g}, never the votes)")
    for r, what in ((s, f"parameters from {source}: a DP release (Thm. 23), its cost "
                        f"{s['gnss_rdp']:.6g} composed in the smooth_sensitivity accountant"),
                    (s["diagnostic"], "parameters chosen from the votes, as in PATE 2018's "
                                      "analysis: a DIAGNOSTIC, NOT a DP release")):
      lines += ["", f"Smooth-sensitivity release (PATE 2018 Sec. 4; GNMax charged on "
                    f"{r['charged']} queries, {r['answered']} of {r['queries']}), {what}: order "
                    f"{r['order']:g}, beta {r['beta']:.6g}, SS {r['smooth_sensitivity']:.6g}, "
                    f"sigma_ss {r['sigma_ss']:.6g}; epsilon {r['epsilon_before']:.6f} before, "
                    f"{r['epsilon']:.6f} +- {r['std']:.6f} after (released draw: "
                    f"{r['released']:.6f})"]
    if s["noise"]["reproducible"]:
      lines += [f"NOT A PRIVATE RELEASE: its noise follows from --noise_seed="
                f"{s['noise']['noise_seed']}; leave the flag unset for a secret draw."]
  return lines


def _checked_inputs() -> list[str]:
  """Refuses, before anything is computed, an epsilon flag that is no budget (negative, zero,
  NaN, infinite) and a --delta of 1/N or more given --dataset_size (unless
  --allow_large_delta); the warnings for what is accepted."""
  for flag in (_TARGET, _MAX_EPSILON, _FILTER):
    if flag.value is not None:
      checks.epsilon(f"--{flag.name}", flag.value)
  checks.delta(_DELTA.value)
  if _DATASET_SIZE.value is None:
    return []
  checks.delta_for_size(_DELTA.value, _DATASET_SIZE.value, _ALLOW_LARGE_DELTA.value,
                        allow=checks.ALLOW_LARGE_DELTA_FLAG)
  warning = checks.large_delta_warning(_DELTA.value, _DATASET_SIZE.value, "--allow_large_delta")
  return [warning] if warning else []


def _not_private(extra: dict) -> str | None:
  """None, or where the public noise of a seeded run's draws came from (--noise_seed)."""
  source = extra.get("noise")
  if source is None or source["private_release"]:
    return None
  return f"--noise_seed={source['noise_seed']}"


def run() -> str:
  """The planner's output for the parsed flags."""
  if _MECHANISM.value is None:
    raise ConfigError(f"pass --mechanism: one of {', '.join(releases.MECHANISMS)}.")
  mechanism = _MECHANISM.value
  delta = _DELTA.value
  warnings = _checked_inputs()
  release, calibration = _plan(mechanism)
  release, extra, more = _pate2018(release, delta)
  book = ledger.PrivacyLedger([release, *more, *_pure_terms()], moment_orders=_moment_orders())
  budget = None
  if _MAX_EPSILON.value is not None:
    accountant = _ACCOUNTANT.value if _ACCOUNTANT.present else None
    budget = book.check_budget(_MAX_EPSILON.value, delta, accountant)
  seeded = _not_private(extra)

  def flagged(data_dependent: bool = True) -> dict:  # a seeded run's reports say so, each
    reports = book.epsilons(delta, data_dependent=data_dependent)
    return {n: r.not_private(seeded) for n, r in reports.items()} if seeded else reports

  summary = book.to_json(delta)
  if seeded:  # every epsilon printed says the draws behind it are public
    summary["details"] = {name: r.to_json() for name, r in flagged().items()}
    budget = budget.not_private(seeded) if budget is not None else None
  if _JSON.value:
    count = "steps" if mechanism == "dpsgd" else "queries"  # DPDFD's steps stay "queries"
    out = {"mechanism": mechanism, count: release.count, **summary}
    if "noise" in extra:  # something was drawn: from a secret key, or not
      out["private_release"] = not seeded
    if warnings:
      out["warnings"] = warnings
    if calibration:
      out["calibration"] = calibration
    if budget is not None:
      out["budget"] = {"max_epsilon": _MAX_EPSILON.value, "checked": budget.to_json()}
    return json.dumps({**out, **extra})
  lines = [f"{ledger.NOT_PRIVATE}: the draws behind these epsilons follow from {seeded}; "
           "leave the flag unset for a secret draw.", ""] if seeded else []
  lines += [f"Warning: {w}" for w in warnings] + ([""] if warnings else [])
  lines += _table(f"Privacy plan: {release.summary()}; delta = {delta:g}", flagged(), delta)
  if book.data_dependent:
    lines += [""] + _table("Data-independent (DP guarantees of the plan, every query charged):",
                           flagged(False), delta)
  if calibration:
    solved = (f"max --queries = {calibration['max_queries']}" if "max_queries" in calibration
              else f"min --noise_scale = {calibration['min_noise']:.9g}")
    lines += ["", f"Calibration for epsilon <= {calibration['target_epsilon']:g} "
                  f"({calibration['accountant']}, delta = {delta:g}): {solved}"]
  if budget is not None:
    lines += ["", f"Budget check: epsilon {budget.epsilon:.6f} ({budget.accountant}, delta = "
                  f"{delta:g}) <= max_epsilon {_MAX_EPSILON.value:g}: within budget."]
  lines += _pate2018_lines(extra)
  lines += ["", "Not covered by these epsilons:"] + [f"- {n}" for n in book.not_covered()]
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments {argv[1:]}: every option is a --flag.")
  try:
    print(run())
  except UserInputError as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  app.run(main)
