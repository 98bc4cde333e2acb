"""The ``python -m dgd_jax.bench`` command's name; its code is dgd_jax/cli/bench.py."""
