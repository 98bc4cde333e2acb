"""The teacher ensemble: lifting equals a loop, sharding equals one device, votes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.models.classifier import Classifier
from dgd_jax.training import ensemble
from dgd_jax.training import placement
from dgd_jax.training import train

N, BATCH, SHAPE = 3, 8, (28, 28, 1)


def setup_ensemble(n=N, chunk=1):
  model = Classifier(width=0.125)
  tx = train.optimizer(train.FitConfig(num_steps=10))
  state = ensemble.init_teachers(model, tx, jax.random.key(0), n, SHAPE,
                                 placement.teacher_mesh(n, jax.devices()[:1]))
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.uniform(-1, 1, (n * 16,) + SHAPE), jnp.float32)
  y = jnp.asarray(rng.integers(0, 10, n * 16), jnp.int32)
  parts = ensemble.Partitions.stack([np.arange(i * 16, i * 16 + 16 - i) for i in range(n)])
  return model, tx, state, x, y, parts


@pytest.mark.integration
@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_lifted_step_equals_loop_over_members(chunk):
  model, tx, state, x, y, parts = setup_ensemble()
  mesh = placement.teacher_mesh(N, jax.devices()[:1])
  step = ensemble.make_train_step(mesh, BATCH, chunk)
  key = jax.random.key(5)
  keys = jax.random.split(key, N)
  looped = []
  for i in range(N):  # the same member code, one teacher at a time, same keys
    member = train.create_train_state(model, tx, jax.random.split(jax.random.key(0), N)[i],
                                      SHAPE)
    member, metrics = ensemble.member_step(member, keys[i], x, y, jnp.asarray(parts.indices[i]),
                                           parts.sizes[i], BATCH)
    looped.append((member.params, metrics["loss"]))
  new_state, metrics = step(state, key, *ensemble.place_examples(mesh, parts, np.asarray(x),
                                                                 np.asarray(y)))
  for i, (params, loss) in enumerate(looped):
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[i], new_state.params), params,
                                rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["loss"][i], loss, rtol=1e-5)


@pytest.mark.integration
def test_members_sample_only_their_partition():
  # Member 1 owns examples 16..30; labels elsewhere are 0, on its partition 7: after
  # training on its own data only, it predicts 7 everywhere.
  model, tx, state, x, _, parts = setup_ensemble()
  y = np.zeros(len(x), np.int32)
  y[parts.indices[1, :parts.sizes[1]]] = 7
  mesh = placement.teacher_mesh(N, jax.devices()[:1])
  step = ensemble.make_train_step(mesh, BATCH, 1)
  examples = ensemble.place_examples(mesh, parts, np.asarray(x), y)
  for s in range(10):
    state, _ = step(state, jax.random.key(s), *examples)
  labels = ensemble.teacher_predictions(ensemble.make_predict_fn(mesh, model.apply, 1),
                                        state.params, np.asarray(x))
  assert np.all(labels[1] == 7) and np.all(labels[0] == 0) and np.all(labels[2] == 0)


@pytest.mark.integration
def test_vote_histograms_sum_to_teachers_and_match_predictions():
  model, _, state, x, _, _ = setup_ensemble()
  mesh = placement.teacher_mesh(N, jax.devices()[:1])
  predict = ensemble.make_predict_fn(mesh, model.apply, 2)
  queries = np.asarray(x)[:37]  # not a multiple of the query chunk
  votes = ensemble.vote_histograms(predict, state.params, queries, 10, query_chunk=16)
  labels = ensemble.teacher_predictions(predict, state.params, queries, query_chunk=16)
  assert votes.shape == (37, 10) and labels.shape == (N, 37)
  np.testing.assert_array_equal(votes.sum(axis=1), N)
  expected = np.stack([np.bincount(labels[:, q], minlength=10) for q in range(37)])
  np.testing.assert_array_equal(votes, expected)
  for i in range(N):
    np.testing.assert_array_equal(
        labels[i], np.argmax(model.apply(jax.tree.map(lambda a: a[i], state.params), queries),
                             -1))


def test_localize_gives_each_shard_its_teachers_examples_once():
  # Four members, two of them overlapping (a sweep), over two shards.
  parts = ensemble.Partitions.stack([np.array([9, 3]), np.array([3, 4, 5]), np.array([0]),
                                     np.array([7, 8])])
  rows, local = parts.localize(2)
  assert rows.shape == (2, 4)  # shard 0: {3, 4, 5, 9}; shard 1: {0, 7, 8} padded
  assert set(rows[0]) == {3, 4, 5, 9} and set(rows[1]) == {0, 7, 8}
  np.testing.assert_array_equal(local.sizes, parts.sizes)
  for i in range(4):
    size = parts.sizes[i]
    np.testing.assert_array_equal(rows[i // 2][local.indices[i, :size]],
                                  parts.indices[i, :size])
  with pytest.raises(Exception, match="equal shards"):
    parts.localize(3)


def test_partitions_stack_pads_and_records_sizes():
  parts = ensemble.Partitions.stack([np.array([5, 6, 7]), np.array([1])])
  np.testing.assert_array_equal(parts.indices, [[5, 6, 7], [1, 0, 0]])
  np.testing.assert_array_equal(parts.sizes, [3, 1])


SHARDED_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from dgd_jax.training import ensemble, placement, train
    from dgd_jax.models.classifier import Classifier
    assert jax.device_count() == 8, jax.devices()
    n = 16
    model = Classifier(width=0.125)
    tx = train.optimizer(train.FitConfig(num_steps=10))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n * 8, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, n * 8).astype(np.int32)
    parts = ensemble.Partitions.stack(list(np.arange(n * 8, dtype=np.int32).reshape(n, 8)))
    out = {}
    for name, devices in (("one", jax.devices()[:1]), ("eight", jax.devices())):
      mesh = placement.teacher_mesh(n, devices)
      state = ensemble.init_teachers(model, tx, jax.random.key(0), n, (28, 28, 1), mesh)
      step = ensemble.make_train_step(mesh, 4, 1)
      args = ensemble.place_examples(mesh, parts, x, y)
      for s in range(3):
        state, metrics = step(state, jax.random.key(s), *args)
      predict = ensemble.make_predict_fn(mesh, model.apply, 1)
      votes = ensemble.vote_histograms(predict, state.params, np.asarray(x), 10, 40)
      out[name] = (jax.device_get(state.params), np.asarray(metrics["loss"]), votes,
                   len(state.params["params"]["head"]["bias"].sharding.device_set))
    assert out["one"][3] == 1 and out["eight"][3] == 8, (out["one"][3], out["eight"][3])
    for a, b in zip(jax.tree.leaves(out["one"][0]), jax.tree.leaves(out["eight"][0])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["one"][1], out["eight"][1], rtol=1e-4)
    np.testing.assert_array_equal(out["one"][2], out["eight"][2])
    print("SHARDED_OK")
""")


@pytest.mark.integration
def test_sharded_equals_single_device_on_8_cpu_devices():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu")
  done = subprocess.run([sys.executable, "-c", SHARDED_SCRIPT], env=env, capture_output=True,
                        text=True, timeout=300)
  assert "SHARDED_OK" in done.stdout, done.stderr[-3000:]


def test_teacher_mesh_uses_a_divisor_of_the_teacher_count():
  devices = jax.devices()[:1] * 8  # stand-ins: only the count matters here
  assert placement.teacher_mesh(250, devices).devices.size == 5
  assert placement.teacher_mesh(16, devices).devices.size == 8
  assert placement.teacher_mesh(7, devices).devices.size == 7


@pytest.mark.integration
def test_bench_prints_one_json_line():
  from dgd_jax.cli import bench
  # Hand count for the paper CNN on 28x28x1: conv1 2*784*9*64, conv2 2*196*9*64*128,
  # head 2*49*128*10; training = 3x forward minus conv1's input gradient.
  assert bench.train_flops_per_example(28, 1, 64, 128) == 3 * (903168 + 28901376 + 125440) \
      - 903168
  done = subprocess.run(
      [sys.executable, "-m", "dgd_jax.bench", "teachers", "--teachers=4", "--batch=4",
       "--steps=1", "--conv1=4", "--conv2=8", "--examples_per_teacher=8"],
      capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  import json
  result = json.loads(done.stdout.strip().splitlines()[-1])
  assert result["teachers"] == 4 and result["examples_per_second"] > 0
  assert 0 < result["fraction_of_matmul_peak"] < 1.5
  done = subprocess.run(
      [sys.executable, "-m", "dgd_jax.bench", "step", "--batch=4", "--steps=1", "--conv1=4",
       "--conv2=8"], capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  result = json.loads(done.stdout.strip().splitlines()[-1])
  assert result["im2col_ms_per_step"] > 0 and result["conv_ms_per_step"] > 0


def test_bad_partitions_are_refused():
  from dgd_jax.runtime.errors import ConfigError
  with pytest.raises(ConfigError, match=r"indices \[n, m\] and sizes \[n\]"):
    ensemble.Partitions(np.zeros((3, 4), np.int32), np.ones(2, np.int32))
  with pytest.raises(ConfigError, match="every teacher needs data"):
    ensemble.Partitions(np.zeros((2, 4), np.int32), np.array([4, 0], np.int32))
  with pytest.raises(ConfigError, match="every teacher needs data"):
    ensemble.Partitions(np.zeros((2, 4), np.int32), np.array([5, 1], np.int32))


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_refit_heads_each_member_learns_only_its_own_partition():
  """Teachers refit from one student (queries.refits): member i's head depends on rows
  parts[i] only, so a changed example moves one teacher, as the votes' sensitivity assumes;
  each head moves away from the shared start toward its own rows' labels."""
  rng = np.random.default_rng(0)
  features = rng.normal(size=(3 * 20, 6)).astype(np.float32)
  labels = (features[:, 0] > 0).astype(np.int32)  # learnable from feature 0
  head = {"kernel": jnp.zeros((6, 2)), "bias": jnp.zeros(2)}
  parts = ensemble.Partitions.stack([np.arange(i * 20, i * 20 + 20 - i) for i in range(3)])
  cfg = train.FitConfig(num_steps=50, batch_size=8, learning_rate=0.05)
  heads = ensemble.refit_heads(head, features, labels, parts, cfg, jax.random.key(1))
  changed_features, changed_labels = features.copy(), labels.copy()
  changed_features[25], changed_labels[25] = 10.0, 1 - labels[25]  # a row of member 1 only
  again = ensemble.refit_heads(head, changed_features, changed_labels, parts, cfg,
                               jax.random.key(1))
  moved = [not np.allclose(heads["kernel"][i], again["kernel"][i]) for i in range(3)]
  assert moved == [False, True, False]
  votes = ensemble.vote_histograms(ensemble.head_labels, heads, features, 2)
  assert votes.shape == (60, 2) and (votes.sum(1) == 3).all()
  assert np.mean(votes.argmax(1) == labels) > 0.9  # learned, not the shared zero start
