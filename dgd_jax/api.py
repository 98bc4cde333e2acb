"""dgd_jax from Python, on your own arrays and your own Flax model (``import dgd_jax``).

The teacher ensemble, its votes, the noisy aggregators with their ledger records, the
accountants, the query planner and whole runs, behind a few functions:

  teachers = dgd_jax.train_teachers(MyCNN(num_classes=10), x_private, y_private, 50)
  votes = dgd_jax.teacher_votes(teachers, x_public)           # [Q, K] private histograms
  answers = dgd_jax.noisy_labels(votes, "gnmax", 40.0)        # secret noise; answers.labels
  dgd_jax.epsilon(answers, delta=1e-5)                        # the labels' (epsilon, delta)
  result = dgd_jax.train_dpsgd(MyCNN(num_classes=10), x_private, y_private, epsilon=3)
  result = dgd_jax.dgd(MyCNN(num_classes=10), x_private, y_private, x_test, y_test)

Images are numpy arrays [N, H, W] or [N, H, W, C] of pixels 0..255 (uint8 or float); labels
integers in [0, K). What an epsilon covers: the released labels (or histograms) as functions
of the private set under the release's neighbouring relation (replace-one, one teacher's
shard changed, by default); the votes and the teachers are private and must not be published.
Everything else in the package is reachable but not part of this surface.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import importlib
import json
import math
import numbers
import os
import re
import tempfile
import types
import warnings
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import serialization

from dgd_jax import privacy
from dgd_jax.data import idx
from dgd_jax.data.loaders import (check_labels, check_layout, check_pixels, content_fingerprint,
                                  to_float)
from dgd_jax.data.partitions import config_shards, partition_indices
from dgd_jax.labelling import aggregation
from dgd_jax.models import adapter
from dgd_jax.plan import artefacts
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import pool as pool_plan
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan import student_fit
from dgd_jax.privacy import checks
from dgd_jax.privacy import ledger
from dgd_jax.privacy import smooth_sensitivity
from dgd_jax.privacy.ledger import NOT_PRIVATE
from dgd_jax.privacy.noise import NoiseSource
from dgd_jax.privacy.releases import build_release
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime import host
from dgd_jax.runtime.errors import (ConfigError, DatasetError, UserInputError,
                                    WorkdirConflictError)
from dgd_jax.runtime.files import fingerprint
from dgd_jax.training import dpsgd
from dgd_jax.training import ensemble
from dgd_jax.training import memory_plan
from dgd_jax.training import placement
from dgd_jax.training import train
from dgd_jax.training.student import uses_vae


def images(x: Any, name: str = "x") -> np.ndarray:
  """Pixels 0..255 [N, H, W] or [N, H, W, C] (uint8 or float) as the float32 [N, H, W, C] in
  [-1, 1] the models read; DatasetError naming the first bad pixel or the shape."""
  x = np.asarray(x)
  check_layout(name, name, x)
  check_pixels(name, name, x)
  return to_float(x[..., None] if x.ndim == 3 else x)


def labels(y: Any, num_images: int, num_classes: int | None = None, name: str = "y"
           ) -> np.ndarray:
  """Integer labels [N] in [0, K) as int32; DatasetError naming the first bad one."""
  y = np.asarray(y)
  if y.shape != (num_images,):
    raise DatasetError(f"{name} has shape {y.shape}; pass one integer label per image "
                       f"({num_images},).")
  check_labels(name, name, y, num_classes)
  return y.astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Teachers:
  """An ensemble of ``num_teachers`` copies of ``model``, member i trained on the disjoint shard
  ``shards[i]`` (indices into the training arrays: an [n, m] array, or a run's list of n
  index arrays). ``params`` is the stacked pytree [n, ...]."""

  model: nn.Module
  params: Any
  num_classes: int
  shards: Any  # [n, m], or n index arrays
  chunk: int  # teachers per vmapped chunk, from the memory plan
  predict: Callable = dataclasses.field(repr=False)  # (params, x) -> labels [n, Q], jitted once
  image_shape: tuple[int, ...] | None = None  # (H, W, C) trained on; None: not checked

  @property
  def num_teachers(self) -> int:
    return len(self.shards)


def _trainable(model: nn.Module) -> nn.Module:
  """``model`` as the train steps run it (``adapter.WithFeatures``: ``train`` passed on,
  BatchNorm as a group norm, parameters only); its parameter tree is the module's own."""
  if not isinstance(model, nn.Module):
    raise ConfigError(f"model={model!r}: pass a flax.linen.Module mapping images to logits.")
  return model if isinstance(model, adapter.WithFeatures) else adapter.WithFeatures(model)


def _logits(model: nn.Module, x: np.ndarray) -> int:
  """K, the number of logits ``model`` gives an image of ``x`` (abstractly, nothing runs)."""
  out = jax.eval_shape(lambda: model.apply(model.init(jax.random.key(0), x[:1]), x[:1]))
  if not hasattr(out, "shape") or len(out.shape) != 2:
    raise ConfigError(f"the model returns {out}; it must map images [B, H, W, C] to logits "
                      "[B, K].")
  return int(out.shape[-1])


def _whole(name: str, value: Any, fix: str, least: int = 1) -> int:
  """``value`` as an int >= ``least``, else a ConfigError naming it and ``fix`` (a zero or
  negative count of steps or examples would train nothing, silently)."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
      or value < least):
    raise ConfigError(f"{name}={value!r} must be a whole number >= {least}: {fix}.")
  return int(value)


def _positive(name: str, value: Any, fix: str) -> float:
  """``value`` as a finite float > 0, else a ConfigError naming it and ``fix`` (NaN, zero or a
  negative rate or epoch count would train nothing, or the wrong way, silently)."""
  ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
        and math.isfinite(value) and value > 0)
  if not ok:
    raise ConfigError(f"{name}={value!r} must be a finite number > 0: {fix}.")
  return float(value)


def _check_optimizer(optimizer: Any) -> None:
  """Refuses an ``optimizer`` that is not an optax GradientTransformation (callable ``init``
  and ``update``), e.g. the string 'adam', before anything trains."""
  if optimizer is not None and not (callable(getattr(optimizer, "init", None))
                                    and callable(getattr(optimizer, "update", None))):
    raise ConfigError(f"optimizer={optimizer!r} is not an optax GradientTransformation: pass "
                      "one, e.g. optimizer=optax.adam(1e-3), or None for Adam at "
                      "learning_rate.")


def _check_loss(loss: Any, model: nn.Module, x: np.ndarray, y: np.ndarray) -> None:
  """Refuses a DP-SGD ``loss`` that does not map one example's logits [1, K] and label [1] (as
  ``training.dpsgd._loss`` calls it) to a float scalar, traced abstractly on x[:1], y[:1]
  (nothing runs); jax-privacy would otherwise fail inside its per-example gradients."""
  if loss is None:
    return
  if not callable(loss):
    raise ConfigError(f"loss={loss!r} is not callable: pass a function (logits [1, K], labels "
                      "[1]) -> scalar, or None for cross-entropy.")
  try:
    out = jax.eval_shape(
        lambda: loss(model.apply(model.init(jax.random.key(0), x[:1]), x[:1]), y[:1]))
  except Exception as e:  # pylint: disable=broad-except  (any failure: the loss cannot serve)
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise ConfigError(f"loss failed on one example's logits [1, K] and labels [1] ({first}): "
                      "it must take (logits, labels) and return a scalar per example.") from None
  if getattr(out, "shape", None) != () or not jnp.issubdtype(out.dtype, jnp.floating):
    raise ConfigError(f"loss returns {out} on one example's logits [1, K] and labels [1]; loss "
                      "must return a scalar per example (e.g. end it with .mean()).")


@contextlib.contextmanager
def _api_words():
  """Re-raises a workdir error (the pipeline's, worded for the command line's ``--workdir``)
  as the same exception type, its message naming the API's ``workdir=`` argument instead."""
  try:
    yield
  except UserInputError as e:
    text = str(e)
    if "--workdir" not in text:
      raise
    try:
      # '--workdir=x' and '--workdir /path' become 'workdir=x', a bare '--workdir' 'workdir='
      adjusted = type(e)(re.sub(r"--workdir(=| (?=[/~.]))?", "workdir=", text))
    except Exception:  # pylint: disable=broad-except  (a type that takes other arguments)
      raise e from None
    raise adjusted.with_traceback(e.__traceback__) from None


def train_teachers(model: nn.Module, x: Any, y: Any, num_teachers: int, *,
                   num_classes: int | None = None, num_steps: int = 600, batch_size: int = 32,
                   learning_rate: float = 1e-3, seed: int = 0, chunk: int = 0) -> Teachers:
  """Trains ``num_teachers`` copies of ``model`` (any ``flax.linen.Module`` mapping images
  [B, H, W, C] to logits [B, K]) on disjoint, equal, shuffled shards of (x, y) as one vmapped
  program (``ensemble``), each for ``num_steps`` Adam steps of ``batch_size`` examples drawn
  from its own shard, the learning rate decaying linearly to 0. ``chunk``: teachers per vmapped
  chunk (0: the backend's default), cut to what fits the device (``memory_plan.plan``). The
  remainder len(x) mod num_teachers is seen by no teacher. Nothing is released. The module
  runs behind ``models.adapter.WithFeatures`` (``Teachers.model``): dropout on in training if
  its ``__call__`` takes ``train``, BatchNorm as a group norm. A schedule that trains nothing
  (``num_steps``, ``batch_size`` or ``learning_rate`` not > 0) is refused before anything
  trains."""
  # the schedule first: a zero or negative one would return untrained teachers silently
  num_steps = _whole("num_steps", num_steps, "train each teacher for at least one step "
                     "(e.g. num_steps=600)")
  batch_size = _whole("batch_size", batch_size, "draw at least one example per step (e.g. "
                      "batch_size=32)")
  learning_rate = _positive("learning_rate", learning_rate, "pass a positive step size (e.g. "
                            "learning_rate=1e-3)")
  chunk = _whole("chunk", chunk, "pass the teachers per vmapped chunk, or 0 for the "
                 "backend's default", least=0)
  x = images(x)
  model = _trainable(model)
  k = _logits(model, x)
  if num_classes is not None and num_classes != k:
    raise ConfigError(f"num_classes={num_classes} but the model has {k} logits: build it with "
                      f"{num_classes} outputs, or drop num_classes.")
  y = labels(y, len(x), k)  # refuses a label >= the model's logits
  if not (isinstance(num_teachers, numbers.Integral) and 1 <= num_teachers <= len(x)):
    raise ConfigError(f"num_teachers={num_teachers!r} with {len(x)} examples: give each "
                      "teacher at least one example (1 <= num_teachers <= len(x)).")
  num_teachers = int(num_teachers)
  shards = partition_indices(len(x), num_teachers, seed)
  cfg = train.FitConfig(num_steps=num_steps, batch_size=batch_size, learning_rate=learning_rate)
  tx = train.optimizer(cfg)
  mesh = placement.teacher_mesh(num_teachers)
  chunk = memory_plan.for_teachers(model, tx, x.shape[1:], mesh, num_teachers, len(x),
                                   batch_size, chunk)[1].chunk
  init_key, train_key = jax.random.split(jax.random.key(seed))
  state = ensemble.init_teachers(model, tx, init_key, num_teachers, x.shape[1:], mesh)
  examples = ensemble.place_examples(mesh, ensemble.Partitions.stack(list(shards)), x, y)
  step = ensemble.make_train_step(mesh, batch_size, chunk)
  for i in range(num_steps):
    state, _ = step(state, jax.random.fold_in(train_key, i), *examples)
  return Teachers(model, state.params, k, shards, chunk,
                  ensemble.make_predict_fn(mesh, model.apply, chunk), tuple(x.shape[1:]))


def teacher_votes(teachers: Teachers, queries: Any) -> np.ndarray:
  """The vote histograms [Q, K] int32 of the teachers on ``queries`` (images as for
  ``train_teachers``). PRIVATE: a function of every teacher's data; release only a noisy
  aggregate of them (``noisy_labels``). Queries of another image shape than the teachers were
  trained on are refused (ConfigError naming both)."""
  q = images(queries, "queries")
  trained = teachers.image_shape
  if trained is not None and tuple(q.shape[1:]) != tuple(trained):
    raise ConfigError(f"queries have images of shape {tuple(q.shape[1:])} (H, W, C) but the "
                      f"teachers were trained on {tuple(trained)}: resize the queries to "
                      "theirs.")
  return ensemble.vote_histograms(teachers.predict, teachers.params, q, teachers.num_classes)


ACCOUNTANT = ledger.DEFAULT_ACCOUNTANT  # every function's default, as the privacy CLI's


def _mechanisms() -> tuple[str, ...]:
  """The registered aggregators that need no class per query (the class counts do)."""
  return tuple(n for n, a in aggregation.AGGREGATORS.items() if a.released != "counts")


def _vote_counts(votes: Any) -> np.ndarray:
  """Vote histograms [Q, K]: whole counts >= 0, every query voted on by the same n >= 1
  teachers (what the releases' sensitivities assume); DatasetError naming what is not."""
  votes = np.asarray(votes)
  if votes.ndim != 2 or not len(votes) or not np.issubdtype(votes.dtype, np.number):
    raise DatasetError(f"votes has shape {votes.shape} and dtype {votes.dtype}; pass vote "
                       "histograms [Q, K] of counts (teacher_votes).")
  if not np.isfinite(votes).all() or (votes < 0).any() or (votes != np.round(votes)).any():
    raise DatasetError("votes must be whole counts >= 0 (how many teachers chose each class); "
                       "vote shares or probabilities would change every epsilon: pass "
                       "teacher_votes(...) output, or shares times the teacher count.")
  sums = votes.sum(axis=1)
  if sums.min() < 1 or sums.min() != sums.max():
    raise DatasetError(f"every query's histogram must count the same n >= 1 teachers; the row "
                       f"sums span {sums.min():g}..{sums.max():g}.")
  return votes


def _delta_for_size(delta: float, size: int, allowed: bool) -> float:
  """``delta`` against N = ``size`` (``privacy.checks.delta_for_size``, the one rule): a delta
  of 1/N or more refused unless ``allowed``, then warned."""
  delta = checks.delta_for_size(delta, size, allowed, allow=checks.ALLOW_LARGE_DELTA_KEYWORD)
  warning = checks.large_delta_warning(delta, size, "allow_large_delta=True")
  if warning:
    warnings.warn(warning, stacklevel=3)
  return delta


def _warn_if_drowned(mechanism: str, noise_scale: float, n: int, k: int) -> None:
  """Warns when the noise leaves the labels near chance even where 90% of the n teachers
  agree (public quantities only: no vote is read)."""
  clean = query_plan.assumed_histogram(n, k, 0.9)
  accuracy = query_plan.expected_label_accuracy(mechanism, noise_scale, clean)
  if accuracy < 0.5:
    warnings.warn(
        f"{mechanism} with noise {noise_scale:g} over {n} teachers: even where 90% of them "
        f"agree, the noisy label is their plurality with probability {accuracy:.2f} (chance "
        f"{1 / k:.2f}). Use more teachers or less noise: plan_queries({n}, {k}, <epsilon>) "
        "chooses both for a budget.", stacklevel=3)


@dataclasses.dataclass(frozen=True, repr=False)
class Answers:
  """What ``noisy_labels`` releases, and its ledger record. ``labels`` [Q] (-1 where
  Confident-GNMax did not answer), ``answered`` [Q], ``histograms`` [Q, K]: the noisy vote
  histograms where the mechanism releases them whole ('gaussian_histogram'), else None.
  ``release`` is the record ``epsilon`` accounts; for LNMax, GNMax and Confident-GNMax it
  carries the (private) votes, so that ``epsilon(..., data_dependent=True)`` and
  ``smooth_sensitivity_epsilon`` can analyse them: never publish the record itself. Printed,
  it shows public quantities only (the mechanism, its noise, the counts, the noise's source),
  never an array."""

  labels: np.ndarray
  answered: np.ndarray
  histograms: np.ndarray | None
  release: privacy.Release
  noise_seed: int | None = None  # not None: reproducible noise, NOT a private release

  def __repr__(self) -> str:
    r = self.release
    noise = ("noise='secret'" if self.noise_seed is None else
             f"noise_seed={self.noise_seed}, private_release=False")
    extra = "".join(f", {name}={getattr(r, name):g}" for name in ("threshold", "sigma1")
                    if getattr(r, name, None) is not None)
    return (f"Answers(mechanism={r.mechanism!r}, noise_scale={r.noise_parameter:g}{extra}, "
            f"queries={len(self.labels)}, answered={int(np.sum(self.answered))}, "
            f"histograms={'released' if self.histograms is not None else 'none'}, "
            f"teachers_changed={r.teachers_changed}, {noise})")


def noisy_labels(votes: Any, mechanism: str, noise_scale: float, *,
                 noise_seed: int | None = None, threshold: float = 0.0, sigma1: float = 0.0,
                 teachers_changed: int = 1) -> Answers:
  """The noisy answers of one aggregator on vote histograms [Q, K] (``teacher_votes``):
  'lnmax' (Laplace scale ``noise_scale``, PATE 2017), 'gnmax' (Gaussian std, PATE 2018),
  'gaussian_histogram' (the noisy histograms, whose argmax are the labels) or
  'confident_gnmax' (``threshold`` checked at std ``sigma1``, then GNMax at ``noise_scale``;
  unanswered queries get -1, and the record charges every query). ``teachers_changed``: how
  many teachers' shards one neighbouring change moves (1 for disjoint shards under
  replace-one). Pass the answers (or their ``release``) to ``epsilon``. The noise comes from
  the operating system's entropy; ``noise_seed`` (an int >= 0) makes it reproducible, for
  tests only: answers so drawn are NOT a private release (anyone with the seed removes the
  noise)."""
  if mechanism not in _mechanisms():
    raise ConfigError(f"mechanism={mechanism!r}; use one of {_mechanisms()}.")
  votes = _vote_counts(votes)
  n = int(votes[0].sum())
  if mechanism != "confident_gnmax":  # Confident-GNMax warns through its threshold instead
    _warn_if_drowned(mechanism, float(noise_scale), n, votes.shape[1])
  extra = dict(threshold=threshold, sigma1=sigma1) if mechanism == "confident_gnmax" else {}
  key = NoiseSource.of(noise_seed).key("noisy_labels")
  out = aggregation.AGGREGATORS[mechanism](key, jnp.asarray(votes),
                                           float(noise_scale), **extra)
  analysable = mechanism in ("lnmax", "gnmax", "confident_gnmax")  # data-dependent analyses
  release = build_release(mechanism, queries=len(votes), noise_scale=float(noise_scale),
                          teachers_changed=teachers_changed,
                          votes=votes if analysable else None, **extra)
  return Answers(np.asarray(out.labels), np.asarray(out.answered),
                 None if out.released is None else np.asarray(out.released), release,
                 noise_seed)


def smooth_sensitivity_epsilon(answers: Answers, delta: float = 1e-5, *,
                               consensus: float = 0.5, noise_seed: int | None = None):
  """PATE 2018's smooth-sensitivity release (Sec. 4) of the data-dependent epsilon of
  GNMax or Confident-GNMax ``answers`` (GNMax charged on the answered queries): its order,
  beta and sigma_ss fixed before the votes, on an assumed histogram whose top class holds
  ``consensus`` of the votes; the released value is a DP release, its own cost
  ``gnss_rdp`` composed with the queries at that order (``privacy.SmoothSensitivityCost``).
  Returns ``privacy.smooth_sensitivity.SmoothSensitivityRelease``; its ``released`` is the
  value to publish (``epsilon``, ``std`` and ``rdp`` beside it are private diagnostics).
  Noise from the OS; ``noise_seed``: reproducible, not private. Where this release's or the
  answers' noise came from a seed, a ``SeededSmoothSensitivityRelease`` says so
  (``private_release`` False, ``note``)."""
  r = answers.release
  if r.mechanism not in ("gnmax", "confident_gnmax") or r.votes is None:
    raise ConfigError(f"smooth_sensitivity_epsilon analyses GNMax or Confident-GNMax answers "
                      f"with their votes; these are {r.mechanism}'s.")
  votes = np.asarray(r.votes, np.float64)
  terms = (votes, *r.gnmax_parameters, delta)
  plan = smooth_sensitivity.plan_release(len(votes), int(votes[0].sum()), votes.shape[1],
                                         *terms[1:], consensus=consensus)
  out = smooth_sensitivity.release_confident_gnmax(
      *terms, plan, answered=answers.answered,
      rng=NoiseSource.of(noise_seed).rng("smooth_sensitivity"),
      teachers_changed=r.teachers_changed)
  seeds = [f"{name}={seed}" for name, seed in (("noise_seed", noise_seed),
                                               ("the answers' noise_seed", answers.noise_seed))
           if seed is not None]
  if not seeds:
    return out
  return SeededSmoothSensitivityRelease(
      **{f.name: getattr(out, f.name) for f in dataclasses.fields(out)},
      note=f"{NOT_PRIVATE}: the noise follows from {' and '.join(seeds)}.")


@dataclasses.dataclass(frozen=True)
class SeededSmoothSensitivityRelease(smooth_sensitivity.SmoothSensitivityRelease):
  """A smooth-sensitivity release drawn from a public seed (``smooth_sensitivity_epsilon``
  with ``noise_seed``, or on seeded answers): reproducible, NOT a private release; ``note``
  says where the seed came from."""

  private_release: bool = False
  note: str = ""


def noise_for(mechanism: str, queries: int, epsilon: float, delta: float = 1e-5, *,
              accountant: str = ACCOUNTANT, teachers_changed: int = 1) -> float:
  """The least noise (Laplace scale for 'lnmax', Gaussian std otherwise) with which
  ``queries`` answers of ``mechanism`` fit ``epsilon`` at ``delta`` under ``accountant``:
  data-independent, no vote is read."""
  checks.epsilon("epsilon", epsilon)
  one_noise = tuple(m for m in _mechanisms() if m != "confident_gnmax")
  if mechanism not in one_noise:
    raise ConfigError(f"mechanism={mechanism!r}: noise_for plans one noise, for one of "
                      f"{one_noise}; Confident-GNMax has two (sigma1, sigma2): fix sigma1 and "
                      "plan sigma2 with dgd_jax.privacy.min_noise on a ConfidentGNMaxQueries "
                      "record.")
  template = build_release(mechanism, queries=queries, noise_scale=1.0,
                           teachers_changed=teachers_changed)
  return privacy.min_noise(template, epsilon, delta, accountant)


def _check_epochs(epochs: Any) -> float:
  """DP-SGD's ``epochs``, a finite number > 0 (zero, negative or NaN would plan one step
  silently: ``steps_for_epochs`` takes at least one)."""
  return _positive("epochs", epochs, "pass the passes over the data to train for (e.g. "
                   "epochs=20)")


def _check_batch(batch_size: Any, n: int) -> int:
  """DP-SGD's expected Poisson batch: a whole number in [1, N]."""
  if not (isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool)
          and 1 <= batch_size <= n):
    raise ConfigError(f"batch_size={batch_size!r} with {n} examples: the expected Poisson "
                      f"batch must be between 1 and N (e.g. batch_size={max(1, n // 100)}).")
  return int(batch_size)


def dpsgd_noise_for(num_examples: int, batch_size: int, epochs: float, epsilon: float,
                    delta: float = 1e-5, *, accountant: str = ACCOUNTANT,
                    norm_bound: float = 1.0, allow_large_delta: bool = False) -> float:
  """DP-SGD's noise multiplier for ceil(epochs N / batch_size) steps at sampling rate
  batch_size / N to fit ``epsilon`` at ``delta`` (add/remove-one), as ``train_dpsgd`` uses.
  A delta of 1/N or more (N = ``num_examples``) is refused unless ``allow_large_delta``."""
  checks.epsilon("epsilon", epsilon)
  num_examples = checks.count("num_examples", num_examples)
  _delta_for_size(delta, num_examples, allow_large_delta)
  batch_size = _check_batch(batch_size, num_examples)
  epochs = _check_epochs(epochs)
  steps = dpsgd_plan.steps_for_epochs(epochs, num_examples, batch_size)
  plan = privacy.DpsgdSteps(1.0, int(batch_size), int(num_examples), steps, norm_bound)
  return privacy.dpsgd_noise_multiplier(plan, epsilon, delta, accountant)


def train_dpsgd(model: nn.Module, x: Any, y: Any, x_test: Any = None, y_test: Any = None, *,
                epsilon: float, delta: float = 1e-5, epochs: float = 20.0,
                batch_size: int | None = None, norm_bound: float = 1.0,
                learning_rate: float = 1e-3, accountant: str = ACCOUNTANT,
                optimizer: optax.GradientTransformation | None = None,
                loss: Callable | None = None, microbatch_size: int = 32, seed: int = 0,
                noise_seed: int | None = None, workdir: str | None = None,
                allow_large_delta: bool = False, allow_noise_redraw: bool = False) -> Result:
  """``model`` (any ``flax.linen.Module`` mapping images to logits) trained on (x, y) with
  DP-SGD on jax-privacy (Abadi et al. 2016): each step a Poisson sample of expected size
  ``batch_size`` (None: N // 20, a sampling rate of 5%), per-example gradients of ``loss``
  (logits [1, K], labels [1]) -> scalar (None: cross-entropy) clipped to ``norm_bound``,
  Gaussian noise calibrated so that ceil(epochs N / batch_size) steps spend ``epsilon`` at
  ``delta`` under ``accountant``, then ``optimizer`` on the noisy mean (None: Adam at
  ``learning_rate`` decaying linearly to 0). Labels must lie in [0, K), K the model's number
  of logits. Returns a ``Result``: ``params``; ``report`` with the epsilon, the steps' ledger
  record (``release``), the logged ``metrics`` (loss, clipped fraction: server diagnostics,
  not releases) and, given (x_test, y_test), ``test_accuracy``. The epsilon covers the
  parameters under add/remove-one neighbours, N = len(x) taken as public; not covered:
  hyper-parameters chosen by looking at the same data. ``seed`` (public) draws the
  initialisation; the noise and the Poisson batches come from the operating system's entropy
  (kept in ``workdir``'s noise.key when given, so that a killed run resumes from its
  checkpoints with the same draws), or from ``noise_seed`` (an int >= 0) for a reproducible
  run that is NOT a private release. A delta of 1/N or more is refused unless
  ``allow_large_delta`` (then warned); a run begun in ``workdir`` resumes only on the backend
  and JAX version it drew on unless ``allow_noise_redraw`` (``Workdir.check_noise_platform``).
  The module runs as ``train_teachers`` runs it
  (``Result.model``: BatchNorm as a group norm, which keeps each example's gradient its own;
  dropout on, each example's mask its own).

  A workdir holds one run: its stage folder records everything that makes it (the model's
  class, fields and parameter shapes, the optimiser, the loss, the learning rate, the batch,
  steps, epochs, clip norm, noise multiplier, accountant, delta, epsilon, microbatch size and
  seeds: ``_dpsgd_slice``), and the noise key and the batches are drawn for that record, as a
  run's stages draw theirs; a call with another of them on the same workdir is refused
  (WorkdirConflictError), the same call resumes. A user's optimiser or loss is recorded as a
  description of its functions (qualified names, bytecode, defaults and closure values:
  ``_describe``), not its source: what it reads from globals or other objects' state is not
  seen."""
  from dgd_jax.plan.context import noise_source  # pylint: disable=g-import-not-at-top
  from dgd_jax.runtime.workdir import Stage, Workdir  # pylint: disable=g-import-not-at-top
  if (x_test is None) != (y_test is None):  # the test split is read after training: pair now
    given, missing = ("x_test", "y_test") if y_test is None else ("y_test", "x_test")
    raise ConfigError(f"{given} was given without {missing}: pass both x_test and y_test "
                      "(the test split), or neither.")
  _check_optimizer(optimizer)
  x = images(x)
  init_key = jax.random.key(seed)
  model = _trainable(model)
  k = _logits(model, x)
  y = labels(y, len(x), k)
  n = len(x)
  if x_test is not None:  # checked before training, so that a bad split loses no model
    xt = images(x_test, "x_test")
    yt = labels(y_test, len(xt), k, "y_test")
    if xt.shape[1:] != x.shape[1:]:
      raise DatasetError(f"x_test has images of shape {xt.shape[1:]} but x has {x.shape[1:]}: "
                         "pass a test split of the training images' shape.")
  checks.epsilon("epsilon", epsilon)
  _delta_for_size(delta, n, allow_large_delta)
  batch_size = _check_batch(max(1, n // 20) if batch_size is None else batch_size, n)
  epochs = _check_epochs(epochs)
  if optimizer is None:  # the default Adam's step size; a user's optimiser carries its own
    _positive("learning_rate", learning_rate, "pass a positive step size (e.g. "
              "learning_rate=1e-3)")
  microbatch_size = _whole("microbatch_size", microbatch_size, "pass the examples per "
                           "vmapped gradient microbatch (e.g. microbatch_size=32)")
  _check_loss(loss, model, x, y)
  steps = dpsgd_plan.steps_for_epochs(epochs, n, batch_size)
  plan = privacy.DpsgdSteps(1.0, int(batch_size), n, steps, norm_bound)
  sigma = privacy.dpsgd_noise_multiplier(plan, epsilon, delta, accountant)
  record = dataclasses.replace(plan, noise_multiplier=sigma)
  fit = train.FitConfig(num_steps=steps, batch_size=int(batch_size),
                        learning_rate=learning_rate, checkpoint_every=max(1, steps // 10),
                        log_every=max(1, steps // 20))
  tx = optimizer or train.optimizer(fit)
  state = train.create_train_state(model, tx, init_key, x.shape[1:])
  metrics = []
  with contextlib.ExitStack() as stack:
    stack.enter_context(_api_words())  # a workdir conflict names workdir=, not --workdir
    folder = workdir or stack.enter_context(tempfile.TemporaryDirectory())
    wd = Workdir(folder)
    wd.bind_data("train_dpsgd's (x, y)", content_fingerprint(x, y))
    # a stage folder: a resumed run must be the same run (Stage.check refuses another)
    stage = Stage(wd, "dpsgd", _dpsgd_slice(
        model, state.params, optimizer, loss, learning_rate=float(learning_rate),
        batch_size=int(batch_size), steps=steps, epochs=float(epochs),
        norm_bound=float(norm_bound), noise_multiplier=sigma, accountant=accountant,
        delta=float(delta), epsilon=float(epsilon), microbatch_size=int(microbatch_size),
        seed=int(seed), noise_seed=noise_seed))
    begun = ["dpsgd"] if os.path.exists(stage.meta_path) else []
    if noise_seed is None and not os.path.isdir(  # secret draws left to make
        os.path.join(stage.checkpoint_dir, str(steps))):
      wd.check_noise_platform(["dpsgd"], host.noise_platform(), allow_noise_redraw)
      wd.record_noise_platform("dpsgd", host.noise_platform())
    stage.begin()
    source = noise_source(wd, -1 if noise_seed is None else noise_seed, begun)
    state = dpsgd.train_private(state, model, x, y, record, microbatch_size, fit,
                                source.key(stage.purpose("noise")),
                                source.rng(stage.purpose("batches")),
                                stage.checkpoint_dir, "dpsgd", metrics.append, loss)
  spent = privacy.PrivacyLedger([record]).epsilon(delta, accountant, data_dependent=False)
  report = {"epsilon": spent.epsilon, "delta": delta,
            "accountant": accountant, "release": record, "metrics": metrics,
            "noise": source.describe()}
  if x_test is not None:
    report["test_accuracy"] = train.accuracy(model.apply, state.params, xt, yt)
  return Result(model, state.params, report, workdir)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr's memory address: another each process


def _code(code: types.CodeType) -> str:
  """A fingerprint of a function's code: its bytecode, constants (nested code included) and
  names."""
  consts = [_code(c) if isinstance(c, types.CodeType) else _describe(c)
            for c in code.co_consts]
  return fingerprint([code.co_code.hex(), consts, list(code.co_names)])


def _describe(obj: Any, path: tuple = ()) -> Any:
  """A JSON description of ``obj`` that is the same in every process for the same object:
  numbers and strings as they are, arrays by shape, dtype and a hash of their bytes,
  containers, named tuples (optax's transformations) and dataclasses field by field,
  functions by qualified name, code, defaults and closure values (an optax transformation's
  hyper-parameters live there), anything else by its repr less memory addresses. Best effort:
  a function's globals and an object's hidden state are not described."""
  if id(obj) in path or len(path) > 16:
    return "<cycle>"
  path = path + (id(obj),)
  if obj is None or isinstance(obj, (bool, int, str)):
    return obj
  if isinstance(obj, float):
    return obj if math.isfinite(obj) else repr(obj)
  if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
    a = np.asarray(obj)
    return f"array{list(a.shape)} {a.dtype} {hashlib.sha256(a.tobytes()).hexdigest()[:16]}"
  if isinstance(obj, nn.Module):
    return _ADDRESS.sub("", repr(obj))
  if isinstance(obj, tuple) and hasattr(obj, "_fields"):
    return {type(obj).__qualname__: {f: _describe(getattr(obj, f), path) for f in obj._fields}}
  if isinstance(obj, (list, tuple)):
    return [_describe(v, path) for v in obj]
  if isinstance(obj, (set, frozenset)):
    return sorted(json.dumps(_describe(v, path), sort_keys=True) for v in obj)
  if isinstance(obj, dict):
    return {str(k): _describe(v, path) for k, v in obj.items()}
  if isinstance(obj, functools.partial):
    return {"partial": _describe(obj.func, path), "args": _describe(obj.args, path),
            "keywords": _describe(obj.keywords, path)}
  if isinstance(obj, types.MethodType):
    return {"method": _describe(obj.__func__, path), "self": _describe(obj.__self__, path)}
  if isinstance(obj, types.FunctionType):
    closure = []
    for cell in obj.__closure__ or ():
      try:
        closure.append(_describe(cell.cell_contents, path))
      except ValueError:  # an empty cell
        closure.append("<empty>")
    return {"function": f"{obj.__module__}.{obj.__qualname__}", "code": _code(obj.__code__),
            "defaults": _describe(obj.__defaults__, path),
            "kwdefaults": _describe(obj.__kwdefaults__, path), "closure": closure}
  if hasattr(obj, "__wrapped__"):  # jax.jit, functools.wraps
    return {"wraps": _describe(obj.__wrapped__, path)}
  if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
    return {type(obj).__qualname__: {f.name: _describe(getattr(obj, f.name), path)
                                     for f in dataclasses.fields(obj)}}
  return _ADDRESS.sub("", repr(obj))


def _named(obj: Any) -> str:
  """A readable name of ``obj`` (an optax transformation: the transformations it chains, as
  their factories' names; a function: its qualified name) and the fingerprint of its
  description (``_describe``), which tells apart two with the same name."""
  description = _describe(obj)
  if hasattr(obj, "init") and hasattr(obj, "update"):
    found = re.findall(r'"function": "[^"]*?(\w+)\.<locals>\.update_fn"',
                       json.dumps(description))
    parts = [p for p in dict.fromkeys(found) if p != "chain"]
    name = "optax " + "+".join(parts) if parts else type(obj).__qualname__
  else:
    name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
  return f"{name.lstrip('.')} {fingerprint(description)}"


def _dpsgd_slice(model: nn.Module, params: Any, optimizer, loss, **settings) -> dict:
  """``train_dpsgd``'s stage slice: every setting that makes its run, and descriptions of the
  model (its class; a fingerprint of its repr, fields included, and of its initial
  parameters' paths, shapes and dtypes), the optimiser (``_named``; the default: Adam at
  ``learning_rate`` decaying linearly to 0, the learning rate recorded only there) and the
  loss (``_named``; the default: cross-entropy)."""
  inner = getattr(model, "module", model)
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  shapes = [[jax.tree_util.keystr(k), list(np.shape(v)), str(getattr(v, "dtype", ""))]
            for k, v in leaves]
  if optimizer is not None:
    settings["learning_rate"] = None  # the optimiser's own is in its description
  return {**settings,
          "model": f"{type(inner).__module__}:{type(inner).__qualname__}",
          "model_fingerprint": fingerprint([_ADDRESS.sub("", repr(model)), shapes]),
          "optimizer": ("adam, linear decay to 0 (default)" if optimizer is None
                        else _named(optimizer)),
          "loss": "cross_entropy (default)" if loss is None else _named(loss)}


def epsilon(releases: Any, delta: float = 1e-5, accountant: str = ACCOUNTANT, *,
            data_dependent: bool = False) -> privacy.EpsilonReport:
  """The (epsilon, delta) of ``releases`` (one record, one ``Answers``, or a sequence of
  them) composed under ``accountant`` ('pld', 'rdp', 'rdp_classic', 'moments_accountant',
  'advanced_composition'; dp-accounting), for the neighbouring relation the records state:
  data-independent, a DP guarantee. ``data_dependent=True`` with a data-dependent accountant
  ('rdp_data_dependent', 'moments_accountant', 'rdp_answered_only') analyses the votes the
  records carry (PATE 2017/2018): a function of the private votes, not a guarantee, and not
  publishable as it is (``smooth_sensitivity_epsilon`` releases it). Its ``note`` says what it
  covers; for answers drawn with a ``noise_seed`` the report's ``private_release`` is False
  and its note starts with NOT A PRIVATE RELEASE."""
  items = releases if isinstance(releases, (list, tuple)) else [releases]
  records = [r.release if isinstance(r, Answers) else r for r in items]
  try:
    report = privacy.PrivacyLedger(records).epsilon(delta, accountant,
                                                    data_dependent=data_dependent)
  except ConfigError:
    # an accountant that exists only on the votes is 'not applicable' without the switch:
    # name the switch rather than the data-independent accountants the ledger lists
    if accountant in ledger.DATA_DEPENDENT_ONLY and not data_dependent:
      raise ConfigError(f"accountant={accountant!r} is data-dependent: pass "
                        "data_dependent=True (on answers that carry their votes), or a "
                        "data-independent accountant such as 'pld'.") from None
    raise
  seeds = sorted({r.noise_seed for r in items if isinstance(r, Answers)} - {None})
  if seeds:
    report = report.not_private(f"noise_seed={', '.join(map(str, seeds))}")
  return report


def plan_queries(num_teachers: int, num_classes: int, target_epsilon: float, *,
                 delta: float = 1e-5, max_queries: int = 10_000, consensus: float = 0.5,
                 accountant: str = ACCOUNTANT) -> query_plan.Candidate:
  """The label plan for a budget, chosen before any vote (data-independent): the aggregator
  ('lnmax' or 'gnmax'), its noise and the most queries that fit ``target_epsilon``, maximising
  the expected clean-equivalent labels on an assumed histogram whose top class holds
  ``consensus`` of the votes."""
  checks.epsilon("target_epsilon", target_epsilon)
  return query_plan.choose(num_teachers, num_classes, target_epsilon, delta, consensus,
                           max_queries, accountant)[0]


def read_idx(folder: str):
  """((x_train, y_train), (x_test, y_test)) from the four standard IDX ``.gz`` files in
  ``folder`` (e.g. Debian's /usr/share/datasets/fashion-mnist): uint8 images, int32 labels."""
  return idx.read_folder(folder)


@dataclasses.dataclass(frozen=True)
class Result:
  """A method's released model trained on your arrays. ``model.apply(params, images(x))``
  gives its logits (``model``: your module, or the paper classifier); ``report`` is
  report.json's contents (test accuracy, epsilon per accountant, what it covers and does not,
  where the noise came from); ``workdir`` the run's folder (None: a temporary one, removed),
  all private but its ``release/`` folder."""

  model: nn.Module
  params: Any
  report: dict
  workdir: str | None

  @property
  def epsilon(self) -> float | None:
    return self.report.get("epsilon")

  @property
  def test_accuracy(self) -> float | None:
    return self.report.get("test_accuracy")


def _module_spec(model: nn.Module | None) -> tuple[str, str]:
  """(config.model.module, config.model.kwargs) rebuilding ``model`` as Class(num_classes=K,
  **kwargs) from its dataclass fields (JSON values); ('', '') for the paper classifier."""
  if model is None:
    return "", ""
  cls = type(model)
  if not (isinstance(model, nn.Module) and "num_classes" in {
      f.name for f in dataclasses.fields(model)}):
    raise ConfigError(f"model={cls.__name__}: pass a flax.linen.Module with a num_classes "
                      "field (built as Class(num_classes=K, **its other fields)), or None for "
                      "the paper classifier.")
  fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
            if f.init and f.name not in ("parent", "name", "num_classes")}
  try:
    kwargs = json.dumps(fields) if fields else ""
  except TypeError as e:
    raise ConfigError(f"model={cls.__name__}: its fields {sorted(fields)} must be JSON values "
                      f"(numbers, strings, lists) to be rebuilt and recorded ({e}).") from None
  return f"{cls.__module__}:{cls.__qualname__}", kwargs


def _check_overrides(name: str, config, overrides: Any) -> None:
  """Refuses an ``overrides`` key that names no field of the preset ``config`` ('block.field':
  a misspelt block is a KeyError, a misspelt field a setting no stage reads), naming the key
  and the closest known ones (difflib) or the known blocks."""
  if overrides is None:
    return
  if not isinstance(overrides, dict):
    raise ConfigError(f"overrides={overrides!r}: pass a dict of {{'block.field': value}}, e.g. "
                      "{'teachers.num_steps': 100}.")
  known = []  # every dotted field of the preset, blocks included

  def walk(node, prefix):
    for key in node.keys():
      known.append(prefix + key)
      if hasattr(node[key], "keys") and not isinstance(node[key], dict):  # a ConfigDict block
        walk(node[key], prefix + key + ".")
  walk(config, "")
  for key in overrides:
    if isinstance(key, str) and key in known:
      continue
    close = difflib.get_close_matches(str(key), known, n=3, cutoff=0.6)
    blocks = sorted(k for k in known if "." not in k and hasattr(config[k], "keys"))
    hint = (f"did you mean {' or '.join(map(repr, close))}?" if close
            else f"the preset's blocks are {', '.join(blocks)}.")
    raise ConfigError(f"overrides key {key!r} is no field of the {name} preset: {hint}")


def _method(name: str, model, x, y, x_test, y_test, epsilon: float, delta: float, preset: str,
            workdir: str | None, noise_seed: int | None, overrides: dict | None,
            allow_large_delta: bool) -> Result:
  """One method's preset (``dgd_jax/configs/<name>.py:npz:<your arrays>,<preset>``) run on
  the arrays in ``workdir`` (resumable) or a temporary folder, its released model read back.
  ``epsilon`` (the run's ``privacy.max_epsilon``) must be a finite number > 0 and ``delta``
  below 1/len(x) unless ``allow_large_delta`` (``privacy.allow_large_delta``): refused here,
  before anything is written."""
  from dgd_jax.configs import common  # pylint: disable=g-import-not-at-top
  get_config = importlib.import_module(f"dgd_jax.configs.{name}").get_config
  # the preset read without its data (a config does not open its dataset), so that a misspelt
  # override is refused before anything is written
  _check_overrides(name, get_config(f"npz:data.npz,{preset}"), overrides)
  arrays = {"x_train": np.asarray(x), "y_train": np.asarray(y), "x_test": np.asarray(x_test),
            "y_test": np.asarray(y_test)}
  for k in ("x_train", "x_test"):
    images(arrays[k], k)  # refused here, with the array's name, before anything is written
  checks.epsilon("epsilon", epsilon)
  given = overrides or {}  # what the run reads: an override of delta or the flag wins
  allow_large_delta = bool(given.get("privacy.allow_large_delta", allow_large_delta))
  _delta_for_size(given.get("privacy.delta", delta), len(arrays["x_train"]), allow_large_delta)
  module, kwargs = _module_spec(model)
  if workdir and os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirConflictError(f"workdir={workdir} is a file, not a directory: nothing was "
                               "changed. Pass a new or existing folder as workdir=.")
  with contextlib.ExitStack() as stack:
    stack.enter_context(_api_words())  # a workdir conflict names workdir=, not --workdir
    folder = workdir or stack.enter_context(tempfile.TemporaryDirectory())
    os.makedirs(folder, exist_ok=True)
    data = os.path.join(folder, "data.npz")  # private, like the rest of the workdir
    if os.path.exists(data):  # a resumed workdir: the arrays it was made from
      with np.load(data) as f:
        kept = [f[k] for k in arrays]
      if content_fingerprint(*kept) != content_fingerprint(*arrays.values()):
        raise WorkdirConflictError(
            f"{folder} was made from other arrays (its data.npz): nothing was changed. Use a "
            "new workdir for these, or pass the arrays it was made from.")
    else:
      np.savez(data, **arrays)
    config = get_config(f"npz:{data},{preset}")
    config = common.with_overrides(config, {
        "privacy.max_epsilon": float(epsilon), "privacy.delta": float(delta),
        "noise_seed": -1 if noise_seed is None else int(noise_seed),
        "privacy.allow_large_delta": bool(allow_large_delta),
        "model.module": module, "model.kwargs": kwargs, **(overrides or {})})
    report = pipeline.run(config, os.path.join(folder, "run"))
    method = methods.method(config)
    ctx = pipeline.open_run(os.path.join(folder, "run"), method.headline_stage)
    params = method.released_model(ctx)
    released, k = ctx.config, ctx.dataset.num_classes
  if model is None:
    model = method.released_module(released, k)[0]
  else:
    model = adapter.WithFeatures(model.clone(num_classes=k))  # as the run trained it
  return Result(model, params, report, os.path.join(workdir, "run") if workdir else None)


def dgd(model: nn.Module | None, x: Any, y: Any, x_test: Any, y_test: Any, *,
        epsilon: float = 10.0, delta: float = 1e-5, preset: str = "cpu",
        workdir: str | None = None, noise_seed: int | None = None,
        overrides: dict | None = None, allow_large_delta: bool = False) -> Result:
  """DGD on your arrays: ``dgd.py``'s ``preset`` with your module (None: the paper
  classifier) as baseline, teachers and student, its label release planned for ``epsilon``
  at ``delta``; (x, y) private, (x_test, y_test) the test split that evaluates. The epsilon
  covers the label answers only (README); ``workdir`` keeps every stage to resume (None: a
  temporary folder). ``overrides``: {'block.field': value} on the preset. ``epsilon`` must be
  a finite number > 0; a ``delta`` of 1/len(x) or more is refused unless
  ``allow_large_delta`` (then warned, as report.md does)."""
  return _method("dgd", model, x, y, x_test, y_test, epsilon, delta, preset, workdir,
                 noise_seed, overrides, allow_large_delta)


def pate(model: nn.Module | None, x: Any, y: Any, x_test: Any, y_test: Any, *,
         epsilon: float = 3.0, delta: float = 1e-5, preset: str = "cpu",
         workdir: str | None = None, noise_seed: int | None = None,
         overrides: dict | None = None, allow_large_delta: bool = False) -> Result:
  """PATE on your arrays (``pate.py``'s ``preset``): teachers on (x, y), the student's
  unlabelled pool the first 9/10 of x_test (assumed public), evaluated on the rest; as
  ``dgd`` otherwise."""
  return _method("pate", model, x, y, x_test, y_test, epsilon, delta, preset, workdir,
                 noise_seed, overrides, allow_large_delta)


def dpdfd(model: nn.Module | None, x: Any, y: Any, x_test: Any, y_test: Any, *,
          epsilon: float = 10.0, delta: float = 1e-5, preset: str = "cpu",
          workdir: str | None = None, noise_seed: int | None = None,
          overrides: dict | None = None, allow_large_delta: bool = False) -> Result:
  """DPDFD on your arrays (``dpdfd.py``'s ``preset``): a model trained on (x, y) converted
  into a DP student by Algorithm 1; as ``dgd`` otherwise."""
  return _method("dpdfd", model, x, y, x_test, y_test, epsilon, delta, preset, workdir,
                 noise_seed, overrides, allow_large_delta)


def run(config, workdir: str) -> dict:
  """A whole method (a config from ``dgd_jax/configs``, e.g.
  ``dgd_jax.configs.dgd.get_config('npz:mine.npz,cpu')``) run in ``workdir``, reusing its
  finished stages; returns report.json's contents (accuracy, epsilon per accountant, what it
  covers and does not)."""
  return pipeline.run(config, workdir)


class Run:
  """A finished run, read-only (``open_run``): its config, its private data and its
  artefacts, for research on a run without rerunning it (experiments/). Everything it loads
  is PRIVATE (the teachers, the baseline, the votes); nothing is written to the workdir."""

  def __init__(self, workdir: str, stage: str = "student"):
    self._ctx = pipeline.open_run(workdir, stage)
    self._teachers = None
    self._vae = None

  @property
  def config(self):
    """The config the run recorded (its config.json): a copy, free to change for a probe."""
    return self._ctx.config

  @property
  def data(self):
    """The run's private data: x_train, y_train, x_test, y_test, num_classes, image_shape."""
    return self._ctx.dataset

  def teachers(self) -> Teachers:
    """The teachers stage's ensemble (loaded once), usable with ``teacher_votes``."""
    if self._teachers is None:
      config, data = self.config, self.data
      params, predict, chunk = artefacts.load_teachers(self._ctx)
      self._teachers = Teachers(artefacts.teacher_model(config, data.num_classes), params,
                                data.num_classes,
                                config_shards(config, data.x_train, data.y_train), chunk,
                                predict, tuple(data.image_shape))
    return self._teachers

  def votes(self, x: np.ndarray) -> np.ndarray:
    """The teachers' vote histograms [Q, K] on images as the run holds them (its data, pool
    or synthetic set: floats in [-1, 1]; ``teacher_votes`` takes pixels). PRIVATE."""
    t = self.teachers()
    return ensemble.vote_histograms(t.predict, t.params, np.asarray(x, np.float32),
                                    t.num_classes)

  def classifier(self, stage: str, lowering: str = "im2col") -> tuple[nn.Module, Any]:
    """A finished classifier stage's (model, params): 'baseline' or 'student' (the released
    one). ``lowering='conv'`` gives lax.conv, as DeepInversion differentiates it."""
    return artefacts.load_classifier(self._ctx, stage, lowering)

  def new_classifier(self, width: float | None = None) -> nn.Module:
    """A fresh classifier as the run builds its baseline: the paper classifier (at ``width``
    where given), the config's own module or its backbone (``width`` given: a paper
    classifier's only)."""
    model = artefacts.classifier(self.config, self.data.num_classes)
    return model if width is None else model.clone(width=width)

  def dpdfd_generator(self) -> nn.Module:
    """A fresh DPDFD generator as the run's config builds Algorithm 1's."""
    return artefacts.dpdfd_generator(self.config, self.data.image_shape)

  def synthetic(self) -> np.ndarray:
    """The generator stage's synthetic set."""
    return artefacts.load_synthetic(self._ctx)

  def pool(self) -> np.ndarray:
    """The student's unlabelled pool's images (never its labels)."""
    return pool_plan.load(self._ctx)

  def pool_classes(self, size: int) -> np.ndarray:
    """[size] the class each of ``size`` DeepInversion samples was synthesised for."""
    return pool_plan.classes(self.config, size, self.data.num_classes)

  def vae(self) -> tuple[nn.Module | None, Any]:
    """The VAE stage's (model, params) (loaded once), or (None, None) where the student does
    not use it."""
    if not uses_vae(self.config.student):
      return None, None
    if self._vae is None:
      self._vae = artefacts.load_vae(self._ctx, self.data.image_shape)
    return self._vae

  def train_student(self, x_s: np.ndarray, targets: np.ndarray, x_u: np.ndarray, name: str,
                    folder: str, brier: bool = False, key: str = "student"
                    ) -> tuple[nn.Module, list]:
    """The student stage's fit under ``config`` (as changed) on labelled (x_s, targets) and
    unlabelled x_u, checkpoints under ``folder``: (model, each round's params; the last is
    the student). ``brier``: targets are vote shares, learnt with the Brier score."""
    model, rounds, _ = student_fit.train_student(self._ctx, self.vae(), x_s, targets, x_u, name,
                                                 folder, brier=brier, key=key)
    return model, rounds


def load_release(folder: str, model: nn.Module | None = None
                 ) -> tuple[nn.Module, Any, Callable[[Any], Any]]:
  """The model a run's ``release/`` folder publishes, without the workdir: (module,
  variables, prepare), ``logits = module.apply(variables, prepare(x))`` for pixels ``x`` as
  ``images`` takes them. ``model``: the Flax module of yours the run trained (as given to
  ``dgd``, ``pate`` or ``dpdfd``); None rebuilds the run's own from its report. DatasetError
  where the folder publishes no model, and why."""
  path = os.path.join(folder, "report.json")
  if not os.path.exists(path):
    raise DatasetError(f"{folder} holds no report.json: pass a run's release/ folder "
                       "(<workdir>/release).")
  with open(path) as f:
    report = json.load(f)
  entry = report.get("model")
  if not entry:
    raise DatasetError(f"{folder} publishes no model: "
                       f"{report.get('model_withheld') or 'the method releases none.'}")
  k, shape = entry["num_classes"], tuple(entry["image_shape"])
  if model is None:
    config = ml_collections.ConfigDict(report["config"])
    module, transform, _ = methods.method(config).released_module(config, k)
  else:
    module, transform = adapter.WithFeatures(model.clone(num_classes=k)), None
  with open(os.path.join(folder, entry["file"]), "rb") as f:
    variables = serialization.msgpack_restore(f.read())

  def prepare(x: Any) -> Any:
    x = images(x)
    if x.shape[1:] != shape:
      raise DatasetError(f"x has images of shape {x.shape[1:]}; the released model reads "
                         f"{shape}.")
    return transform(x) if transform else x
  return module, variables, prepare


def open_run(workdir: str, stage: str = "student") -> Run:
  """The finished run in ``workdir`` read at its ``stage`` (the stages it needs are
  finished), read-only. Refused if the workdir is not a run or was made by another config."""
  return Run(workdir, stage)
