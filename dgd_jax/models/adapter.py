"""A classifier of your own in the paper classifier's place.

The pipeline reads two things from a classifier beyond its logits: its features, the f(.) of
DGD Eq. 2 and Eq. 6 (``with_features=True``), and the outputs of its convolutions, whose
statistics DeepInversion matches (``is_convolution``). ``WithFeatures`` gives any
``flax.linen.Module`` that maps images to logits the first: its features are the input of
the last ``nn.Dense`` layer it calls (the layer before the logits in an MLP or a CNN with a
dense head), or its logits where it calls none. Its parameters are the module's own, in the
same tree (``nn.share_scope``), so a checkpoint of the module loads either way.

Training mode: a module whose ``__call__`` takes ``train`` gets ``train=True`` in the train
steps (``training.train.training_apply``), with a ``dropout`` rng, so its ``nn.Dropout`` layers
are active there and off in evaluation. ``nn.BatchNorm`` layers are replaced by a group norm
(``group_norm``: each example normalised over its own positions and channel groups, then
BatchNorm's own scale and bias): batch statistics would mix the examples of a batch, which
DP-SGD's per-example sensitivity forbids and the vmapped train steps do not carry, so the
module keeps parameters only, in training and in evaluation alike.
"""
from __future__ import annotations

import inspect

import flax.linen as nn
import jax.numpy as jnp

from dgd_jax.models.classifier import Conv3x3


def is_convolution(module: nn.Module, method_name: str) -> bool:
  """The layers whose outputs' statistics DeepInversion matches (``capture_intermediates``):
  the paper classifier's convolutions and any ``nn.Conv``."""
  return isinstance(module, (Conv3x3, nn.Conv)) and method_name == "__call__"


GROUPS = 32  # group norm's most channel groups (Wu & He 2018's default)


def group_norm(next_fun, args, kwargs, context):
  """An ``nn.intercept_methods`` interceptor: ``nn.BatchNorm`` computed as a group norm over
  each example's positions and min(32, C) channel groups (a divisor of C), with the layer's
  own scale and bias; every other call as it is."""
  m = context.module
  if not (isinstance(m, nn.BatchNorm) and context.method_name == "__call__"):
    return next_fun(*args, **kwargs)
  x = args[0]
  c = x.shape[-1]
  g = max(d for d in range(1, min(GROUPS, c) + 1) if c % d == 0)
  xg = x.reshape(x.shape[:-1] + (g, c // g))
  axes = tuple(range(1, xg.ndim - 2)) + (xg.ndim - 1,)  # per example and group
  mean, var = xg.mean(axes, keepdims=True), xg.var(axes, keepdims=True)
  y = ((xg - mean) * jnp.reciprocal(jnp.sqrt(var + m.epsilon))).reshape(x.shape)
  if m.use_scale:
    y = y * m.param("scale", m.scale_init, (c,), m.param_dtype)
  if m.use_bias:
    y = y + m.param("bias", m.bias_init, (c,), m.param_dtype)
  return y


def takes_train(module: nn.Module) -> bool:
  """Whether the module's ``__call__`` takes a ``train`` argument."""
  return "train" in inspect.signature(type(module).__call__).parameters


class WithFeatures(nn.Module):
  """``module`` (images -> logits), answering ``with_features=True`` with (logits, the input
  of its last ``nn.Dense``) as the paper classifier does; ``train`` reaches a module that
  takes it; BatchNorm runs as ``group_norm``."""

  module: nn.Module

  def setup(self):
    nn.share_scope(self, self.module)  # the module's parameter tree, not nested under ours

  @property
  def num_classes(self) -> int:
    return self.module.num_classes

  def _logits(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
    with nn.intercept_methods(group_norm):
      return self.module(x, train=train) if takes_train(self.module) else self.module(x)

  def __call__(self, x: jnp.ndarray, with_features: bool = False, train: bool = False):
    if not with_features:
      logits = self._logits(x, train)
      state = set(self.variables) - {"params"} if self.is_initializing() else set()
      if state:  # the train steps update parameters only
        raise ValueError(
            f"{type(self.module).__name__} keeps variables besides its parameters "
            f"({sorted(state)}), which dgd_jax's train steps do not update: keep its state in "
            "parameters (BatchNorm is run as a group norm here).")
      return logits
    dense_inputs = []

    def record(next_fun, args, kwargs, context):
      if isinstance(context.module, nn.Dense) and context.method_name == "__call__":
        dense_inputs.append(args[0])
      return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
      logits = self._logits(x, train)
    return logits, (dense_inputs[-1] if dense_inputs else logits)
