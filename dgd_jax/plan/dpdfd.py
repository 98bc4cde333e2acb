"""DPDFD's plan (Liu et al., IJCAI 2023): what the config makes of Algorithm 1 (the sensitive
model, the inputs, the analysis its steps are accounted under), the planned steps' ledger
record and the noise multiplier that fits the budget; the checks of the ``dpdfd`` block.
The accounting reads the private training set twice, outside any release: its size N, and,
under ``privacy.dpdfd_analysis='disjoint_teachers'``, the teachers' shards
(``data.config_shards``), checked pairwise disjoint (``release``)."""
from __future__ import annotations

import dataclasses

from dgd_jax import privacy
from dgd_jax.data import config_shards, load_private
from dgd_jax.plan.context import config_teachers_changed, planned_noise, private_size
from dgd_jax.privacy import dpdfd as dpdfd_privacy
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.synthesis import dpdfd


def step_settings(block, noise: float) -> dpdfd.StepSettings:
  """One step's settings from the ``dpdfd`` config block, at noise multiplier ``noise``."""
  return dpdfd.StepSettings(**{f.name: block[f.name] for f in
                               dataclasses.fields(dpdfd.StepSettings) if f.name != "noise"},
                            noise=noise)


TEACHERS = ("baseline", "ensemble", "private_data")  # private_data: Sec. 4.4 direct training


INPUTS = ("generator", "synthetic")  # Algorithm 1's generator, or the generator stage's set


def uses_synthetic(config) -> bool:
  """Whether the inputs are the generator stage's fixed synthetic set."""
  return config.dpdfd.inputs == "synthetic"


# The analyses each kind of sensitive model's steps may be accounted under (``privacy.dpdfd``).
ANALYSES = {"baseline": ("whole_batch", "theorem3"),
             "ensemble": ("disjoint_teachers", "whole_batch", "theorem3"),
             "private_data": ("direct",)}


def reads_size(config) -> bool:
  """Whether the analysis reads the private set's size ('direct': B of N per step;
  'disjoint_teachers': the shards of range(N)); no other reads the private data."""
  return config.privacy.dpdfd_analysis in ("direct", "disjoint_teachers")


def neighbours(config) -> tuple[str, ...]:
  """The neighbouring relations the steps are claimed for: 'whole_batch' assumes nothing about
  the teachers (both); 'disjoint_teachers' those the teacher partition covers; 'direct' and
  'theorem3' replace-one (``privacy.dpdfd``)."""
  analysis = config.privacy.dpdfd_analysis
  if analysis == "disjoint_teachers":
    return tuple(config_teachers_changed(config))
  if analysis == "whole_batch":
    return ("replace_one", "add_or_remove_one")
  return ("replace_one",)


def release(config, noise: float, dataset_size: int | None = None,
            neighbours: str = "replace_one") -> privacy.DpdfdSteps:
  """The ledger record of the planned DPDFD steps at noise multiplier ``noise``, stated under
  the relation ``neighbours``. The ensemble's 'disjoint_teachers' analysis is granted only when
  the teachers stage's shards (``data.config_shards``) are checked pairwise disjoint, at the
  number of teachers one change moves under the partition."""
  d, analysis = config.dpdfd, config.privacy.dpdfd_analysis
  if analysis not in ANALYSES.get(d.teacher, ()):
    raise ConfigError(
        f"config.privacy.dpdfd_analysis={analysis!r} does not describe what dpdfd.teacher="
        f"{d.teacher!r} releases; use one of {ANALYSES.get(d.teacher)} (privacy.dpdfd).")
  n = config.num_teachers if d.teacher == "ensemble" else 1
  disjoint, changed = False, 1
  if analysis == "disjoint_teachers" or analysis == "direct":
    dataset_size = dataset_size or private_size(config)  # direct: B of N; shards of range(N)
  if analysis == "disjoint_teachers":
    data = load_private(config)
    disjoint = dpdfd_privacy.shards_disjoint(config_shards(config, data.x_train, data.y_train))
    changed = config_teachers_changed(config)[neighbours]
  return privacy.DpdfdSteps(noise, "multiplier", d.norm_bound, d.batch_size, d.num_steps,
                            num_teachers=n, analysis=analysis,
                            normalization="batch" if d.operation == "batch" else "per_sample",
                            teachers_disjoint=disjoint,
                            dataset_size=dataset_size if analysis == "direct" else None,
                            teachers_changed=changed, neighbours=neighbours)


def noise_multiplier(config, dataset_size: int | None = None) -> float:
  """``dpdfd.noise``, or the least noise whose plan fits ``privacy.max_epsilon``."""
  d, p = config.dpdfd, config.privacy
  source = d.inputs
  if (d.operation not in dpdfd.OPERATIONS or d.loss not in dpdfd.LOSSES
      or d.teacher not in TEACHERS or d.reference not in dpdfd.REFERENCES
      or source not in INPUTS):
    raise ConfigError(f"config.dpdfd.operation={d.operation!r} / loss={d.loss!r} / "
                      f"teacher={d.teacher!r} / reference={d.reference!r} / inputs={source!r}; "
                      f"use one of {dpdfd.OPERATIONS} / {dpdfd.LOSSES} / {TEACHERS} / "
                      f"{dpdfd.REFERENCES} / {INPUTS}.")
  if source == "synthetic" and d.teacher == "private_data":
    raise ConfigError("config.dpdfd.inputs='synthetic' asks for synthetic inputs, but direct "
                      "training (dpdfd.teacher='private_data') trains on the private examples; "
                      "set dpdfd.inputs='generator' (unused there).")
  if source == "synthetic" and "generator" not in config:
    raise ConfigError("config.dpdfd.inputs='synthetic' reads the generator stage's synthetic "
                      "set, but the config has no 'generator' block: start from "
                      "dgd_jax/configs/dpdfd.py:<dataset>,ensemble (configs.dpdfd.synthetic).")
  if d.self_training and not d.replay_epochs:
    raise ConfigError(f"config.dpdfd.self_training={d.self_training} retrains the replayed "
                      "student on its own predictions; it needs dpdfd.replay_epochs > 0.")
  if d.replay_epochs < 0 or (d.replay_epochs and d.teacher == "private_data"):
    raise ConfigError(f"config.dpdfd.replay_epochs={d.replay_epochs}: replay trains on the "
                      "released synthetic rows of a conversion; it must be >= 0, and 0 for "
                      "direct training (dpdfd.teacher='private_data'), whose rows are private "
                      "examples.")
  return planned_noise("dpdfd", d.noise, p.max_epsilon, lambda: max(
      privacy.min_noise(release(config, 1.0, dataset_size, r), p.max_epsilon, p.delta,
                        p.accountant) for r in neighbours(config)))


def releases(config, neighbours: str = "replace_one") -> list[privacy.Release]:
  """The planned DPDFD steps under the relation ``neighbours``, what the budget guard and
  ``sweep --accounting_only`` account before anything is trained."""
  size = private_size(config) if reads_size(config) else None
  return [release(config, noise_multiplier(config, size), size, neighbours)]
