"""Models (flax linen): the paper classifier (or one of yours, ``WithFeatures``), the DAFL
generator, the convolutional VAE."""
from dgd_jax.models.adapter import WithFeatures
from dgd_jax.models.classifier import Classifier
from dgd_jax.models.generator import Generator
from dgd_jax.models.vae import VAE
from dgd_jax.models.vit import ViT

__all__ = ["VAE", "Classifier", "Generator", "ViT", "WithFeatures"]
