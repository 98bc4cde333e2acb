"""Release records: one frozen dataclass per kind of private release that a ``PrivacyLedger``
holds. Each record knows its dp-accounting event (data-independent: the plan, every planned release
charged), its RDP curve, and, when it carries the teachers' vote histograms, its data-dependent RDP
curve. A Confident-GNMax record may also carry the realised ``answered`` count or mask of a run:
that is a function of the private votes, so it only enters the realised accountant
(``rdp_answered_only``), never the data-independent epsilons."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import dp_accounting
import numpy as np

from dgd_jax.privacy import checks, dpdfd, events, pate2017, pate2018, renyi_filter
from dgd_jax.runtime.errors import ConfigError


# What a label-query epsilon leaves out, in DGD and PATE alike: the end of every teacher-vote
# record's ``covers``. A method's report states its own version once instead (``runner.methods``
# notes; ``runner.report`` drops this one there).
TEACHER_EXCLUSIONS = (
    "Not covered: the teachers (trained without noise; never to be released), and whatever "
    "produced the queried inputs: in DGD the baseline classifier (trained on the private data "
    "without noise), the generator trained against it or the samples inverted from it, its "
    "synthetic data and the VAE trained on them, which the DGD student also learns from, so "
    "the epsilon bounds the label queries, not everything the student saw; in PATE the "
    "unlabelled pool, assumed public. None of these models may be released as private.")


def _describe_votes(votes) -> dict | None:
  return None if votes is None else {"queries": int(votes.shape[0]), "classes": int(votes.shape[1])}


class Release:
  """Common interface of the release records."""

  mechanism: ClassVar[str]
  covers: ClassVar[str]  # what its epsilon covers and leaves out (ledger.not_covered)
  noise_field: ClassVar[str]  # the parameter ``with_noise`` sets (calibration)
  count_field: ClassVar[str]  # the parameter ``with_count`` sets (calibration)
  votes = None
  neighbours = "replace_one"  # the neighbouring relation the event is stated under (events)

  @property
  def neighboring_relation(self) -> dp_accounting.NeighboringRelation:
    return events.NEIGHBOURS[self.neighbours]

  def teachers_moved(self) -> int | None:
    """How many teachers' shards one neighbouring change moves, where the record's sensitivity
    rests on that (None elsewhere)."""
    return None

  @property
  def count(self) -> int:
    return getattr(self, self.count_field)

  @property
  def noise_parameter(self) -> float:
    return getattr(self, self.noise_field)

  @property
  def has_votes(self) -> bool:
    """Carries the teachers' vote histograms (private data)."""
    return self.votes is not None

  @property
  def realised(self) -> bool:
    """Carries a realised, vote-dependent quantity of a run other than the votes (Confident-GNMax's
    answered queries)."""
    return False

  @property
  def data_dependent(self) -> bool:
    """Carries anything that depends on the private data (votes or a realised count)."""
    return self.has_votes or self.realised

  def _check_queries(self, noise_label: str) -> int:
    """Validates (in place) the noise parameter, ``queries`` and, if given, ``votes``
    [queries, classes] of a label-query record; returns ``queries``."""
    object.__setattr__(self, self.noise_field,
                       checks.positive(noise_label, getattr(self, self.noise_field)))
    queries = checks.count("queries", self.queries)
    object.__setattr__(self, "queries", queries)
    if self.votes is not None:
      object.__setattr__(self, "votes", checks.votes(self.votes, queries))
    return queries

  def with_count(self, count: int) -> "Release":
    return dataclasses.replace(self, **{self.count_field: count})

  def with_noise(self, noise: float) -> "Release":
    return dataclasses.replace(self, **{self.noise_field: noise})

  def event(self) -> dp_accounting.DpEvent:
    raise NotImplementedError

  def rdp(self, orders) -> np.ndarray:
    """Data-independent RDP curve, summed over the record's releases."""
    return events.rdp_curve(self.event(), orders)

  def rdp_data_dependent(self, orders) -> np.ndarray:
    """Data-dependent RDP curve where votes are recorded, else the data-independent one. Every
    planned release is charged."""
    return self.rdp(orders)

  def rdp_answered_only(self, orders) -> np.ndarray:
    """Realised RDP curve of the run: only the releases that happened (Confident-GNMax's answered
    queries), per-query data-dependent where votes are recorded. Not a DP guarantee."""
    return self.rdp_data_dependent(orders)

  @classmethod
  def build(cls, p: dict) -> "Release":
    """The record from ``build_release``'s planner-style parameters ``p`` (every keyword of
    ``build_release``), refusing what it lacks or cannot take."""
    raise ConfigError(f"{cls.mechanism} records are not built from planner parameters.")

  def summary(self) -> str:
    """One line of what the record releases, for the privacy command and report.md."""
    return f"{self.mechanism}, {self.count} {self.count_field}"

  def describe(self) -> dict:
    out = {"mechanism": self.mechanism}
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if field.name == "votes":
        out["votes"] = _describe_votes(value)
      elif isinstance(value, np.ndarray):
        out[field.name] = int(value.sum())  # an answered mask: how many were answered
      else:
        out[field.name] = value
    return out


# L2 sensitivity of one class's vote count to one changed vote (ClassCountQueries)
COUNT_SENSITIVITY = 1.0


@dataclasses.dataclass(frozen=True, eq=False)
class TeacherRelease(Release):
  """A record whose sensitivity rests on "one neighbouring change of the private set moves k
  teachers' shards": ``teachers_changed`` = k (``data.partitions.TEACHERS_CHANGED``) under the
  relation ``neighbours`` ('replace_one' or 'add_or_remove_one'); the mechanism modules scale
  their sensitivities by k (``events``)."""

  teachers_changed: int = dataclasses.field(default=1, kw_only=True)
  neighbours: str = dataclasses.field(default="replace_one", kw_only=True)

  def _check_neighbours(self) -> None:
    object.__setattr__(self, "teachers_changed",
                       checks.count("teachers_changed", self.teachers_changed))
    checks.choice("neighbours", self.neighbours, tuple(events.NEIGHBOURS))

  def teachers_moved(self) -> int | None:
    return self.teachers_changed

  @staticmethod
  def _teacher(p: dict) -> dict:
    return dict(teachers_changed=p["teachers_changed"],
                neighbours=p["neighbours"] or "replace_one")

  @classmethod
  def build(cls, p: dict) -> "Release":
    """A label-query record at ``p``'s answer noise and query count, with its votes where it
    has a data-dependent analysis (a ``votes`` field)."""
    _need(cls.mechanism, noise_scale=p["noise_scale"], queries=p["queries"])
    takes_votes = "votes" in {f.name for f in dataclasses.fields(cls)}
    if p["votes"] is not None and not takes_votes:
      raise ConfigError(f"{cls.mechanism} has no data-dependent analysis: drop --votes.")
    votes = {"votes": p["votes"]} if takes_votes else {}
    return cls(noise_scale=p["noise_scale"], queries=p["queries"], **votes, **cls._teacher(p))


# The records ``build_release`` (the privacy command, the planner, the API) builds by name:
# mechanism -> record class, filled by ``register``.
MECHANISMS: dict[str, type[Release]] = {}


def register(cls: type[Release]) -> type[Release]:
  """Adds a record class to ``MECHANISMS`` under its ``mechanism`` name (a class decorator):
  the one step that makes a new release known to the privacy command and the planner."""
  known = MECHANISMS.get(cls.mechanism)
  if known is not None and known is not cls:
    raise ConfigError(f"mechanism {cls.mechanism!r} is already {known.__name__}; choose "
                      "another name.")
  MECHANISMS[cls.mechanism] = cls
  return cls


def _need(mechanism: str, **values) -> None:
  missing = [name for name, value in values.items() if value is None]
  if missing:
    raise ConfigError(f"mechanism {mechanism!r} needs {', '.join(missing)}: pass "
                      f"{' '.join(f'--{name}=<value>' for name in missing)}.")


@register
@dataclasses.dataclass(frozen=True, eq=False)
class LNMaxQueries(TeacherRelease):
  """``queries`` LNMax label queries with Laplace scale ``noise_scale`` = b = 1/gamma = 2/eps0."""

  noise_scale: float
  queries: int
  votes: np.ndarray | None = None

  mechanism: ClassVar[str] = "lnmax"
  covers: ClassVar[str] = "Covers the noisy label answers only. " + TEACHER_EXCLUSIONS
  noise_field: ClassVar[str] = "noise_scale"
  count_field: ClassVar[str] = "queries"

  def __post_init__(self):
    self._check_neighbours()
    self._check_queries("noise_scale (Laplace b)")

  @property
  def eps0(self) -> float:
    """Per-query pure epsilon 2k/b."""
    return pate2017.per_query_epsilon(self.noise_scale, self.teachers_changed)

  def event(self) -> dp_accounting.DpEvent:
    return pate2017.query_event(self.noise_scale, self.queries, self.teachers_changed)

  def summary(self) -> str:
    return (f"lnmax, {self.queries} queries, Laplace scale b = {self.noise_scale:g} "
            f"(per-query pure epsilon 2/b = {self.eps0:.6g})")

  def log_moments(self, moment_orders, data_dependent: bool = True) -> np.ndarray:
    votes = self.votes if data_dependent else None
    return pate2017.log_moments(self.noise_scale, self.queries, moment_orders, votes,
                                self.teachers_changed)

  def rdp_data_dependent(self, orders) -> np.ndarray:
    if self.votes is None:
      return self.rdp(orders)
    return pate2017.rdp_data_dependent(self.votes, self.noise_scale, orders,
                                       self.teachers_changed)


@register
@dataclasses.dataclass(frozen=True, eq=False)
class HistogramQueries(TeacherRelease):
  """``queries`` noisy vote histograms released whole, n + N(0, sigma^2 I) each (sigma =
  ``noise_scale``): the Gaussian
  mechanism of L2 sensitivity k sqrt(2) (one changed vote moves one count down and another up),
  whose RDP is GNMax's data-independent bound (PATE 2018 Prop. 8). GNMax's data-dependent
  analysis bounds the argmax alone, so this record never carries votes: every accountant
  charges the data-independent curve."""

  noise_scale: float
  queries: int

  mechanism: ClassVar[str] = "gaussian_histogram"
  covers: ClassVar[str] = (
      "Covers the noisy vote histograms released whole (every count of every queried sample "
      "with its Gaussian noise). " + TEACHER_EXCLUSIONS)
  noise_field: ClassVar[str] = "noise_scale"
  count_field: ClassVar[str] = "queries"

  def __post_init__(self):
    self._check_neighbours()
    self._check_queries(f"noise_scale ({self.mechanism} Gaussian sigma)")

  def event(self) -> dp_accounting.DpEvent:
    return pate2018.gnmax_event(self.noise_scale, self.queries, self.teachers_changed)

  def summary(self) -> str:
    return (f"{self.mechanism}, {self.queries} noisy vote histograms released whole, "
            f"Gaussian sigma = {self.noise_scale:g}")


@register
@dataclasses.dataclass(frozen=True, eq=False)
class ClassCountQueries(HistogramQueries):
  """``queries`` noisy counts n_c + N(0, sigma^2), each of one class c fixed before the query
  (the class a synthetic sample was made for): the Gaussian mechanism of L2 sensitivity k
  (one changed vote moves the count by at most 1), so sigma / sqrt 2 costs what
  ``HistogramQueries`` costs at sigma. No data-dependent analysis: every accountant charges
  the data-independent curve."""

  mechanism: ClassVar[str] = "gaussian_class_count"
  covers: ClassVar[str] = (
      "Covers the noisy vote counts released (of each queried sample, the count of the class "
      "it was synthesised for, with its Gaussian noise). " + TEACHER_EXCLUSIONS)

  def event(self) -> dp_accounting.DpEvent:
    return events.gaussian_event(self.noise_scale, self.teachers_changed * COUNT_SENSITIVITY,
                                 self.queries)

  def summary(self) -> str:
    return (f"{self.mechanism}, {self.queries} noisy counts of one class each, Gaussian sigma "
            f"= {self.noise_scale:g}")


@register
@dataclasses.dataclass(frozen=True, eq=False)
class GNMaxQueries(HistogramQueries):
  """``queries`` GNMax label queries with Gaussian std ``noise_scale`` on each count: the argmax of
  ``HistogramQueries``' release, so the same data-independent event; with ``votes``, PATE 2018's
  data-dependent curve of the argmax (Thm. 6)."""

  votes: np.ndarray | None = None

  mechanism: ClassVar[str] = "gnmax"
  covers: ClassVar[str] = (
      "Covers the noisy label answers only. " + TEACHER_EXCLUSIONS)

  def rdp_data_dependent(self, orders) -> np.ndarray:
    if self.votes is None:
      return self.rdp(orders)
    return np.sum(pate2018.gnmax_rdp_data_dependent(self.votes, self.noise_scale, orders,
                                                    self.teachers_changed), axis=0)

  @property
  def gnmax_parameters(self) -> tuple[float | None, float | None, float]:
    """(threshold, sigma1, sigma2) as PATE 2018's analyses take them: no threshold step."""
    return None, None, self.noise_scale

  def summary(self) -> str:
    return f"gnmax, {self.queries} queries, Gaussian sigma = {self.noise_scale:g}"


@register
@dataclasses.dataclass(frozen=True, eq=False)
class ConfidentGNMaxQueries(TeacherRelease):
  """``queries`` Confident-GNMax queries: a noisy threshold check (std ``sigma1``) on every query,
  a GNMax answer (std ``noise_scale``, the paper's sigma2) on the answered ones.

  The data-independent event (``event``, ``rdp``) and the data-dependent curve
  (``rdp_data_dependent``) charge the threshold check AND the GNMax answer on every query: which
  queries pass the threshold depends on the private votes, so charging only the answered ones is
  not a data-independent guarantee. ``answered`` (None, a count, or with ``votes`` a boolean mask)
  records the realised outcome of a run; it only feeds ``rdp_answered_only``, the realised cost of
  this run, which is not a DP guarantee: ``FilteredQueries`` is the run under a Renyi filter
  (Feldman & Zrnic 2021), whose answered-only charging is one."""

  threshold: float
  sigma1: float
  noise_scale: float
  queries: int
  answered: int | np.ndarray | None = None
  votes: np.ndarray | None = None

  mechanism: ClassVar[str] = "confident_gnmax"
  covers: ClassVar[str] = (
      "Covers the noisy threshold checks and label answers only. The data-independent "
      "epsilons charge the GNMax answer on every query; an answered-only cost is a realised "
      "value, not a DP guarantee. " + TEACHER_EXCLUSIONS)
  noise_field: ClassVar[str] = "noise_scale"
  count_field: ClassVar[str] = "queries"

  @property
  def gnmax_parameters(self) -> tuple[float | None, float | None, float]:
    """(threshold, sigma1, sigma2) as PATE 2018's analyses take them."""
    return self.threshold, self.sigma1, self.noise_scale

  @classmethod
  def build(cls, p: dict) -> "Release":
    _need(cls.mechanism, threshold=p["threshold"], sigma1=p["sigma1"],
          noise_scale=p["noise_scale"], queries=p["queries"])
    return cls(p["threshold"], p["sigma1"], p["noise_scale"], p["queries"], p["answered"],
               p["votes"], **cls._teacher(p))

  def summary(self) -> str:
    answered = (f" ({self.num_answered} answered: realised, used only by rdp_answered_only)"
                if self.realised else "")
    return (f"confident_gnmax, {self.queries} queries{answered}, threshold = "
            f"{self.threshold:g}, sigma1 = {self.sigma1:g}, sigma2 = {self.noise_scale:g}")

  def __post_init__(self):
    self._check_neighbours()
    object.__setattr__(self, "threshold", float(self.threshold))
    if not np.isfinite(self.threshold):
      raise ConfigError(f"threshold={self.threshold} must be a finite number of votes.")
    object.__setattr__(self, "sigma1", checks.positive("sigma1 (threshold noise)", self.sigma1))
    queries = self._check_queries("noise_scale (GNMax noise sigma2)")
    answered = self.answered
    if isinstance(answered, (list, tuple, np.ndarray)):
      mask = np.asarray(answered)
      if mask.dtype != bool or mask.shape != (queries,):
        raise ConfigError(f"answered mask must be a boolean array of shape ({queries},); got "
                          f"dtype {mask.dtype}, shape {mask.shape}.")
      mask = mask.copy()
      mask.setflags(write=False)
      object.__setattr__(self, "answered", mask)
    elif answered is not None:
      answered = checks.count("answered", answered, minimum=0)
      if answered > queries:
        raise ConfigError(f"answered={answered} exceeds queries={queries}: the answered count is "
                          "how many of the run's queries passed the threshold, so it cannot "
                          "exceed them; pass --queries (the number asked) >= --answered.")
      if self.votes is not None:
        raise ConfigError("with votes, pass answered as a boolean mask over the queries (which "
                          "ones passed the threshold), not a count.")
      object.__setattr__(self, "answered", answered)

  @property
  def num_answered(self) -> int:
    if self.answered is None:
      return self.queries
    if isinstance(self.answered, np.ndarray):
      return int(self.answered.sum())
    return self.answered

  @property
  def realised(self) -> bool:
    return self.answered is not None

  def with_count(self, count: int) -> "Release":
    return dataclasses.replace(self, queries=count, answered=None)

  def event(self) -> dp_accounting.DpEvent:
    # Every query: the threshold check and the GNMax answer (answered or not: data-independent).
    k = self.teachers_changed
    return dp_accounting.ComposedDpEvent([pate2018.threshold_event(self.sigma1, self.queries, k),
                                          pate2018.gnmax_event(self.noise_scale, self.queries, k)])

  def _per_query_rdp(self, orders) -> tuple[np.ndarray, np.ndarray]:
    """(threshold-step RDP, GNMax RDP) per query, shape [queries, orders]: data-dependent with
    votes, data-independent without."""
    lam = checks.orders("orders", orders, minimum=1.0)
    k = self.teachers_changed
    if self.votes is None:
      return (np.tile(pate2018.threshold_rdp(self.sigma1, lam, k), (self.queries, 1)),
              np.tile(pate2018.gnmax_rdp(self.noise_scale, lam, k), (self.queries, 1)))
    return (pate2018.threshold_rdp_data_dependent(self.votes, self.threshold, self.sigma1, lam,
                                                  k),
            pate2018.gnmax_rdp_data_dependent(self.votes, self.noise_scale, lam, k))

  def rdp_data_dependent(self, orders) -> np.ndarray:
    if self.votes is None:
      return self.rdp(orders)
    step1, step2 = self._per_query_rdp(orders)
    return np.sum(step1, axis=0) + np.sum(step2, axis=0)  # GNMax charged on every query

  def rdp_answered_only(self, orders) -> np.ndarray:
    step1, step2 = self._per_query_rdp(orders)
    if isinstance(self.answered, np.ndarray):
      step2 = step2[self.answered]
    else:
      step2 = step2[:self.num_answered]  # identical rows without votes
    return np.sum(step1, axis=0) + np.sum(step2, axis=0)


@dataclasses.dataclass(frozen=True, eq=False)
class FilteredQueries(TeacherRelease):
  """Up to ``queries`` GNMax (``threshold`` None) or Confident-GNMax queries asked under a Renyi
  filter (``renyi_filter``): budget ``filter_epsilon`` at ``filter_delta``, held at Renyi order
  ``filter_order`` as the RDP budget B = ``renyi_filter.rdp_budget`` less ``spent_before`` (the
  other records' RDP at that order). Each query is charged its threshold step, and its GNMax
  step only when answered; querying stops before B could be exceeded.

  Guarantees, all data-independent: the filter's, (filter_order, B)-RDP for these queries
  (``filter_rdp``, the ``renyi_filter`` accountant: with the other records, filter_epsilon);
  and, as for any prefix of the plan, the plan's curve with every planned query fully
  charged (``event``, ``rdp``). The realised fields (``asked``, the ``answered`` mask over the
  asked queries, ``stop_reason``) and ``votes`` (of the asked queries) feed the data-dependent
  diagnostics only."""

  noise_scale: float
  queries: int
  filter_epsilon: float
  filter_delta: float
  filter_order: float
  threshold: float | None = None
  sigma1: float | None = None
  spent_before: float = 0.0
  asked: int | None = None
  answered: np.ndarray | None = None
  stop_reason: str | None = None
  votes: np.ndarray | None = None

  mechanism: ClassVar[str] = "renyi_filter"
  covers: ClassVar[str] = (
      "Covers the noisy threshold checks and label answers of the queries asked under the "
      "Renyi filter (answered-only charging is a DP guarantee there: the budget was fixed per "
      "Renyi order before any query, Feldman & Zrnic 2021). " + TEACHER_EXCLUSIONS)
  noise_field: ClassVar[str] = "noise_scale"
  count_field: ClassVar[str] = "queries"

  def __post_init__(self):
    self._check_neighbours()
    object.__setattr__(self, "noise_scale", checks.positive("noise_scale (GNMax noise sigma2)",
                                                            self.noise_scale))
    object.__setattr__(self, "queries", checks.count("queries", self.queries))
    if (self.threshold is None) != (self.sigma1 is None):
      raise ConfigError("a filtered Confident-GNMax record needs both threshold and sigma1; "
                        "plain GNMax neither.")
    if self.sigma1 is not None:
      object.__setattr__(self, "sigma1", checks.positive("sigma1 (threshold noise)",
                                                         self.sigma1))
      object.__setattr__(self, "threshold", float(self.threshold))
    if not self.budget >= sum(self.step_rdp()):  # the filter checks each query's worst case
      raise ConfigError(f"the filter's budget at order {self.filter_order:g} is "
                        f"{self.budget:.6g} after the other records' {self.spent_before:.6g}, "
                        f"below one query's worst case {sum(self.step_rdp()):.6g}: no query "
                        "fits; raise the filter epsilon or the noise.")
    if self.asked is not None:
      asked = checks.count("asked", self.asked, minimum=0)
      if asked > self.queries:
        raise ConfigError(f"asked={asked} exceeds the planned queries={self.queries}.")
      mask = np.asarray(self.answered if self.answered is not None else np.ones(asked, bool))
      if mask.dtype != bool or mask.shape != (asked,):
        raise ConfigError(f"answered must be a boolean mask over the {asked} asked queries.")
      mask = mask.copy()
      mask.setflags(write=False)
      object.__setattr__(self, "answered", mask)
      checks.choice("stop_reason", self.stop_reason, renyi_filter.STOP_REASONS)
      if self.votes is not None:
        object.__setattr__(self, "votes", checks.votes(self.votes, asked))
    elif self.votes is not None or self.answered is not None:
      raise ConfigError("votes and answered describe the asked queries: pass asked too.")

  @property
  def budget(self) -> float:
    """The RDP budget of these queries at ``filter_order``."""
    return (renyi_filter.rdp_budget(self.filter_epsilon, self.filter_delta, self.filter_order)
            - self.spent_before)

  @property
  def realised(self) -> bool:
    return self.asked is not None

  @property
  def num_answered(self) -> int | None:
    return None if self.answered is None else int(self.answered.sum())

  def with_count(self, count: int) -> "Release":
    return dataclasses.replace(self, queries=count, asked=None, answered=None, stop_reason=None,
                               votes=None)

  def _plan(self, queries: int, answered=None, votes=None) -> Release:
    teacher = dict(teachers_changed=self.teachers_changed, neighbours=self.neighbours)
    if self.threshold is None:
      return GNMaxQueries(self.noise_scale, queries, votes, **teacher)
    return ConfidentGNMaxQueries(self.threshold, self.sigma1, self.noise_scale, queries, answered,
                                 votes, **teacher)

  def event(self) -> dp_accounting.DpEvent:
    return self._plan(self.queries).event()  # every planned query fully charged

  def filter_rdp(self, orders) -> np.ndarray:
    """The filter's guarantee where it holds (B at ``filter_order``), the plan's curve
    elsewhere; the smaller of the two at ``filter_order``."""
    lam = checks.orders("orders", orders, minimum=1.0)
    curve = self.rdp(lam)
    at = np.isclose(lam, self.filter_order, rtol=0.0, atol=1e-12)
    curve[at] = np.minimum(curve[at], self.budget)  # Feldman & Zrnic 2021 Thm. 3.1
    return curve

  def step_rdp(self) -> tuple[float, float]:
    """(threshold step, GNMax step) RDP of one query at ``filter_order``."""
    step1, step2 = renyi_filter.step_rdp(
        "gnmax" if self.threshold is None else "confident_gnmax", self.noise_scale, self.sigma1,
        [self.filter_order], self.teachers_changed)
    return float(step1[0]), float(step2[0])

  def run_filter(self, passed) -> "renyi_filter.FilterOutcome":
    """The filter over the threshold bits ``passed`` of the planned queries, in order (all
    True for GNMax); ``realise`` records its outcome."""
    passed = np.asarray(passed, dtype=bool)
    if passed.shape[0] > self.queries:
      raise ConfigError(f"{passed.shape[0]} threshold bits for {self.queries} planned queries.")
    if self.threshold is None:
      passed = np.ones_like(passed)
    out = renyi_filter.run_filter(passed, self.budget, *self.step_rdp())
    return dataclasses.replace(out, order=self.filter_order)

  def realise(self, asked: int, passed, stop_reason: str, votes=None) -> "FilteredQueries":
    """This record with the outcome of a run: the first ``asked`` queries asked, ``passed`` their
    threshold bits (ignored for GNMax: every asked query is answered), their ``votes``."""
    mask = (np.ones(asked, bool) if self.threshold is None
            else np.asarray(passed, dtype=bool)[:asked])
    return dataclasses.replace(self, asked=asked, answered=mask, stop_reason=stop_reason,
                               votes=None if votes is None else np.asarray(votes)[:asked])

  def _asked_record(self) -> Release | None:
    if not self.asked:
      return None
    return self._plan(self.asked, None if self.threshold is None or self.votes is None
                      else self.answered, self.votes)

  def rdp_data_dependent(self, orders) -> np.ndarray:
    record = self._asked_record()
    if self.votes is None or record is None:
      return self.rdp(orders)
    return record.rdp_data_dependent(orders)  # every asked query fully charged

  def rdp_answered_only(self, orders) -> np.ndarray:
    record = self._asked_record()
    if record is None:
      return np.zeros_like(checks.orders("orders", orders, minimum=1.0))
    if self.threshold is not None and self.votes is None:
      record = dataclasses.replace(record, answered=self.num_answered)
    return record.rdp_answered_only(orders)

  def summary(self) -> str:
    what = ("gnmax" if self.threshold is None else
            f"confident_gnmax, threshold = {self.threshold:g}, sigma1 = {self.sigma1:g},")
    return (f"{what} sigma2 = {self.noise_scale:g}, under a Renyi filter of epsilon "
            f"{self.filter_epsilon:g} at order {self.filter_order:g}: {self.asked} of "
            f"{self.queries} queries asked, {self.num_answered} answered")

  def describe(self) -> dict:
    out = super().describe()
    out["budget_rdp"] = self.budget
    return out


@register
@dataclasses.dataclass(frozen=True, eq=False)
class DpdfdSteps(TeacherRelease):
  """``steps`` DPDFD training steps (Algorithm 1) with noise ``noise_scale`` in ``noise_convention``
  ('multiplier': std = noise * C, Eq. 4; 'std': std = noise, Fig. 1 / Theorem 3).

  ``analysis`` (``privacy.dpdfd``): 'whole_batch' (default; nothing assumed about the teachers:
  B T releases of 2C for one teacher with per-sample rows, T of 2C under batch normalisation,
  B T of 2nC for n teachers); 'disjoint_teachers' (n teachers on disjoint shards, replace-one:
  B T releases of 2C; needs ``teachers_disjoint``); 'direct' (label DP only: T Gaussian steps of
  2C, each on B of ``dataset_size`` examples drawn without replacement); 'theorem3' (the paper's
  claim, ``dpdfd.THEOREM3_CONDITIONS``). ``teachers_changed`` scales 'disjoint_teachers' only;
  'whole_batch' holds under either neighbouring relation, 'direct' and 'theorem3' under
  replace-one."""

  noise_scale: float
  noise_convention: str
  norm_bound: float
  batch_size: int
  steps: int
  num_teachers: int = 1
  analysis: str = dpdfd.DEFAULT_ANALYSIS
  normalization: str = dpdfd.DEFAULT_NORMALIZATION
  teachers_disjoint: bool = False
  dataset_size: int | None = None

  mechanism: ClassVar[str] = "dpdfd"
  covers: ClassVar[str] = (
      "The teacher model(s) are not private. Each step releases B rows of normalised "
      "gradients, each with its own noise. Analysis 'whole_batch' assumes nothing about the "
      "teachers (one teacher: B T releases of 2C, or T of 2C under batch normalisation; n "
      "teachers: B T of 2nC, or T of 2 sqrt(n) C). Analysis 'disjoint_teachers' (teachers on "
      "disjoint shards, one change moving k of them): B T releases of 2kC. Analysis 'direct' "
      "(training on the private data, B of N drawn without replacement per step, replace-one) is "
      + dpdfd.DIRECT_LABEL_DP + ". Analysis 'theorem3' is " + dpdfd.THEOREM3_CONDITIONS + ".")
  noise_field: ClassVar[str] = "noise_scale"
  count_field: ClassVar[str] = "steps"

  def __post_init__(self):
    self._check_neighbours()
    if self.neighbours != "replace_one" and self.analysis in ("direct", "theorem3"):
      raise ConfigError(f"DPDFD analysis {self.analysis!r} is stated for replace-one neighbours "
                        f"only; got neighbours={self.neighbours!r}.")
    self.event()  # validates every field

  @property
  def noise_std(self) -> float:
    return dpdfd.absolute_noise_std(self.noise_scale, self.noise_convention, self.norm_bound)

  def teachers_moved(self) -> int | None:
    return self.teachers_changed if self.analysis == "disjoint_teachers" else None

  def event(self) -> dp_accounting.DpEvent:
    return dpdfd.event(self.noise_scale, self.noise_convention, self.norm_bound, self.batch_size,
                       self.steps, self.num_teachers, self.analysis, self.normalization,
                       self.teachers_disjoint, self.dataset_size, self.teachers_changed)

  @classmethod
  def build(cls, p: dict) -> "Release":
    if p["votes"] is not None:
      raise ConfigError(f"{cls.mechanism} has no vote histograms: drop --votes.")
    _need(cls.mechanism, noise_scale=p["noise_scale"], queries=p["queries"],
          norm_bound=p["norm_bound"], batch_size=p["batch_size"],
          noise_convention=p["noise_convention"])
    if p["analysis"] == "direct":
      _need(cls.mechanism, dataset_size=p["dataset_size"])
    return cls(p["noise_scale"], p["noise_convention"], p["norm_bound"], p["batch_size"],
               p["queries"], p["num_teachers"], p["analysis"], p["normalization"],
               p["teachers_disjoint"], p["dataset_size"], **cls._teacher(p))

  def summary(self) -> str:
    direct = (f", N = {self.dataset_size} (B of N without replacement per step; label DP "
              "only)" if self.analysis == "direct" else "")
    return (f"dpdfd, {self.steps} steps, sigma = {self.noise_scale:g} as "
            f"{self.noise_convention} (noise std {self.noise_std:.6g}), C = "
            f"{self.norm_bound:g}, B = {self.batch_size}, n = {self.num_teachers}, analysis "
            f"{self.analysis}, {self.normalization} normalisation{direct}")

  def describe(self) -> dict:
    count, sensitivity = dpdfd.releases(self.norm_bound, self.batch_size, self.steps,
                                        self.num_teachers, self.analysis, self.normalization,
                                        self.teachers_disjoint, self.teachers_changed)
    out = {**super().describe(), "noise_std": self.noise_std, "gaussian_releases": count,
           "l2_sensitivity": sensitivity}
    if self.analysis == "direct":
      out["sampling"] = (f"{self.batch_size} of {self.dataset_size} without replacement per "
                         "step (replace-one)")
      out["privacy_unit"] = "label"
    return out


# Batch selections a DP-SGD record can be accounted for; anything else is refused.
DPSGD_SAMPLINGS = ("poisson",)


@register
@dataclasses.dataclass(frozen=True, eq=False)
class DpsgdSteps(Release):
  """``steps`` DP-SGD steps (Abadi et al. 2016). Each step Poisson-samples the private set (every
  example independently with probability q = ``batch_size`` / ``dataset_size``; ``batch_size`` is
  the expected batch size), and releases the sum of the sampled examples' gradients, each clipped
  to L2 norm ``norm_bound`` C, plus N(0, (``noise_multiplier`` C)^2 I).

  Neighbours (``neighbours``): 'add_or_remove_one' (default: one example added or removed; the
  sum's L2 sensitivity is C) or 'replace_one' (one example substituted, as the teacher-vote
  records are stated, so that DGD's private baseline composes with its label queries). Either
  way each step is ``PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))`` with the
  multiplier per example contribution (std / C); dp-accounting's accountant of that relation
  does the rest (under replace-one a sampled step can move the sum by 2C: PLD only, since
  dp-accounting's RDP has no replace-one Poisson analysis). The sampling the trainer performs
  is ``batch_selection()``: the same q, the same number of steps."""

  noise_multiplier: float
  batch_size: int
  dataset_size: int
  steps: int
  norm_bound: float = 1.0
  sampling: str = "poisson"
  neighbours: str = "add_or_remove_one"

  mechanism: ClassVar[str] = "dpsgd"
  covers: ClassVar[str] = (
      "Covers the DP-SGD training steps: every step's noisy sum of clipped per-example "
      "gradients (clip norm C, noise std sigma C) on a Poisson sample, for the neighbours each "
      "record states (add/remove-one for the dpsgd method, replace-one for DGD's private "
      "baseline); the model and everything computed from it are post-processing. "
      "Not covered: hyper-parameter tuning (the learning rate, clip norm, batch size, epochs "
      "and model were chosen by looking at test accuracy on runs over the same private data), "
      "and the test-set evaluation. The ScatterNet features are a fixed, data-independent "
      "transform and cost no epsilon; any data-dependent normalisation would need its own "
      "budget (none is used: group normalisation is per example).")
  noise_field: ClassVar[str] = "noise_multiplier"
  count_field: ClassVar[str] = "steps"

  def __post_init__(self):
    object.__setattr__(self, "noise_multiplier",
                       checks.positive("noise_multiplier (DP-SGD sigma)", self.noise_multiplier))
    object.__setattr__(self, "norm_bound", checks.positive("norm_bound (clip norm C)",
                                                           self.norm_bound))
    object.__setattr__(self, "steps", checks.count("steps", self.steps))
    object.__setattr__(self, "dataset_size", checks.count("dataset_size", self.dataset_size))
    object.__setattr__(self, "batch_size", checks.count("batch_size", self.batch_size))
    if self.batch_size > self.dataset_size:
      raise ConfigError(f"batch_size={self.batch_size} exceeds dataset_size={self.dataset_size}: "
                        "the expected Poisson batch is q N with q <= 1; lower the batch size.")
    if self.sampling not in DPSGD_SAMPLINGS:
      raise ConfigError(f"sampling={self.sampling!r}: the DP-SGD accountant here supports "
                        f"{DPSGD_SAMPLINGS} only (Poisson sampling, PoissonSampledDpEvent); use "
                        "--sampling=poisson.")
    checks.choice("neighbours", self.neighbours, tuple(events.NEIGHBOURS))

  @classmethod
  def build(cls, p: dict) -> "Release":
    if p["votes"] is not None:
      raise ConfigError(f"{cls.mechanism} has no vote histograms: drop --votes.")
    _need(cls.mechanism, noise_scale=p["noise_scale"], steps=p["queries"],
          batch_size=p["batch_size"], dataset_size=p["dataset_size"])
    return cls(p["noise_scale"], p["batch_size"], p["dataset_size"], p["queries"],
               norm_bound=1.0 if p["norm_bound"] is None else p["norm_bound"],
               sampling=p["sampling"], neighbours=p["neighbours"] or "add_or_remove_one")

  def summary(self) -> str:
    return (f"dpsgd, {self.steps} steps, noise multiplier {self.noise_multiplier:g}, Poisson "
            f"sampling q = {self.batch_size} / {self.dataset_size} = "
            f"{self.sampling_probability:.6g}, clip norm C = {self.norm_bound:g} (noise std "
            f"{self.noise_std:.6g}), {self.neighbours} neighbours")

  @classmethod
  def from_json(cls, r: dict) -> "DpsgdSteps":
    """The record of steps that ran, from its ``describe()`` (a stage result's ledger; one
    written before the field was named ``neighbours`` holds it as ``relation``)."""
    return cls(r["noise_multiplier"], r["batch_size"], r["dataset_size"], r["steps"],
               r["norm_bound"], r["sampling"], r.get("neighbours", r.get("relation")))

  @property
  def sampling_probability(self) -> float:
    """q = expected batch size / dataset size."""
    return self.batch_size / self.dataset_size

  @property
  def noise_std(self) -> float:
    """The absolute std of the noise on the sum of clipped gradients, noise_multiplier * C."""
    return self.noise_multiplier * self.norm_bound

  @property
  def l2_sensitivity(self) -> float:
    """How far one neighbour moves a step's clipped sum: C (add/remove), 2C (replace-one)."""
    return self.norm_bound * (2 if self.neighbours == "replace_one" else 1)

  def step_event(self) -> dp_accounting.DpEvent:
    # One step: the Poisson-subsampled Gaussian mechanism (Abadi et al. 2016, Alg. 1).
    return dp_accounting.PoissonSampledDpEvent(
        self.sampling_probability, dp_accounting.GaussianDpEvent(self.noise_multiplier))

  def event(self) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(self.step_event(), self.steps)

  def rdp(self, orders) -> np.ndarray:
    if self.neighbours == "replace_one":
      raise ConfigError("dp-accounting has no replace-one RDP analysis of Poisson sampling: "
                        "account replace-one DP-SGD with the pld accountant.")
    return super().rdp(orders)

  def batch_selection(self):
    """The jax-privacy batch selection strategy the trainer draws its batches with: exactly
    the sampling ``event`` assumes (standard Poisson: no cycles, no truncation)."""
    from jax_privacy import batch_selection  # pylint: disable=g-import-not-at-top
    return batch_selection.CyclicPoissonSampling(sampling_prob=self.sampling_probability,
                                                 iterations=self.steps)

  def describe(self) -> dict:
    return {**super().describe(), "sampling_probability": self.sampling_probability,
            "noise_std": self.noise_std, "l2_sensitivity": self.l2_sensitivity,
            "privacy_unit": "example"}


@dataclasses.dataclass(frozen=True, eq=False)
class SmoothSensitivityCost(Release):
  """A smooth-sensitivity (GNSS) release of a run's data-dependent epsilon (PATE 2018 Sec. 4,
  ``smooth_sensitivity``): (``order``, c)-RDP at its one order, c = lam e^(2 beta) /
  sigma_ss^2 + (beta lam - ln(1 - 2 lam beta) / 2) / (lam - 1) (App. C, Thm. 23), for
  order, beta and sigma_ss fixed before any vote was read (``source`` 'config' or 'plan'; a
  vote-chosen 'votes' plan is refused: its release is a diagnostic). It states no other order:
  its curve is +inf elsewhere, so it composes with the other records at ``order`` alone (the
  ``smooth_sensitivity`` accountant). Data-independent: c is a function of the parameters."""

  order: float
  beta: float
  sigma_ss: float
  source: str = "plan"
  neighbours: str = "replace_one"  # one changed example moves one vote (k = 1)

  mechanism: ClassVar[str] = "smooth_sensitivity"
  covers: ClassVar[str] = (
      "Covers the smooth-sensitivity release of the queries' data-dependent epsilon (PATE "
      "2018 Sec. 4), its order, beta and sigma_ss fixed before any vote: (lam, c)-RDP by Thm. "
      "23, composed here with the queries at lam. Not covered: the same quantities chosen "
      "from the votes, the exact data-dependent epsilon and its smooth sensitivity (server "
      "diagnostics, not releases).")
  noise_field: ClassVar[str] = "sigma_ss"
  count_field: ClassVar[str] = "releases"
  releases: ClassVar[int] = 1

  def __post_init__(self):
    if self.source not in ("config", "plan"):
      raise ConfigError(f"a smooth-sensitivity release with parameters from {self.source!r} is "
                        "a diagnostic, not a DP release: fix order, beta and sigma_ss before "
                        "the votes (config or plan).")
    checks.choice("neighbours", self.neighbours, tuple(events.NEIGHBOURS))
    self.cost()  # refused outside 1 < order < 1/(2 beta)

  def cost(self) -> float:
    from dgd_jax.privacy import smooth_sensitivity  # pylint: disable=g-import-not-at-top
    return smooth_sensitivity.gnss_rdp(self.beta, self.sigma_ss, self.order)  # Thm. 23

  def teachers_moved(self) -> int | None:
    return 1

  def event(self) -> dp_accounting.DpEvent:
    raise ConfigError("a smooth-sensitivity release has no dp-accounting event: it is RDP at "
                      "one order (the smooth_sensitivity accountant composes it).")

  def rdp(self, orders) -> np.ndarray:
    """c at ``order``, +inf at every other order (none is stated)."""
    lam = checks.orders("orders", orders, minimum=1.0)
    return np.where(np.isclose(lam, self.order, rtol=0.0, atol=1e-12), self.cost(), np.inf)

  def describe(self) -> dict:
    return {**super().describe(), "releases": 1, "gnss_rdp": self.cost()}


@dataclasses.dataclass(frozen=True, eq=False)
class PureDpRelease(Release):
  """A pure-DP term composed by adding its epsilon (basic composition), e.g. DGD's VAE latent
  noise eps1 (``local.vae_latent_epsilon``)."""

  epsilon: float
  label: str
  note: str = ""

  mechanism: ClassVar[str] = "pure"
  covers: ClassVar[str] = (
      "DGD's eps1 protects synthetic examples fed to the VAE, not private examples; it is "
      "added to the total as the paper does (never makes the total smaller).")

  def __post_init__(self):
    object.__setattr__(self, "epsilon", checks.non_negative("epsilon", self.epsilon))

  def event(self) -> dp_accounting.DpEvent:
    raise ConfigError("a PureDpRelease has no dp-accounting event: the ledger adds its epsilon.")


def build_release(mechanism: str, *, queries: int | None, noise_scale: float | None = None,
                  threshold: float | None = None, sigma1: float | None = None,
                  votes=None, answered=None,
                  norm_bound: float | None = None, batch_size: int | None = None,
                  num_teachers: int = 1, noise_convention: str | None = None,
                  analysis: str = dpdfd.DEFAULT_ANALYSIS,
                  normalization: str = dpdfd.DEFAULT_NORMALIZATION,
                  teachers_disjoint: bool = False, dataset_size: int | None = None,
                  sampling: str = "poisson", teachers_changed: int = 1,
                  neighbours: str | None = None) -> Release:
  """One release record from planner-style parameters (``noise_scale`` is Laplace b for lnmax,
  the Gaussian sigma for gnmax and the histogram records, the answer's sigma2 for
  confident_gnmax (``sigma1`` its threshold noise), DPDFD's sigma for dpdfd and the noise multiplier for dpsgd;
  ``queries`` is DPDFD's and DP-SGD's steps T; ``teachers_changed`` and ``neighbours`` as in
  ``TeacherRelease``; ``neighbours`` None: the record's default, replace-one for the teacher
  records and add/remove-one for DP-SGD)."""
  checks.choice("mechanism", mechanism, tuple(MECHANISMS))
  if votes is not None:
    votes = checks.votes(votes, queries)
    queries = votes.shape[0]
  return MECHANISMS[mechanism].build(dict(
      queries=queries, noise_scale=noise_scale, threshold=threshold, sigma1=sigma1,
      votes=votes, answered=answered, norm_bound=norm_bound, batch_size=batch_size,
      num_teachers=num_teachers, noise_convention=noise_convention, analysis=analysis,
      normalization=normalization, teachers_disjoint=teachers_disjoint,
      dataset_size=dataset_size, sampling=sampling, teachers_changed=teachers_changed,
      neighbours=neighbours))
