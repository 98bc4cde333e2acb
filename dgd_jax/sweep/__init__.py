"""The ``python -m dgd_jax.sweep`` command's name; its code is dgd_jax/cli/sweep.py."""
