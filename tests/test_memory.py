"""Memory planning for the teacher ensemble: the chunk chosen to fit, the refusal
when nothing fits, and the estimate against the measured peak RSS on CPU."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import jax
import pytest

from dgd_jax.configs import teachers as teachers_config
from dgd_jax.data import load_private
from dgd_jax.plan import artefacts
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import memory_plan

# The measured peak (train and predict, 8 teachers, chunk 4) lies within this factor of the
# estimate either way (on CPU about 1.35-1.4 x at widths 0.5 and 1.0; memory_plan.HEADROOM leaves
# room for that).
FACTOR = 2.0

PROBE = r"""
import json, re, sys
import numpy as np, jax, optax
from dgd_jax.training import ensemble, memory_plan, placement
from dgd_jax.models.classifier import Classifier

def status(field):
  return int(re.search(field + r":\s+(\d+)", open("/proc/self/status").read()).group(1)) * 1024

width, n, chunk, batch = float(sys.argv[1]), 8, 4, 128
model, tx = Classifier(width=width), optax.adam(1e-3)
rng = np.random.default_rng(0)
x = rng.random((n * 240, 28, 28, 1), np.float32)
y = rng.integers(0, 10, n * 240).astype(np.int32)
fixed, member = memory_plan.estimate(model, tx, (28, 28, 1), teachers_per_device=n,
                                examples_per_device=len(x), batch_size=batch,
                                query_chunk=ensemble.QUERY_CHUNK)
mesh = placement.teacher_mesh(n)
parts = ensemble.Partitions.stack([np.arange(i * 240, (i + 1) * 240) for i in range(n)])
before = status("VmRSS")
state = ensemble.init_teachers(model, tx, jax.random.key(0), n, (28, 28, 1), mesh)
examples = ensemble.place_examples(mesh, parts, x, y)
step = ensemble.make_train_step(mesh, batch, chunk)
for i in range(2):
  state, metrics = step(state, jax.random.key(i), *examples)
jax.block_until_ready(metrics)
labels = ensemble.make_predict_fn(mesh, model.apply, chunk)(state.params, x[:ensemble.QUERY_CHUNK])
jax.block_until_ready(labels)
print(json.dumps({"measured": status("VmHWM") - before, "estimate": fixed + chunk * member}))
"""


def test_plan_takes_the_largest_chunk_that_fits():
  fixed, member = 100, 10
  free = int((fixed + 3.5 * member) / memory_plan.HEADROOM) + 1
  assert memory_plan.plan(fixed, member, chunk=8, free=free).chunk == 3
  assert memory_plan.plan(fixed, member, chunk=2, free=free).chunk == 2  # never more than asked
  big = memory_plan.plan(fixed, member, chunk=250, free=10**9)
  assert big.chunk == 250 and big.total == fixed + 250 * member
  assert "chunk 250" in big.describe()


def test_plan_refuses_when_one_teacher_at_a_time_does_not_fit():
  gib = memory_plan.GIB
  with pytest.raises(ConfigError, match="does not fit.*fewer teachers.*narrower model.*smaller "
                     "batch"):
    memory_plan.plan(fixed=10 * gib, member=gib, chunk=1, free=8 * gib)
  with pytest.raises(ConfigError, match="does not fit"):  # the states fit, one member not
    memory_plan.plan(fixed=gib, member=8 * gib, chunk=4, free=8 * gib)


def test_a_run_that_does_not_fit_is_told_the_flags_that_set_its_memory(npz_file, monkeypatch):
  config = teachers_config.get_config(f"npz:{npz_file},cpu")
  monkeypatch.setattr(memory_plan, "device_bytes", lambda: (10**6, "a 1 MB device"))
  with pytest.raises(ConfigError, match="does not fit.*--config.num_teachers, "
                     "--config.model.width, --config.teachers.batch_size"):
    artefacts.teacher_memory(config, load_private(config), 4)


def test_the_fallback_count_errs_high():
  """Where a backend has no memory analysis, the jaxpr count stands in: never below XLA's."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from dgd_jax.models.classifier import Classifier  # pylint: disable=g-import-not-at-top
  model = Classifier(width=0.5)
  params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
  x = jax.ShapeDtypeStruct((64, 28, 28, 1), jnp.float32)
  assert memory_plan.jaxpr_bytes(model.apply, params, x) >= memory_plan.program_bytes(
      model.apply, params, x) > 64 * 28 * 28 * 32 * 4  # at least conv1's output


class _Device:
  def __init__(self, stats):
    self.stats = stats

  def memory_stats(self):
    if isinstance(self.stats, Exception):
      raise self.stats
    return self.stats


def test_device_bytes_reads_the_backend_then_the_host_then_the_default(monkeypatch):
  """The device's own limit less what is in use; else the host's available memory shared by
  its devices; else the stated default: each with its source."""
  meminfo = "MemTotal:  999 kB\nMemAvailable:  3000 kB\n"
  monkeypatch.setattr(memory_plan, "open", lambda path: io.StringIO(meminfo), raising=False)
  devices = [_Device({"bytes_limit": 10_000, "bytes_in_use": 2_500})] * 2
  monkeypatch.setattr(jax, "local_devices", lambda: devices)
  assert memory_plan.device_bytes() == (7_500, "memory_stats()")
  for stats in (RuntimeError("no memory_stats on this backend"), None, {"bytes_in_use": 1}):
    devices = [_Device(stats)] * 2
    free, source = memory_plan.device_bytes()
    assert (free, source[:12]) == (3000 * 1024 // 2, "MemAvailable"), stats
  def unreadable(path):
    raise OSError(path)
  monkeypatch.setattr(memory_plan, "open", unreadable, raising=False)
  assert memory_plan.device_bytes() == (memory_plan.DEFAULT_DEVICE_BYTES, "DEFAULT_DEVICE_BYTES")
  monkeypatch.setattr(memory_plan, "open", lambda path: io.StringIO("MemTotal: 1 kB\n"),
                      raising=False)
  assert memory_plan.device_bytes() == (memory_plan.DEFAULT_DEVICE_BYTES, "DEFAULT_DEVICE_BYTES")


@pytest.mark.integration
def test_teachers_stage_refuses_before_it_allocates(idx_dir, tmp_path, monkeypatch):
  """A device too small for the ensemble: a clear error, nothing trained, the workdir left
  for the fixed config."""
  config = teachers_config.get_config(f"idx:{idx_dir},cpu")
  config.num_teachers, config.teachers.num_steps = 4, 2
  monkeypatch.setattr(memory_plan, "device_bytes", lambda: (1000, "a test's tiny device"))
  workdir = tmp_path / "run"
  with pytest.raises(ConfigError, match="a test's tiny device"):
    pipeline.run(config, str(workdir))
  assert not (workdir / "teachers").exists()
  monkeypatch.undo()
  pipeline.run(config, str(workdir))  # the same workdir, once the device is big enough
  assert (workdir / "teachers" / "result.json").exists()


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("width", [0.5, 1.0])
def test_estimate_is_within_a_factor_of_the_measured_peak(width):
  env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}  # one CPU device
  out = subprocess.run([sys.executable, "-c", PROBE, str(width)], capture_output=True,
                       text=True, env=env, check=True, timeout=300)
  numbers = json.loads(out.stdout.strip().splitlines()[-1])
  ratio = numbers["measured"] / numbers["estimate"]
  assert 1 / FACTOR <= ratio <= FACTOR, numbers
