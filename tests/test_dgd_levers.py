"""The levers that make DGD learn: augmentations, the generator's image priors, the
student's consistency term, the query-plan chooser, the restricted private set. Each loss term
is checked against a hand computation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.configs import dgd as dgd_config
from dgd_jax.labelling import propagation
from dgd_jax.models.classifier import Classifier
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan import student_fit
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.synthesis import generative
from dgd_jax.training import augment
from dgd_jax.training import student
from dgd_jax.plan import query_checks


def test_translate_moves_pixels_and_keeps_edges():
  x = jnp.zeros((1, 6, 6, 1)).at[0, 2, 3, 0].set(1.0)
  for seed in range(20):  # every draw moves the lit pixel by at most 2 in each direction
    y = augment.translate(jax.random.key(seed), x, 2)
    (i, j), = np.argwhere(np.asarray(y[0, ..., 0]) == 1.0)
    assert abs(i - 2) <= 2 and abs(j - 3) <= 2 and float(y.sum()) == 1.0
  assert augment.translate(jax.random.key(0), x, 0) is x


@pytest.mark.parametrize("max_shift", [1, 2, 4])
def test_translate_is_each_images_crop_of_its_edge_padded_copy(max_shift):
  """The selection by static slices equals a per-image crop at the drawn offset, exactly."""
  x = jax.random.normal(jax.random.key(0), (16, 9, 7, 2))
  key = jax.random.key(5)
  offsets = np.asarray(jax.random.randint(key, (16, 2), 0, 2 * max_shift + 1))
  padded = np.pad(np.asarray(x), ((0, 0), (max_shift,) * 2, (max_shift,) * 2, (0, 0)),
                  mode="edge")
  expected = np.stack([p[i:i + 9, j:j + 7] for p, (i, j) in zip(padded, offsets)])
  np.testing.assert_array_equal(augment.translate(key, x, max_shift), expected)


def test_flip_and_cutout():
  x = jnp.arange(2 * 4 * 4, dtype=jnp.float32).reshape(2, 4, 4, 1)
  y = augment.flip(jax.random.key(3), x)
  for a, b in zip(np.asarray(x), np.asarray(y)):
    assert np.array_equal(a, b) or np.array_equal(a[:, ::-1], b)
  c = augment.cutout(jax.random.key(0), jnp.ones((8, 10, 10, 1)), 3, fill=0.0)
  zeros = (np.asarray(c) == 0).reshape(8, -1).sum(1)
  assert np.all((zeros >= 4) & (zeros <= 9))  # a 3x3 square, clipped at the border


@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_mixup_mixes_images_and_targets_with_one_lambda_per_pair():
  """Each row is lam x_i + (1 - lam) x_j with the targets mixed by the same lam and j."""
  n = 8
  x = jax.random.normal(jax.random.key(0), (n, 5, 5, 1))
  t = jnp.eye(n)  # distinct one-hot targets reveal each row's lam and partner
  x_mix, t_mix = augment.mixup(jax.random.key(1), x, t, 0.4)
  t_mix, x, x_mix = np.asarray(t_mix), np.asarray(x), np.asarray(x_mix)
  np.testing.assert_allclose(t_mix.sum(1), 1.0, rtol=1e-6)
  assert (np.count_nonzero(t_mix > 1e-6, axis=1) <= 2).all()
  expected = np.einsum("ij,jhwc->ihwc", t_mix, x)  # sum_j t~_ij x_j
  np.testing.assert_allclose(x_mix, expected, atol=1e-5)
  assert not np.allclose(x_mix, x)  # something was mixed


@pytest.mark.integration
def test_mixup_teachers_step_on_mixed_pairs_and_are_chosen_by_the_config():
  """teachers.mixup > 0: a member's update is one Adam step on the cross-entropy of the mixed
  minibatch against its mixed one-hot targets; 0 keeps the plain update."""
  from dgd_jax.stages import teachers
  from dgd_jax.training import train
  model = Classifier(width=0.125)
  tx = train.optimizer(train.FitConfig(num_steps=10))
  state = train.create_train_state(model, tx, jax.random.key(0), (28, 28, 1))
  xb = jax.random.normal(jax.random.key(1), (8, 28, 28, 1))
  yb = jnp.arange(8) % 10
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.teachers.mixup = 0.0
  assert teachers.member_update(config, 10) is None
  config.teachers.mixup = 0.4
  update = teachers.member_update(config, 10)
  new_state, metrics = update(state, jax.random.key(2), xb, yb)
  xm, tm = augment.mixup(jax.random.key(2), xb, jax.nn.one_hot(yb, 10), 0.4)
  loss = lambda p: -(tm * jax.nn.log_softmax(model.apply(p, xm))).sum(-1).mean()
  expected = state.apply_gradients(grads=jax.grad(loss)(state.params))
  np.testing.assert_allclose(metrics["loss"], loss(state.params), rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               new_state.params, expected.params)
  plain, _ = train.update(state, xb, yb)
  assert not np.allclose(jax.tree.leaves(plain.params)[0], jax.tree.leaves(new_state.params)[0])


def test_total_variation_by_hand():
  x = jnp.array([[0.0, 1.0], [3.0, 1.0]]).reshape(1, 2, 2, 1)
  # vertical |3-0|, |1-1| -> mean 1.5; horizontal |1-0|, |1-3| -> mean 1.5
  assert float(generative.total_variation(x)) == pytest.approx(3.0)


@pytest.mark.integration
def test_statistics_loss_and_layer_statistics_by_hand():
  stats = [(jnp.array([1.0, 2.0]), jnp.array([1.0, 1.0]))]
  targets = [(np.array([1.0, 0.0]), np.array([4.0, 5.0]))]
  # ||(0, 2)|| + ||(-3, -4)|| = 2 + 5
  assert float(generative.statistics_loss(stats, targets)) == pytest.approx(7.0)

  model = Classifier(num_classes=3, width=0.05)
  x = np.asarray(jax.random.uniform(jax.random.key(0), (50, 8, 8, 1), minval=-1, maxval=1))
  params = model.init(jax.random.key(1), x[:1])
  whole = generative.layer_statistics(model.apply, params, x, batch_size=50)
  chunked = generative.layer_statistics(model.apply, params, x, batch_size=7)
  conv1 = x  # the first conv's output recomputed by hand from its kernel
  kernel = params["params"]["conv1"]["kernel"]
  out = jax.lax.conv_general_dilated(conv1, kernel, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
  out = out + params["params"]["conv1"]["bias"]
  np.testing.assert_allclose(whole[0][0], np.asarray(out).mean((0, 1, 2)), atol=1e-5)
  np.testing.assert_allclose(whole[0][1], np.asarray(out).var((0, 1, 2)), atol=1e-5)
  for (m1, v1), (m2, v2) in zip(whole, chunked):
    np.testing.assert_allclose(m1, m2, atol=1e-5)
    np.testing.assert_allclose(v1, v2, atol=1e-5)
  assert len(whole) == 2  # conv1 and conv2


def test_consistency_term_by_hand():
  """The student's FixMatch term: CE of the strong view against the weak view's argmax,
  only where the weak view is confident."""
  weak_logits = jnp.array([[5.0, 0.0], [0.1, 0.0]])  # confident, not confident at 0.95
  strong_logits = jnp.array([[1.0, 2.0], [0.0, 3.0]])
  term, share = student.consistency_loss(weak_logits, strong_logits, 0.95)
  # Row 0 is confident with pseudo-label 0: CE = -log softmax(1, 2)[0]; row 1 is masked.
  by_hand = 0.5 * (-np.log(np.exp(1.0) / (np.exp(1.0) + np.exp(2.0))))
  assert float(term) == pytest.approx(by_hand, rel=1e-6) and float(share) == 0.5
  grad = jax.grad(lambda w: student.consistency_loss(w, strong_logits, 0.95)[0])(
      weak_logits)
  assert not np.any(np.asarray(grad))  # the weak view is the fixed target


def test_assumed_histogram():
  v = query_plan.assumed_histogram(250, 10, 0.6)
  assert v[0] == 150 and v[1] == 50 and np.allclose(v[2:], 50 / 8) and v.sum() == 250
  with pytest.raises(ConfigError, match="assumed_consensus"):
    query_plan.assumed_histogram(250, 10, 0.05)


def test_expected_label_accuracy_limits():
  votes = query_plan.assumed_histogram(250, 10, 0.8)
  assert query_plan.expected_label_accuracy("gnmax", 1.0, votes) == 1.0
  assert query_plan.expected_label_accuracy("lnmax", 1e6, votes) == pytest.approx(0.1, abs=0.02)


def test_small_ensembles_get_less_noise_and_fewer_queries():
  big, _ = query_plan.choose(250, 10, 10.0, 1e-5, 0.5, 60000)
  small, table = query_plan.choose(50, 10, 10.0, 1e-5, 0.5, 60000)
  assert small.noise_scale < big.noise_scale and small.num_queries < big.num_queries
  assert small.epsilon <= 10.0 and big.epsilon <= 10.0
  assert small == max(table, key=lambda c: c.clean_equivalent)
  # The fixed plan of the quick preset (LNMax b = 40) is a poor plan for 50 teachers.
  votes = query_plan.assumed_histogram(50, 10, 0.5)
  assert query_plan.expected_label_accuracy("lnmax", 40.0, votes) < small.label_accuracy - 0.1
  capped, _ = query_plan.choose(250, 10, 10.0, 1e-5, 0.5, 100)
  assert capped.num_queries <= 100


def test_no_plan_fits_a_tiny_budget():
  with pytest.raises(ConfigError, match="no query plan fits"):
    query_plan.choose(10, 10, 1e-4, 1e-5, 0.5, 1000)


def test_select_stable_keeps_confident_stable_samples_per_class():
  from dgd_jax.stages.generator import select_stable
  # 6 candidates, 2 classes; keep 4 (2 per class). Scores min(p_y(x), p_y(shifted x)):
  strong, weak_ = 4.0, 0.5
  logits = np.array([[strong, 0], [weak_, 0], [strong, 0], [0, strong], [0, strong], [0, weak_]])
  shifted = logits.copy()
  shifted[2] = [0, strong]  # sample 2 flips class when shifted: unstable
  keep = select_stable(logits, shifted, 4, 2)
  assert keep.tolist() == [0, 1, 3, 4]


def test_private_size_keeps_the_test_split_and_refuses_impossible_sizes():
  from dgd_jax.data.loaders import Dataset
  from dgd_jax.runtime.errors import DatasetError
  data = Dataset("d", np.zeros((10, 2, 2, 1), np.float32), np.arange(10), np.zeros((4, 2, 2, 1)),
                 np.arange(4), 10)
  small = data.with_private_size(3)
  assert small.y_train.tolist() == [0, 1, 2] and len(small.x_test) == 4
  assert data.with_private_size(0) is data
  for bad in (-1, 11):
    with pytest.raises(DatasetError, match="private_size"):
      data.with_private_size(bad)


def test_quick_preset_inverts_as_the_standard_one_and_cuts_its_diagnostic():
  from dgd_jax.configs import dgd
  quick, standard = (dgd.get_config(f"fashion_mnist,{p}").generator for p in ("cpu", "standard"))
  assert (quick.inversion_steps, quick.inversion_learning_rate,
          quick.synthetic_student_steps) == (200, 0.1, 500)
  assert (standard.inversion_steps, standard.inversion_learning_rate,
          standard.synthetic_student_steps) == (200, 0.1, 0)
  assert quick.num_synthetic == standard.num_synthetic == dgd.INVERSION["num_synthetic"]
  # eps 1 keeps the quick cut; the generator variant is untouched by it
  assert dgd.get_config("fashion_mnist,cpu,eps1").generator.synthetic_student_steps == 500
  assert dgd.get_config("fashion_mnist,cpu,generator").generator.synthesis == "generator"


def test_cpu_presets_train_mixup_teachers_and_the_paper_preset_does_not():
  from dgd_jax.configs import dgd
  for preset in ("cpu", "standard", "cpu,eps1", "standard,eps1"):
    assert dgd.get_config(f"fashion_mnist,{preset}").teachers.mixup == dgd.TEACHER_MIXUP > 0
  for preset in ("", "cpu,table1", "cpu,generator"):
    assert dgd.get_config(f"fashion_mnist{',' if preset else ''}{preset}").teachers.mixup == 0


def test_label_propagation_spreads_labels_along_the_graph():
  # Two tight clusters on the unit circle, one label each: every member gets its cluster's.
  rng = np.random.default_rng(0)
  angles = np.concatenate([rng.normal(0.0, 0.05, 60), rng.normal(np.pi / 2, 0.05, 60)])
  f = np.stack([np.cos(angles), np.sin(angles)], 1).astype(np.float32)
  truth = np.repeat([0, 1], 60)
  idx, sim = propagation.knn_graph(f, 5)
  brute = np.argsort(-(f @ f.T), axis=1)[:, 1:6]
  np.testing.assert_allclose(np.sort(sim, 1), np.sort(np.take_along_axis(f @ f.T, brute, 1), 1),
                             atol=1e-6)
  p, reached = propagation.propagate(f, np.array([3, 70]), np.array([0, 1]), 3, neighbours=20)
  assert p.shape == (120, 3) and np.allclose(p.sum(1), 1.0) and reached.all()
  np.testing.assert_array_equal(p.argmax(1), truth)
  # Class mass normalisation: ten labels of class 0 against one of class 1 do not flood it.
  many = np.concatenate([np.arange(10), [70]])
  p, _ = propagation.propagate(f, many, np.array([0] * 10 + [1]), 3, neighbours=20)
  np.testing.assert_array_equal(p.argmax(1), truth)
  # A cluster no label reaches (no edge across: the clusters are orthogonal) is flagged, and
  # its rows are uniform, not class 0.
  p, reached = propagation.propagate(f, np.array([3]), np.array([1]), 3, neighbours=20)
  np.testing.assert_array_equal(reached, truth == 0)
  assert np.allclose(p[~reached], 1 / 3) and (p[reached].argmax(1) == 1).all()
  # Label distributions propagate as their one-hot labels do (Y's rows are the distributions).
  hard, _ = propagation.propagate(f, many, np.array([0] * 10 + [1]), 3, neighbours=20)
  soft, _ = propagation.propagate(f, many, np.eye(3)[[0] * 10 + [1]], 3, neighbours=20)
  np.testing.assert_allclose(soft, hard)


def test_representative_queries_cover_the_clusters():
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(4, 8))
  f = np.concatenate([c + 0.01 * rng.normal(size=(50, 8)) for c in centres]).astype(np.float32)
  f /= np.linalg.norm(f, axis=1, keepdims=True)
  chosen = propagation.representative(f, 4, jax.random.key(0))
  assert len(set(chosen.tolist())) == 4 and sorted(set(chosen // 50)) == [0, 1, 2, 3]
  again = propagation.representative(f, 4, jax.random.key(0))
  np.testing.assert_array_equal(chosen, again)  # deterministic per key
  # The features: unit rows, whitened onto the leading components of the pool.
  images = rng.uniform(-1, 1, (64, 28, 28, 1)).astype(np.float32)
  z = propagation.features(images, dims=10)
  assert z.shape == (64, 10) and np.allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)


def test_propagation_runs_only_for_few_labels():
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.student.propagation = 10
  assert student_fit.propagates(config, 114, 8000)  # a small ensemble's plan
  # the quick preset's GNMax plan: a third labelled
  assert not student_fit.propagates(config, 2852, 8000)
  config.student.propagation = 0
  assert not student_fit.propagates(config, 114, 8000)


def test_histogram_plan_spends_the_budget_on_num_queries_histograms():
  """plan='auto' with the gaussian_histogram aggregator: num_queries histograms at the least
  sigma that fits the budget, recorded as a HistogramQueries release."""
  from dgd_jax import privacy
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.num_teachers = 50
  config.queries.update(aggregator="gaussian_histogram", num_queries=2000)
  q = query_plan.settings(config)
  assert q.aggregator == "gaussian_histogram" and q.num_queries == 2000
  record = query_plan.release(config)
  assert isinstance(record, privacy.HistogramQueries) and record.noise_scale == q.noise_scale
  accountant = config.privacy.accountant
  assert accountant == "pld"  # the presets plan the histograms under PLD
  assert 9.99 < privacy.epsilon_of(record, 1e-5, accountant) <= 10.0
  assert privacy.epsilon_of(record.with_noise(0.99 * q.noise_scale), 1e-5, accountant) > 10.0
  assert q.chosen[0]["epsilon"] == pytest.approx(privacy.epsilon_of(record, 1e-5, accountant))
  config.privacy.accountant = "rdp"  # looser for composed Gaussians: more noise, same budget
  assert query_plan.settings(config).noise_scale > 1.05 * q.noise_scale
  config.privacy.accountant = accountant
  config.privacy.max_epsilon = 1.0  # a tighter budget: more noise for the same count
  assert query_plan.settings(config).noise_scale > 5 * q.noise_scale


def test_class_count_plan_targets_and_refusals():
  """gaussian_class_count: num_queries counts at the least sigma that fits the budget, which
  is the histogram plan's sigma over sqrt 2; the targets put the count's share on the class
  asked about and the rest evenly on the others; a pool whose samples have no class fixed
  before synthesis is refused before anything trains."""
  import math
  from dgd_jax import privacy
  from dgd_jax.plan import pool
  from dgd_jax.runtime.errors import ConfigError
  from dgd_jax.synthesis import generative
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.num_teachers = 50
  config.queries.aggregator = "gaussian_histogram"
  histogram = query_plan.settings(config)
  config.queries.aggregator = "gaussian_class_count"
  q = query_plan.settings(config)
  assert q.noise_scale == pytest.approx(histogram.noise_scale / math.sqrt(2), rel=1e-3)
  record = query_plan.release(config)
  assert isinstance(record, privacy.ClassCountQueries) and record.queries == q.num_queries
  assert 9.99 < privacy.epsilon_of(record, 1e-5, "pld") <= 10.0
  query_checks.check(config)
  # targets: a = n_c / n on c, (1 - a) / (K - 1) elsewhere, a not clipped
  t = student.class_count_targets(np.array([30.0, -5.0]), np.array([2, 0]), 50, 3)
  np.testing.assert_allclose(t, [[0.2, 0.2, 0.6], [-0.1, 0.55, 0.55]], atol=1e-6)
  # the classes asked about are invert's targets, a function of the index alone
  np.testing.assert_array_equal(generative.inversion_classes(7, 4, 3), [0, 1, 2, 0, 0, 1, 2])
  for field, value in (("pool.source", "public"), ("generator.synthesis", "generator"),
                       ("generator.oversample", 2.0)):
    bad = dgd_config.get_config("fashion_mnist,cpu")
    bad.queries.aggregator = "gaussian_class_count"
    block, name = field.split(".")
    bad[block][name] = value
    with pytest.raises(ConfigError, match="class it was synthesised for"):
      pool.check_classes(bad)
  config.queries.selection, config.queries.first_round = "least_confident", 2000
  with pytest.raises(ConfigError, match="'random' or 'representative'"):
    query_checks.check(config)


@pytest.mark.parametrize("teachers,arg,source,expected", [
    (50, "fashion_mnist,cpu", "synthetic", "gaussian_class_count"),  # noise per teacher 0.89
    (250, "fashion_mnist,cpu", "synthetic", "gaussian_histogram"),  # 0.18
    (250, "fashion_mnist,cpu,eps1", "synthetic", "gaussian_class_count"),  # 1.33
    (50, "fashion_mnist,cpu", "public", "gaussian_histogram"),  # no synthesis classes
])
def test_auto_counts_chooses_class_counts_by_the_noise_per_teacher(teachers, arg, source,
                                                                   expected):
  """aggregator='auto_counts': class counts where the histograms' planned sigma over the
  teacher count is at least CLASS_COUNT_NOISE_PER_VOTE and the pool's samples have classes,
  else the histograms; the plan says why, at the chosen release's least sigma."""
  from dgd_jax.runtime.errors import ConfigError
  config = dgd_config.get_config(arg)
  config.num_teachers = teachers
  config.pool.source = source
  config.queries.aggregator = "auto_counts"
  q = query_plan.settings(config)
  assert q.aggregator == expected
  assert ("no class" if source == "public" else "noise per teacher") in q.chosen[0]["why"]
  named = config.copy_and_resolve_references()
  named.queries.aggregator = expected
  assert q.noise_scale == query_plan.settings(named).noise_scale
  config.queries.plan = "fixed"
  with pytest.raises(ConfigError, match="auto_counts"):
    query_checks.check(config)


def test_least_confident_rounds_are_refused_with_released_histograms():
  """The least-confident selector learns the first round's labels; a histogram release gives
  none worth learning (its argmax at sigma 44.71 is mostly noise), so the run is refused
  before anything trains, with the selections that work."""
  from dgd_jax.runtime.errors import ConfigError
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.num_teachers = 250  # as plan.checks.run_config resolves it for 60,000 images
  config.queries.update(selection="least_confident", first_round=2000)
  with pytest.raises(ConfigError, match="'random' or 'representative'"):
    query_checks.check(config)
  config.queries.selection = "representative"
  query_checks.check(config)


@pytest.mark.parametrize("arg,teachers,release", [
    ("fashion_mnist,cpu", 250, "gaussian_histogram"),
    ("fashion_mnist,cpu", 50, "gaussian_class_count"),
    ("fashion_mnist,standard,eps1", 250, "gaussian_class_count")])
def test_count_plans_fit_the_budget_of_the_analytic_gaussian_mechanism(arg, teachers, release):
  """The presets' Q histograms (class counts) of noise sigma are one Gaussian mechanism of L2
  sensitivity sqrt(2 Q) / sigma (sqrt(Q) / sigma); its exact epsilon (Balle & Wang 2018,
  Thm. 8) at the planned sigma is within the budget, and 1% less noise would exceed it: PLD
  planned it neither loosely nor too tightly."""
  import math
  import analytic_gaussian
  config = dgd_config.get_config(arg)
  config.num_teachers = teachers
  q = query_plan.settings(config)
  assert q.aggregator == release  # the presets' auto_counts, by the noise per teacher
  per_query = 2 if release == "gaussian_histogram" else 1  # squared sensitivity
  exact = lambda sigma: analytic_gaussian.epsilon(math.sqrt(per_query * q.num_queries) / sigma,
                                                  config.privacy.delta)

  budget = config.privacy.max_epsilon
  assert budget - 1e-3 < exact(q.noise_scale) <= budget
  assert exact(0.99 * q.noise_scale) > budget


def test_brier_score_is_linear_in_the_targets():
  """The Brier score's gradient is linear in the targets, so zero-mean noise on the targets
  leaves the expected gradient unchanged (the released vote shares are unbiased); and it stays
  bounded for targets with negative entries, where the cross-entropy is not."""
  logits = jax.random.normal(jax.random.key(0), (5, 4))
  t1 = jax.nn.softmax(jax.random.normal(jax.random.key(1), (5, 4)))
  noise = 0.7 * jax.random.normal(jax.random.key(2), (5, 4))
  grad = jax.grad(student.brier_score)
  np.testing.assert_allclose(grad(logits, t1 + noise) + grad(logits, t1 - noise),
                             2 * grad(logits, t1), atol=1e-6)
  p = jax.nn.softmax(logits)
  assert float(student.brier_score(logits, t1)) == pytest.approx(
      float(jnp.mean(jnp.sum((p - t1) ** 2, -1))), rel=1e-6)
  negative = jnp.full((5, 4), -0.5).at[:, 0].set(2.5)
  huge = jnp.zeros((5, 4)).at[:, 1:].set(-100.0)  # all mass on class 0: bounded loss
  assert float(student.brier_score(huge, negative)) < 4 * (3.0 ** 2)


def test_released_histograms_become_vote_shares():
  h = np.array([[30.5, -2.0, 21.5], [0.0, 50.0, 0.0]])
  s = student.shares(h, 50)
  assert s.dtype == np.float32
  np.testing.assert_allclose(s, h / 50)  # negative entries kept: unbiased


def test_more_histograms_than_synthetic_samples_are_refused_before_training():
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.num_teachers = 250  # as plan.checks.run_config resolves it for 60,000 images
  query_checks.check(config)  # 4,000 of the 8,000 samples
  config.generator.num_synthetic = 2000
  with pytest.raises(ConfigError, match="num_queries=4000 exceeds the 2000 synthetic samples"):
    query_checks.check(config)


def test_the_student_ensemble_is_chosen_for_the_noise_per_teacher():
  """student.ensemble = 0 (the CPU presets): five students where the release's noise per
  teacher is large (50 teachers at eps 10, 250 at eps 1), one where it is small (250 at eps
  10); a count the config sets is kept."""
  config = dgd_config.get_config("fashion_mnist,cpu")
  assert config.student.ensemble == 0
  for teachers, sigma, expected in ((50, 44.71, 5), (250, 333.7, 5), (250, 44.71, 1)):
    config.num_teachers = teachers
    assert student_fit.members(config, sigma) == expected
  config.student.ensemble = 3
  assert student_fit.members(config, None) == 3  # the noise is not read
  assert dgd_config.get_config("fashion_mnist,cpu,table1").student.ensemble == 1


@pytest.mark.extended  # CI's second tier (docs/PERFORMANCE.md)
@pytest.mark.slow
@pytest.mark.integration
def test_refit_rounds_that_cannot_run_are_refused_before_training():
  """queries.refits: whole numbers only; histograms of random samples only, Eq. 6 off (the
  rounds' students train before the VAE); each round, not the total, must fit the pool."""
  config = dgd_config.get_config("fashion_mnist,cpu")
  config.num_teachers = 50
  # 8,000 a round of 8,000 samples; refit rounds learn histograms (the presets' auto_counts
  # would choose class counts for 50 teachers)
  config.queries.update(aggregator="gaussian_histogram", refits=1, num_queries=16000)
  query_checks.check(config)
  for field, value, match in (("refits", -1, "refits=-1"), ("refits", True, "refits=True"),
                              ("aggregator", "gnmax", "gaussian_histogram"),
                              ("selection", "representative", "selection 'random'"),
                              ("num_queries", 16002,
                               "asks 8001 samples in each of its 2 rounds")):
    bad = config.copy_and_resolve_references()
    bad.queries[field] = value
    with pytest.raises(ConfigError, match=match):
      query_checks.check(bad)
  bad = config.copy_and_resolve_references()
  bad.student.w_tangent = 1.0
  with pytest.raises(ConfigError, match="before the VAE"):
    query_checks.check(bad)
