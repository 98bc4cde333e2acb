"""Drivers: the command lines (flags -> library calls). ``python -m dgd_jax.<command>`` runs
``cli/<command>.py``; the library never reads FLAGS."""
