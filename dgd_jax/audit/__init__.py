"""The privacy audit: its attacks (``attacks``) and the ``python -m dgd_jax.audit`` command,
whose code is dgd_jax/cli/audit.py."""
