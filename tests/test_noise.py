"""The secret noise (privacy.noise, plan.context.noise_source): drawn from the OS, kept in the
workdir, never derivable from a published seed; reproducible only on request; hardened
Gaussian sampling; a delta of 1/N or more refused."""
from __future__ import annotations

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import tiny_configs
from dgd_jax.plan import checks as plan_checks
from dgd_jax.plan.context import noise_source
from dgd_jax.runtime.workdir import Stage, Workdir
from dgd_jax.privacy import checks, discrete, noise
from dgd_jax.privacy.noise import NoiseSource
from dgd_jax.runner import pipeline
from dgd_jax.runtime import host
from dgd_jax.runtime.errors import ConfigError, WorkdirConflictError


def test_sources_secret_and_reproducible():
  a, b = NoiseSource.fresh(), NoiseSource.fresh()
  assert a.secret != b.secret and a.is_secret and a.noise_seed is None
  assert a.secret.hex() not in repr(a) and str(a.secret) not in repr(a)
  assert a.secret.hex() not in json.dumps(a.describe())
  assert a.describe() == {"source": "secret_key", "reproducible": False, "private_release": True}
  r = NoiseSource.reproducible(7)
  assert r == NoiseSource.reproducible(7) != NoiseSource.reproducible(8)
  assert r.describe()["private_release"] is False and r.describe()["noise_seed"] == 7
  assert NoiseSource.of(-1).is_secret and NoiseSource.of(None).is_secret
  assert NoiseSource.of(3) == NoiseSource.reproducible(3)
  for bad in (-2, 1.5, True, "3"):
    with pytest.raises(ConfigError, match="noise_seed"):
      NoiseSource.reproducible(bad)


def test_keys_are_128_bit_rbg_and_differ_by_purpose_and_secret():
  s = NoiseSource.reproducible(0)
  k = s.key("queries")
  assert jax.random.key_impl(k) == jax.random.key_impl(jax.random.key(0, impl="rbg"))
  assert jax.random.key_data(k).shape == (4,)  # 128 bits
  draw = lambda key: np.asarray(jax.random.normal(key, (8,)))
  np.testing.assert_array_equal(draw(k), draw(NoiseSource.reproducible(0).key("queries")))
  assert not np.allclose(draw(k), draw(s.key("dpsgd")))
  assert not np.allclose(draw(k), draw(NoiseSource.fresh().key("queries")))
  # the NumPy generator: 256 seeded bits, the same per (secret, purpose)
  assert s.rng("a").integers(1 << 62) == NoiseSource.reproducible(0).rng("a").integers(1 << 62)
  assert s.rng("a").integers(1 << 62) != s.rng("b").integers(1 << 62)
  assert jax.eval_shape(lambda: k) == noise.abstract_key()


def test_hardened_normal_is_the_halved_sum_of_four_draws_and_standard():
  """Opacus' secure_mode: N(0, 1) as (z1 + z2 + z3 + z4) / 2 (Holohan & Braghin 2021)."""
  key = jax.random.key(5)
  z = np.asarray(noise.normal(key, (20000,)))
  draws = np.asarray(jax.random.normal(key, (noise.GAUSSIAN_DRAWS, 20000)))
  np.testing.assert_allclose(z, draws.sum(0) / 2, rtol=1e-6, atol=1e-6)
  assert stats.kstest(z, "norm").pvalue > 1e-3
  assert abs(z.mean()) < 4 / np.sqrt(z.size) and z.std() == pytest.approx(1.0, rel=0.03)
  # no output is one draw's value (the float32 attack reads the draw's low-order bits)
  assert not (z[None] == draws).any()


def test_lnmax_releases_only_the_argmax_of_its_laplace_noise():
  """PRIVACY.md leaves LNMax's single-draw Laplace unhardened because only the argmax leaves
  the aggregator: nothing else of the noisy values is returned as a release."""
  from dgd_jax.labelling import aggregation
  votes = jnp.asarray(np.random.default_rng(0).integers(0, 5, (50, 10)), jnp.float32)
  out = aggregation.lnmax(jax.random.key(0), votes, 10.0)
  assert out.released is None and out.labels.shape == (50,)
  assert aggregation.AGGREGATORS["lnmax"].released == "labels"


def _words(u: np.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
  u = np.asarray(u, np.uint64)
  return (jnp.asarray((u >> np.uint64(32)).astype(np.uint32)),
          jnp.asarray((u & np.uint64(0xFFFFFFFF)).astype(np.uint32)))


def test_discrete_laplace_counts_are_an_exact_64_bit_pmf():
  """c_k >= 1, sum 2^64 exactly, the discrete Laplace pmf (tails folded into the ends)."""
  scale, support = 3.0, 20
  c = discrete.discrete_laplace_counts(scale, support)
  assert c.dtype == np.uint64 and len(c) == 2 * support + 1 and (c >= 1).all()
  assert sum(int(v) for v in c) == 1 << 64
  q, k = np.exp(-1 / scale), np.arange(-support + 1, support)
  ideal = (1 - q) / (1 + q) * q ** np.abs(k)
  np.testing.assert_allclose(c[1:-1].astype(float) / 2.0 ** 64, ideal, rtol=1e-12)
  np.testing.assert_allclose(float(c[-1]) / 2.0 ** 64, q ** support / (1 + q), rtol=1e-12)
  assert not c.flags.writeable  # cached: shared by every caller


def test_table_index_is_the_exact_integer_inverse_cdf():
  """u maps to the number of cumulative counts <= u: at every boundary C_i - 1 / C_i, and at
  the ends 0 and 2^64 - 1, exactly as an unsigned 64-bit searchsorted."""
  c = discrete.discrete_laplace_counts(3.0, 20)
  cdf = np.cumsum(c[:-1], dtype=np.uint64)
  u = np.concatenate([cdf, cdf - np.uint64(1), np.array([0, (1 << 64) - 1], np.uint64),
                      np.random.default_rng(0).integers(0, 1 << 63, 500, np.uint64)])
  got = np.asarray(noise.table_index(*_words(u), discrete.cdf_words(c)))
  np.testing.assert_array_equal(got, np.searchsorted(cdf, u, side="right"))
  assert got.min() == 0 and got.max() == len(c) - 1


def test_from_counts_draws_the_table_pmf():
  """A fixed key's 400k draws against c_k / 2^64 (chi-square, every bin >= 100 expected)."""
  c = discrete.discrete_laplace_counts(3.0, 20)
  n = 400_000
  draws = np.asarray(noise.from_counts(jax.random.key(3, impl="rbg"), discrete.cdf_words(c),
                                       (n,)))
  assert draws.dtype == np.int32 and 0 <= draws.min() and draws.max() < len(c)
  expected = n * c.astype(float) / 2.0 ** 64
  observed = np.bincount(draws, minlength=len(c)).astype(float)
  assert expected.min() >= 100 and observed.sum() == n  # every bin large enough for chi-square
  assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_clipped_shift_epsilon_is_exact_and_not_vacuous():
  """The realised epsilon of clip(j + k, -R, R) is the ideal |j - j'| / t plus a tiny
  rounding excess; a corrupted table is caught (a zero count: inf; a moved count: more)."""
  scale, inputs, r = 4.0, (-6, 6), 10
  c = discrete.discrete_laplace_counts(scale, r + 6)
  eps = discrete.clipped_shift_epsilon(c, inputs, r)
  assert 12 / scale <= eps <= 12 / scale + 1e-9
  assert discrete.clipped_shift_epsilon(c, (0, 6), r) == pytest.approx(6 / scale, abs=1e-9)
  zero = c.copy()
  zero[3] = 0
  assert discrete.clipped_shift_epsilon(zero, inputs, r) == np.inf
  moved = c.copy()  # half of P(k = -15) moved to k = 0: P(-9 | 6) / P(-9 | -6) doubles
  moved[1], moved[r + 6] = c[1] // np.uint64(2), c[r + 6] + (c[1] - c[1] // np.uint64(2))
  assert discrete.clipped_shift_epsilon(moved, inputs, r) == pytest.approx(eps + np.log(2))
  short = discrete.discrete_laplace_counts(scale, r + 5)  # y = R unreachable from j = -6
  assert discrete.clipped_shift_epsilon(short, inputs, r) == np.inf


def test_workdir_keeps_one_owner_only_key(tmp_path):
  wd = Workdir(str(tmp_path / "w"))
  first = noise_source(wd, -1, [])
  path = tmp_path / "w" / "noise.key"
  assert path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == first.secret
  assert noise_source(wd, -1, ["queries"]) == first  # a resumed run: the same secret
  assert noise_source(Workdir(str(tmp_path / "v")), -1, []) != first  # another run: another
  assert noise_source(wd, 4, ["queries"]) == NoiseSource.reproducible(4)
  noise_source(Workdir(str(tmp_path / "x")), 4, [])
  assert not (tmp_path / "x" / "noise.key").exists()  # a reproducible run writes no key
  path.chmod(0o644)
  with pytest.raises(WorkdirConflictError, match="chmod 600"):
    noise_source(wd, -1, [])
  path.unlink()
  with pytest.raises(WorkdirConflictError, match="drew noise"):
    noise_source(wd, -1, ["queries"])  # its releases cannot be resumed with other noise
  assert not path.exists()  # nothing written by the refusal


def test_delta_of_one_over_n_or_more_is_refused():
  assert checks.delta_for_size(1e-5, 1000) == 1e-5
  with pytest.raises(ConfigError, match="1/N = 1/1000"):
    checks.delta_for_size(1e-3, 1000)
  assert checks.delta_for_size(1e-3, 1000, allowed=True) == 1e-3


def _answers(workdir):
  with np.load(os.path.join(workdir, "queries", "queries.npz")) as q:
    return {k: q[k] for k in q.files}


def _student(workdir):
  """The student's parameters, serialised (the label-only DGD run withholds it from release/)."""
  from flax import serialization  # pylint: disable=g-import-not-at-top
  from dgd_jax.plan import artefacts  # pylint: disable=g-import-not-at-top
  params = artefacts.load_classifier(pipeline.open_run(workdir, "student"), "student")[1]
  return serialization.msgpack_serialize(serialization.to_state_dict(params))


def _redo_queries(workdir, drop_key: bool):
  """Removes the queries and what read them; ``drop_key``: the key and the record of its
  draws too, as a new workdir would have neither."""
  for stage in ("queries", "student", "release"):
    shutil.rmtree(os.path.join(workdir, stage), ignore_errors=True)
  if drop_key:
    os.unlink(os.path.join(workdir, "noise.key"))
    os.unlink(os.path.join(workdir, "noise_draws.json"))


@pytest.mark.integration
def test_secret_draws_differ_resumes_reuse_and_noise_seed_reproduces(finished_dgd, tmp_path):
  """Two secret runs release different answers and train different students; a run resumed
  in its workdir reuses the key and releases the same answers; two runs with one noise_seed
  release the same answers, and say they are not private."""
  path, workdir, report = finished_dgd
  assert report["noise"]["source"] == "secret_key"
  copies = {}
  for name in ("resumed", "fresh", "seeded", "seeded_again"):
    copies[name] = str(tmp_path / name)
    shutil.copytree(workdir, copies[name])
  _redo_queries(copies["resumed"], drop_key=False)
  pipeline.run(tiny_configs.dgd(path), copies["resumed"])
  for k, v in _answers(workdir).items():
    np.testing.assert_array_equal(_answers(copies["resumed"])[k], v)
  _redo_queries(copies["fresh"], drop_key=True)
  pipeline.run(tiny_configs.dgd(path), copies["fresh"])
  assert not all(np.array_equal(_answers(copies["fresh"])[k], v)
                 for k, v in _answers(workdir).items())
  assert _student(copies["fresh"]) != _student(workdir)
  config = tiny_configs.dgd(path)
  config.noise_seed = 11
  with pytest.raises(WorkdirConflictError, match="noise_seed"):  # released from the key
    pipeline.run(config, copies["seeded"])
  for name in ("seeded", "seeded_again"):
    _redo_queries(copies[name], drop_key=True)
  seeded = pipeline.run(config, copies["seeded"])
  pipeline.run(config, copies["seeded_again"])
  for k, v in _answers(copies["seeded"]).items():
    np.testing.assert_array_equal(_answers(copies["seeded_again"])[k], v)
  assert _student(copies["seeded"]) == _student(copies["seeded_again"])
  assert seeded["noise"] == {"source": "noise_seed", "noise_seed": 11, "reproducible": True,
                             "private_release": False,
                             "drawn_on": {}}  # no secret draw to bind to a platform
  assert not os.path.exists(os.path.join(copies["seeded"], "noise.key"))
  for folder in (copies["seeded"], os.path.join(copies["seeded"], "release")):
    with open(os.path.join(folder, "report.md")) as f:
      assert "NOT A PRIVATE RELEASE" in f.read()
  with open(os.path.join(workdir, "report.md")) as f:
    assert "NOT A PRIVATE RELEASE" not in f.read()


@pytest.mark.integration
def test_a_noisy_stage_is_redrawn_only_on_the_platform_it_drew_on(finished_dgd_copy):
  """The same key draws other noise on another backend or JAX version: resuming or
  recomputing a noisy stage there is refused unless allowed; reusing it is not a draw."""
  path, workdir, report = finished_dgd_copy
  config = tiny_configs.dgd(path)
  here = host.noise_platform()
  assert report["noise"]["drawn_on"] == {"queries": here}
  elsewhere = {**here, "backend": "tpu", "jax": "0.0.1"}
  with open(os.path.join(workdir, "noise_draws.json"), "w") as f:
    json.dump({"queries": elsewhere}, f)
  assert pipeline.run(config, workdir)["noise"]["drawn_on"] == {"queries": elsewhere}  # reused
  before = _answers(workdir)
  _redo_queries(workdir, drop_key=False)
  with pytest.raises(WorkdirConflictError, match="allow_noise_redraw"):
    pipeline.run(config, workdir)
  assert not os.path.exists(os.path.join(workdir, "queries"))  # refused before it began
  redrawn = pipeline.run(config, workdir, allow_noise_redraw=True)
  assert redrawn["noise"]["drawn_on"] == {"queries": here}
  for k, v in before.items():  # here the key draws what it drew here before
    np.testing.assert_array_equal(_answers(workdir)[k], v)


@pytest.mark.integration
def test_a_large_delta_is_refused_before_anything_runs_or_warned(npz_file, tmp_path):
  config = tiny_configs.dgd(npz_file)  # 512 private examples
  config.privacy.delta = 1e-2
  with pytest.raises(ConfigError, match="allow_large_delta"):
    pipeline.run(config, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()
  config.privacy.allow_large_delta = True
  assert "1/N = 1/512" in plan_checks.large_delta(config, 512)


def test_a_draw_is_bound_to_its_stage_slice(tmp_path):
  """One key serving two configs (a sweep's points) gives their noisy stages independent
  draws: releasing the same votes at two scales from the same standard draws would let the
  difference cancel the noise. The same slice (a resumed run) draws the same."""
  from dgd_jax.plan.context import Context
  wd = Workdir(str(tmp_path / "w"))
  source = NoiseSource.fresh()
  ctx = lambda part: Context(None, wd, Stage(wd, "queries", part), lambda: None, {}, source)
  draw = lambda c: np.asarray(jax.random.normal(c.noise_key("queries"), (16,)))
  a, b = ctx({"queries": {"noise_scale": 40.0}}), ctx({"queries": {"noise_scale": 80.0}})
  assert not np.allclose(draw(a), draw(b))
  np.testing.assert_array_equal(draw(a), draw(ctx({"queries": {"noise_scale": 40.0}})))
  assert a.noise_rng("x").integers(1 << 60) != b.noise_rng("x").integers(1 << 60)
