r"""Sweeps: one config, a grid of overrides, one sub-workdir per grid point, a CSV and plots.

  python -m dgd_jax.sweep --config=dgd_jax/configs/dgd.py:fashion_mnist,cpu \
      --workdir=workdirs/fig3 --set=queries.num_queries=27,750,1000,3000 \
      [--set=...] [--reuse=workdirs/dgd_cpu] [--accounting_only] [--columns=a.b,...]
      [--config.x=...]

``--set=name=v1,v2`` sweeps one config field; ``--set=a,b=v1:w1,v2:w2`` sets several fields
together; several ``--set`` flags make a grid (the first one is the plots' x axis).

Stage reuse: every stage folder of a grid point is a link into ``<workdir>/stages/``, named
by the stage and the fingerprint of its config slice, so grid points that agree on a
stage's slice share one copy of it (e.g. the teachers of a query sweep are trained once).
The points share the sweep's secret noise key (``<workdir>/noise.key``); each noisy draw is
bound to its stage's slice, so points that differ in a noisy stage draw independent noise.
``--reuse`` (repeatable) adds the finished stages of existing workdirs to that cache where
their slices match (read only: they are never rewritten). ``--accounting_only`` trains
nothing: it tabulates the planned (data-independent) epsilon of the method's releases
(``Method.releases``: label queries, DPDFD steps, ...) under every accountant, for the
claimed neighbouring relation with the largest epsilon, and a column ``epsilon[<relation>]``
per claimed relation; a method with no differential-privacy release gets epsilon = inf.

Writes ``<workdir>/sweep.csv``, ``accuracy.png`` / ``epsilon.png`` and ``sweep.md``.
"""
from __future__ import annotations

import itertools
import os
from typing import Any, Sequence

import ml_collections
from absl import logging

from dgd_jax import privacy
from dgd_jax.configs.common import with_overrides
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan.context import noise_source
from dgd_jax.runtime.workdir import NOISE_KEY_FILE, Workdir, stored_slice
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import fingerprint, write_csv, write_json, write_text

Axis = tuple[tuple[str, ...], list[tuple[Any, ...]]]  # field names, one value tuple per point


def _cast(text: str, current: Any) -> Any:
  if isinstance(current, bool):
    if text.lower() not in ("true", "false", "1", "0"):
      raise ConfigError(f"{text!r} is not a boolean; use true or false.")
    return text.lower() in ("true", "1")
  if isinstance(current, int):
    return int(float(text)) if float(text).is_integer() else float(text)
  return type(current)(text) if current is not None else text


def _at(tree: Any, path: str, missing: str) -> Any:
  """``tree['a']['b']`` for 'a.b' in a config or report; ConfigError ``missing`` if absent."""
  node = tree
  for part in path.split("."):
    if not isinstance(node, (dict, ml_collections.ConfigDict)) or part not in node:
      raise ConfigError(missing)
    node = node[part]
  return node


def parse_axis(spec: str, config: ml_collections.ConfigDict) -> Axis:
  """'queries.num_queries=27,750' or 'a,b=1:2,3:4' -> ((names), [value tuples])."""
  if "=" not in spec:
    raise ConfigError(f"--set={spec!r}: write name=v1,v2 or a,b=v1:w1,v2:w2.")
  names_text, values_text = spec.split("=", 1)
  names = tuple(n.strip() for n in names_text.split(","))
  points = []
  for item in values_text.split(","):
    parts = item.split(":") if len(names) > 1 else [item]
    if len(parts) != len(names):
      raise ConfigError(f"--set={spec!r}: {item!r} gives {len(parts)} values for "
                        f"{len(names)} fields {list(names)}.")
    current = [_at(config, n, f"--set names config.{n}, which this config does not have.")
               for n in names]
    points.append(tuple(_cast(p.strip(), c) for c, p in zip(current, parts)))
  return names, points


SEED = "seed"  # the swept name whose values over_seeds averages over


def grid(config: ml_collections.ConfigDict, axes: Sequence[Axis]
         ) -> list[tuple[dict[str, Any], ml_collections.ConfigDict]]:
  """Every grid point's overrides and config."""
  out = []
  for combo in itertools.product(*[points for _, points in axes]):
    overrides = {n: v for (names, _), values in zip(axes, combo) for n, v in zip(names, values)}
    out.append((overrides, plan_checks.run_config(with_overrides(config, overrides))))
  return out


def point_name(overrides: dict[str, Any]) -> str:
  return "_".join(f"{k.split('.')[-1]}={v}" for k, v in overrides.items()).replace("/", "-")


def _link_stages(config, workdir: str, point: str, reuse: Sequence[str]) -> None:
  """Links each stage folder of ``point`` to the shared folder of its config slice, and the
  point's noise key to the sweep's (``Context.noise_key`` binds each draw to its stage's
  slice, so points that differ in a noisy stage still draw independent noise)."""
  os.makedirs(os.path.join(workdir, point), exist_ok=True)
  key = os.path.join(workdir, NOISE_KEY_FILE)
  if os.path.exists(key) and not os.path.lexists(os.path.join(workdir, point, NOISE_KEY_FILE)):
    os.symlink(key, os.path.join(workdir, point, NOISE_KEY_FILE))
  for name in methods.plan_stages(config):
    part = methods.stage_slice(name, config)
    shared = os.path.join(workdir, "stages", f"{name}-{fingerprint(part)}")
    for found in ([] if os.path.exists(shared) else [os.path.join(r, name) for r in reuse]):
      stage_json = os.path.join(found, "stage.json")
      if (os.path.exists(os.path.join(found, "result.json")) and os.path.exists(stage_json)
          and stored_slice(stage_json) == part):
        shared = os.path.abspath(found)
        break
    os.makedirs(shared, exist_ok=True)
    link = os.path.join(workdir, point, name)
    if os.path.islink(link) and os.path.realpath(link) != os.path.realpath(shared):
      os.remove(link)  # a point whose config changed since the last sweep
    if not os.path.lexists(link):
      os.symlink(os.path.abspath(shared), link)


def planned_epsilons(config) -> dict[str, float | str]:
  """The data-independent epsilon of the method's planned releases under every accountant for
  the claimed relation with the largest one (named in ``neighbours``), and one column per
  claimed relation, ``epsilon[<relation>]``, under ``privacy.accountant``; ``{'epsilon':
  inf}`` for a method with no differential-privacy release."""
  ledgers = plan_checks.planned_ledgers(config, methods.method(config))
  if not ledgers:
    return {"epsilon": float("inf")}
  p = config.privacy
  accountant = "rdp" if p.accountant in privacy.DATA_DEPENDENT_ONLY else p.accountant
  by_relation = {r: {k: e.epsilon for k, e in
                     ledger.epsilons(p.delta, data_dependent=False).items()}
                 for r, ledger in ledgers.items()}
  headline = max(by_relation, key=lambda r: by_relation[r][accountant])
  return {**by_relation[headline], "neighbours": headline,
          **{f"epsilon[{r}]": e[accountant] for r, e in by_relation.items()}}


def run(config: ml_collections.ConfigDict, workdir: str, axes: Sequence[Axis],
        reuse: Sequence[str] = (), accounting_only: bool = False,
        columns: Sequence[str] = ()) -> list[dict]:
  """Runs (or, with ``accounting_only``, plans) every grid point; returns the CSV rows.
  ``columns`` are extra report.json fields (dotted paths) for the CSV and accuracy plot."""
  if not axes:
    raise ConfigError("Give at least one --set=name=v1,v2 to sweep.")
  points = grid(config, axes)
  for _, c in points:  # refuse bad grid points (budget guard included) before any training
    method = methods.method(c)  # a known method
    plan_checks.check_config(c)
    if not accounting_only:
      plan_checks.budget_guard(c, method)
  for r in reuse:  # a workdir of another format is refused before anything is linked
    Workdir(r, writer=False).check_format()
  workdir = os.path.abspath(workdir)
  rows = []
  with Workdir(workdir).lock():  # one sweep per workdir (each point's run locks its own)
    if not accounting_only and any(c.noise_seed == -1 for _, c in points):
      noise_source(Workdir(workdir), -1, [])  # the sweep's secret key, drawn once
    for overrides, c in points:
      row = dict(overrides)
      if accounting_only:
        row.update(planned_epsilons(c))
      else:
        name = point_name(overrides)
        _link_stages(c, workdir, name, [os.path.abspath(r) for r in reuse])
        report = pipeline.run(c, os.path.join(workdir, name))
        row.update({k: report.get(k) for k in ("test_accuracy", "epsilon", "accountant",
                                               "queries", "baseline_accuracy")})
        row.update({c: _column(report, c, name) for c in columns})
        row["workdir"] = name
      rows.append(row)
      _write(workdir, axes, rows, accounting_only, columns)
  return rows


def _column(report: dict, path: str, point: str):
  """report.json's field at ``path`` for the table, or None (a blank cell, with a warning)
  where this point's report has none: the fields differ between releases (a class-count
  release has no label agreement), and a sweep keeps the points it has run."""
  try:
    return _at(report, path, "")
  except ConfigError:
    logging.warning("sweep: point %s's report.json has no %r (--columns); its cell is blank.",
                    point, path)
    return None


def over_seeds(rows: list[dict], values: Sequence[str]) -> list[dict]:
  """With ``seed`` among the swept names: one row per setting of the other names, with the
  number of seeds and the mean, min and max of each of ``values`` over them (the spread that
  a single seed hides); [] otherwise."""
  if not rows or SEED not in rows[0]:
    return []
  values = [v for v in values if all(isinstance(r.get(v), (int, float)) for r in rows)]
  names = [k for k in _axis_names(rows) if k != SEED]
  groups = {}
  for r in rows:
    groups.setdefault(tuple(r[n] for n in names), []).append(r)
  out = []
  for key, group in groups.items():
    row = {**dict(zip(names, key)), "seeds": len(group)}
    for v in values:
      xs = [float(r[v]) for r in group]
      row.update({f"{v}_mean": sum(xs) / len(xs), f"{v}_min": min(xs), f"{v}_max": max(xs)})
    out.append(row)
  return out


def _axis_names(rows: list[dict]) -> list[str]:
  """The swept names: the keys before the first result column."""
  keys = list(rows[0])
  return keys[:keys.index("test_accuracy")] if "test_accuracy" in keys else keys


def _write(workdir: str, axes: Sequence[Axis], rows: list[dict], accounting_only: bool,
           columns: Sequence[str] = ()) -> None:
  table = list(dict.fromkeys(k for r in rows for k in r))  # every field of every row
  write_csv(os.path.join(workdir, "sweep.csv"), rows, table)
  x_names = axes[0][0]  # a joined axis (a,b=v1:w1,...) is one x: its values joined by ':'
  x_name = ",".join(x_names)
  x_of = lambda r: r[x_names[0]] if len(x_names) == 1 else ":".join(str(r[n]) for n in x_names)
  rest = [n for names, _ in axes[1:] for n in names]
  xs = list(dict.fromkeys(x_of(r) for r in rows))

  def series(value_key: str) -> dict[str, list]:
    out = {}
    for r in rows:
      label = ", ".join(f"{n.split('.')[-1]}={r[n]}" for n in rest) or value_key
      out.setdefault(label, [None] * len(xs))[xs.index(x_of(r))] = r.get(value_key)
    return out

  pictures = []
  if accounting_only and any(k in privacy.ACCOUNTANTS for k in table):
    accountants = [k for k in table if k in privacy.ACCOUNTANTS]
    by_accountant = {a: [r[a] for r in rows] for a in accountants} if not rest else {
        f"{a} ({label})": ys for a in accountants for label, ys in series(a).items()}
    plots.line_plot(os.path.join(workdir, "epsilon.png"), xs, by_accountant, xlabel=x_name,
                    ylabel="epsilon (delta = planned)", title="Planned epsilon per accountant")
    pictures.append("epsilon.png")
  elif not accounting_only:
    accuracy = series("test_accuracy")
    for c in columns:  # the numeric ones (a column may name a string, e.g. an aggregator)
      if all(r.get(c) is None or isinstance(r.get(c), (int, float)) for r in rows):
        accuracy.update({f"{c} ({k})" if rest else c: v for k, v in series(c).items()})
    plots.line_plot(os.path.join(workdir, "accuracy.png"), xs, accuracy,
                    xlabel=x_name, ylabel="test accuracy", title="Test accuracy")
    plots.line_plot(os.path.join(workdir, "epsilon.png"), xs, series("epsilon"),
                    xlabel=x_name, ylabel="epsilon (headline accountant)", title="Epsilon")
    pictures += ["accuracy.png", "epsilon.png"]
  fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else "" if v is None else str(v)
  lines = ["| " + " | ".join(table) + " |", "|" + "---|" * len(table)]
  lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in table) + " |" for r in rows]
  summary = [] if accounting_only else over_seeds(rows, ["test_accuracy", *columns])
  if summary:
    write_json(os.path.join(workdir, "seeds.json"), summary)
    head = list(summary[0])
    lines += ["", "Over the seeds (mean, min, max):", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in head) + " |" for r in summary]
  lines += [""] + [f"![{p}]({p})" for p in pictures]
  write_text(os.path.join(workdir, "sweep.md"), "\n".join(lines) + "\n")
