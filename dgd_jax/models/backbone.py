"""A public pretrained backbone in a classifier's place: what trains, what stays frozen.

``Pretrained(module, checkpoint, trainable)`` wraps a classifier (``models.vit.ViT``, or any
module with the paper classifier's interface) whose weights start from a public checkpoint
(``models.pretrained``: big_vision / AugReg ``.npz`` or orbax) with a fresh ``num_classes``
head. ``trainable`` says what each copy trains:

* ``'all'``: every weight, from the checkpoint (full fine-tuning);
* ``'head'``: the head only, on the frozen backbone's features;
* ``'last:K'``: the last K transformer blocks, the final norm and the head.

The frozen weights are not parameters: they are constants of the program, read once from the
checkpoint (``frozen_weights``), so they take no optimizer state, no DP-SGD noise and no copy
per teacher: under ``jax.vmap`` over an ensemble's parameters they stay one unbatched array,
and where the images are shared (the teachers' votes) the frozen layers run once for all
members. Only the trainable part is the module's parameter tree (``{'trainable': ...}``).

Privacy: the checkpoint is public (pretrained on public data), so starting from it and
computing its frozen features costs no epsilon; every method's accounting covers what the
trainable part learns from the private data exactly as before. A checkpoint pretrained on
data that overlaps the private set is not public, and nothing here can check that.

With ``trainable='head'`` the backbone's output does not change while the head trains, so
its features are computed once (``features``: the head's inputs [N, D] for the whole set)
and the head trains on them: ``Pretrained`` takes either images or those features
(``head_only``). It still initialises from images, whose shape the fresh head is made for.

``image_size`` > 0 resizes the images (bilinear) to the resolution the checkpoint was
pretrained at before the backbone sees them; the position embeddings are resized instead
where it is 0 (``pretrained.into``).
"""
from __future__ import annotations

import functools
import os
import re

import flax.linen as nn
import jax
from flax import traverse_util
import jax.numpy as jnp
import numpy as np

from dgd_jax.models import pretrained
from dgd_jax.runtime.errors import ConfigError

TRAINABLE = ("all", "head", "last:K")
_LAST = re.compile(r"last:(\d+)$")
_BLOCK = re.compile(r"encoderblock_(\d+)$")


def check_trainable(trainable: str) -> str:
  """``trainable`` if it is one of ``TRAINABLE`` (K a positive integer), else ConfigError."""
  m = _LAST.match(trainable)
  if trainable in ("all", "head") or (m and int(m.group(1)) > 0):
    return trainable
  raise ConfigError(f"trainable={trainable!r}: use one of {TRAINABLE} with K >= 1 (the last "
                    "K transformer blocks, the final norm and the head).")


def is_trainable(path: tuple[str, ...], trainable: str, depth: int) -> bool:
  """Whether the parameter at ``path`` (keys from the tree's root) trains under ``trainable``
  in a backbone of ``depth`` blocks (``encoderblock_{i}``)."""
  if trainable == "all" or path[0] == "head":
    return True
  if trainable == "head":
    return False
  k = int(_LAST.match(trainable).group(1))
  if "encoder_norm" in path:
    return True
  blocks = [int(m.group(1)) for m in map(_BLOCK.match, path) if m]
  return bool(blocks) and blocks[0] >= depth - k


def depth_of(params: dict) -> int:
  """The number of ``encoderblock_{i}`` in a parameter tree (0 for a model without)."""
  return len({m.group(1) for path in traverse_util.flatten_dict(params)
              for m in map(_BLOCK.match, path) if m})


def split(params: dict, trainable: str) -> tuple[dict, dict]:
  """(trainable, frozen) parts of a parameter tree; each keeps the tree's nesting."""
  depth = depth_of(params)
  if trainable.startswith("last:") and depth == 0:
    raise ConfigError(f"trainable={trainable!r} needs a transformer with encoderblock_i "
                      "layers; this model has none: use 'all' or 'head'.")
  if trainable.startswith("last:") and int(trainable[5:]) > depth:
    raise ConfigError(f"trainable={trainable!r}: the backbone has {depth} blocks; choose "
                      f"K <= {depth}, or 'all'.")
  parts = ({}, {})
  for path, leaf in traverse_util.flatten_dict(params).items():
    parts[0 if is_trainable(path, trainable, depth) else 1][path] = leaf
  return tuple(traverse_util.unflatten_dict(part) for part in parts)


def merge(a: dict, b: dict) -> dict:
  """One tree holding the leaves of two disjoint trees."""
  return traverse_util.unflatten_dict({**traverse_util.flatten_dict(a),
                                       **traverse_util.flatten_dict(b)})


def _fresh(module: nn.Module, key, image_shape) -> dict:
  return module.init(key, jnp.zeros((1,) + tuple(image_shape), jnp.float32))["params"]


@functools.lru_cache(maxsize=4)
def _checkpoint(path: str, mtime: float) -> dict:
  del mtime  # part of the cache key: a rewritten file is read again
  return pretrained.load(path)


def start(module: nn.Module, checkpoint: str, key, image_shape) -> dict:
  """The module's parameters from ``checkpoint`` with a fresh head drawn from ``key`` (a
  fresh init everywhere when ``checkpoint`` is '')."""
  fresh = _fresh(module, key, image_shape)
  if not checkpoint:
    return fresh
  stamp = os.path.getmtime(checkpoint) if os.path.exists(checkpoint) else 0.0
  return pretrained.into({"params": fresh}, _checkpoint(checkpoint, stamp),  # load's errors
                         reset_head=True)["params"]


_FROZEN: dict = {}


def frozen_weights(module: nn.Module, checkpoint: str, trainable: str, image_shape) -> dict:
  """The frozen part of ``start``, as NumPy constants, computed once per (module,
  checkpoint, trainable, shape); with no checkpoint, a fresh init from the public key 0."""
  cache_key = (repr(module), checkpoint, trainable, tuple(image_shape))
  if cache_key not in _FROZEN:
    with jax.ensure_compile_time_eval():
      full = start(module, checkpoint, jax.random.key(0), image_shape)
    _FROZEN[cache_key] = jax.tree.map(np.asarray, split(full, trainable)[1])
  return _FROZEN[cache_key]


def head_only(module: nn.Module) -> bool:
  """Whether ``module`` trains its head alone on frozen features (``trainable='head'``): its
  training inputs can be ``features`` computed once instead of images."""
  return isinstance(module, Pretrained) and module.trainable == "head"


FEATURE_BATCH = 256  # images per call of ``features``' program


@functools.cache
def feature_program(module: "Pretrained"):
  """The jitted program from a batch of images to the frozen backbone's pooled features (the
  head's inputs; the head's values do not enter them), one per module (modules are equal by
  their fields): the training set's and the test set's features share its compilation."""
  def run(x):
    shapes = jax.eval_shape(module.init, jax.random.key(0), x[:1])
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    return module.apply(zeros, x, with_features=True)[1]
  return jax.jit(run)


def features(module: "Pretrained", images: np.ndarray, batch: int = FEATURE_BATCH
             ) -> np.ndarray:
  """The frozen backbone's pooled features [N, D] of ``images`` [N, H, W, C], in batches of
  ``batch`` (the last one padded, so that one program serves every batch)."""
  if not head_only(module):
    raise ConfigError("features are the inputs of a head trained alone: they need a "
                      "Pretrained module with trainable='head'.")
  run, out = feature_program(module), []
  for i in range(0, len(images), batch):
    xb = np.asarray(images[i:i + batch], np.float32)
    pad = batch - len(xb)
    if pad:
      xb = np.concatenate([xb, np.zeros((pad,) + xb.shape[1:], xb.dtype)])
    out.append(np.asarray(run(xb))[:batch - pad])
  return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def init_shape(module: nn.Module, input_shape: tuple, image_shape: tuple) -> tuple:
  """The shape ``module`` initialises from when it trains on ``input_shape``: the images'
  for a head-only backbone (its fresh head is made for them), else the inputs'."""
  return tuple(image_shape) if head_only(module) else tuple(input_shape)


class Pretrained(nn.Module):
  """``module`` started from ``checkpoint``, training ``trainable`` only (module docstring).
  ``__call__`` is the classifier interface: logits, or (logits, features), from images, or
  with ``trainable='head'`` from the features ``features`` computed ([N, D])."""

  module: nn.Module
  checkpoint: str = ""
  trainable: str = "all"
  image_size: int = 0  # > 0: images resized to image_size x image_size first

  @property
  def num_classes(self) -> int:
    return self.module.num_classes

  def _input_shape(self, x: jnp.ndarray) -> tuple[int, int, int]:
    h, w, c = x.shape[-3:]
    return (self.image_size, self.image_size, c) if self.image_size else (h, w, c)

  @nn.compact
  def __call__(self, x: jnp.ndarray, with_features: bool = False, train: bool = False):
    check_trainable(self.trainable)
    if x.ndim == 2:
      return self._head(x, with_features)
    shape = self._input_shape(x)
    trainable = self.param(
        "trainable", lambda key: split(start(self.module, self.checkpoint, key, shape),
                                       self.trainable)[0])
    frozen = jax.tree.map(jnp.asarray, frozen_weights(self.module, self.checkpoint,
                                                      self.trainable, shape))
    if self.image_size:
      x = jax.image.resize(x, x.shape[:-3] + shape, "bilinear")
    rngs = {"dropout": self.make_rng("dropout")} if train and self.has_rng("dropout") else {}
    return self.module.apply({"params": merge(trainable, frozen)}, x,
                             with_features=with_features, train=train, rngs=rngs)

  def _head(self, x: jnp.ndarray, with_features: bool):
    """The head alone on features [B, D] (``features``): x @ kernel + bias."""
    if self.trainable != "head":
      raise ConfigError(f"a [batch, features] input reaches the head alone, which needs "
                        f"trainable='head' (got {self.trainable!r}): pass images.")
    if self.is_initializing():
      raise ConfigError("a head-only backbone initialises from images (its fresh head is "
                        "made for their features): init it with an image batch "
                        "(backbone.init_shape), then train on features.")
    head = self.param("trainable", lambda key: None)["head"]
    logits = x @ head["kernel"] + head["bias"]
    return (logits, x) if with_features else logits
