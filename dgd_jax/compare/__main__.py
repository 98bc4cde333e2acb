"""``python -m dgd_jax.compare``: the command, whose code is dgd_jax/cli/compare.py."""
import runpy

runpy.run_module("dgd_jax.cli.compare", run_name="__main__", alter_sys=True)
