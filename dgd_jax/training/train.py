"""Pure classifier training: state, one jitted train step, evaluation, a resumable loop.

Used by the baseline stage and (lifted with ``jax.vmap``) by the teacher ensemble.
Minibatches are drawn inside the step, uniformly with replacement, from the whole training
array held on the device, so the step needs only (state, data, key).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from typing import Any, Callable, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax.training import train_state

from dgd_jax.runtime import files
from dgd_jax.runtime import progress as progress_lib
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import placement

TrainState = train_state.TrainState


class Step(Protocol):
  """The one training-step contract, what ``run_steps`` runs: ``step(state, key) -> (state,
  metrics)``. Every library step takes the state and the key first, then its data and its
  settings (a frozen dataclass or static numbers): ``train_step``, ``ensemble.member_step``
  (and its lift, ``ensemble.make_train_step``), ``ldp.robust_step``, ``ldp.robust_update``,
  ``generative.generator_step``, ``generative.vae_step``, ``dpdfd.step``,
  ``dpdfd.direct_step``, ``dpdfd.synthetic_step``, ``dpdfd.replay_step``,
  ``dpsgd.dpsgd_step``; a stage closes over the rest and jits the result with the state
  donated."""

  def __call__(self, state: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
    ...


@dataclasses.dataclass(frozen=True)
class FitConfig:
  """Hyperparameters of one classifier training run (DGD Section IV-A: Adam, batch 128,
  learning rate decaying linearly to ``end_learning_rate``)."""

  num_steps: int
  batch_size: int = 128
  learning_rate: float = 1e-3
  end_learning_rate: float = 0.0
  checkpoint_every: int = 500
  log_every: int = 100
  eval_batch_size: int = 1000


def optimizer(cfg: FitConfig) -> optax.GradientTransformation:
  """Adam with a linear learning-rate decay from ``learning_rate`` to ``end_learning_rate``."""
  return optax.adam(optax.linear_schedule(cfg.learning_rate, cfg.end_learning_rate,
                                          cfg.num_steps))


def create_train_state(model: nn.Module, tx: optax.GradientTransformation, key: jax.Array,
                       image_shape: tuple[int, ...]) -> TrainState:
  params = model.init(key, jnp.zeros((1,) + tuple(image_shape), jnp.float32))
  return TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def cross_entropy(logits: jnp.ndarray, labels: jnp.ndarray) -> jnp.ndarray:
  """Mean softmax cross-entropy with integer labels [B], or with target distributions
  [B, K] (mixed or soft targets)."""
  if labels.ndim == logits.ndim:
    return optax.softmax_cross_entropy(logits, labels).mean()
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def sample_batch(key: jax.Array, x: jnp.ndarray, y: jnp.ndarray, batch_size: int):
  """A minibatch drawn uniformly with replacement."""
  idx = jax.random.randint(key, (batch_size,), 0, x.shape[0])
  return x[idx], y[idx]


DROPOUT = 0xD60  # fold_in salt: a step's dropout key, apart from its other draws


def training_apply(apply_fn: Callable, params: Any, x: jnp.ndarray, key: jax.Array):
  """``apply_fn`` in training mode (``train=True``), its dropout drawn from ``key``: for the
  paper classifier, which ignores it, and a user's module behind ``models.adapter``."""
  return apply_fn(params, x, train=True, rngs={"dropout": jax.random.fold_in(key, DROPOUT)})


def update(state: TrainState, xb: jnp.ndarray, yb: jnp.ndarray, key: jax.Array | None = None
           ) -> tuple[TrainState, dict[str, jnp.ndarray]]:
  """One optimizer step on the cross-entropy of the minibatch (xb, yb); yb integer labels or
  target distributions (``cross_entropy``), the accuracy against their argmax. With ``key``
  the model runs in training mode (``training_apply``: dropout on)."""

  def loss_fn(params):
    logits = (state.apply_fn(params, xb) if key is None
              else training_apply(state.apply_fn, params, xb, key))
    return cross_entropy(logits, yb), logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  labels = yb if yb.ndim == 1 else jnp.argmax(yb, -1)
  accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
  return state.apply_gradients(grads=grads), {"loss": loss, "accuracy": accuracy}


def train_step(state: TrainState, key: jax.Array, x: jnp.ndarray, y: jnp.ndarray,
               batch_size: int) -> tuple[TrainState, dict[str, jnp.ndarray]]:
  """One Adam step on a minibatch sampled from (x, y) with ``key``. Pure; jit it."""
  return update(state, *sample_batch(key, x, y, batch_size), key=key)


EVAL_BATCH = 1000  # images a model labels at a time (``logits``)


@functools.partial(jax.jit, static_argnums=0)
def _logits(apply_fn: Callable, params: Any, x: jnp.ndarray) -> jnp.ndarray:
  return apply_fn(params, x)


def logits(apply_fn: Callable, params: Any, x: np.ndarray, batch_size: int = EVAL_BATCH
           ) -> np.ndarray:
  """The model's logits [N, K] for ``x`` in fixed-size chunks (the last one padded: one
  trace per model)."""
  n = len(x)
  batch_size = min(batch_size, max(n, 1))
  pad = -n % batch_size
  xp = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
  out = [np.asarray(_logits(apply_fn, params, xp[i:i + batch_size]))
         for i in range(0, len(xp), batch_size)]
  return np.concatenate(out)[:n]


def mean_distribution(apply_fn: Callable, members: list[Any], x: np.ndarray) -> np.ndarray:
  """The members' mean predicted distribution [N, K] over ``x`` (an ensemble's prediction)."""
  return np.mean([jax.nn.softmax(logits(apply_fn, p, x)) for p in members], axis=0)


def self_training(fit_round: Callable[[np.ndarray, int], Any], apply_fn: Callable, params: Any,
                  x: np.ndarray, rounds: int) -> list[Any]:
  """Self-training: ``rounds`` times, a fresh model fitted by ``fit_round(targets, round)``
  (round 1, 2, ...) to the last model's logits over ``x``, read as distributions. It reads
  nothing but the earlier model and x, so it is post-processing of whatever taught
  ``params``. Returns each round's parameters, ``params`` first."""
  history = [params]
  for round_ in range(1, rounds + 1):
    history.append(fit_round(logits(apply_fn, history[-1], x), round_))
  return history


def predict(apply_fn: Callable, params: Any, x: np.ndarray, batch_size: int = EVAL_BATCH
            ) -> np.ndarray:
  """Predicted labels for ``x`` (see ``logits``)."""
  if not len(x):
    return np.zeros((0,), np.int32)
  return logits(apply_fn, params, x, batch_size).argmax(-1).astype(np.int32)


def accuracy(apply_fn: Callable, params: Any, x: np.ndarray, y: np.ndarray,
             batch_size: int = EVAL_BATCH) -> float:
  """Fraction of ``x`` classified as ``y``."""
  return float(np.mean(predict(apply_fn, params, x, batch_size) == y))


class NonFiniteLossError(ConfigError):
  """The loss became NaN or infinite: the run stops at once instead of training on."""


def _saved(state: Any) -> dict:
  """What a checkpoint holds, for any train state: its array fields (parameters, optimizer
  state, BatchNorm statistics, ...), nested states (DPDFD's generator) the same way, but not
  the step counter (the checkpoint's own step) or empty fields."""
  items = {}
  for field in dataclasses.fields(state):
    value = getattr(state, field.name)
    if field.metadata.get("pytree_node", True) and field.name != "step" and value is not None:
      items[field.name] = _saved(value) if isinstance(value, train_state.TrainState) else value
  return items


def _restored(state: Any, items: dict) -> Any:
  """``state`` with the fields ``_saved`` wrote."""
  return state.replace(**{
      k: (_restored(getattr(state, k), v) if isinstance(getattr(state, k), train_state.TrainState)
          else v) for k, v in items.items()})


def _restore(manager: ocp.CheckpointManager, step: int, state: Any, checkpoint_dir: str
             ) -> Any:
  """``state`` with the checkpoint of ``step``; one that cannot be read (cut short,
  corrupted) raises ``DamagedArtefactError`` naming the stage to recompute."""
  try:
    restored = manager.restore(step, args=ocp.args.StandardRestore(_saved(state)))
  except Exception as e:  # pylint: disable=broad-except  # Orbax/TensorStore raise many kinds
    raise files.damaged(os.path.join(checkpoint_dir, str(step)), e) from None
  return _restored(state, restored).replace(step=_at_step(state.step, step))


def _at_step(counter: Any, step: int) -> Any:
  """``step`` in the shape, dtype and placement of a state's own ``counter``: a stacked
  ensemble's is an [n] array sharded over its teachers, a single model's a scalar."""
  return counter * 0 + step if hasattr(counter, "shape") else step


@contextlib.contextmanager
def _quiet():
  """Orbax's warnings that a read-only manager is read-only (one per finished model read)
  silenced while it opens one; errors still show."""
  level = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  try:
    yield
  finally:
    logging.set_verbosity(level)


def load_items(checkpoint_dir: str, abstract: dict) -> dict:
  """The checkpoint items ``abstract`` names (``{"params": ...}``; a nested state's as a dict,
  ``{"generator": {"params": ..., "batch_stats": ...}}``) saved at the latest step in
  ``checkpoint_dir``, read alone against their abstract values (``jax.eval_shape(model.init,
  ...)``), placed by each leaf's ``sharding`` (a ``jax.ShapeDtypeStruct``'s; the first local
  device where it has none): reading a finished model needs no optimizer or training config."""
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda s: jax.ShapeDtypeStruct(
      s.shape, s.dtype, sharding=getattr(s, "sharding", None) or device), abstract)
  with _quiet(), ocp.CheckpointManager(checkpoint_dir, options=ocp.CheckpointManagerOptions(
      read_only=True, create=False, save_interval_steps=0,
      enable_async_checkpointing=False)) as manager:
    step = manager.latest_step()
    if step is None:
      raise files.damaged(checkpoint_dir, FileNotFoundError("no finished checkpoint"))
    try:
      return manager.restore(step, args=ocp.args.PyTreeRestore(
          item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
          partial_restore=True))
    except Exception as e:  # pylint: disable=broad-except  # Orbax/TensorStore raise many kinds
      raise files.damaged(os.path.join(checkpoint_dir, str(step)), e) from None


def load_params(checkpoint_dir: str, abstract: Any) -> Any:
  """The parameters saved at the latest step in ``checkpoint_dir`` (``load_items``)."""
  return load_items(checkpoint_dir, {"params": abstract})["params"]


def summarize(metrics: dict[str, jax.Array]) -> dict[str, float]:
  """Scalars as floats; per-member arrays (a teacher axis) as mean, min and max."""
  out = {}
  for k, v in metrics.items():
    v = placement.to_host(v)  # a teacher axis may span processes
    if v.ndim == 0:
      out[k] = float(v)
    else:
      out.update({k: float(v.mean()), f"{k}_min": float(v.min()), f"{k}_max": float(v.max())})
  return out


def run_steps(state: Any, step_fn: Step, key: jax.Array, cfg: FitConfig,
              checkpoint_dir: str, name: str, log: Callable[[dict], None] = lambda m: None,
              examples_per_step: int | None = None) -> Any:
  """Runs ``state, metrics = step_fn(state, fold_in(key, s))`` for s in [start, num_steps),
  resuming from the latest Orbax checkpoint in ``checkpoint_dir``; a resumed run draws the
  same keys as an uninterrupted one. ``step_fn`` should be jitted with the state donated.
  Logs progress (rate, ETA) and metrics every ``cfg.log_every`` steps; a non-finite loss
  stops the run."""
  # Orbax saves into <step>.orbax-checkpoint-tmp-* and renames it to <step> when complete,
  # so a killed save is never restored; cleanup_tmp_directories removes its leftovers.
  options = ocp.CheckpointManagerOptions(max_to_keep=1, create=True,
                                         enable_async_checkpointing=False,
                                         cleanup_tmp_directories=True)
  with files.writing(checkpoint_dir):
    manager = ocp.CheckpointManager(checkpoint_dir, options=options)
  with manager:
    start = manager.latest_step()
    if start is not None:
      state = _restore(manager, start, state, checkpoint_dir)
    start = start or 0
    bar = progress_lib.Progress(name, cfg.num_steps, start=start,
                                examples_per_step=examples_per_step or cfg.batch_size)
    for step in range(start, cfg.num_steps):
      state, metrics = step_fn(state, jax.random.fold_in(key, step))
      done = step + 1
      if done % cfg.log_every == 0 or done == cfg.num_steps:
        metrics = summarize(metrics)
        if not np.isfinite(metrics["loss"]):  # a mean over teachers is NaN if any is
          raise NonFiniteLossError(f"{name}: loss is {metrics['loss']} at step {done}; "
                                   "lower the learning rate.")
        bar.update(done, metrics)
        log({"step": done, **metrics})
      if done % cfg.checkpoint_every == 0 or done == cfg.num_steps:
        with files.writing(os.path.join(checkpoint_dir, str(done))):
          saved = _saved(state)
          files.check_space(checkpoint_dir, sum(x.nbytes for x in jax.tree.leaves(saved)))
          manager.save(done, args=ocp.args.StandardSave(saved))
    manager.wait_until_finished()
  return state


def fit(state: TrainState, x: np.ndarray, y: np.ndarray, key: jax.Array, cfg: FitConfig,
        checkpoint_dir: str, name: str, log: Callable[[dict], None] = lambda m: None
        ) -> TrainState:
  """Trains one classifier on (x, y) for ``cfg.num_steps`` steps (see ``run_steps``)."""
  x_dev, y_dev = jnp.asarray(x), jnp.asarray(y)
  step = jax.jit(functools.partial(train_step, batch_size=cfg.batch_size), donate_argnums=0)
  return run_steps(state, lambda s, k: step(s, k, x_dev, y_dev), key, cfg, checkpoint_dir,
                   name, log)
