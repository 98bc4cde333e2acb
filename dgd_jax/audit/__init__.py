"""The ``python -m dgd_jax.audit`` command's name; its code is dgd_jax/cli/audit.py."""
