"""A progress line with rate and ETA for long loops (logged through absl logging)."""
from __future__ import annotations

import logging as py_logging
import time

from absl import logging


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
  """``update(done, metrics)`` logs 'name done/total (pct) metrics | rate | ETA'."""

  def __init__(self, name: str, total: int, start: int = 0, examples_per_step: int = 0):
    self.name, self.total, self.start = name, total, start
    self.examples_per_step = examples_per_step
    self.t0 = time.perf_counter()

  def line(self, done: int, metrics: dict | None = None) -> str:
    elapsed = max(time.perf_counter() - self.t0, 1e-9)
    rate = (done - self.start) / elapsed
    eta = (self.total - done) / rate if rate > 0 else float("inf")
    parts = [f"{self.name} {done}/{self.total} ({100 * done / max(self.total, 1):.0f}%)"]
    if metrics:
      parts.append(" ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    speed = f"{rate:.2f} steps/s"
    if self.examples_per_step:
      speed += f" {rate * self.examples_per_step:.0f} ex/s"
    parts.append(speed)
    parts.append(f"ETA {_duration(eta)}" if eta != float("inf") else "ETA ?")
    return " | ".join(parts)

  def update(self, done: int, metrics: dict | None = None) -> None:
    logging.info(self.line(done, metrics))


class _DropChatter(py_logging.Filter):
  """Hides Orbax's per-save INFO chatter so progress lines stay readable."""

  def filter(self, record: py_logging.LogRecord) -> bool:
    return record.levelno >= py_logging.WARNING or "orbax" not in record.pathname


def setup_cli_logging() -> None:
  """INFO progress lines for the command-line tools, without Orbax's per-save chatter."""
  py_logging.getLogger("absl").addFilter(_DropChatter())
  logging.set_verbosity(logging.INFO)
