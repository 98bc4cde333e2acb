r"""DP-SGD (Abadi et al. 2016) on jax-privacy: the reference every method is compared with.
Models (Tramer & Boneh, ICLR 2021): ScatterNet features + a linear layer (default, the most
accurate here), ScatterNet + a small CNN (``scatternet_cnn``), the end-to-end tanh CNN
(``cnn``), or the head of the public pretrained backbone ``config.model`` names, on its frozen
features (``backbone``: ViT-B/16 at 224 x 224; set ``--config.model.checkpoint``; De et al.
2022's reference). Poisson sampling of an expected batch, per-example clipping, Gaussian noise
whose multiplier is calibrated to ``privacy.max_epsilon`` (dp-accounting PLD, delta 1e-5).

COMMAND (ScatterNet + linear, eps 3):
  python -m dgd_jax.main --config=dgd_jax/configs/dpsgd.py:fashion_mnist,eps3 \
      --workdir=workdirs/dpsgd_eps3
COMMAND (end-to-end tanh CNN, eps 3):
  python -m dgd_jax.main --config=dgd_jax/configs/dpsgd.py:fashion_mnist,eps3,cnn \
      --workdir=workdirs/dpsgd_cnn_eps3
Presets: ``eps1``, ``eps3`` (default), ``eps10``; ``cnn`` / ``scatternet_cnn`` pick the model.
On data of any size a preset keeps its recipe's sampling rate and epochs: the run sets the
batch to round(q N) and the steps to ceil(40 N / batch) (``dpsgd_plan.schedule``; 8192 and 293
on Fashion-MNIST's 60,000), unless ``dpsgd.batch_size`` / ``num_steps`` are set.
Measured results: RESULTS.md, "DP-SGD".
"""
from __future__ import annotations

import ml_collections

from dgd_jax.configs import common

EPSILONS = {"eps1": 1.0, "eps3": 3.0, "eps10": 10.0}
MODELS = ("scatternet_linear", "scatternet_cnn", "cnn", "backbone")
# The recipes' batches are for Fashion-MNIST's 60,000 training images: the presets keep their
# sampling rate q = B / 60,000 and their epochs on data of any size (dpsgd_plan.schedule).
RECIPE_SIZE = 60_000

# Tramer & Boneh's Fashion-MNIST recipes (their README): SGD with momentum 0.9, clip norm 0.1,
# 40 epochs; ScatterNet + linear: batch 8192, lr 16, group norm of 27 groups; CNNs: batch 2048,
# lr 4. The learning rate multiplies the mean noisy gradient (noisy sum / expected batch).
# microbatch_size only trades speed for memory (the same sums): small microbatches keep the
# per-example gradients in cache, faster on CPU than 256.
RECIPES = {
    "scatternet_linear": dict(batch_size=8192, learning_rate=16.0, epochs=40, microbatch_size=8),
    "scatternet_cnn": dict(batch_size=2048, learning_rate=4.0, epochs=40, microbatch_size=32),
    "cnn": dict(batch_size=2048, learning_rate=4.0, epochs=40, microbatch_size=32),
    # A linear head on frozen ViT features (De et al. 2022 fine-tune with large batches and
    # few epochs); not tuned here.
    "backbone": dict(batch_size=4096, learning_rate=4.0, epochs=20, microbatch_size=32),
}


def dpsgd_config(model: str, epochs: float | None = None) -> ml_collections.ConfigDict:
  recipe = RECIPES[model]
  epochs = recipe["epochs"] if epochs is None else epochs
  return ml_collections.ConfigDict(dict(
      model=model,  # scatternet_linear | scatternet_cnn | cnn (models.dpsgd.MODELS) | backbone
      batch_size=0,  # expected Poisson batch q N; 0: round(sampling_rate x N)
      num_steps=0,  # 0: ceil(epochs x N / batch_size)
      sampling_rate=recipe["batch_size"] / RECIPE_SIZE,  # q, for batch_size = 0
      epochs=float(epochs),  # for num_steps = 0
      learning_rate=recipe["learning_rate"],  # SGD, constant
      momentum=0.9,
      norm_bound=0.1,  # per-example clip norm C (Abadi Alg. 1 line 6)
      noise=0.0,  # noise multiplier sigma; 0 = the least that fits privacy.max_epsilon
      sampling="poisson",  # the only batch selection the accountant supports here
      microbatch_size=recipe["microbatch_size"],  # per-example gradients vmapped at a time
      scattering_scales=2,  # J
      scattering_orientations=8,  # L
      groups=27,  # group norm groups of the 81 scattering channels
      norm_affine=False,  # a learnt group-norm scale and shift (Tramer & Boneh: none)
      ema=0.0,  # > 0: release the moving average of the parameters with this decay
  ))


GRAMMAR = common.Grammar("dpsgd.py", choices=(
    common.Choice("budget", tuple(EPSILONS), "eps3"),
    common.Choice("model", MODELS, "scatternet_linear")))


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  config = common.base_config(arg.dataset, arg.preset, arg.smoke)
  config.method = "dpsgd"
  config.dpsgd = dpsgd_config(arg["model"])
  if arg["model"] == "backbone":  # ViT-B/16 features at 224 x 224, its head trained
    config.model.update(backbone="vit", variant="B/16", trainable="head", image_size=224)
  # PLD (dp-accounting's privacy-loss-distribution accountant) is the tightest valid bound for
  # Poisson-sampled Gaussian steps: calibrated under it the same epsilon needs less noise
  # than under RDP, so the model learns more at the same budget.
  config.privacy = common.privacy_config(EPSILONS[arg["budget"]], accountant="pld")
  config.log_every = 20
  config.checkpoint_every = 100
  return config
