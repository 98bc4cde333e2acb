"""dgd_jax: privacy-preserving teacher-student learning in JAX (README.md)."""
from dgd_jax import host

host.keep_freed_memory()  # before XLA allocates: faster CPU steps (host.py)
