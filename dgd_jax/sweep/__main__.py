"""``python -m dgd_jax.sweep``: the command, whose code is dgd_jax/cli/sweep.py."""
import runpy

runpy.run_module("dgd_jax.cli.sweep", run_name="__main__", alter_sys=True)
