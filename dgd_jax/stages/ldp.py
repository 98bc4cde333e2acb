"""LDP stage (Sun et al.): the robust teacher (Algorithm 2, Eq. 3) beside BASE (the baseline
stage's classifier, trained on clean data only), both evaluated on clean and on
client-transformed (Algorithm 1) test images; the client's local epsilon; a picture of
original / masked / perturbed samples at both of the paper's settings."""
from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax import privacy
from dgd_jax.plan import ldp as ldp_plan
from dgd_jax.plan.artefacts import classifier, fit_config, load_classifier
from dgd_jax.privacy import noise
from dgd_jax.plan.context import NOISE_KEY, Context, Program, abstract, abstract_key
from dgd_jax.runtime import plots
from dgd_jax.training import ldp
from dgd_jax.training import train

CONFIG_KEYS = ("ldp", NOISE_KEY)
CHUNK = 1000  # test images the client transforms at a time


def perturbed(config, key: jax.Array, x: np.ndarray) -> np.ndarray:
  """The client's transform of ``x`` (Algorithm 1) at the config's setting, in chunks."""
  sigma, mu, bound = config.ldp.sigma, config.ldp.mu, config.ldp.bound  # static under jit
  fn = jax.jit(lambda k, xb: ldp.transform(k, xb, sigma, mu, bound))
  return np.concatenate([np.asarray(fn(jax.random.fold_in(key, i), x[i:i + CHUNK]))
                         for i in range(0, len(x), CHUNK)])


def programs(config, data) -> dict[str, Program]:
  """The robust teacher's step (LDP Eq. 3) on the private set and the client's transform of
  one chunk, at the config's shapes."""
  model, cfg = classifier(config, data.num_classes), fit_config(config, "ldp")
  state = jax.eval_shape(lambda: train.create_train_state(
      model, train.optimizer(cfg), jax.random.key(0), data.image_shape))
  step_cfg = ldp_plan.robust_settings(config.ldp)
  c = config.ldp
  return {
      "robust_step": Program(functools.partial(ldp.robust_step, cfg=step_cfg),
                             (state, abstract_key(), abstract(data.x_train),
                              abstract(data.y_train))),
      "client_transform": Program(lambda k, xb: ldp.transform(k, xb, c.sigma, c.mu, c.bound),
                                  (noise.abstract_key(),
                                   abstract((CHUNK,) + data.image_shape))),
  }


def run(ctx: Context) -> dict:
  config, data = ctx.config, ctx.dataset
  c = config.ldp
  base, base_params = load_classifier(ctx, "baseline")
  model = classifier(config, data.num_classes)
  cfg = fit_config(config, "ldp")
  init_key, train_key, _, _ = jax.random.split(ctx.key("ldp"), 4)  # public
  # the client's own noise (Algorithm 1), secret: its test queries and the pictured samples
  test_key, picture_key = ctx.noise_key("ldp_client"), ctx.noise_key("ldp_client_picture")
  state = train.create_train_state(model, train.optimizer(cfg), init_key, data.image_shape)
  x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
  step_cfg = ldp_plan.robust_settings(c)
  step = jax.jit(functools.partial(ldp.robust_step, x=x, y=y, cfg=step_cfg),
                 donate_argnums=0)
  state = train.run_steps(state, step, train_key, cfg,
                          ctx.stage.checkpoint_dir, "robust_teacher", ctx.log)
  x_pert = perturbed(config, test_key, data.x_test)
  acc = lambda apply, params, xs: train.accuracy(apply, params, xs, data.y_test)

  rows = [data.x_test[:10]]
  labels = ["original"]
  for name, (sigma, mu) in ldp.PRESETS.items():
    keys = jax.random.split(jax.random.fold_in(picture_key, int(sigma)), 10)
    rows.append(np.asarray(jax.vmap(lambda k, xi: ldp.mask(k, xi, mu))(keys, rows[0])))
    rows.append(np.asarray(ldp.transform(keys[0], rows[0], sigma, mu, c.bound)))
    labels += [f"masked ({sigma:g}, {100 * mu:g}%)", f"perturbed ({sigma:g}, {100 * mu:g}%)"]
  plots.image_grid(os.path.join(ctx.stage.path, "samples.png"), np.stack(rows),
                   row_labels=labels, title="LDP client transform (Algorithm 1)")
  num_features = int(np.prod(data.image_shape))
  per_feature = privacy.ldp_local_epsilon(c.sigma, num_features, c.mu, relation="feature")
  robust_perturbed = acc(model.apply, state.params, x_pert)
  return {
      "test_accuracy": robust_perturbed,  # the headline: the robust teacher, perturbed inputs
      "base_clean_accuracy": acc(base.apply, base_params, data.x_test),
      "base_perturbed_accuracy": acc(base.apply, base_params, x_pert),
      "robust_perturbed_accuracy": robust_perturbed,
      "robust_clean_accuracy": acc(model.apply, state.params, data.x_test),
      "local_epsilon": privacy.ldp_local_epsilon(c.sigma, num_features, c.mu),
      "local_epsilon_note": "pure epsilon of one client sample (all its unmasked features, "
                            "range 2B each, exact discrete Laplace B/sigma on the grid B/255), "
                            "as the sampler's integer table realises it; per feature: "
                            f"{per_feature:.12g}",
      "sigma": c.sigma, "mu": c.mu, "bound": c.bound,
      "samples_png": "ldp/samples.png",
  }
