"""Teachers stage: n teachers on disjoint partitions of the private training set (PATE
Section 2.1, DGD Section III-A), trained as one lifted program, evaluated alone and as an
ensemble (plurality and LNMax) on the test set.

Teacher-count sweep stage (``run_sweep``): ensembles of several sizes trained as one lifted
program (each member's partition padded to a common length), then aggregated accuracy
against teacher count and Laplace scale (DGD Fig. 8 top left; PATE Fig. 2). Writes
sweep.csv and sweep.png into its stage folder."""
from __future__ import annotations

import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax.data import config_shards
from dgd_jax.labelling import aggregation
from dgd_jax.plan import backbone
from dgd_jax.plan import ldp as ldp_plan
from dgd_jax.plan.artefacts import new_teachers, teacher_inputs, teacher_programs
from dgd_jax.plan.context import Context
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.runtime.files import save_array, write_csv
from dgd_jax.training import augment
from dgd_jax.training import ensemble
from dgd_jax.training import ldp
from dgd_jax.training import train

# "ldp": robust teachers for an LDP client (LDP Eq. 3) when ``ldp.robust_teachers`` is set.
CONFIG_KEYS = ("num_teachers", "teachers", "ldp")
SWEEP_KEYS = ("teachers", "sweep")


def augmented_update(state, key, xb, yb):
  """A plain update on a randomly shifted and mirrored minibatch (``teachers.augment``)."""
  return train.update(state, augment.weak(key, xb), yb, key=key)


def mixup_update(state, key, xb, yb, alpha: float, num_classes: int):
  """A plain update on mixed pairs of the minibatch and their mixed one-hot targets (mixup,
  Zhang et al. 2018; ``teachers.mixup``)."""
  return train.update(state, *augment.mixup(key, xb, jax.nn.one_hot(yb, num_classes), alpha),
                      key=key)


def update_rules(config) -> dict:
  """The config fields (name -> value) that ask for a member update other than the plain one,
  in the order ``check`` names them."""
  fields = {"teachers.mixup": config.teachers.mixup,
            "teachers.augment": config.teachers.augment,
            "ldp.robust_teachers": "ldp" in config and config.ldp.robust_teachers}
  return {name: value for name, value in fields.items() if value}


def check(config) -> None:
  """Refuses a negative mixup, more than one member update rule (a teacher trains with one)
  and a rule that changes images where the teachers train on features."""
  if config.teachers.mixup < 0:
    raise ConfigError(f"config.teachers.mixup={config.teachers.mixup}; it must be >= 0 "
                      "(0: no mixup).")
  rules = update_rules(config)
  if len(rules) > 1:
    (first, value), *rest = rules.items()
    raise ConfigError(f"config.{first}={value} with {', '.join(name for name, _ in rest)}: "
                      "the teachers train with one update rule; turn all but one off.")
  image_rules = set(rules) & {"teachers.augment", "ldp.robust_teachers"}
  if image_rules and backbone.head_only(config, "teachers"):
    raise ConfigError(f"config.{min(image_rules)} changes the teachers' images, but with "
                      "config.model.trainable='head' they train on the backbone's features, "
                      "computed once: set trainable to 'last:1' or 'all', or turn it off.")


def member_update(config, num_classes: int):
  """The member update of the config's one update rule (``check``): ``mixup_update``,
  ``augmented_update`` or ``ldp.robust_update`` with its LDP setting; None for plain
  teachers."""
  rule = next(iter(update_rules(config)), None)
  if rule == "teachers.mixup":
    return functools.partial(mixup_update, alpha=config.teachers.mixup,
                             num_classes=num_classes)
  if rule == "teachers.augment":
    return augmented_update
  if rule == "ldp.robust_teachers":
    return functools.partial(ldp.robust_update, cfg=ldp_plan.robust_settings(config.ldp))
  return None


def train_members(ctx: Context, rows: list[np.ndarray], name: str):
  """Trains one teacher per index row (into the training set) as one program on the
  teacher mesh; returns (params [n, ...], predict_fn, seconds, the teachers per vmapped
  chunk)."""
  config, data = ctx.config, ctx.dataset
  parts = ensemble.Partitions.stack(rows)
  init_key, train_key = jax.random.split(ctx.key(name))
  state, predict, mesh, chunk, cfg, model = new_teachers(config, data, len(rows), init_key)
  t0 = time.perf_counter()  # the seconds include a head-only backbone's features
  x_train = teacher_inputs(model, data.x_train)  # head-only: the features, computed once
  examples = ensemble.place_examples(mesh, parts, x_train, data.y_train)
  step = ensemble.make_train_step(mesh, cfg.batch_size, chunk,
                                  member_update(config, data.num_classes))
  state = train.run_steps(state, lambda s, k: step(s, k, *examples),
                          train_key, cfg, ctx.stage.checkpoint_dir, name, ctx.log,
                          examples_per_step=len(rows) * cfg.batch_size)
  seconds = time.perf_counter() - t0
  return state.params, predict, seconds, chunk


def programs(config, data) -> dict:
  """The teachers' programs at the config's shapes (``artefacts.teacher_programs``)."""
  return teacher_programs(config, data, config_shards(config, data.x_train, data.y_train),
                          member_update(config, data.num_classes))


def sweep_rows(config, data) -> list[np.ndarray]:
  """Every member's index row of the sweep: each size's shards, the sizes in turn."""
  return [r for n in config.sweep.sizes
          for r in config_shards(config, data.x_train, data.y_train, int(n))]


def sweep_programs(config, data) -> dict:
  return teacher_programs(config, data, sweep_rows(config, data),
                          member_update(config, data.num_classes))


def ensemble_accuracies(labels: np.ndarray, y: np.ndarray, num_classes: int,
                        noise_scales, key: jax.Array) -> tuple[dict, np.ndarray]:
  """Per-teacher accuracy (mean/min/max), plurality accuracy and LNMax accuracy at each
  Laplace scale, from teacher labels [n, Q] on a labelled evaluation set; also the vote
  histograms [Q, K]."""
  per_teacher = (labels == y).mean(axis=1)
  votes = np.asarray(ensemble.histogram(jnp.asarray(labels), num_classes))
  out = {
      "teacher_accuracy_mean": float(per_teacher.mean()),
      "teacher_accuracy_min": float(per_teacher.min()),
      "teacher_accuracy_max": float(per_teacher.max()),
      "plurality_accuracy": float(np.mean(np.argmax(votes, -1) == y)),
  }
  for scale in noise_scales:
    noisy = aggregation.lnmax(jax.random.fold_in(key, int(scale * 1000)), jnp.asarray(votes),
                              float(scale))
    out[f"lnmax_accuracy_scale_{scale:g}"] = float(np.mean(np.asarray(noisy.labels) == y))
  return out, votes


def run(ctx: Context) -> dict:
  config, data = ctx.config, ctx.dataset
  rows = config_shards(config, data.x_train, data.y_train)
  params, predict, seconds, chunk = train_members(ctx, rows, "teachers")
  # The diagnostic evaluation: every teacher labels every evaluated image, slow on CPU for
  # the whole test set, so the CPU presets read its head (eval_size; 0: all of it).
  num_eval = config.teachers.eval_size or len(data.x_test)
  x_eval, y_eval = data.x_test[:num_eval], data.y_test[:num_eval]
  labels = ensemble.teacher_predictions(predict, params, x_eval)
  result, votes = ensemble_accuracies(labels, y_eval, data.num_classes,
                                      config.teachers.noise_scales, ctx.key("teachers_eval"))
  if ctx.writer:
    save_array(os.path.join(ctx.stage.path, "test_votes.npy"), votes)
  return {
      "num_teachers": config.num_teachers,
      "examples_per_teacher": min(map(len, rows)),  # the smallest shard ('stable': sizes vary)
      "partition": config.teachers.partition,
      "dropped_examples": len(data.x_train) - sum(len(r) for r in rows),
      "train_seconds": seconds,
      "chunk": chunk,  # teachers per vmapped chunk (memory_plan.plan); readers predict with it
      "eval_size": len(x_eval),  # test images the accuracies below are measured on
      **result,
  }


def write_sweep_table(path: str, table: list[dict], sizes: list[int], scales: list[float],
                dataset: str) -> None:
  """sweep.csv and sweep.png (accuracy against teacher count) in ``path``."""
  write_csv(os.path.join(path, "sweep.csv"), table, list(table[0]))
  series = {"plurality (no noise)": [r["plurality_accuracy"] for r in table]}
  series.update({f"LNMax, Laplace scale {s:g}": [r[f"lnmax_accuracy_scale_{s:g}"] for r in table]
                 for s in scales})
  series["mean single teacher"] = [r["teacher_accuracy_mean"] for r in table]
  plots.line_plot(os.path.join(path, "sweep.png"), sizes, series,
                  xlabel="teachers", ylabel="test accuracy", logx=True,
                  title=f"Aggregated accuracy vs teacher count ({dataset})")


def run_sweep(ctx: Context) -> dict:
  config, data = ctx.config, ctx.dataset
  sizes = [int(s) for s in config.sweep.sizes]
  rows = sweep_rows(config, data)
  params, predict, seconds, _ = train_members(ctx, rows, "teacher_sweep")
  labels = ensemble.teacher_predictions(predict, params, data.x_test)
  scales = [float(s) for s in config.sweep.noise_scales]
  table, start = [], 0
  for n in sizes:
    acc, _ = ensemble_accuracies(labels[start:start + n], data.y_test,
                                          data.num_classes, scales, ctx.key(f"sweep_{n}"))
    start += n
    smallest = min(len(r) for r in rows[start - n:start])  # 'stable': shard sizes vary
    table.append({"teachers": n, "examples_per_teacher": smallest, **acc})
  if ctx.writer:
    write_sweep_table(ctx.stage.path, table, sizes, scales, config.dataset)
  return {"members_trained": len(rows), "train_seconds": seconds,
          "csv": "teacher_sweep/sweep.csv", "plot_png": "teacher_sweep/sweep.png",
          "table": table}
