r"""DGD (Discriminative-Generative Distillation, Ge et al. 2023). So far: the baseline and
the generative stream (generator, synthetic set, VAE); teachers, queries and the student
follow.

COMMAND (quick CPU preset):
  python -m dgd_jax.main --config=dgd_jax/configs/dgd.py:fashion_mnist,cpu \
      --workdir=workdirs/dgd_cpu --stages=generator,vae
COMMAND (paper preset; the generator's 200 x 120 steps of 512 are a GPU job):
  python -m dgd_jax.main --config=dgd_jax/configs/dgd.py:fashion_mnist \
      --workdir=workdirs/dgd_paper --stages=generator,vae
"""
import ml_collections

from dgd_jax.configs import baseline as baseline_config


def get_config(arg: str | None = None):
  config = baseline_config.get_config(arg)
  paper = config.preset == "paper"
  config.method = "dgd"
  config.generator = ml_collections.ConfigDict(dict(
      rounds=200 if paper else 20,  # DGD IV-A: 200 rounds
      iterations_per_round=120 if paper else 25,  # a round: DAFL's epoch of 120 iterations
      batch_size=512 if paper else 128,  # DAFL's MNIST batch
      learning_rate=0.2,  # DGD IV-A (Adam, as DAFL), divided by 10 every decay_every rounds
      decay_every=80 if paper else 8,
      latent_dim=100,
      features=128 if paper else 32,  # DAFL generator width
      standardize_output=False,  # tanh output in [-1, 1] like our data (DAFL: a final BN)
      alpha=5.0,  # Eq. 2 weight of the information-entropy term (natural log)
      beta=0.1,  # Eq. 2 weight of the activation term
      num_synthetic=0,  # 0: as many as the private training set (DGD IV-A)
  ))
  config.vae = ml_collections.ConfigDict(dict(
      latent_dim=32,  # c (DGD IV-A)
      features=32,
      tanh_output=True,  # synthetic data lies in [-1, 1] (False: linear, for standardised data)
      num_steps=500 if paper else 300,  # DGD IV-A: 500 iterations
      batch_size=128,
      learning_rate=1e-3,  # decaying linearly to 0 (DGD IV-A)
      end_learning_rate=0.0,
  ))
  return config
