"""``python -m dgd_jax.bench``: the command, whose code is dgd_jax/cli/bench.py."""
import runpy

runpy.run_module("dgd_jax.cli.bench", run_name="__main__", alter_sys=True)
