"""A classifier of your own in the paper classifier's place.

The pipeline reads two things from a classifier beyond its logits: its features, the f(.) of
DGD Eq. 2 and Eq. 6 (``with_features=True``), and the outputs of its convolutions, whose
statistics DeepInversion matches (``is_convolution``). ``WithFeatures`` gives any
``flax.linen.Module`` that maps images to logits the first: its features are the input of
the last ``nn.Dense`` layer it calls (the layer before the logits in an MLP or a CNN with a
dense head), or its logits where it calls none. Its parameters are the module's own, in the
same tree (``nn.share_scope``), so a checkpoint of the module loads either way. The module
keeps no other variables (no BatchNorm running statistics): the train steps update parameters
only.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from dgd_jax.models.classifier import Conv3x3


def is_convolution(module: nn.Module, method_name: str) -> bool:
  """The layers whose outputs' statistics DeepInversion matches (``capture_intermediates``):
  the paper classifier's convolutions and any ``nn.Conv``."""
  return isinstance(module, (Conv3x3, nn.Conv)) and method_name == "__call__"


class WithFeatures(nn.Module):
  """``module`` (images -> logits), answering ``with_features=True`` with (logits, the input
  of its last ``nn.Dense``) as the paper classifier does."""

  module: nn.Module

  def setup(self):
    nn.share_scope(self, self.module)  # the module's parameter tree, not nested under ours

  @property
  def num_classes(self) -> int:
    return self.module.num_classes

  def __call__(self, x: jnp.ndarray, with_features: bool = False):
    if not with_features:
      logits = self.module(x)
      state = set(self.variables) - {"params"} if self.is_initializing() else set()
      if state:  # the train steps update parameters only
        raise ValueError(
            f"{type(self.module).__name__} keeps variables besides its parameters "
            f"({sorted(state)}, e.g. BatchNorm's running statistics), which dgd_jax's train "
            "steps do not update: use nn.LayerNorm or nn.GroupNorm, or "
            "nn.BatchNorm(use_running_average=True).")
      return logits
    dense_inputs = []

    def record(next_fun, args, kwargs, context):
      if isinstance(context.module, nn.Dense) and context.method_name == "__call__":
        dense_inputs.append(args[0])
      return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
      logits = self.module(x)
    return logits, (dense_inputs[-1] if dense_inputs else logits)
