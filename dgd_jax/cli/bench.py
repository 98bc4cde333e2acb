r"""Benchmarks, printing one JSON line each.

  python -m dgd_jax.bench teachers --teachers=250 --batch=32 --conv1=64 --conv2=128

  python -m dgd_jax.bench step --batch=250 --conv1=16 --conv2=32 --steps=50

  python -m dgd_jax.bench head --variant=Ti/16 --image_size=224 --images=512

``step`` times one model's train step under both convolution lowerings (im2col, lax.conv).
``head`` times a public backbone's head trained alone (``trainable='head'``, a ViT from a
random init): one step on images (the backbone run on every minibatch) against one step on
the features computed once (``models.backbone.features``), and computing those.
``teachers`` times the ensemble train step (Adam, the paper CNN) with the same flags as
the PyTorch peer ``shared/bench/torch_teachers.py``, so the two can run side by side.
Output: examples_per_second, seconds_per_step, peak resident memory, the model FLOPs per
step and their rate as a fraction of the measured float32 matmul peak of this machine.
"""
from __future__ import annotations

import json
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from dgd_jax.models.classifier import LOWERINGS, Classifier
from dgd_jax.training import ensemble
from dgd_jax.training import placement
from dgd_jax.training import train

_TEACHERS = flags.DEFINE_integer("teachers", 250, "ensemble size")
_BATCH = flags.DEFINE_integer("batch", 32, "examples per teacher per step")
_STEPS = flags.DEFINE_integer("steps", 5, "timed steps after one warm-up step")
_CONV1 = flags.DEFINE_integer("conv1", 64, "channels of the first conv layer")
_CONV2 = flags.DEFINE_integer("conv2", 128, "channels of the second conv layer")
_SIZE = flags.DEFINE_integer("size", 28, "image height and width")
_CHANNELS = flags.DEFINE_integer("channels", 1, "image channels")
_CHUNK = flags.DEFINE_integer("chunk", 0, "teachers per vmapped chunk; 0 = backend default")
_PER_TEACHER = flags.DEFINE_integer("examples_per_teacher", 240, "partition size")
_VARIANT = flags.DEFINE_string("variant", "Ti/16", "head: the ViT variant")
_IMAGE_SIZE = flags.DEFINE_integer("image_size", 224, "head: the size the images are resized to")
_IMAGES = flags.DEFINE_integer("images", 512, "head: the images whose features are computed")


def train_flops_per_example(size: int, channels: int, conv1: int, conv2: int,
                            classes: int = 10) -> float:
  """Multiply-add FLOPs (x2) of one training example: forward F, weight gradients F,
  input gradients F minus the first layer's (its input needs no gradient)."""
  first = 2 * size * size * 9 * channels * conv1
  second = 2 * (size // 2) ** 2 * 9 * conv1 * conv2
  head = 2 * (size // 4) ** 2 * conv2 * classes
  return 3 * (first + second + head) - first


def matmul_peak_flops(n: int = 2048, repeats: int = 5, trials: int = 3) -> float:
  """Measured float32 n x n matmul rate of the default device (FLOP/s), best of
  ``trials`` timings of ``repeats`` products."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda a: a @ a)
  f(a).block_until_ready()
  best = 0.0
  for _ in range(trials):
    t = time.perf_counter()
    for _ in range(repeats):
      f(a).block_until_ready()
    best = max(best, 2 * n ** 3 * repeats / (time.perf_counter() - t))
  return best


def teachers(n: int = 250, b: int = 32, conv1: int = 64, conv2: int = 128, steps: int = 5,
             chunk: int = 0, size: int = 28, channels: int = 1, per_teacher: int = 240,
             peak: float | None = None) -> dict:
  """The ensemble train step's throughput (Adam, the paper CNN at ``conv1``/``conv2``
  channels): n teachers x b examples, ``steps`` timed steps after a warm-up, against the
  measured matmul ``peak`` (FLOP/s; measured here when None)."""
  shape = (size, size, channels)
  model = Classifier(channels=(conv1, conv2))
  tx = train.optimizer(train.FitConfig(num_steps=1000))
  mesh = placement.teacher_mesh(n)
  chunk = ensemble.auto_chunk(chunk, n)
  rng = np.random.default_rng(0)
  total = n * per_teacher
  x = rng.uniform(-1, 1, (total,) + shape).astype(np.float32)
  y = rng.integers(0, 10, total).astype(np.int32)
  parts = ensemble.Partitions.stack(list(np.arange(total, dtype=np.int32).reshape(n, -1)))
  examples = ensemble.place_examples(mesh, parts, x, y)
  state = ensemble.init_teachers(model, tx, jax.random.key(0), n, shape, mesh)
  step = ensemble.make_train_step(mesh, b, chunk)
  state, metrics = step(state, jax.random.key(1), *examples)  # compile + warm-up
  jax.block_until_ready(metrics)
  t = time.perf_counter()
  for s in range(steps):
    state, metrics = step(state, jax.random.key(2 + s), *examples)
  jax.block_until_ready(metrics)
  seconds = (time.perf_counter() - t) / steps
  flops = n * b * train_flops_per_example(size, channels, conv1, conv2)
  peak = peak or matmul_peak_flops()
  return {
      "impl": "dgd_jax", "jax": jax.__version__, "backend": jax.default_backend(),
      "devices": int(mesh.devices.size), "chunk": chunk,
      "teachers": n, "batch": b, "conv1": conv1, "conv2": conv2,
      "seconds_per_step": seconds, "examples_per_second": n * b / seconds,
      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      "model_gflop_per_step": flops / 1e9,
      "achieved_gflops": flops / seconds / 1e9, "matmul_peak_gflops": peak / 1e9,
      "fraction_of_matmul_peak": flops / seconds / peak,
  }


def bench_teachers() -> dict:
  return teachers(_TEACHERS.value, _BATCH.value, _CONV1.value, _CONV2.value, _STEPS.value,
                  _CHUNK.value, _SIZE.value, _CHANNELS.value, _PER_TEACHER.value)


def bench_step() -> dict:
  """One model's jitted Adam step (not vmapped: the baseline, the student) under each
  convolution lowering (models/classifier.py), best of 3 timings of ``--steps`` steps."""
  b = _BATCH.value
  shape = (_SIZE.value, _SIZE.value, _CHANNELS.value)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.uniform(-1, 1, (b,) + shape).astype(np.float32))
  y = jnp.asarray(rng.integers(0, 10, b).astype(np.int32))
  tx = train.optimizer(train.FitConfig(num_steps=1000))
  out = {"batch": b, "conv1": _CONV1.value, "conv2": _CONV2.value,
         "backend": jax.default_backend()}
  for lowering in LOWERINGS:
    model = Classifier(channels=(_CONV1.value, _CONV2.value), lowering=lowering)
    state = train.create_train_state(model, tx, jax.random.key(0), shape)
    step = jax.jit(train.update)
    out[f"{lowering}_ms_per_step"] = best_ms_per_step(lambda s, i: step(s, x, y), state)
  return out


def best_ms_per_step(step, state) -> float:
  """``step(state, i) -> (state, metrics)`` compiled and warmed up once, then the best of 3
  timings of ``--steps`` steps, in milliseconds per step."""
  state, _ = step(state, 0)
  best = np.inf
  for _ in range(3):
    t = time.perf_counter()
    for i in range(_STEPS.value):
      state, metrics = step(state, i)
    jax.block_until_ready(metrics)
    best = min(best, (time.perf_counter() - t) / _STEPS.value)
  return 1000 * best


def bench_head() -> dict:
  """A ViT head trained alone on ``--images`` images (``--size`` x ``--size``, resized to
  ``--image_size``): the seconds of computing their features once, and the best of 3 timings
  of ``--steps`` Adam steps of ``--batch`` on the images and on the features."""
  from dgd_jax.models import backbone  # pylint: disable=g-import-not-at-top
  from dgd_jax.models.vit import ViT  # pylint: disable=g-import-not-at-top
  model = backbone.Pretrained(ViT(num_classes=10, variant=_VARIANT.value), "", "head",
                              _IMAGE_SIZE.value)
  shape = (_SIZE.value, _SIZE.value, _CHANNELS.value)
  rng = np.random.default_rng(0)
  x = rng.uniform(-1, 1, (_IMAGES.value,) + shape).astype(np.float32)
  y = jnp.asarray(rng.integers(0, 10, _IMAGES.value).astype(np.int32))
  t = time.perf_counter()
  features = backbone.features(model, x)
  out = {"variant": _VARIANT.value, "image_size": _IMAGE_SIZE.value, "images": len(x),
         "batch": _BATCH.value, "features_seconds": time.perf_counter() - t,
         "matmul_peak_gflops": matmul_peak_flops() / 1e9}
  state = train.create_train_state(model, train.optimizer(train.FitConfig(num_steps=1000)),
                                   jax.random.key(0), shape)
  for name, inputs in (("images", jnp.asarray(x)), ("features", jnp.asarray(features))):
    step = jax.jit(lambda s, k, inputs=inputs: train.train_step(s, k, inputs, y, _BATCH.value))
    out[f"{name}_ms_per_step"] = best_ms_per_step(
        lambda s, i, step=step: step(s, jax.random.key(i)), state)
  out["ratio"] = out["images_ms_per_step"] / out["features_ms_per_step"]
  return out


BENCHMARKS = {"teachers": bench_teachers, "step": bench_step, "head": bench_head}


def main(argv):
  if len(argv) != 2 or argv[1] not in BENCHMARKS:
    raise app.UsageError(f"usage: python -m dgd_jax.bench {{{','.join(BENCHMARKS)}}} [flags]")
  print(json.dumps(BENCHMARKS[argv[1]]()))


if __name__ == "__main__":
  app.run(main)
