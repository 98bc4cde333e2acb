"""Public pretrained ViT weights into a model's parameter tree (``models.vit.ViT``'s layout).

Public ViT checkpoints ship as ``.npz`` files of the flattened parameter tree, keys joined by
'/' (big_vision's ``utils.load_params``; some files prefix the keys with ``params/``). Two
layouts exist and both are read, the second converted to the first, which is ``ViT``'s:

* big_vision (``models/vit.py``): ``pos_embedding`` [1, h*w, D] at the top, added to the
  patches before the class token; in each block ``LayerNorm_0``,
  ``MultiHeadDotProductAttention_0``, ``LayerNorm_1``, ``MlpBlock_0``;
* google-research/vision_transformer (the AugReg release, Steiner et al. 2021):
  ``Transformer/posembed_input/pos_embedding`` [1, 1 + h*w, D], added after the class token
  is prepended; in each block ``LayerNorm_0``, ``MultiHeadDotProductAttention_1``,
  ``LayerNorm_2``, ``MlpBlock_3``. Its class-token row is folded into ``cls`` (the token's
  input, cls + row 0, is the same), as big_vision's ``fix_old_checkpoints`` does.

An orbax checkpoint directory of either tree reads too. ``into`` copies a checkpoint into a
fresh init leaf by leaf, shapes checked, the head kept fresh (a new number of classes) where
asked, and the position embeddings resized to the model's token grid (big_vision's
``resample_posemb``, bilinear). ``save_npz`` writes big_vision's flat layout.
"""
from __future__ import annotations

import math
import os
import tempfile
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import traverse_util

from dgd_jax.runtime.errors import ConfigError

# vision_transformer's names of a block's layers -> big_vision's.
OLD_BLOCK_NAMES = {"LayerNorm_0": "LayerNorm_0",
                   "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
                   "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}
# vision_transformer's optional representation layer between the pooled features and the head.
PRE_LOGITS = "pre_logits"


def _missing_file(path: str) -> ConfigError:
  return ConfigError(f"checkpoint {path!r} does not exist: put a public ViT checkpoint there "
                     "(a big_vision / AugReg .npz, e.g. Ti_16-i21k-300ep-...npz from "
                     "gs://vit_models/augreg, or an orbax checkpoint directory).")


def _params_of(tree: Mapping) -> Mapping:
  """The parameters of a flax variables dict ``{'params': ...}``, or the tree itself."""
  inner = tree.get("params") if isinstance(tree, Mapping) else None
  return inner if isinstance(inner, Mapping) else tree


def flatten(tree: Mapping) -> dict[str, Any]:
  """A nested dict as {'a/b/c': leaf}, in the tree's order."""
  return traverse_util.flatten_dict(tree, sep="/")


def nest(flat: Mapping[str, Any]) -> dict:
  """{'a/b/c': leaf} as a nested dict."""
  return traverse_util.unflatten_dict(dict(flat), sep="/")


def to_big_vision(tree: Mapping) -> dict:
  """A ViT parameter tree in big_vision's layout (module docstring), from either layout."""
  tree = nest(flatten(tree))  # a fresh copy of the dicts; the leaves are shared
  encoder = tree.get("Transformer", {})
  fold = False
  if "posembed_input" in encoder:  # vision_transformer: always a class-token row with a cls
    tree["pos_embedding"] = encoder.pop("posembed_input")["pos_embedding"]
    fold = "cls" in tree
  elif "pos_embedding" in encoder:  # big_vision before 2022; a class-token row perhaps
    tree["pos_embedding"] = encoder.pop("pos_embedding")
    rows = tree["pos_embedding"].shape[1]
    fold = "cls" in tree and not _is_square(rows) and _is_square(rows - 1)
  for name, block in encoder.items():
    if name.startswith("encoderblock_") and "MultiHeadDotProductAttention_1" in block:
      encoder[name] = {OLD_BLOCK_NAMES.get(k, k): v for k, v in block.items()}
  if fold:
    _fold_class_row(tree)
  return tree


def _fold_class_row(tree: dict) -> None:
  """Position embeddings [1, 1 + g*g, D] whose row 0 is added to the class token (the
  original ViT code) as big_vision's [1, g*g, D] and ``cls`` + row 0: the same token inputs."""
  posemb = tree["pos_embedding"]
  tree["cls"] = tree["cls"] + posemb[:, :1]
  tree["pos_embedding"] = posemb[:, 1:]


def _is_square(n: int) -> bool:
  return n > 0 and math.isqrt(n) ** 2 == n


def load_npz(path: str) -> dict:
  """A big_vision or vision_transformer (AugReg) ``.npz`` checkpoint as a nested dict of
  NumPy arrays in big_vision's layout."""
  if not os.path.isfile(path):
    raise _missing_file(path)
  try:
    with np.load(path, allow_pickle=False) as f:
      flat = {k: f[k] for k in f.files}
  except (OSError, ValueError) as e:
    raise ConfigError(f"cannot read checkpoint {path!r} ({e}): give an .npz of the flattened "
                      "parameter tree, keys joined by '/'.") from None
  if any(k.startswith("params/") for k in flat):  # a training checkpoint: its parameters only
    flat = {k[len("params/"):]: v for k, v in flat.items() if k.startswith("params/")}
  return to_big_vision(nest(flat))


def load_orbax(path: str) -> dict:
  """The ViT parameter tree of an orbax checkpoint directory (``PyTreeCheckpointer`` or
  ``StandardCheckpointer``; the tree or ``{'params': tree}``) as NumPy arrays in big_vision's
  layout."""
  if not os.path.isdir(path):
    raise _missing_file(path)
  import orbax.checkpoint as ocp  # only here: importing orbax costs a second
  checkpointer = ocp.PyTreeCheckpointer()
  path = os.path.abspath(path)
  try:
    metadata = checkpointer.metadata(path).item_metadata
    metadata = getattr(metadata, "tree", metadata)
    # NumPy arrays: no device placement, whatever topology the checkpoint was saved on.
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata)
    tree = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=args))
  except (OSError, ValueError, FileNotFoundError) as e:
    raise ConfigError(f"cannot read orbax checkpoint {path!r} ({e}): give a directory written "
                      "by orbax's PyTreeCheckpointer or StandardCheckpointer (of a "
                      "CheckpointManager, its step's item folder).") from None
  return to_big_vision(jax.tree.map(np.asarray, dict(_params_of(tree))))


def load(path: str) -> dict:
  """``load_orbax`` for a directory, ``load_npz`` for a file."""
  return load_orbax(path) if os.path.isdir(path) else load_npz(path)


def save_npz(path: str, params: Mapping) -> None:
  """Writes a parameter tree (or ``{'params': tree}``) as a big_vision ``.npz``: one array a
  leaf, keys joined by '/'. The file appears whole or not at all (a rename)."""
  flat = {k: np.asarray(v) for k, v in flatten(_params_of(params)).items()}
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
  try:
    with os.fdopen(fd, "wb") as f:  # a file object: np.savez adds no '.npz' to the name
      np.savez(f, **flat)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def resample_posemb(posemb, tokens: int) -> jnp.ndarray:
  """Position embeddings [1, N, D] of a square token grid resized to [1, tokens, D] of another
  square grid, bilinearly as a 2D image (big_vision's ``resample_posemb``); a leading
  class-token row (N = 1 + g*g) is kept as it is."""
  extra = 0 if _is_square(posemb.shape[1]) else 1
  old, new = posemb.shape[1] - extra, tokens - extra
  if not (_is_square(old) and _is_square(new)):
    raise ConfigError(f"position embeddings of {posemb.shape[1]} tokens cannot be resized to "
                      f"{tokens}: both token grids must be square; use square images.")
  g_old, g_new = math.isqrt(old), math.isqrt(new)
  logging.info("ViT: position embeddings resized from a %dx%d grid to %dx%d.", g_old, g_old,
               g_new, g_new)
  grid = jnp.asarray(posemb[0, extra:]).reshape(g_old, g_old, -1)
  grid = jax.image.resize(grid, (g_new, g_new, grid.shape[-1]), "bilinear")
  return jnp.concatenate([jnp.asarray(posemb[:, :extra]), grid.reshape(1, new, -1)], axis=1)


def _shape_hint(key: str, ours: tuple, theirs: tuple) -> str:
  if key == "embedding/kernel" and ours[:2] == theirs[:2] and ours[2] != theirs[2]:
    return (f"the checkpoint reads {theirs[2]}-channel images, the model {ours[2]}-channel "
            f"ones: give the model {theirs[2]}-channel images.")
  return "build the ViT with the checkpoint's variant (width, depth, heads, mlp_dim, patch)."


def into(params: Mapping, pretrained: Mapping, *, reset_head: bool = True) -> dict:
  """``params`` (a model's fresh init: its parameter tree, or ``{'params': tree, ...}``) with
  every leaf of ``pretrained`` copied in, in ``params``' dtypes: shapes checked leaf by leaf;
  the head kept from ``params`` when ``reset_head`` (a new ``num_classes`` head); the position
  embeddings resized to ``params``' token grid. A missing or unexpected key or another shape
  is a ConfigError naming it."""
  wrapped = _params_of(params) is not params
  fresh = flatten(_params_of(params))
  tree = to_big_vision(_params_of(pretrained))
  if "pos_embedding" in fresh and "cls" in fresh and "cls" in tree and "pos_embedding" in tree:
    rows = tree["pos_embedding"].shape[1]
    if _is_square(fresh["pos_embedding"].shape[1]) and not _is_square(rows) and _is_square(
        rows - 1):  # a square grid's model: the extra row is a class-token row (old big_vision)
      _fold_class_row(tree)
  theirs = flatten(tree)
  if any(k.startswith(PRE_LOGITS + "/") for k in theirs):
    if not reset_head:
      raise ConfigError("the checkpoint's head reads its pre_logits layer, which ViT does not "
                        "have: load it with reset_head=True (a fresh head on the features).")
    theirs = {k: v for k, v in theirs.items() if not k.startswith(PRE_LOGITS + "/")}
  if reset_head:
    theirs = {k: v for k, v in theirs.items() if not k.startswith("head/")}
  for key in sorted(theirs):  # sorted: the same first error however the trees were built
    if key not in fresh:
      hint = " (a class token: build the ViT with pool='tok')" if key == "cls" else ""
      raise ConfigError(f"the checkpoint's {key!r} has no place in the model{hint}: build the "
                        "ViT with the checkpoint's variant and pool.")
  loaded = {}
  for key, ours in sorted(fresh.items()):
    if reset_head and key.startswith("head/"):
      loaded[key] = ours
      continue
    if key not in theirs:
      hint = " (pool='tok' without a class token: use pool='gap')" if key == "cls" else ""
      raise ConfigError(f"the checkpoint has no {key!r}{hint}: build the ViT with the "
                        "checkpoint's variant and pool, or give a checkpoint of this ViT.")
    value = theirs[key]
    if (key == "pos_embedding" and value.shape != ours.shape
        and value.shape[-1] == ours.shape[-1]):
      value = resample_posemb(value, ours.shape[1])
    if tuple(value.shape) != tuple(ours.shape):
      raise ConfigError(f"checkpoint leaf {key!r} has shape {tuple(value.shape)}, the model's "
                        f"{tuple(ours.shape)}: {_shape_hint(key, ours.shape, value.shape)}")
    loaded[key] = jnp.asarray(value, dtype=ours.dtype)
  tree = nest(loaded)
  return {**params, "params": tree} if wrapped else tree
