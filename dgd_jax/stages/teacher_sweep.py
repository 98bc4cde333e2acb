"""Teacher-count sweep: ensembles of several sizes trained as one lifted program (each
member's partition padded to a common length), then aggregated accuracy against teacher
count and Laplace scale (DGD Fig. 8 top left; PATE Fig. 2). Writes sweep.csv and
sweep.png into the stage folder."""
from __future__ import annotations

import os


from dgd_jax import ensemble, plots
from dgd_jax.data import partition_indices
from dgd_jax.stages import teachers
from dgd_jax.workdir import write_csv

CONFIG_KEYS = ("seed", "dataset", "private_size", "model", "teachers", "sweep")


def write_table(path: str, table: list[dict], sizes: list[int], scales: list[float],
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


def run(ctx) -> dict:
  config, data = ctx.config, ctx.dataset
  sizes = [int(s) for s in config.sweep.sizes]
  rows = [r for n in sizes for r in partition_indices(len(data.x_train), n, config.seed)]
  params, predict, seconds = teachers.train_members(ctx, rows, "teacher_sweep")
  labels = ensemble.teacher_predictions(predict, params, data.x_test)
  scales = [float(s) for s in config.sweep.noise_scales]
  table, start = [], 0
  for n in sizes:
    acc, _ = teachers.ensemble_accuracies(labels[start:start + n], data.y_test,
                                          data.num_classes, scales, ctx.key(f"sweep_{n}"))
    start += n
    table.append({"teachers": n, "examples_per_teacher": len(data.x_train) // n, **acc})
  if ctx.writer:
    write_table(ctx.stage.path, table, sizes, scales, config.dataset)
  return {"members_trained": len(rows), "train_seconds": seconds,
          "csv": "teacher_sweep/sweep.csv", "plot_png": "teacher_sweep/sweep.png",
          "table": table}
