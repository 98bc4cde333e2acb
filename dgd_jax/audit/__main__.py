"""``python -m dgd_jax.audit``: the command, whose code is dgd_jax/cli/audit.py."""
import runpy

runpy.run_module("dgd_jax.cli.audit", run_name="__main__", alter_sys=True)
