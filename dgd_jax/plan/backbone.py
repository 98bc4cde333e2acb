"""The public pretrained backbone a config names (``config.model.backbone``,
``models.backbone``): which classifiers take it, and the module each gets."""
from __future__ import annotations

import functools
import hashlib
import os

import flax.linen as nn
from absl import logging

from dgd_jax.models.backbone import Pretrained, check_trainable
from dgd_jax.models.vit import ViT
from dgd_jax.runtime.errors import ConfigError

BACKBONES = ("vit",)
ROLES = ("teachers", "baseline", "student")


def role(block: str | None) -> str:
  """The role of a classifier built for ``config.<block>``: the teachers, DGD's student, or
  the baseline (every other classifier: the baseline, DPDFD's and the generator stage's
  students, the LDP model)."""
  return block if block in ("teachers", "student") else "baseline"


def takes(config, block: str | None) -> bool:
  """Whether the classifier of ``block`` is the backbone."""
  m = config.model
  if not m.backbone:
    return False
  unknown = set(m.roles) - set(ROLES)
  if unknown:
    raise ConfigError(f"config.model.roles={tuple(m.roles)}: {sorted(unknown)} is not a role; "
                      f"use some of {ROLES}.")
  return role(block) in m.roles


def head_only(config, block: str | None) -> bool:
  """Whether the classifier of ``block`` is the backbone training its head alone, on features
  computed once (``models.backbone.features``) instead of images."""
  return takes(config, block) and config.model.trainable == "head"


def classifier(config, num_classes: int) -> nn.Module:
  """The backbone classifier: ``config.model``'s ViT variant from its checkpoint, training
  ``config.model.trainable``."""
  m = config.model
  if m.backbone not in BACKBONES:
    raise ConfigError(f"config.model.backbone={m.backbone!r}: use one of {BACKBONES}, or '' "
                      "for the paper classifier.")
  if m.module:
    raise ConfigError(f"config.model.module={m.module!r} and config.model.backbone="
                      f"{m.backbone!r} both name the classifier: set one of them to ''.")
  if not m.checkpoint:
    _warn_random_init(m.variant, m.trainable)
  return Pretrained(ViT(num_classes=num_classes, variant=m.variant), m.checkpoint,
                    check_trainable(m.trainable), m.image_size)


@functools.lru_cache(maxsize=None)
def _warn_random_init(variant: str, trainable: str) -> None:
  frozen = "" if trainable == "all" else f" (and trainable={trainable!r} freezes random weights)"
  logging.warning("config.model.checkpoint is empty: the ViT-%s starts from a random init%s; "
                  "pass a public pretrained checkpoint (BUILD.md, Datasets) for a pretrained "
                  "backbone.", variant, frozen)


def _files(path: str) -> list[str]:
  return [path] if os.path.isfile(path) else sorted(
      os.path.join(d, f) for d, _, names in os.walk(path) for f in names)


@functools.lru_cache(maxsize=4)
def _content(path: str, stamp: tuple) -> str:
  del stamp  # part of the cache key: a rewritten checkpoint is read again
  h = hashlib.blake2b(digest_size=16)
  for name in _files(path):
    h.update(os.path.relpath(name, path).encode())
    with open(name, "rb") as f:
      for block in iter(lambda f=f: f.read(1 << 24), b""):
        h.update(block)
  return h.hexdigest()


def fingerprint(config) -> str:
  """'+<hash of the checkpoint's bytes>' where the run starts from a checkpoint, else '':
  bound to the workdir beside the data's fingerprint, so that another file at the same path
  is refused instead of reusing stages trained from the old one."""
  path = config.model.checkpoint if config.model.backbone else ""
  if not path or not os.path.exists(path):
    return ""  # no checkpoint, or a missing one (refused where it is read)
  stamp = tuple((f, st.st_size, st.st_mtime_ns) for f in _files(path) for st in [os.stat(f)])
  return "+" + _content(path, stamp)


def cost_note(config) -> str:
  """What the epsilon says of a public backbone the run's classifiers start from ('' where
  there is none): a sentence for report.md's coverage line."""
  m = config.model
  uses = m.backbone and (config.get("method") != "dpsgd" or config.dpsgd.model == "backbone")
  if not uses:
    return ""
  where = f"the checkpoint {m.checkpoint}" if m.checkpoint else "a random init (no checkpoint)"
  who = "DP-SGD model" if config.get("method") == "dpsgd" else ", ".join(m.roles)
  return (f" (Public backbone: the {who} start from ViT-{m.variant} at {where}; public weights "
          "and the frozen features computed from them cost no epsilon, unless the checkpoint "
          "was pretrained on data overlapping the private set.)")
