"""The privacy ledger: every release of private information is recorded here and turned into
(epsilon, delta) by every accountant that applies. Host-side NumPy/SciPy/dp-accounting only.

Neighbouring relation: every record states one (``Release.neighbours``) and, where its sensitivity
rests on the teacher partition, how many teachers one change moves (``teachers_changed``;
``events`` explains both). A ledger holds records of one relation; a run that claims several
(the 'stable' partition: add/remove-one and replace-one) accounts one ledger per relation, and
its headline is the largest (``relations_json``).

Data-independent accountants (a DP guarantee for the plan; every planned release charged):

* ``advanced_composition``: LNMax only. T eps0^2 + eps0 sqrt(2 T ln(1/delta)) as written in PATE
  2017 App. B and DGD Sec. III-E (``pate2017.advanced_composition_epsilon``).
* ``moments_accountant``: LNMax only. PATE 2017's moments accountant over orders l = 1..8:
  eps = min_l (sum alpha(l) + ln(1/delta)) / l. Data-independent alpha from Thm. 3; DATA-DEPENDENT
  (Thm. 1 with Lemma 4) for records that carry vote histograms (the name PATE 2017 gives it).
* ``rdp``: dp-accounting ``RdpAccountant`` on the records' events, improved conversion.
* ``rdp_classic``: the same RDP curve, classic conversion rdp + ln(1/delta)/(lam - 1).
* ``pld``: dp-accounting ``PLDAccountant`` (pessimistic discretisation); when every event is
  Gaussian their composition is one Gaussian and its epsilon is computed exactly
  (``dp_accounting.get_epsilon_gaussian``).
* ``renyi_filter``: where a record's queries ran under a Renyi filter (``FilteredQueries``):
  the filter's (lam*, B)-RDP at its order (answered-only charging, Feldman & Zrnic 2021) with
  every other record's RDP curve, improved conversion; the plan's curve at the other orders.
* ``smooth_sensitivity``: where the ledger holds a smooth-sensitivity release of the
  data-dependent epsilon (``SmoothSensitivityCost``, PATE 2018 Sec. 4): its (lam, c)-RDP at
  its order (Thm. 23, parameters fixed before the votes) with every other record's RDP curve,
  improved conversion at that order. The other data-independent accountants do not apply to
  such a ledger (they cannot hold a one-order record).
* ``dpdfd_theorem3``: a single DPDFD record under analysis 'theorem3': the paper's claim
  (Theorem 3), valid only under ``dpdfd.THEOREM3_CONDITIONS``.

Data-dependent accountants (``data_dependent=True``; functions of the private data, not DP
guarantees, never used by ``check_budget``):

* ``moments_accountant`` with votes (above).
* ``rdp_data_dependent`` / ``rdp_classic_data_dependent``: when votes are recorded, the per-query
  data-dependent RDP (PATE 2017 Thm. 1 for LNMax, PATE 2018 Thm. 6 and the exact threshold bound
  for (Confident-)GNMax; every query charged), improved / classic conversion.
* ``rdp_answered_only``: when a Confident-GNMax record carries the realised ``answered`` count or
  mask: the GNMax step charged on the answered queries only (``REALISED_WARNING``).

Pure-DP terms (``PureDpRelease``, e.g. DGD's eps1) are added to every accountant's epsilon (basic
composition), as DGD does.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import dp_accounting
from absl import logging
import numpy as np
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp

from dgd_jax.privacy import checks, conversion, dpdfd, events, pate2017
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.privacy.releases import (DpdfdSteps, DpsgdSteps, FilteredQueries, LNMaxQueries,
                                      PureDpRelease, Release, SmoothSensitivityCost)

ACCOUNTANTS = ("advanced_composition", "moments_accountant", "rdp", "rdp_classic", "pld",
               "renyi_filter", "smooth_sensitivity", "dpdfd_theorem3", "rdp_data_dependent",
               "rdp_classic_data_dependent", "rdp_answered_only")
# The planners' default (CLI and Python): exact for the Gaussian releases, and an upper bound on
# every release dp-accounting's PLD models.
DEFAULT_ACCOUNTANT = "pld"
# Accountants that exist only with recorded votes (no data-independent value).
DATA_DEPENDENT_ONLY = ("rdp_data_dependent", "rdp_classic_data_dependent", "rdp_answered_only")
# The accountants that compose a record stated at one Renyi order (``SmoothSensitivityCost``):
# those that sum RDP curves on a grid holding that order. The others (events, moments, PLD) do
# not apply to a ledger that holds one.
ONE_ORDER_ACCOUNTANTS = ("smooth_sensitivity",) + DATA_DEPENDENT_ONLY

DATA_DEPENDENT_WARNING = (
    "DATA-DEPENDENT: this epsilon is a function of the private vote histograms (PATE 2017 Sec. "
    "3.3). Publishing it is not differentially private without a smooth-sensitivity treatment "
    "(PATE 2018 Sec. 4), and it bounds the privacy loss of this dataset against its neighbours "
    "only.")

REALISED_WARNING = (
    "REALISED: the realised cost of this run, charging the GNMax step only on the queries that "
    "were answered; which queries were answered depends on the private votes, so this is not a "
    "DP guarantee unless a privacy filter with a budget fixed in advance per Renyi order is "
    "enforced (Feldman & Zrnic 2021): the renyi_filter accountant, where the run used one. The "
    "other data-independent epsilons charge every query.")

# What the vote and per-row sensitivities assume of the queried inputs.
FIXED_INPUTS_NOTE = (
    "The sensitivities of the teachers' answers (one changed example moves k teachers' votes or "
    "rows) hold for fixed queried inputs. Where those inputs are synthetic (DGD; DPDFD with "
    "dpdfd.inputs='synthetic'), the epsilon is conditional on the synthetic inputs, which are a "
    "noise-free function of the private data; with private_baseline they are post-processing "
    "of a DP release and the condition is met.")

RELATION_NAMES = {"replace_one": "replace-one (one private example substituted, the size fixed)",
                  "add_or_remove_one": "add/remove-one (one private example added or removed)"}


def neighbours_note(relation: str, teachers_changed: int | None) -> str:
  """The relation a ledger is stated for and, for teacher releases, what one change moves."""
  note = f"Neighbours: {RELATION_NAMES[relation]}."
  if teachers_changed:
    note += (f" One such change moves the shards of at most {teachers_changed} teacher(s), so "
             f"the answers' sensitivities are {teachers_changed} times those of one changed "
             "vote (data.partitions.TEACHERS_CHANGED).")
  return note


NOT_PRIVATE = "NOT A PRIVATE RELEASE"


@dataclasses.dataclass(frozen=True)
class EpsilonReport:
  """One accountant's (epsilon, delta) for the whole ledger. ``private_release``: False where
  the releases it accounts are known to have been drawn with a public noise seed (anyone with
  it removes the noise), so that the epsilon describes the mechanism, not what was published;
  ``note`` then starts with NOT A PRIVATE RELEASE (``not_private``)."""

  epsilon: float
  delta: float
  accountant: str
  order: float | None
  data_dependent: bool
  note: str
  private_release: bool = True

  def not_private(self, why: str) -> "EpsilonReport":
    """This report flagged as no private release: ``why`` says where the public noise came
    from (e.g. 'noise_seed=0')."""
    if not self.private_release:
      return self
    return dataclasses.replace(self, private_release=False,
                               note=f"{NOT_PRIVATE}: the noise follows from {why}. {self.note}")

  def to_json(self) -> dict:
    """Its fields; ``private_release`` only where False (a report that is not flagged claims
    nothing about where its releases' noise came from: report.json's ``noise`` says)."""
    out = dataclasses.asdict(self)
    if self.private_release:
      del out["private_release"]
    return out


def _describe_events(evs) -> str:
  parts = []
  for ev in evs:
    for e, count in events.flatten(ev):
      if isinstance(e, dp_accounting.SampledWithoutReplacementDpEvent):
        parts.append(f"{count} x SampledWithoutReplacementDpEvent({e.sample_size} of "
                     f"{e.source_dataset_size}, {type(e.event).__name__}"
                     f"({e.event.noise_multiplier:.6g}))")
      elif isinstance(e, dp_accounting.PoissonSampledDpEvent):
        parts.append(f"{count} x PoissonSampledDpEvent(q = {e.sampling_probability:.6g}, "
                     f"{type(e.event).__name__}({e.event.noise_multiplier:.6g}))")
      else:
        parts.append(f"{count} x {type(e).__name__}({e.noise_multiplier:.6g})")
  return " + ".join(parts)


def _grid_note(evs) -> str:
  if not events.subsampled(evs):
    return ""
  return (f", orders <= {events.SUBSAMPLED_ORDERS_MAX} and "
          f"{', '.join(f'{o:g}' for o in events.SUBSAMPLED_ORDERS_EXTRA)} of the grid "
          "(subsampled RDP is costly; fewer orders only give a larger epsilon)")


def _replace_one_sampled(mechanisms) -> list[Release]:
  """DP-SGD records under replace-one (DGD's private baseline): dp-accounting analyses their
  Poisson-sampled steps under REPLACE_ONE with its PLD accountant only."""
  return [r for r in mechanisms if isinstance(r, DpsgdSteps) and r.neighbours == "replace_one"]


def _relation(mechanisms) -> dp_accounting.NeighboringRelation:
  """The one neighbouring relation every record is stated under (DP-SGD: add/remove-one; the
  teacher-vote and DPDFD records: replace-one). Epsilons under different relations do not
  compose as they stand, so a mixed ledger is refused."""
  relations = {r.neighboring_relation for r in mechanisms}
  if len(relations) > 1:
    raise ConfigError(
        "the ledger mixes records stated under different neighbouring relations ("
        + ", ".join(f"{r.mechanism}: {r.neighboring_relation.name}" for r in mechanisms)
        + "); composing them needs one relation for all (e.g. DP-SGD accounted under "
        "replace-one): record them in separate ledgers.")
  return relations.pop()


class PrivacyLedger:
  """Records releases; reports (epsilon, delta) under every applicable accountant."""

  def __init__(self, releases: Iterable[Release] = (), *,
               orders=conversion.DEFAULT_RDP_ORDERS,
               moment_orders=conversion.DEFAULT_MOMENT_ORDERS):
    self.orders = checks.orders("orders", orders, minimum=1.0)
    self.moment_orders = checks.orders("moment_orders", moment_orders, minimum=0.0)
    self._releases: list[Release] = []
    for release in releases:
      self.record(release)

  def record(self, release: Release) -> None:
    """Adds one release record (a frozen ``releases.*`` dataclass)."""
    if not isinstance(release, Release):
      raise ConfigError(f"{release!r} is not a release record: record an LNMaxQueries, "
                        "GNMaxQueries, ConfidentGNMaxQueries, DpdfdSteps or PureDpRelease.")
    self._releases.append(release)

  @property
  def releases(self) -> tuple[Release, ...]:
    return tuple(self._releases)

  @property
  def data_dependent(self) -> bool:
    """Whether any record carries private-data-dependent values (votes, realised answers)."""
    return any(r.data_dependent for r in self._releases)

  @property
  def neighbours(self) -> str:
    """The one neighbouring relation every mechanism record is stated under."""
    mechanisms = [r for r in self._releases if not isinstance(r, PureDpRelease)]
    return _relation(mechanisms).name.lower() if mechanisms else "replace_one"

  @property
  def teachers_changed(self) -> int | None:
    """The most teachers one neighbouring change moves among the teacher records (None: no
    teacher record)."""
    return max((r.teachers_moved() for r in self._releases if r.teachers_moved()), default=None)

  def not_covered(self) -> list[str]:
    """What the epsilons do not cover, for the mechanisms in the ledger."""
    notes = list(dict.fromkeys(r.covers for r in self._releases))
    notes.append(neighbours_note(self.neighbours, self.teachers_changed))
    if any(r.has_votes for r in self._releases):
      notes.append(DATA_DEPENDENT_WARNING)
    if any(r.realised for r in self._releases):
      notes.append(REALISED_WARNING)
    return notes

  # ---- accountants -------------------------------------------------------------------------

  def epsilons(self, delta: float, data_dependent: bool = True,
               accountants: Iterable[str] | None = None) -> dict[str, EpsilonReport]:
    """Every applicable accountant's report at ``delta`` (or only those named in
    ``accountants``). With ``data_dependent=False`` recorded votes and realised answered counts
    are ignored: the plan before any query is answered, every planned release charged."""
    delta = checks.delta(delta)
    if not self._releases:
      raise ConfigError("the privacy ledger is empty: record the planned releases first.")
    wanted = ACCOUNTANTS if accountants is None else tuple(accountants)
    for name in wanted:
      checks.choice("accountant", name, ACCOUNTANTS)
    mechanisms = [r for r in self._releases if not isinstance(r, PureDpRelease)]
    pure = [r for r in self._releases if isinstance(r, PureDpRelease)]
    extra = sum(r.epsilon for r in pure)
    suffix = (f"; plus {extra:.6g} pure DP ({', '.join(r.label for r in pure)}) by basic "
              "composition" if pure else "")
    one_order = any(isinstance(r, SmoothSensitivityCost) for r in mechanisms)
    out: dict[str, EpsilonReport] = {}
    for name in ACCOUNTANTS:
      if name not in wanted or (one_order and name not in ONE_ORDER_ACCOUNTANTS):
        continue
      try:
        result = getattr(self, f"_{name}")(mechanisms, delta, data_dependent)
      except MemoryError:  # e.g. a PLD composed of 10^13 releases: its support outgrows memory
        if len(wanted) == 1:
          composed = _describe_events([r.event() for r in mechanisms])
          raise ConfigError(
              f"the {name} accountant cannot compose {composed} in memory: use another "
              "accountant (rdp), or fewer releases.") from None
        logging.warning("accountant %s skipped: its composition does not fit in memory", name)
        continue
      if result is None:
        continue
      eps, order, note, dependent = result
      order = None if order is None else float(order)
      grid = self.moment_orders if name == "moments_accountant" else self.orders
      if order is not None and order >= grid.max():
        note += (" (optimum at the edge of the order grid, the largest order tried: more orders "
                 "could lower it; the value is a valid bound)")
      elif order is not None and order <= grid.min():
        note += (" (optimum at the edge of the order grid, the smallest order tried: orders "
                 "closer to 1 could lower it; the value is a valid bound)")
      if dependent and any(r.has_votes for r in mechanisms):
        note = f"{note}. {DATA_DEPENDENT_WARNING}"
      out[name] = EpsilonReport(float(eps) + extra, delta, name, order, dependent, note + suffix)
    return out

  # Each accountant: (mechanism records, delta, data_dependent) -> (eps, order, note,
  # data-dependent), or None where it does not apply.

  def _advanced_composition(self, mechanisms, delta, data_dependent):
    del data_dependent
    if not mechanisms or not all(isinstance(r, LNMaxQueries) for r in mechanisms):
      return None
    eps = pate2017.advanced_composition_epsilon([r.eps0 for r in mechanisms],
                                                [r.queries for r in mechanisms], delta)
    return eps, None, ("PATE 2017 App. B / DGD Sec. III-E: T eps0^2 + eps0 sqrt(2 T ln(1/delta)), "
                       f"eps0 = 2/b = {', '.join(f'{r.eps0:.6g}' for r in mechanisms)} per query"
                       ), False

  def _moments_accountant(self, mechanisms, delta, data_dependent):
    if not mechanisms or not all(isinstance(r, LNMaxQueries) for r in mechanisms):
      return None
    use_votes = data_dependent and any(r.has_votes for r in mechanisms)
    alpha = sum(r.log_moments(self.moment_orders, use_votes) for r in mechanisms)
    eps, order = conversion.moments_epsilon(self.moment_orders, alpha, delta)
    kind = ("data-dependent (Thm. 1 with Lemma 4's q, used where q <= 1/(e^(2/b)+1))" if use_votes
            else "data-independent (Thm. 3: alpha(l) <= 2 gamma^2 l(l+1))")
    orders = ", ".join(f"{l:g}" for l in self.moment_orders)
    return eps, order, (f"PATE 2017 moments accountant, {kind}, orders l = {orders}; "
                        "order = l"), use_votes

  def _rdp(self, mechanisms, delta, data_dependent):
    del data_dependent
    if not mechanisms:
      return 0.0, None, "no noisy-aggregation releases", False
    relation = _relation(mechanisms)
    if _replace_one_sampled(mechanisms):
      return None  # dp-accounting's RDP has no replace-one analysis of Poisson sampling
    evs = [r.event() for r in mechanisms]
    orders = events.orders_for(evs, self.orders)
    accountant = dp_rdp.RdpAccountant(orders.tolist(), relation)
    accountant.compose(dp_accounting.ComposedDpEvent(evs))
    eps, order = accountant.get_epsilon_and_optimal_order(delta)
    return eps, order, (f"dp-accounting RdpAccountant ({relation.name}) on {_describe_events(evs)}, "
                        f"improved conversion{_grid_note(evs)}; order = lambda"), False

  def _rdp_classic(self, mechanisms, delta, data_dependent):
    del data_dependent
    if not mechanisms:
      return 0.0, None, "no noisy-aggregation releases", False
    _relation(mechanisms)  # one relation for the whole curve
    if _replace_one_sampled(mechanisms):
      return None  # events.rdp_curve's Poisson curve is the add/remove one
    orders = events.orders_for([r.event() for r in mechanisms], self.orders)
    curve = sum(r.rdp(orders) for r in mechanisms)
    eps, order = conversion.classic_epsilon(orders, curve, delta)
    return eps, order, ("the same RDP curve, classic conversion rdp + ln(1/delta)/(lambda-1); "
                        "order = lambda"), False

  def _pld(self, mechanisms, delta, data_dependent):
    del data_dependent
    if not mechanisms:
      return 0.0, None, "no noisy-aggregation releases", False
    _relation(mechanisms)  # one relation for the whole composition
    if _replace_one_sampled(mechanisms):
      return self._pld_replace_one(mechanisms, delta)
    evs = [r.event() for r in mechanisms]
    multiplier = events.gaussian_equivalent(evs)
    if multiplier is not None:
      # Root found to 1e-12 by brentq; rounded up by that tolerance.
      eps = dp_accounting.get_epsilon_gaussian(multiplier, delta, tol=1e-12) + 1e-12
      return eps, None, (f"composition of Gaussians = one Gaussian with noise multiplier "
                         f"{multiplier:.6g}; exact (dp_accounting.get_epsilon_gaussian, +1e-12)"
                         ), False
    interval = events.pld_interval(evs)
    accountant = dp_pld.PLDAccountant(events.PLD_RELATION, value_discretization_interval=interval)
    if not accountant.supports(dp_accounting.ComposedDpEvent(evs)):
      return None  # e.g. sampling without replacement: dp-accounting's PLD has no such event
    accountant.compose(dp_accounting.ComposedDpEvent(evs))
    eps = accountant.get_epsilon(delta)
    note = ("dp-accounting PLDAccountant (a shift by the sensitivity either way: its "
            f"ADD_OR_REMOVE_ONE parametrisation; pessimistic, discretisation {interval:g}) on "
            f"{_describe_events(evs)}")
    pure = events.laplace_pure_epsilon(evs)
    if pure is not None and not eps <= pure:
      # dp-accounting's Laplace PLD overflows (infinite mass) above a pure epsilon of about 700.
      eps, note = pure, (f"{note} gives {eps:g}; replaced by the basic composition of the pure "
                         f"(1/m)-DP Laplace events, sum count/m = {pure:.6g} (delta = 0)")
    return eps, None, note, False

  def _pld_replace_one(self, mechanisms, delta):
    """DP-SGD under replace-one composed with replace-one label queries: the DP-SGD steps'
    PLD from dp-accounting's REPLACE_ONE Poisson analysis, the other records' PLD in the
    shift-by-sensitivity parametrisation (``events.PLD_RELATION``), composed by dp-accounting
    (PLD convolution, not a sum of epsilons)."""
    sampled = _replace_one_sampled(mechanisms)
    rest = [r for r in mechanisms if r not in sampled]
    interval = events.pld_interval([r.event() for r in mechanisms])
    steps = dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE,
                                 value_discretization_interval=interval)
    steps.compose(dp_accounting.ComposedDpEvent([r.event() for r in sampled]))
    total = steps._pld  # pylint: disable=protected-access  # the composed PLD itself
    note = ("dp-accounting PLDAccountant (REPLACE_ONE, pessimistic, discretisation "
            f"{interval:g}) on {_describe_events([r.event() for r in sampled])}")
    if rest:
      others = dp_pld.PLDAccountant(events.PLD_RELATION, value_discretization_interval=interval)
      others.compose(dp_accounting.ComposedDpEvent([r.event() for r in rest]))
      total = total.compose(others._pld)  # pylint: disable=protected-access
      note += (f", composed (PLD convolution) with {_describe_events([r.event() for r in rest])}"
               " in the shift-by-sensitivity parametrisation")
    return total.get_epsilon_for_delta(delta), None, note, False

  def _renyi_filter(self, mechanisms, delta, data_dependent):
    del data_dependent
    filtered = [r for r in mechanisms if isinstance(r, FilteredQueries)]
    if not filtered or _replace_one_sampled(mechanisms):
      return None
    _relation(mechanisms)
    eps, order = self._composed_at(
        mechanisms, [r.filter_order for r in filtered], delta,
        lambda r, orders: r.filter_rdp(orders) if r in filtered else r.rdp(orders))
    budgets = ", ".join(f"{r.budget:.6g} at order {r.filter_order:g} (epsilon "
                        f"{r.filter_epsilon:g})" for r in filtered)
    return eps, order, (f"Renyi filter (Feldman & Zrnic 2021): RDP budget {budgets} fixed "
                        "before the first query, threshold step charged on every query, GNMax on "
                        "the answered ones, other records' RDP added; improved conversion; "
                        "order = lambda"), False

  def _composed_at(self, mechanisms, own_orders, delta, curve) -> tuple[float, float]:
    """(epsilon, order) of the records' summed RDP, ``curve(record, orders)`` each, on the
    orders their events need plus ``own_orders`` (where a record states its guarantee at one
    order: a Renyi filter's budget, a smooth-sensitivity release), improved conversion."""
    evs = [r.event() for r in mechanisms if not isinstance(r, SmoothSensitivityCost)]
    orders = np.union1d(events.orders_for(evs, self.orders) if evs else self.orders,
                        own_orders)
    return conversion.improved_epsilon(orders, sum(curve(r, orders) for r in mechanisms), delta)

  def _grid(self, mechanisms) -> np.ndarray:
    """The ledger's orders and every one-order record's order."""
    return np.union1d(self.orders, [r.order for r in mechanisms
                                    if isinstance(r, SmoothSensitivityCost)])

  def _smooth_sensitivity(self, mechanisms, delta, data_dependent):
    del data_dependent
    releases = [r for r in mechanisms if isinstance(r, SmoothSensitivityCost)]
    if not releases or _replace_one_sampled(mechanisms):
      return None
    _relation(mechanisms)
    eps, order = self._composed_at(mechanisms, [r.order for r in releases], delta,
                                   lambda r, orders: r.rdp(orders))
    what = ", ".join(f"order {r.order:g}, beta {r.beta:.6g}, sigma_ss {r.sigma_ss:.6g} "
                     f"(from the {r.source}): {r.cost():.6g}" for r in releases)
    return eps, order, (f"smooth-sensitivity release of the data-dependent epsilon (PATE 2018 "
                        f"Thm. 23, parameters fixed before the votes; {what}) composed with the "
                        "other records' data-independent RDP at its order; improved conversion; "
                        "order = lambda"), False

  def _dpdfd_theorem3(self, mechanisms, delta, data_dependent):
    del data_dependent
    if (len(mechanisms) != 1 or not isinstance(mechanisms[0], DpdfdSteps)
        or mechanisms[0].analysis != "theorem3"):
      return None
    r = mechanisms[0]
    eps, order = dpdfd.theorem3_epsilon(r.noise_std, r.norm_bound, r.batch_size, r.steps, delta,
                                        r.num_teachers, self.orders)
    return eps, order, (
        f"DPDFD Theorem 3 with sigma read as the absolute std {r.noise_std:.6g} (noise "
        f"{r.noise_scale:g} as {r.noise_convention}); n B T = {r.num_teachers * r.batch_size * r.steps} "
        f"Gaussian releases of L2 sensitivity 2C, no subsampling: {dpdfd.THEOREM3_CONDITIONS}; "
        "order = lambda"), False

  _DATA_DEPENDENT_WHAT = ("per-query data-dependent RDP (PATE 2017 Thm. 1 for LNMax, PATE 2018 "
                          "Thm. 6 for GNMax, exact Bernoulli divergence for the threshold step; "
                          "every query charged)")

  def _data_dependent_rdp(self, mechanisms, delta, data_dependent, classic: bool):
    """The per-query data-dependent RDP curve, converted classically or by dp-accounting."""
    if not (data_dependent and any(r.has_votes for r in mechanisms)):
      return None
    if _replace_one_sampled(mechanisms):
      return None  # no replace-one RDP curve for Poisson-sampled DP-SGD steps
    orders = self._grid(mechanisms)
    curve = sum(r.rdp_data_dependent(orders) for r in mechanisms)
    convert = conversion.classic_epsilon if classic else conversion.improved_epsilon
    eps, order = convert(orders, curve, delta)
    kind = "classic" if classic else "improved"
    return eps, order, f"{self._DATA_DEPENDENT_WHAT}, {kind} conversion; order = lambda", True

  def _rdp_data_dependent(self, mechanisms, delta, data_dependent):
    return self._data_dependent_rdp(mechanisms, delta, data_dependent, classic=False)

  def _rdp_classic_data_dependent(self, mechanisms, delta, data_dependent):
    return self._data_dependent_rdp(mechanisms, delta, data_dependent, classic=True)

  def _rdp_answered_only(self, mechanisms, delta, data_dependent):
    if not (data_dependent and any(r.realised for r in mechanisms)):
      return None
    if _replace_one_sampled(mechanisms):
      return None  # no replace-one RDP curve for Poisson-sampled DP-SGD steps
    orders = self._grid(mechanisms)
    curve = sum(r.rdp_answered_only(orders) for r in mechanisms)
    eps, order = conversion.improved_epsilon(orders, curve, delta)
    per_query = ("data-dependent per-query RDP" if any(r.has_votes for r in mechanisms)
                 else "data-independent per-query RDP")
    return eps, order, (f"{REALISED_WARNING} Threshold step on every query, GNMax on the "
                        f"answered ones, {per_query}, improved conversion; order = lambda"), True

  def epsilon(self, delta: float, accountant: str, data_dependent: bool = True) -> EpsilonReport:
    """One accountant's report; ConfigError when it does not apply to these releases."""
    checks.choice("accountant", accountant, ACCOUNTANTS)
    reports = self.epsilons(delta, data_dependent, accountants=[accountant])
    if accountant not in reports:
      raise ConfigError(f"accountant {accountant!r} does not apply to these releases "
                        f"({', '.join(r.mechanism for r in self._releases)}): use one of "
                        f"{', '.join(self.epsilons(delta, data_dependent))}.")
    return reports[accountant]

  def check_budget(self, max_epsilon: float, delta: float,
                   accountant: str | None = None) -> EpsilonReport:
    """Refuses (ConfigError) when the planned releases exceed ``max_epsilon`` at ``delta``.

    The plan is data-independent (votes and realised answered counts are ignored: every planned
    release is charged). Without ``accountant`` the smallest data-independent epsilon is used:
    each accountant is a valid upper bound, so their minimum is one too. Returns the report that
    was checked."""
    max_epsilon = checks.positive("max_epsilon", max_epsilon)
    if accountant is None:
      report = min(self.epsilons(delta, data_dependent=False).values(), key=lambda r: r.epsilon)
    else:
      report = self.epsilon(delta, accountant, data_dependent=False)
    if not report.epsilon <= max_epsilon:
      plan = ", ".join(f"{r.count} {r.mechanism} releases" for r in self._releases
                       if not isinstance(r, PureDpRelease))
      raise ConfigError(
          f"the planned releases ({plan}) give epsilon = {report.epsilon:.6g} "
          f"({report.accountant}, delta = {delta:g}, {self.neighbours} neighbours"
          + (f", {self.teachers_changed} teacher(s) moved per change" if self.teachers_changed
             else "") + f"), above the maximum epsilon {max_epsilon:g}. "
          "Fix: fewer queries/steps or more noise; `python -m dgd_jax.privacy ... "
          f"--target_epsilon={max_epsilon:g}` gives the largest number of queries that fits.")
    return report

  def to_json(self, delta: float) -> dict:
    """A JSON-ready summary for report.json. ``data_dependent_accountants`` names every key of
    ``epsilons`` whose value depends on private data; ``data_independent_epsilons`` (present when
    the ledger holds data-dependent values) are the DP guarantees of the plan."""
    reports = self.epsilons(delta)
    out = {
        "delta": delta,
        "epsilons": {name: r.epsilon for name, r in reports.items()},
        "data_dependent_accountants": [name for name, r in reports.items() if r.data_dependent],
        "details": {name: r.to_json() for name, r in reports.items()},
        "releases": [r.describe() for r in self._releases],
        "neighbours": self.neighbours,
        "teachers_changed": self.teachers_changed,
        "data_dependent": self.data_dependent,
        "not_covered": self.not_covered(),
    }
    if self.data_dependent:
      out["data_independent_epsilons"] = {
          name: r.epsilon for name, r in self.epsilons(delta, data_dependent=False).items()}
    return out


def relations_json(ledgers: dict[str, PrivacyLedger], delta: float, accountant: str) -> dict:
  """A stage result's privacy JSON for a run that claims the relations ``ledgers`` holds (one
  ledger each): the ``to_json`` of the ledger whose epsilon under ``accountant`` is largest
  (the headline: the guarantee holds for every claimed relation), and under ``by_neighbours``
  each relation's epsilons and teachers moved."""
  if not ledgers:
    raise ConfigError("no neighbouring relation to account: the run claims none.")
  reports = {}
  for relation, ledger in ledgers.items():
    json = ledger.to_json(delta)
    if accountant not in json["epsilons"]:
      raise ConfigError(f"accountant {accountant!r} does not apply under {relation} to these "
                        f"releases: use one of {', '.join(json['epsilons'])}.")
    reports[relation] = json
  headline = max(reports, key=lambda r: reports[r]["epsilons"][accountant])
  return {**reports[headline], "by_neighbours": {
      relation: {"teachers_changed": json["teachers_changed"],
                 "epsilons": json.get("data_independent_epsilons", json["epsilons"]),
                 "epsilons_data_dependent": {k: json["epsilons"][k]
                                             for k in json["data_dependent_accountants"]}}
      for relation, json in reports.items()}}
