"""Input checks shared by the privacy modules. Each failure raises ``ConfigError`` with a message
that names the bad value and the fix."""
from __future__ import annotations

import math

import numpy as np

from dgd_jax.runtime.errors import ConfigError


def positive(name: str, value: float, what: str = "") -> float:
  """A finite number > 0 (noise scales, norm bounds, epsilons)."""
  try:
    value = float(value)
  except (TypeError, ValueError):
    raise ConfigError(f"{name}={value!r} is not a number: pass a positive number{what}.") from None
  if not math.isfinite(value) or value <= 0:
    raise ConfigError(f"{name}={value} must be a finite number > 0{what}: zero or negative noise "
                      "gives no privacy; pass a positive value.")
  return value


def non_negative(name: str, value: float) -> float:
  try:
    value = float(value)
  except (TypeError, ValueError):
    raise ConfigError(f"{name}={value!r} is not a number: pass a number >= 0.") from None
  if not math.isfinite(value) or value < 0:
    raise ConfigError(f"{name}={value} must be a finite number >= 0.")
  return value


def count(name: str, value: int, minimum: int = 1) -> int:
  """A whole number >= minimum (queries, steps, batch sizes)."""
  try:
    number = float(value)
  except (TypeError, ValueError):
    number = math.nan
  if isinstance(value, bool) or not number.is_integer() or number < minimum:
    raise ConfigError(f"{name}={value!r} must be a whole number >= {minimum}.")
  return int(number)


def delta(value: float) -> float:
  """The delta of (epsilon, delta)-DP, strictly inside (0, 1)."""
  try:
    value = float(value)
  except (TypeError, ValueError):
    raise ConfigError(f"delta={value!r} is not a number: pass a delta in (0, 1), e.g. "
                      "1e-5.") from None
  if not (0.0 < value < 1.0):
    raise ConfigError(f"delta={value} is outside (0, 1): pass a delta in (0, 1), typically "
                      "below 1/(number of private examples), e.g. 1e-5.")
  return value


# How each entry point that knows N accepts a delta of 1/N or more (``delta_for_size``'s
# ``allow``): the run's config, the planner's flag, the API's keyword.
ALLOW_LARGE_DELTA_CONFIG = "--config.privacy.allow_large_delta=True (report.md then warns)"
ALLOW_LARGE_DELTA_FLAG = "--allow_large_delta (the output then warns)"
ALLOW_LARGE_DELTA_KEYWORD = "allow_large_delta=True (a UserWarning then says so)"


def delta_for_size(value: float, size: int, allowed: bool = False,
                   allow: str = ALLOW_LARGE_DELTA_CONFIG) -> float:
  """``delta`` checked against N = ``size``, the private set's size (public or a public
  bound): delta >= 1/N allows a mechanism that publishes one example in the clear and is
  still (0, delta)-DP, so it is refused unless ``allowed`` (the caller then warns,
  ``large_delta_warning``). ``allow`` names the caller's way to accept it. The one home of
  the rule: every entry point that knows N calls it."""
  value = delta(value)
  if is_large_delta(value, size) and not allowed:
    raise ConfigError(
        f"delta={value:g} is at least 1/N = 1/{size}: a guarantee with delta >= 1/N allows "
        "publishing one private example outright. Pass a delta below 1/N (e.g. "
        f"{10 ** math.floor(math.log10(0.1 / size)):g}), or, knowingly, {allow}.")
  return value


def is_large_delta(value: float, size: int) -> bool:
  """Whether ``delta`` is at least 1/N (N = ``size`` > 0)."""
  return size > 0 and value >= 1.0 / size


def large_delta_warning(value: float, size: int, allowed_by: str) -> str | None:
  """None, or the warning for an accepted delta of 1/N or more (``allowed_by``: the setting
  that accepted it)."""
  if not is_large_delta(value, size):
    return None
  return (f"delta = {value:g} is at least 1/N = 1/{size} (allowed by {allowed_by}): such a "
          "guarantee permits publishing a private example outright.")


# The largest target epsilon planned or calibrated for: e^100 bounds nothing, and calibrating
# PLD accounts that far takes minutes (their support grows with epsilon).
MAX_EPSILON = 100.0


def epsilon(name: str, value: float) -> float:
  """A target epsilon or budget: a finite number in (0, MAX_EPSILON] (zero, negative or NaN
  is no budget at all, and a larger one promises nothing)."""
  try:
    number = float(value)
  except (TypeError, ValueError):
    number = math.nan
  if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
    raise ConfigError(f"{name}={value!r} is not a privacy budget: it must be a finite number > 0 "
                      f"(e.g. {name}=1).")
  if number > MAX_EPSILON:
    raise ConfigError(f"{name}={value!r}: above {MAX_EPSILON:g} an epsilon bounds nothing "
                      f"(e^epsilon) and its calibration takes minutes; plan for {name} <= "
                      f"{MAX_EPSILON:g}, or train without noise where no guarantee is wanted.")
  return number


def max_epsilon(value: float, name: str = "config.privacy.max_epsilon") -> float:
  """A run's budget guard ``privacy.max_epsilon``: a finite number > 0, or ``inf``, the
  explicit way to turn the guard off (every plan then accounted, none refused or calibrated;
  ``has_budget``). Zero, negative and NaN values are refused, never read as 'off'."""
  try:
    number = float(value)
  except (TypeError, ValueError):
    number = math.nan
  if isinstance(value, bool) or math.isnan(number) or number <= 0:
    raise ConfigError(f"{name}={value!r} is not a budget: set a finite epsilon > 0 (e.g. "
                      f"--{name}=3), or inf to turn the budget guard off.")
  return number


def has_budget(max_epsilon_: float) -> bool:
  """Whether a checked ``max_epsilon`` sets a budget (finite), not the guard off (inf)."""
  return math.isfinite(max_epsilon_)


def orders(name: str, values, minimum: float) -> np.ndarray:
  """A non-empty 1-D array of finite orders, each > minimum."""
  arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
  if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= minimum):
    raise ConfigError(f"{name} must be a non-empty list of finite numbers > {minimum}; "
                      f"got {values!r}.")
  return arr


def votes(value, queries: int | None = None) -> np.ndarray:
  """Vote histograms ``[queries, classes]``: finite, non-negative, at least 2 classes. Returns a
  read-only float64 copy."""
  try:
    arr = np.array(value, dtype=np.float64)
  except (TypeError, ValueError):
    raise ConfigError("votes must be a numeric array of vote histograms "
                      "[queries, classes].") from None
  if arr.ndim != 2:
    raise ConfigError(f"votes has shape {arr.shape}; it must be 2-D [queries, classes] (one row "
                      "of teacher vote counts per query). Reshape it, e.g. votes[None, :] for one "
                      "query.")
  if arr.shape[0] < 1 or arr.shape[1] < 2:
    raise ConfigError(f"votes has shape {arr.shape}; it needs at least 1 query and 2 classes.")
  if not np.all(np.isfinite(arr)):
    raise ConfigError("votes contains NaN or infinite counts: pass finite vote counts.")
  if np.any(arr < 0):
    bad = tuple(int(i) for i in np.argwhere(arr < 0)[0])
    raise ConfigError(f"votes contains negative counts (first at [query, class] = {bad}): vote "
                      "counts are numbers of teachers and must be >= 0.")
  if queries is not None and arr.shape[0] != queries:
    raise ConfigError(f"votes has {arr.shape[0]} rows but queries={queries}: pass one vote "
                      "histogram per query (or leave queries unset).")
  arr.setflags(write=False)
  return arr


def votes_file(path: str) -> np.ndarray:
  """The vote histograms ``[queries, classes]`` of a ``.npy`` file (the planner's ``--votes``):
  whole, non-negative counts whose rows all sum to the same number of teachers (every teacher
  votes on every query). Refuses anything else, naming the file and the fix."""
  where = f"--votes {path!r}"
  try:
    arr = np.load(path, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise ConfigError(f"cannot read {where} ({e}): pass a .npy file written with numpy.save "
                      "of the [queries, classes] vote counts.") from None
  if not isinstance(arr, np.ndarray):  # an .npz archive
    arr.close()
    raise ConfigError(f"{where} is an .npz archive; pass a .npy file of one [queries, classes] "
                      "array of vote counts (numpy.save, not numpy.savez).")
  if arr.dtype == np.bool_:
    raise ConfigError(f"{where} holds a boolean array; vote histograms are counts of teachers "
                      "per class. A mask of the answered queries goes to --answered_mask.")
  if np.issubdtype(arr.dtype, np.complexfloating):
    raise ConfigError(f"{where} holds complex numbers ({arr.dtype}); pass real vote counts, "
                      "e.g. an integer array.")
  if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
    raise ConfigError(f"{where} holds {arr.dtype} values; pass numeric vote counts, e.g. an "
                      "integer array.")
  if arr.ndim != 2:
    raise ConfigError(f"{where} has shape {arr.shape}; it must be 2-D [queries, classes] (one row "
                      "of teacher vote counts per query). Reshape it, e.g. votes[None, :] for one "
                      "query.")
  if arr.shape[0] < 1 or arr.shape[1] < 2:
    raise ConfigError(f"{where} has shape {arr.shape}; it needs at least 1 query (row) and 2 "
                      "classes (columns).")
  arr = arr.astype(np.float64)
  if not np.all(np.isfinite(arr)):
    raise ConfigError(f"{where} contains NaN or infinite counts: pass finite vote counts.")
  if np.any(arr != np.round(arr)):
    bad = tuple(int(i) for i in np.argwhere(arr != np.round(arr))[0])
    raise ConfigError(f"{where} contains fractional counts (first {arr[bad]:g} at [query, class]"
                      f" = {bad}); each entry is a number of teachers: pass the raw whole counts, "
                      "not averaged or normalised votes.")
  if np.any(arr < 0):
    bad = tuple(int(i) for i in np.argwhere(arr < 0)[0])
    raise ConfigError(f"{where} contains negative counts (first at [query, class] = {bad}): vote "
                      "counts are numbers of teachers and must be >= 0.")
  totals = arr.sum(axis=1)
  if np.any(totals != totals[0]):
    other = int(np.argmax(totals != totals[0]))
    raise ConfigError(f"{where} has rows with different totals (query 0: {totals[0]:g} votes, "
                      f"query {other}: {totals[other]:g}); every teacher votes on every query, "
                      "so each row must sum to the number of teachers. Pass the votes of one "
                      "ensemble, every query complete.")
  if totals[0] == 0:
    raise ConfigError(f"{where} has no votes (every row sums to 0); pass the teachers' vote "
                      "counts.")
  return votes(arr)


def choice(name: str, value: str, allowed) -> str:
  if value not in allowed:
    raise ConfigError(f"unknown {name} {value!r}: use one of {', '.join(allowed)}.")
  return value
