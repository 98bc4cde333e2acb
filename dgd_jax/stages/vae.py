"""VAE stage (DGD Section III-B): the convolutional VAE (latent c) trained on the unlabelled
pool (DGD: the synthetic set; PATE: the public pool), reporting the negative-ELBO terms, what
DGD's eps1 noise does to reconstructions, and a picture of reconstructions beside inputs.
Its encoder and decoder later supply the student's VAE triples (DGD Eq. 4)."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from flax.training import train_state

from dgd_jax.models.vae import VAE, elbo_terms
from dgd_jax.plan import pool
from dgd_jax.plan.artefacts import fit_config, vae_model
from dgd_jax.plan.context import Context, Program, abstract, abstract_key
from dgd_jax.runtime import plots
from dgd_jax.synthesis import generative
from dgd_jax.training import triples
from dgd_jax.training import train

CONFIG_KEYS = ("pool", "vae")
EPS1_MEASURED = (0.01, 0.1, 1.0, 10.0, 100.0)  # DGD's eps1 (paper: 0.01) and larger values


def programs(config, data) -> dict[str, Program]:
  """The VAE's training step on the whole pool (``pool.size_of``), at the config's shapes."""
  shape = data.image_shape
  vae, cfg = vae_model(config, shape), fit_config(config, "vae")
  key = jax.random.key(0)
  state = jax.eval_shape(lambda: train_state.TrainState.create(
      apply_fn=vae.apply, params=vae.init(key, jnp.zeros((1,) + shape), key)["params"],
      tx=train.optimizer(cfg)))
  step = lambda s, k, x: generative.vae_step(s, k, vae, x, cfg.batch_size)  # as run's
  return {"vae_step": Program(step, (state, abstract_key(),
                                     abstract((pool.size_of(config, data),) + shape)))}


def run(ctx: Context) -> dict:
  config = ctx.config
  x_syn = pool.load(ctx)  # the synthetic set (DGD) or the public pool (PATE)
  vae = vae_model(config, x_syn.shape[1:])
  cfg = fit_config(config, "vae")
  init_key, train_key, eval_key = jax.random.split(ctx.key("vae"), 3)
  params = vae.init(init_key, jnp.zeros((1,) + x_syn.shape[1:]), init_key)["params"]
  state = train_state.TrainState.create(apply_fn=vae.apply, params=params,
                                        tx=train.optimizer(cfg))
  x_dev = jnp.asarray(x_syn)
  step = jax.jit(lambda s, k: generative.vae_step(s, k, vae, x_dev, cfg.batch_size),
                 donate_argnums=0)
  state = train.run_steps(state, step, train_key, cfg, ctx.stage.checkpoint_dir, "vae",
                          ctx.log)
  held = x_syn[:1000]  # ELBO terms on a fixed slice, one sample of z each
  terms = {k: float(v) for k, v in jax.jit(
      lambda p: elbo_terms(vae, p, jnp.asarray(held), eval_key))(state.params).items()}
  x_hat, _, _ = vae.apply({"params": state.params}, jnp.asarray(held[:20]), eval_key)
  eps1_mse, x_eps1 = eps1_reconstructions(vae, state.params, held, eval_key)
  pairs = np.stack([held[:10], np.asarray(x_hat[:10]), x_eps1[:10], held[10:20],
                    np.asarray(x_hat[10:20])])
  plots.image_grid(os.path.join(ctx.stage.path, "reconstructions.png"), pairs,
                   row_labels=["input", "VAE", f"eps1={EPS1_MEASURED[0]:g}", "input", "VAE"],
                   title="VAE reconstructions of synthetic samples")
  return {"elbo_reconstruction": terms["reconstruction"], "elbo_kl": terms["kl"],
          "negative_elbo": terms["loss"], "per_pixel_mse": terms["reconstruction"] / held[0].size,
          "synthetic_variance_per_pixel": float(held.var()),
          "eps1_reconstruction_mse": eps1_mse,
          "reconstructions_png": "vae/reconstructions.png"}


def eps1_reconstructions(vae: VAE, params, x: np.ndarray, key: jax.Array
                         ) -> tuple[dict[str, float], np.ndarray]:
  """What DGD's eps1 term does to reconstructions: per-pixel MSE between x and the decoded
  normalised posterior mean, without noise ("none") and with Laplace(2c/eps1) noise for each
  eps1 in EPS1_MEASURED; and the decodings at the first of them."""
  mean, _ = vae.apply({"params": params}, jnp.asarray(x), method=VAE.encode)
  decode = jax.jit(lambda z: vae.apply({"params": params}, z, method=VAE.decode))
  mse = lambda y: float(np.mean((np.asarray(y) - x) ** 2))
  clean = mean / jnp.maximum(1.0, jnp.max(jnp.abs(mean), axis=-1, keepdims=True))
  result, first = {"none": mse(decode(clean))}, None
  for eps1 in EPS1_MEASURED:
    y = decode(triples.latent_noise(key, mean, eps1))  # DGD Eq. 4's eps1 perturbation
    result[f"{eps1:g}"] = mse(y)
    first = np.asarray(y) if first is None else first
  return result, first
