"""``python -m dgd_jax.privacy``: the command, whose code is dgd_jax/cli/privacy.py."""
import runpy

runpy.run_module("dgd_jax.cli.privacy", run_name="__main__", alter_sys=True)
