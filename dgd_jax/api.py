"""dgd_jax from Python, on your own arrays and your own Flax model (``import dgd_jax``).

The teacher ensemble, its votes, the noisy aggregators with their ledger records, the
accountants, the query planner and whole runs, behind a few functions:

  teachers = dgd_jax.train_teachers(MyCNN(num_classes=10), x_private, y_private, 50)
  votes = dgd_jax.teacher_votes(teachers, x_public)           # [Q, K] private histograms
  labels, release = dgd_jax.noisy_labels(votes, "gnmax", 40.0)  # secret noise
  dgd_jax.epsilon([release], delta=1e-5)                      # the labels' (epsilon, delta)
  params, steps = dgd_jax.train_dpsgd(MyCNN(num_classes=10), x_private, y_private, epsilon=3)

Images are numpy arrays [N, H, W] or [N, H, W, C] of pixels 0..255 (uint8 or float); labels
integers in [0, K). What an epsilon covers: the released labels (or histograms) as functions
of the private set under the release's neighbouring relation (replace-one, one teacher's
shard changed, by default); the votes and the teachers are private and must not be published.
Everything else in the package is reachable but not part of this surface.
"""
from __future__ import annotations

import dataclasses
import numbers
import tempfile
import warnings
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import privacy
from dgd_jax.data.loaders import check_labels, check_layout, check_pixels, to_float
from dgd_jax.data.partitions import partition_indices
from dgd_jax.labelling import aggregation
from dgd_jax.plan import queries as query_plan
from dgd_jax.privacy import checks
from dgd_jax.privacy.noise import NoiseSource
from dgd_jax.privacy.releases import build_release
from dgd_jax.runner import pipeline
from dgd_jax.runtime.errors import ConfigError, DatasetError
from dgd_jax.training import dpsgd
from dgd_jax.training import ensemble
from dgd_jax.training import memory_plan
from dgd_jax.training import placement
from dgd_jax.training import train


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
  ``shards[i]`` (indices into the training arrays). ``params`` is the stacked pytree [n, ...]."""

  model: nn.Module
  params: Any
  num_classes: int
  shards: np.ndarray  # [n, m]
  chunk: int  # teachers per vmapped chunk, from the memory plan
  predict: Callable = dataclasses.field(repr=False)  # (params, x) -> labels [n, Q], jitted once

  @property
  def num_teachers(self) -> int:
    return len(self.shards)


def _logits(model: nn.Module, x: np.ndarray) -> int:
  """K, the number of logits ``model`` gives an image of ``x`` (abstractly, nothing runs)."""
  out = jax.eval_shape(lambda: model.apply(model.init(jax.random.key(0), x[:1]), x[:1]))
  if not hasattr(out, "shape") or len(out.shape) != 2:
    raise ConfigError(f"the model returns {out}; it must map images [B, H, W, C] to logits "
                      "[B, K].")
  return int(out.shape[-1])


def train_teachers(model: nn.Module, x: Any, y: Any, num_teachers: int, *,
                   num_classes: int | None = None, num_steps: int = 600, batch_size: int = 32,
                   learning_rate: float = 1e-3, seed: int = 0, chunk: int = 0) -> Teachers:
  """Trains ``num_teachers`` copies of ``model`` (any ``flax.linen.Module`` mapping images
  [B, H, W, C] to logits [B, K]) on disjoint, equal, shuffled shards of (x, y) as one vmapped
  program (``ensemble``), each for ``num_steps`` Adam steps of ``batch_size`` examples drawn
  from its own shard, the learning rate decaying linearly to 0. ``chunk``: teachers per vmapped
  chunk (0: the backend's default), cut to what fits the device (``memory_plan.plan``). The
  remainder len(x) mod num_teachers is seen by no teacher. Nothing is released."""
  x = images(x)
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
                  ensemble.make_predict_fn(mesh, model.apply, chunk))


def teacher_votes(teachers: Teachers, queries: Any) -> np.ndarray:
  """The vote histograms [Q, K] int32 of the teachers on ``queries`` (images as for
  ``train_teachers``). PRIVATE: a function of every teacher's data; release only a noisy
  aggregate of them (``noisy_labels``)."""
  return ensemble.vote_histograms(teachers.predict, teachers.params,
                                  images(queries, "queries"), teachers.num_classes)


# The table's aggregators that need no class per query (the class counts do).
_MECHANISMS = tuple(n for n, a in aggregation.AGGREGATORS.items() if a.released != "counts")


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


def noisy_labels(votes: Any, mechanism: str, noise_scale: float, *,
                 noise_seed: int | None = None, threshold: float = 0.0, sigma1: float = 0.0, teachers_changed: int = 1
                 ) -> tuple[np.ndarray, privacy.Release]:
  """(labels [Q], the release's ledger record) of one aggregator on vote histograms [Q, K]:
  'lnmax' (Laplace scale ``noise_scale``, PATE 2017), 'gnmax' (Gaussian std, PATE 2018),
  'gaussian_histogram' (the noisy histograms, whose argmax are the labels) or
  'confident_gnmax' (``threshold`` checked at std ``sigma1``, then GNMax at ``noise_scale``;
  unanswered queries get -1, and the record charges every query). ``teachers_changed``: how
  many teachers' shards one neighbouring change moves (1 for disjoint shards under
  replace-one). The record is data-independent: pass it to ``epsilon``. The noise comes from
  the operating system's entropy; ``noise_seed`` (an int >= 0) makes it reproducible, for
  tests only: labels so drawn are NOT a private release (anyone with the seed removes the
  noise)."""
  if mechanism not in _MECHANISMS:
    raise ConfigError(f"mechanism={mechanism!r}; use one of {_MECHANISMS}.")
  votes = _vote_counts(votes)
  n = int(votes[0].sum())
  if mechanism != "confident_gnmax":  # Confident-GNMax warns through its threshold instead
    _warn_if_drowned(mechanism, float(noise_scale), n, votes.shape[1])
  extra = dict(threshold=threshold, sigma1=sigma1) if mechanism == "confident_gnmax" else {}
  key = NoiseSource.of(noise_seed).key("noisy_labels")
  out = aggregation.AGGREGATORS[mechanism](key, jnp.asarray(votes),
                                           float(noise_scale), **extra)
  release = build_release(mechanism, queries=len(votes), noise_scale=float(noise_scale),
                          sigma2=float(noise_scale), teachers_changed=teachers_changed, **extra)
  return np.asarray(out.labels), release


def train_dpsgd(model: nn.Module, x: Any, y: Any, *, epsilon: float, delta: float = 1e-5,
                epochs: float = 20.0, batch_size: int | None = None, norm_bound: float = 1.0,
                learning_rate: float = 1e-3, accountant: str = "pld",
                microbatch_size: int = 32, seed: int = 0, noise_seed: int | None = None
                ) -> tuple[Any, privacy.DpsgdSteps]:
  """``model`` (any ``flax.linen.Module`` mapping images to logits) trained on (x, y) with
  DP-SGD on jax-privacy (Abadi et al. 2016): each step a Poisson sample of expected size
  ``batch_size`` (None: N // 20, a sampling rate of 5%), per-example gradients clipped to
  ``norm_bound``, Gaussian noise calibrated so that ceil(epochs N / batch_size) steps spend
  ``epsilon`` at ``delta`` under ``accountant``, Adam on the noisy mean. Labels must lie in
  [0, K), K the model's number of logits. Returns (the parameters, the steps' ledger record).
  The epsilon covers the parameters under add/remove-one neighbours, N = len(x) taken as
  public; not covered: hyper-parameters chosen by looking at the same data. Predict with
  ``model.apply(params, dgd_jax.images(x))``. ``seed`` (public) draws the initialisation; the
  noise and the Poisson batches come from the operating system's entropy, or from
  ``noise_seed`` (an int >= 0) for a reproducible run that is NOT a private release. A delta
  of 1/N or more is refused: it allows releasing an example outright."""
  x = images(x)
  init_key = jax.random.key(seed)
  source = NoiseSource.of(noise_seed)
  noise_key, batch_rng = source.key("dpsgd"), source.rng("dpsgd_batches")
  logits = jax.eval_shape(lambda: model.apply(model.init(init_key, x[:1]), x[:1]))
  y = labels(y, len(x), logits.shape[-1])
  n = len(x)
  checks.delta_for_size(delta, n)
  batch_size = max(1, n // 20) if batch_size is None else batch_size
  if not (isinstance(batch_size, numbers.Integral) and 1 <= batch_size <= n):
    raise ConfigError(f"batch_size={batch_size!r} with {n} examples: the expected Poisson "
                      f"batch must be between 1 and N (e.g. batch_size={max(1, n // 100)}).")
  steps = dpsgd.steps_for_epochs(epochs, n, batch_size)
  plan = privacy.DpsgdSteps(1.0, int(batch_size), n, steps, norm_bound)
  sigma = privacy.dpsgd_noise_multiplier(plan, epsilon, delta, accountant)
  record = dataclasses.replace(plan, noise_multiplier=sigma)
  fit = train.FitConfig(num_steps=steps, batch_size=int(batch_size),
                        learning_rate=learning_rate, checkpoint_every=steps,
                        log_every=steps)
  state = train.create_train_state(model, train.optimizer(fit), init_key, x.shape[1:])
  with tempfile.TemporaryDirectory() as checkpoints:
    state = dpsgd.train_private(state, model, x, y, record, microbatch_size, fit, noise_key,
                                batch_rng, checkpoints, "dpsgd")
  return state.params, record


def epsilon(releases: Sequence[privacy.Release], delta: float = 1e-5,
            accountant: str = "pld") -> privacy.EpsilonReport:
  """The data-independent (epsilon, delta) of ``releases`` composed, under ``accountant``
  ('pld', 'rdp', 'rdp_classic', 'moments_accountant', 'advanced_composition'; dp-accounting),
  for the neighbouring relation the records state. Its ``note`` says what it covers."""
  return privacy.PrivacyLedger(list(releases)).epsilon(delta, accountant, data_dependent=False)


def plan_queries(num_teachers: int, num_classes: int, target_epsilon: float, *,
                 delta: float = 1e-5, max_queries: int = 10_000, consensus: float = 0.5,
                 accountant: str = "rdp") -> query_plan.Candidate:
  """The label plan for a budget, chosen before any vote (data-independent): the aggregator
  ('lnmax' or 'gnmax'), its noise and the most queries that fit ``target_epsilon``, maximising
  the expected clean-equivalent labels on an assumed histogram whose top class holds
  ``consensus`` of the votes."""
  return query_plan.choose(num_teachers, num_classes, target_epsilon, delta, consensus,
                           max_queries, accountant)[0]


def run(config, workdir: str) -> dict:
  """A whole method (a config from ``dgd_jax/configs``, e.g.
  ``dgd_jax.configs.dgd.get_config('npz:mine.npz,cpu')``) run in ``workdir``, reusing its
  finished stages; returns report.json's contents (accuracy, epsilon per accountant, what it
  covers and does not)."""
  return pipeline.run(config, workdir)
