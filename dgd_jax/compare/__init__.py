"""The ``python -m dgd_jax.compare`` command's name; its code is dgd_jax/cli/compare.py."""
