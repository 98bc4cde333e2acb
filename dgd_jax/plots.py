"""PNG plots for reports (matplotlib, the ``plots`` extra)."""
from __future__ import annotations

from typing import Sequence

from absl import logging


def line_plot(path: str, x: Sequence[float], series: dict[str, Sequence[float]], *,
              xlabel: str, ylabel: str, title: str, logx: bool = False) -> bool:
  """Writes one line per ``series`` entry against ``x`` to ``path``; returns False (with a
  warning) when matplotlib is not installed."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    logging.warning("matplotlib is not installed, so %s was not drawn: "
                    "pip install 'dgd_jax[plots]'.", path)
    return False
  fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
  for label, ys in series.items():
    ax.plot(x, ys, marker="o", label=label)
  if logx:
    ax.set_xscale("log")
    ax.set_xticks(list(x), [f"{v:g}" for v in x])
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
  return True
