"""The Vision Transformer (models.vit) and public pretrained checkpoints (models.pretrained):
shapes and parameter counts, vmapped ensembles, the npz / AugReg / orbax round trips, the
position embeddings' resize, and the errors a wrong checkpoint gets."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.models import ViT, pretrained
from dgd_jax.models.vit import PatchEmbedding
from dgd_jax.runtime.errors import ConfigError

SHAPE = (32, 32, 3)
TINY = dict(variant="", width=16, depth=2, mlp_dim=32, num_heads=2, patch_size=4)


def tiny(num_classes: int = 10, **kw) -> ViT:
  return ViT(num_classes=num_classes, **{**TINY, **kw})


def images(n: int, shape=SHAPE, seed: int = 1) -> jnp.ndarray:
  return jax.random.uniform(jax.random.key(seed), (n,) + shape, minval=-1, maxval=1)


@functools.lru_cache(maxsize=None)
def jitted(model: ViT, method: str = "apply"):
  """``model.apply`` or ``model.init`` compiled once per model (eager ops would compile one
  by one)."""
  return jax.jit(getattr(model, method), static_argnames=("with_features", "train"))


def init(model: ViT, shape=SHAPE, seed: int = 0) -> dict:
  return jitted(model, "init")(jax.random.key(seed), jnp.zeros((1,) + shape))["params"]


def apply(model: ViT, params: dict, x: jnp.ndarray, **kw):
  return jitted(model)({"params": params}, x, **kw)


def randomised_head(params: dict, seed: int = 5) -> dict:
  """The head is zero at init (big_vision's fine-tuning head): random weights so the logits
  depend on the backbone."""
  head = params["head"]
  k1, k2 = jax.random.split(jax.random.key(seed))
  return {**params, "head": {"kernel": jax.random.normal(k1, head["kernel"].shape),
                             "bias": jax.random.normal(k2, head["bias"].shape)}}


def leaves(tree) -> dict:
  return pretrained.flatten(tree)


@pytest.fixture(scope="module")
def source():
  """A 'pretrained' tiny ViT (random init with a random head) and its images."""
  model = tiny(num_classes=7)
  params = randomised_head(init(model, seed=3))
  return model, params


@pytest.fixture(scope="module")
def npz(source, tmp_path_factory):
  path = str(tmp_path_factory.mktemp("ckpt") / "vit.npz")
  pretrained.save_npz(path, {"params": source[1]})
  return path


def test_shapes_features_and_leading_batch_dims():
  model = tiny()
  params = init(model)
  x = images(4)
  logits, features = apply(model, params, x, with_features=True)
  assert logits.shape == (4, 10) and features.shape == (4, 16)
  np.testing.assert_array_equal(logits, 0.0)  # the zero-initialised head
  out = apply(model, params, x.reshape((2, 2) + SHAPE))
  assert out.shape == (2, 2, 10)
  gap = tiny(pool="gap")
  gap_params = init(gap)
  assert "cls" not in gap_params
  assert apply(gap, gap_params, x, with_features=True)[1].shape == (4, 16)
  tree = jax.tree.map(jnp.shape, params)
  block = tree["Transformer"]["encoderblock_1"]
  assert set(block) == {"LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1",
                        "MlpBlock_0"}
  assert set(block["MultiHeadDotProductAttention_0"]) == {"query", "key", "value", "out"}
  assert tree["embedding"]["kernel"] == (4, 4, 3, 16) and tree["cls"] == (1, 1, 16)
  assert tree["pos_embedding"] == (1, 64, 16) and "encoder_norm" in tree["Transformer"]


def test_patch_embedding_equals_a_strided_convolution():
  x = images(2, (12, 8, 3))
  layer = PatchEmbedding(5, 4)
  variables = layer.init(jax.random.key(0), x)
  p = variables["params"]
  expected = jax.lax.conv_general_dilated(
      x, p["kernel"], (4, 4), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["bias"]
  np.testing.assert_allclose(layer.apply(variables, x), expected, rtol=1e-5, atol=1e-5)


def test_parameter_counts_of_the_public_variants():
  """ViT-Ti/16 and B/16 at 224x224 with a 1000-way head (shapes only): timm's 5,717,416 and
  86,567,656 less the class token's position-embedding row, which big_vision's layout folds
  into ``cls``."""
  def count(variant):
    shapes = jax.eval_shape(lambda: ViT(num_classes=1000, variant=variant).init(
        jax.random.key(0), jnp.zeros((1, 224, 224, 3))))
    return sum(x.size for x in jax.tree.leaves(shapes))
  assert count("Ti/16") == 5_717_416 - 192
  assert count("B/16") == 86_567_656 - 768
  assert ViT(variant="mu/4").dims() == dict(width=64, depth=2, mlp_dim=256, num_heads=4,
                                            patch_size=4)


def test_vmapped_parameters_equal_separate_applies():
  model = tiny()
  x = images(5)
  stacked = jax.vmap(lambda k: randomised_head(
      jitted(model, "init")(k, x[:1])["params"], 0))(jax.random.split(jax.random.key(0), 3))
  stacked = jax.tree.map(lambda a: a + 0.1 * jax.random.normal(jax.random.key(9), a.shape),
                         stacked)
  together = jax.vmap(lambda p: apply(model, p, x))(stacked)
  for i in range(3):
    alone = apply(model, jax.tree.map(lambda a, i=i: a[i], stacked), x)
    np.testing.assert_allclose(together[i], alone, rtol=1e-5, atol=1e-5)
  assert not np.allclose(together[0], together[1])


def test_dropout_only_in_training(source):
  _, params = source
  model = tiny(num_classes=7, dropout=0.5)
  x = images(3)
  evaluation = apply(model, params, x)
  np.testing.assert_allclose(evaluation, apply(tiny(num_classes=7), params, x))
  trained = [apply(model, params, x, train=True, rngs={"dropout": jax.random.key(i)})
             for i in range(2)]
  assert not np.allclose(trained[0], trained[1]) and not np.allclose(trained[0], evaluation)


def test_npz_round_trip(source, npz):
  model, params = source
  x = images(4)
  expected = apply(model, params, x)
  loaded = pretrained.into({"params": init(model, seed=11)}, pretrained.load_npz(npz),
                           reset_head=False)
  np.testing.assert_array_equal(apply(model, loaded["params"], x), expected)

  # One changed weight in the file changes the logits.
  flat = leaves(params)
  key = "Transformer/encoderblock_1/MlpBlock_0/Dense_1/kernel"
  flat[key] = flat[key] + 1.0
  changed = npz.replace(".npz", "_changed.npz")
  np.savez(changed, **{f"params/{k}": np.asarray(v) for k, v in flat.items()})  # prefixed
  moved = pretrained.into(init(model), pretrained.load(changed), reset_head=False)
  assert not np.allclose(apply(model, moved, x), expected)

  # A new head of another number of classes; the backbone is the checkpoint's.
  other = tiny(num_classes=3)
  fresh = init(other, seed=4)
  reset = pretrained.into(fresh, pretrained.load(npz))
  assert reset["head"]["kernel"].shape == (16, 3)
  np.testing.assert_array_equal(reset["head"]["kernel"], fresh["head"]["kernel"])
  ours, theirs = leaves(reset), leaves(params)
  assert set(ours) == set(theirs)
  for name, value in ours.items():
    if not name.startswith("head/"):
      np.testing.assert_array_equal(value, theirs[name], err_msg=name)
  assert apply(other, reset, x).shape == (4, 3)


def augreg_names(params: dict, class_row: np.ndarray) -> dict:
  """``params`` as google-research/vision_transformer names them: the position embeddings in
  the encoder with a class-token row (added to ``cls``), the blocks' layers renumbered."""
  renamed = {"MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
             "LayerNorm_1": "LayerNorm_2", "MlpBlock_0": "MlpBlock_3"}
  flat = {}
  for key, value in leaves(params).items():
    parts = key.split("/")
    if parts[0] == "Transformer" and parts[1].startswith("encoderblock_"):
      parts[2] = renamed.get(parts[2], parts[2])
    flat["/".join(parts)] = np.asarray(value)
  posemb = flat.pop("pos_embedding")
  flat["Transformer/posembed_input/pos_embedding"] = np.concatenate([class_row, posemb], 1)
  flat["cls"] = flat["cls"] - class_row
  return flat


def test_augreg_names_convert(source, tmp_path):
  model, params = source
  row = np.asarray(jax.random.normal(jax.random.key(2), (1, 1, 16)))
  flat = augreg_names(params, row)
  path = str(tmp_path / "augreg.npz")
  np.savez(path, **flat)
  loaded = pretrained.load_npz(path)
  assert "posembed_input" not in loaded["Transformer"]
  ours, theirs = leaves(loaded), leaves(params)
  assert set(ours) == set(theirs)
  for name, value in ours.items():
    np.testing.assert_allclose(value, theirs[name], rtol=1e-6, atol=1e-6, err_msg=name)
  x = images(4)
  np.testing.assert_allclose(
      apply(model, pretrained.into(init(model), loaded, reset_head=False), x),
      apply(model, params, x), rtol=1e-5, atol=1e-5)

  # A representation layer (pre_logits) is dropped with the head, refused under its head.
  flat["pre_logits/kernel"] = np.zeros((16, 16), np.float32)
  flat["pre_logits/bias"] = np.zeros((16,), np.float32)
  np.savez(path, **flat)
  assert "pre_logits" in pretrained.load_npz(path)
  assert "pre_logits" not in pretrained.into(init(model), pretrained.load_npz(path))
  with pytest.raises(ConfigError, match="pre_logits.*reset_head=True"):
    pretrained.into(init(model), pretrained.load_npz(path), reset_head=False)


def test_position_embeddings_resize_to_another_grid(source):
  """A checkpoint from 32x32 images (8x8 patches of 4) in a model on 48x48 ones (12x12)."""
  _, params = source
  model = tiny(num_classes=7)
  big = (48, 48, 3)
  loaded = pretrained.into(init(model, big), params, reset_head=False)
  assert loaded["pos_embedding"].shape == (1, 144, 16)
  np.testing.assert_array_equal(loaded["cls"], params["cls"])  # the class token as it was
  grid = params["pos_embedding"].reshape(8, 8, 16)
  np.testing.assert_allclose(loaded["pos_embedding"].reshape(12, 12, 16),
                             jax.image.resize(grid, (12, 12, 16), "bilinear"), rtol=1e-6)
  assert apply(model, loaded, images(2, big)).shape == (2, 7)

  # With a class-token row in front (the original ViT layout), that row is kept.
  with_row = jnp.concatenate([params["cls"], params["pos_embedding"]], axis=1)
  resized = pretrained.resample_posemb(with_row, 1 + 144)
  np.testing.assert_array_equal(resized[:, :1], params["cls"])
  np.testing.assert_allclose(resized[:, 1:], loaded["pos_embedding"], rtol=1e-6)


def test_orbax_round_trip(source, tmp_path):
  import orbax.checkpoint as ocp
  model, params = source
  x = images(3)
  expected = apply(model, params, x)
  for name, checkpointer, tree in [("pytree", ocp.PyTreeCheckpointer(), {"params": params}),
                                   ("standard", ocp.StandardCheckpointer(), params)]:
    path = str(tmp_path / name)
    checkpointer.save(path, tree)
    if hasattr(checkpointer, "wait_until_finished"):
      checkpointer.wait_until_finished()
    loaded = pretrained.load(path)  # a directory: orbax
    assert all(isinstance(v, np.ndarray) for v in jax.tree.leaves(loaded))
    out = apply(model, pretrained.into(init(model), loaded, reset_head=False), x)
    np.testing.assert_array_equal(out, expected)


def test_a_wrong_checkpoint_is_refused_by_name(source, npz, tmp_path):
  _, params = source
  with pytest.raises(ConfigError, match=r"'Transformer/encoderblock_0/MlpBlock_0/Dense_0/"
                     r"bias' has shape \(32,\), the model's \(48,\)"):  # first in order
    pretrained.into(init(tiny(mlp_dim=48)), params)
  with pytest.raises(ConfigError, match="3-channel images, the model 1-channel"):
    pretrained.into(init(tiny(), (32, 32, 1)), params)
  missing = str(tmp_path / "nowhere.npz")
  for load in (pretrained.load, pretrained.load_npz, pretrained.load_orbax):
    with pytest.raises(ConfigError, match="nowhere.npz' does not exist: put a public ViT"):
      load(missing)
  short = {k: v for k, v in leaves(params).items() if k != "Transformer/encoder_norm/scale"}
  with pytest.raises(ConfigError, match="no 'Transformer/encoder_norm/scale'"):
    pretrained.into(init(tiny()), pretrained.nest(short))
  with pytest.raises(ConfigError, match="'cls' has no place in the model.*pool='tok'"):
    pretrained.into(init(tiny(pool="gap")), params)
  deeper = init(tiny(depth=3), seed=2)
  with pytest.raises(ConfigError, match="no 'Transformer/encoderblock_2/"):
    pretrained.into(deeper, params)
  garbage = tmp_path / "garbage.npz"
  garbage.write_bytes(b"not a zip file")
  with pytest.raises(ConfigError, match="cannot read checkpoint"):
    pretrained.load_npz(str(garbage))
  (tmp_path / "empty").mkdir()
  with pytest.raises(ConfigError, match="cannot read orbax checkpoint"):
    pretrained.load(str(tmp_path / "empty"))


def test_bad_model_settings_are_refused():
  x = jnp.zeros((1,) + SHAPE)
  with pytest.raises(ConfigError, match="variant='X/16'"):
    ViT(variant="X/16").init(jax.random.key(0), x)
  with pytest.raises(ConfigError, match="do not split into 16x16 patches"):
    ViT(variant="Ti/16").init(jax.random.key(0), jnp.zeros((1, 28, 28, 3)))
  with pytest.raises(ConfigError, match="leaves patch_size unset"):
    ViT(variant="Ti").init(jax.random.key(0), x)
  with pytest.raises(ConfigError, match="pool='map'"):
    tiny(pool="map").init(jax.random.key(0), x)
  with pytest.raises(ConfigError, match="not a multiple of num_heads"):
    tiny(num_heads=3).init(jax.random.key(0), x)
