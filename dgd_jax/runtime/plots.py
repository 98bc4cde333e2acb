"""PNG plots for reports (matplotlib, the ``plots`` extra)."""
from __future__ import annotations

from typing import Sequence

from absl import logging

from dgd_jax.runtime.files import atomic_write


def _pyplot(path: str):
  """matplotlib.pyplot on the Agg backend, or None (with a warning naming ``path``)."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    logging.warning("matplotlib is not installed, so %s was not drawn: "
                    "pip install 'dgd_jax[plots]'.", path)
    return None
  return plt


def _save(fig, path: str) -> None:
  atomic_write(path, lambda f: fig.savefig(f, format="png"), binary=True)


def line_plot(path: str, x: Sequence[float], series: dict[str, Sequence[float]], *,
              xlabel: str, ylabel: str, title: str, logx: bool = False) -> bool:
  """Writes one line per ``series`` entry against ``x`` (numbers, or categories placed at
  equal steps; None values leave gaps) to ``path``; returns False (with a warning) when
  matplotlib is not installed."""
  plt = _pyplot(path)
  if plt is None:
    return False
  fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
  categorical = not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x)
  positions = list(range(len(x))) if categorical else list(x)
  for label, ys in series.items():
    ax.plot(positions, [float("nan") if y is None else y for y in ys], marker="o", label=label)
  if categorical:
    ax.set_xticks(positions, [str(v) for v in x])
  elif logx:
    ax.set_xscale("log")
    ax.set_xticks(list(x), [f"{v:g}" for v in x])
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  _save(fig, path)
  plt.close(fig)
  return True


def image_grid(path: str, images, *, row_labels: Sequence[str] | None = None,
               title: str = "") -> bool:
  """Writes images [rows, cols, H, W, C] as one PNG grid, each image scaled to its own
  min..max (synthetic images need not lie in the data range); returns False without
  matplotlib."""
  plt = _pyplot(path)
  if plt is None:
    return False
  import numpy as np  # pylint: disable=g-import-not-at-top
  images = np.asarray(images, np.float32)
  rows, cols = images.shape[:2]
  fig, axes = plt.subplots(rows, cols, figsize=(cols * 0.8, rows * 0.8 + 0.4), dpi=100,
                           squeeze=False)
  for r in range(rows):
    for c in range(cols):
      ax = axes[r][c]
      img = images[r, c]
      lo, hi = float(img.min()), float(img.max())
      img = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
      ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
      ax.set_xticks([])
      ax.set_yticks([])
      if c == 0 and row_labels is not None:
        ax.set_ylabel(row_labels[r], fontsize=7, rotation=0, ha="right", va="center")
  if title:
    fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  _save(fig, path)
  plt.close(fig)
  return True


def class_grid(path: str, x, labels, num_classes: int, title: str, per_class: int = 10
               ) -> bool:
  """Writes one row of up to ``per_class`` samples per (predicted) class; False without
  matplotlib."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  grid = np.zeros((num_classes, per_class) + x.shape[1:], np.float32)
  for k in range(num_classes):
    chosen = x[labels == k][:per_class]
    grid[k, :len(chosen)] = chosen
  return image_grid(path, grid, row_labels=[f"class {k}" for k in range(num_classes)],
                    title=title)


def frontier(path: str, points: Sequence[dict], published: Sequence[dict] = (), *,
             title: str = "Test accuracy against epsilon (delta 1e-5)") -> bool:
  """The privacy-utility picture: test accuracy (%) against epsilon (log axis, ticks at 1,
  3 and 10), one line per method. ``points``: dicts with ``line`` (the method's label),
  ``epsilon``, ``accuracy`` (%) and ``whole`` (True: the epsilon covers everything the model
  learnt from the private data, drawn filled; False: the label answers only, drawn hollow).
  ``published``: dicts with ``line``, ``epsilon``, ``accuracy`` and ``source``, drawn as
  stars in their method's colour. Returns False (with a warning) without matplotlib."""
  plt = _pyplot(path)
  if plt is None:
    return False
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 6.5), dpi=110)
  names = list(dict.fromkeys([p["line"] for p in points] + [p["line"] for p in published]))
  colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
  for name in names:
    mine = sorted((p for p in points if p["line"] == name), key=lambda p: p["epsilon"])
    if mine:
      ax.plot([p["epsilon"] for p in mine], [p["accuracy"] for p in mine], "-",
              color=colours[name], alpha=0.6)
    for p in mine:
      ax.plot(p["epsilon"], p["accuracy"], "o" if p["whole"] else "s", markersize=8,
              color=colours[name], markerfacecolor=colours[name] if p["whole"] else "white",
              markeredgewidth=1.8)
    for p in (p for p in published if p["line"] == name):
      ax.plot(p["epsilon"], p["accuracy"], "*", markersize=13, color=colours[name],
              markeredgecolor="black", markeredgewidth=0.5)
  ax.set_xscale("log")
  largest = max([p["epsilon"] for p in [*points, *published]], default=10)
  ax.set_xlim(0.75, max(13, 1.3 * largest))  # PATE's every-query epsilon lies past 10
  ax.set_xticks([1, 3, 10], ["1", "3", "10"])
  ax.minorticks_off()
  ax.set_xlabel("epsilon (each run's own accountant; published: the paper's)")
  ax.set_ylabel("test accuracy (%)")
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  handles = [Line2D([], [], color=colours[n], marker="o", linestyle="-", label=n)
             for n in names]
  handles += [
      Line2D([], [], color="grey", marker="o", linestyle="",
             label="filled: epsilon covers everything the model learnt from private data"),
      Line2D([], [], color="grey", marker="s", markerfacecolor="white", linestyle="",
             label="hollow: epsilon covers the label answers only"),
      Line2D([], [], color="grey", marker="*", markersize=11, linestyle="",
             markeredgecolor="black", label="star: published number (paper's setting)")]
  ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13),
            ncol=2, frameon=False)
  fig.tight_layout()
  _save(fig, path)
  plt.close(fig)
  return True
