"""A public pretrained backbone in the classifiers' place (models.backbone, plan.backbone):
what trains and what stays frozen, the frozen part shared by an ensemble, the checkpoint's
weights reaching the logits, and the switch for every method's classifiers."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import tensorflow_datasets as tfds

from dgd_jax.configs import dgd as dgd_config
from dgd_jax.configs import dpdfd as dpdfd_config
from dgd_jax.configs import dpsgd as dpsgd_config
from dgd_jax.models import backbone, pretrained
from dgd_jax.models.backbone import Pretrained
from dgd_jax.models.vit import ViT
from dgd_jax.plan import artefacts
from dgd_jax.plan import backbone as backbone_plan
from dgd_jax.plan import dpsgd as dpsgd_plan
from dgd_jax.plan import queries as query_plan
from dgd_jax.runner import pipeline
from dgd_jax.stages import teachers as teachers_stage
from dgd_jax.runtime.errors import ConfigError, WorkdirConflictError
from dgd_jax.training import train
import tiny_configs

SHAPE = (32, 32, 3)
TINY = "mu/4"  # the CPU presets' ViT


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """A 'public' checkpoint: a tiny ViT with a 7-way head from a random init, saved."""
  path = str(tmp_path_factory.mktemp("ckpt") / "vit.npz")
  source = ViT(num_classes=7, variant=TINY)
  params = source.init(jax.random.key(3), jnp.zeros((1,) + SHAPE))["params"]
  params["head"]["kernel"] = jax.random.normal(jax.random.key(4), params["head"]["kernel"].shape)
  pretrained.save_npz(path, params)
  return path, params


def leaves(tree) -> dict:
  return {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.parametrize("trainable, trained", [
    ("all", None), ("head", ("head",)), ("last:1", ("head", "encoder_norm", "encoderblock_1"))])
def test_only_what_trains_is_a_parameter(checkpoint, trainable, trained):
  path, source = checkpoint
  model = Pretrained(ViT(num_classes=10, variant=TINY), path, trainable)
  params = model.init(jax.random.key(0), jnp.zeros((2,) + SHAPE))["params"]["trainable"]
  names = leaves(params)
  if trained is None:
    assert len(names) == len(leaves(source))
  else:
    assert names and all(any(t in n for t in trained) for n in names), names
    assert not any("embedding" in n or "encoderblock_0" in n for n in names)
  head = params["head"]["kernel"]
  assert head.shape[-1] == 10  # a fresh head of the new classes
  for name, value in names.items():  # everything else starts from the checkpoint
    if "head" not in name:
      np.testing.assert_array_equal(value, leaves(source)[name])


def test_the_checkpoint_reaches_the_logits_and_frozen_weights_get_no_gradient(checkpoint):
  path, source = checkpoint
  x = jax.random.uniform(jax.random.key(1), (4,) + SHAPE, minval=-1, maxval=1)
  model = Pretrained(ViT(num_classes=7, variant=TINY), path, "head")
  params = model.init(jax.random.key(0), x)
  params = jax.tree.map(lambda a: a, params)
  params["params"]["trainable"]["head"] = source["head"]  # the checkpoint's own head
  ours = model.apply(params, x)
  theirs = ViT(num_classes=7, variant=TINY).apply({"params": source}, x)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
  assert np.abs(ours).max() > 0.1
  logits, features = model.apply(params, x, with_features=True)
  assert features.shape[0] == 4 and logits.shape == (4, 7)
  grads = jax.grad(lambda p: model.apply(p, x).sum())(params)
  assert set(grads["params"]["trainable"]) == {"head"}  # nothing else to move

  # Another checkpoint file at the same path moves the frozen features.
  other = jax.tree.map(lambda a: a + 0.1, source)
  other_path = path.replace(".npz", "_other.npz")
  pretrained.save_npz(other_path, other)
  moved = Pretrained(ViT(num_classes=7, variant=TINY), other_path, "head").apply(params, x)
  assert not np.allclose(moved, ours)


def test_an_ensemble_shares_the_frozen_backbone(checkpoint):
  """Vmapped over three members' heads, the frozen part stays one unbatched constant: the
  members' logits equal three separate applies, and the ensemble's parameters are heads."""
  path, _ = checkpoint
  model = Pretrained(ViT(num_classes=10, variant=TINY), path, "head")
  x = jax.random.uniform(jax.random.key(1), (5,) + SHAPE, minval=-1, maxval=1)
  keys = jax.random.split(jax.random.key(0), 3)
  stacked = jax.vmap(lambda k: model.init(k, x[:1]))(keys)
  stacked = jax.tree.map(lambda a: a + jax.random.normal(jax.random.key(9), a.shape) * 0.1,
                         stacked)
  together = jax.vmap(lambda p: model.apply(p, x))(stacked)
  for i in range(3):
    alone = model.apply(jax.tree.map(lambda a, i=i: a[i], stacked), x)
    np.testing.assert_allclose(together[i], alone, rtol=1e-5, atol=1e-5)
  sizes = sum(a.size for a in jax.tree.leaves(stacked))
  assert sizes == 3 * (64 * 10 + 10)  # three heads of width 64, nothing else


def test_a_head_trains_with_adam_on_the_frozen_features(checkpoint):
  path, _ = checkpoint
  model = Pretrained(ViT(num_classes=3, variant=TINY), path, "head")
  rng = np.random.default_rng(0)
  x = rng.uniform(-1, 1, (64,) + SHAPE).astype(np.float32)
  y = (x[..., 0].mean((1, 2)) > 0).astype(np.int32)
  x, y = jnp.asarray(x), jnp.asarray(y)
  state = train.create_train_state(model, optax.adam(1e-2), jax.random.key(0), SHAPE)
  step = jax.jit(lambda s, k: train.train_step(s, k, x, y, 32))
  before = train.accuracy(model.apply, state.params, np.asarray(x), np.asarray(y))
  for i in range(60):
    state, _ = step(state, jax.random.key(i))
  after = train.accuracy(model.apply, state.params, np.asarray(x), np.asarray(y))
  assert after > max(before, 0.7), (before, after)


def test_a_head_trains_on_features_computed_once_as_on_the_images(checkpoint):
  """Head-only: the frozen features, computed once in padded batches, give the same logits
  and the same training steps as the images they came from."""
  path, _ = checkpoint
  model = Pretrained(ViT(num_classes=3, variant=TINY), path, "head")
  rng = np.random.default_rng(1)
  x = rng.uniform(-1, 1, (12,) + SHAPE).astype(np.float32)
  y = jnp.asarray(rng.integers(0, 3, 12), jnp.int32)
  feats = backbone.features(model, x, batch=5)  # 5 + 5 + 2, the last padded
  np.testing.assert_allclose(feats, backbone.features(model, x, batch=16), rtol=1e-5, atol=1e-5)
  assert feats.shape == (12, artefacts.feature_programs(model, SHAPE)[1][0])
  states = [train.create_train_state(model, optax.adam(1e-1), jax.random.key(0), SHAPE)] * 2
  for i in range(3):
    states = [train.train_step(s, jax.random.key(i), jnp.asarray(inputs), y, 4)[0]
              for s, inputs in zip(states, (x, feats))]
  on_images, on_features = states
  assert not np.allclose(leaves(on_images.params)["['params']['trainable']['head']['kernel']"],
                         0)  # trained away from the zero init
  np.testing.assert_allclose(model.apply(on_images.params, x),
                             model.apply(on_features.params, feats), rtol=1e-4, atol=1e-4)
  for a, b in zip(jax.tree.leaves(on_images.params), jax.tree.leaves(on_features.params)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  with pytest.raises(ConfigError, match="initialises from images"):
    model.init(jax.random.key(0), jnp.asarray(feats))
  full = Pretrained(ViT(num_classes=3, variant=TINY), path, "all")
  with pytest.raises(ConfigError, match="needs trainable='head'"):
    full.apply(states[0].params, jnp.asarray(feats))
  with pytest.raises(ConfigError, match="trainable='head'"):
    backbone.features(full, x)
  assert artefacts.teacher_inputs(full, x) is x  # a fine-tuned backbone reads images


def test_bad_settings_are_refused(checkpoint, tmp_path):
  path, _ = checkpoint
  with pytest.raises(ConfigError, match="trainable='last:0'"):
    backbone.check_trainable("last:0")
  with pytest.raises(ConfigError, match="the backbone has 2 blocks"):
    Pretrained(ViT(num_classes=3, variant=TINY), path, "last:5").init(
        jax.random.key(0), jnp.zeros((1,) + SHAPE))
  with pytest.raises(ConfigError, match="does not exist"):
    Pretrained(ViT(num_classes=3, variant=TINY), str(tmp_path / "none.npz"), "head").init(
        jax.random.key(0), jnp.zeros((1,) + SHAPE))


def test_the_config_switch_serves_every_method(checkpoint):
  """DGD Table II's preset gives the teachers the ViT and keeps the CNN elsewhere; the roles
  give it to any classifier; DP-SGD takes it as its model."""
  path, _ = checkpoint
  config = dgd_config.get_config("cifar10,paper")
  assert config.num_teachers == 100 and config.privacy.max_epsilon == 3.0
  assert (config.model.backbone, config.model.variant, config.model.trainable) == (
      "vit", "B/16", "last:1")
  teacher = artefacts.teacher_model(config, 10)
  assert isinstance(teacher, Pretrained) and teacher.image_size == 224
  assert not isinstance(artefacts.classifier(config, 10), Pretrained)
  assert not isinstance(artefacts.classifier(config, 10, "student"), Pretrained)
  config.model.roles = ("teachers", "student", "baseline")
  assert isinstance(artefacts.classifier(config, 10, "student"), Pretrained)
  config.model.roles = ("teacher",)
  with pytest.raises(ConfigError, match="is not a role"):
    artefacts.classifier(config, 10, "teachers")
  config.model.roles = ("teachers",)
  config.model.trainable, config.teachers.mixup, config.teachers.augment = "head", 0.0, True
  with pytest.raises(ConfigError, match="they train on the backbone's features"):
    teachers_stage.check(config)  # a shifted image has no feature computed once
  assert dgd_config.get_config("cifar10,paper,eps10").privacy.max_epsilon == 10.0
  cpu = dgd_config.get_config("fashion_mnist,cpu,vit")
  assert (cpu.model.variant, cpu.model.trainable, cpu.model.image_size) == (
      dgd_config.CPU_VIT, "all", 0)

  dp = dpsgd_config.get_config("cifar10,backbone")
  dp.model.update(checkpoint=path, variant=TINY, image_size=0)
  model = dpsgd_plan.model_of(dp, 10)
  assert isinstance(model, Pretrained) and model.trainable == "head"
  dp.model.backbone = ""
  with pytest.raises(ConfigError, match="needs config.model.backbone"):
    dpsgd_plan.model_of(dp, 10)
  assert backbone_plan.role(None) == "baseline"
  assert "cost no epsilon" in backbone_plan.cost_note(config)  # report.md's coverage line
  assert "DP-SGD model" in backbone_plan.cost_note(dpsgd_config.get_config("cifar10,backbone"))
  assert backbone_plan.cost_note(dgd_config.get_config("fashion_mnist,cpu")) == ""
  assert backbone_plan.cost_note(dpsgd_config.get_config("fashion_mnist")) == ""


@pytest.mark.integration
def test_pate_runs_with_vit_teachers_and_dpdfd_compiles_with_a_vit_baseline(npz_file, tmp_path):
  """The switch through whole methods: PATE trains, queries and reports with ViT teachers
  (report.md's coverage line naming the backbone); DPDFD's programs build on a ViT
  baseline as its sensitive model."""
  path = str(tmp_path / "public.npz")  # a 'public' checkpoint for 28 x 28 x 1 images
  vit = ViT(num_classes=3, variant="mu/4")  # 7 x 7 patches of 4
  pretrained.save_npz(path, vit.init(jax.random.key(5), jnp.zeros((1, 28, 28, 1)))["params"])
  config = tiny_configs.pate(npz_file)
  config.model.update(backbone="vit", variant="mu/4", roles=("teachers",), checkpoint=path,
                      trainable="head")
  report = pipeline.run(config, str(tmp_path / "pate"))
  assert f"the teachers start from ViT-mu/4 at the checkpoint {path}" in (
      report["covers"]["covered"])
  assert 0 <= report["test_accuracy"] <= 1 and report["epsilon"] > 0
  # Another checkpoint at the same path is refused: the teachers were trained from the first.
  pretrained.save_npz(path, vit.init(jax.random.key(6), jnp.zeros((1, 28, 28, 1)))["params"])
  with pytest.raises(WorkdirConflictError, match="checkpoint"):
    pipeline.run(config, str(tmp_path / "pate"))
  teachers = artefacts.teacher_model(config, 10)
  assert isinstance(teachers, Pretrained) and not isinstance(
      artefacts.classifier(config, 10, "student"), Pretrained)

  # DP-SGD's reference row: the head alone on the frozen features, computed once.
  dp = dpsgd_config.get_config(f"npz:{npz_file},eps3,backbone")
  dp.model.update(checkpoint=path, variant="mu/4", image_size=0)
  dp.dpsgd.update(batch_size=128, num_steps=3, microbatch_size=32)
  programs = pipeline.compile_programs(dp)["dpsgd"]
  assert list(programs) == ["features", "dpsgd_step"]
  result = pipeline.run(dp, str(tmp_path / "dpsgd"))
  assert result["stages"]["dpsgd"]["num_params"] == 64 * 10 + 10, result["stages"]["dpsgd"]
  assert 0 <= result["test_accuracy"] <= 1
  assert "DP-SGD model start from ViT-mu/4" in result["covers"]["covered"]
  assert list(pipeline.compile_programs(config)["teachers"]) == [
      "init", "features", "train_step", "votes"]

  dgd = dgd_config.get_config(f"npz:{npz_file},cpu")  # DeepInversion matches conv outputs
  dgd.model.update(backbone="vit", variant="mu/4", roles=("baseline",))
  with pytest.raises(ConfigError, match="the ViT backbone .* has no nn.Conv layer"):
    pipeline.compile_programs(dgd)

  dpdfd = dpdfd_config.get_config(f"npz:{npz_file},cpu")
  dpdfd.model.update(backbone="vit", variant="mu/4", roles=("baseline",))
  compiled = pipeline.compile_programs(dpdfd)
  assert compiled["baseline"]["train_step"] and compiled["dpdfd"]["step"]


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_the_cifar10_vit_preset_runs_every_stage_on_mock_cifar10(tmp_path):
  """dgd.py:cifar10,cpu,vit with every schedule cut to one step (smoke), on TFDS's mock
  CIFAR-10 read through dgd_jax's builder: every stage runs at the preset's shapes."""
  with tfds.testing.mock_data(num_examples=2000):
    config = dgd_config.get_config("cifar10,cpu,vit,smoke")
    config.data_dir = str(tmp_path / "tfds")
    report = pipeline.run(config, str(tmp_path / "run"))
  # 2,000 images at eps 10: more than N // 80's 25, for the budget (query_plan)
  assert report["stages"]["teachers"]["num_teachers"] == query_plan.num_teachers_for(2000, 10.0)
  assert set(report["stages"]) >= {"baseline", "teachers", "generator", "queries", "student"}
  assert 0 <= report["test_accuracy"] <= 1 and report["epsilon"] <= 10.0
  assert "Public backbone: the teachers start from ViT-mu/8" in report["covers"]["covered"]
