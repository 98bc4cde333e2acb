"""The secret noise of every differentially private release, and its samplers.

A DP guarantee holds only while the mechanism's noise (and DP-SGD's Poisson sampling) stays
secret: anyone who can regenerate the noise subtracts it from the released answers and gets
the private statistics back. So every draw a guarantee assumes secret comes from a
``NoiseSource``, never from the public ``config.seed``:

* ``NoiseSource.fresh()``: 256 bits from the operating system's entropy (``os.urandom``), the
  default; a run keeps them in one owner-only file of its workdir (``runtime.workdir``) so that a
  killed and resumed run releases the same answers;
* ``NoiseSource.reproducible(noise_seed)``: the same bits derived from a public integer, for
  tests and papers only: such a run is **not a private release** (report.json says so).

``key(purpose)`` is a JAX key of the ``rbg`` implementation (128-bit key data, where the
default threefry key holds 64 bits) hashed from the secret and the purpose; ``rng(purpose)``
a NumPy generator seeded with 256 hashed bits. The secret is never written to a config,
report, log or file name: ``repr`` shows only where it came from.

Samplers (floating-point attacks, Mironov 2012; Holohan & Braghin 2021): ``normal`` sums
``GAUSSIAN_DRAWS`` = 4 standard normal draws and halves the sum (Opacus' ``secure_mode``), so
the low-order bits of one draw do not reveal where it fell (``numpy_normal``: the same from a
NumPy generator, for the smooth-sensitivity release); ``laplace`` is JAX's single-draw
float Laplace, used where only an argmax leaves (LNMax); ``from_counts`` is exact integer
noise: 64 uniform bits mapped by an integer inverse CDF through a table of counts
(``privacy.discrete``), so the pmf drawn is the table's exactly (the LDP client's noise,
``training.ldp``). What each leaves uncovered is stated in PRIVACY.md
("The noise: where it comes from").
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax.runtime.errors import ConfigError

SECRET_BYTES = 32  # 256 bits from os.urandom
KEY_IMPL = "rbg"  # 4 x uint32 key data: 128 bits reach every draw (threefry keeps 64)
GAUSSIAN_DRAWS = 4  # Opacus secure_mode: the sum of 4 N(0, 1) draws, halved, is N(0, 1)


@dataclasses.dataclass(frozen=True)
class NoiseSource:
  """Where a run's secret draws come from (see the module docstring). ``noise_seed`` is the
  public integer of a reproducible source, None for a secret one."""

  secret: bytes = dataclasses.field(repr=False)
  noise_seed: int | None = None

  def __post_init__(self):
    if not isinstance(self.secret, bytes) or len(self.secret) != SECRET_BYTES:
      raise ConfigError(f"a noise secret is {SECRET_BYTES} bytes; got "
                        f"{len(self.secret) if isinstance(self.secret, bytes) else self.secret!r}"
                        ".")

  @classmethod
  def fresh(cls) -> "NoiseSource":
    """A secret source drawn from the operating system's entropy."""
    return cls(os.urandom(SECRET_BYTES))

  @classmethod
  def reproducible(cls, noise_seed: int) -> "NoiseSource":
    """The source ``noise_seed`` names: the same draws on every run (not a private release)."""
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, (int, np.integer)) \
        or noise_seed < 0:
      raise ConfigError(f"noise_seed={noise_seed!r}: a whole number >= 0 makes the noise "
                        "reproducible (not a private release); leave it unset (-1 in a config) "
                        "for noise from a secret key.")
    return cls(hashlib.sha256(f"dgd_jax noise_seed {int(noise_seed)}".encode()).digest(),
               int(noise_seed))

  @classmethod
  def of(cls, noise_seed: int | None) -> "NoiseSource":
    """``reproducible(noise_seed)`` for a seed >= 0, else ``fresh()`` (None or -1)."""
    return cls.fresh() if noise_seed is None or noise_seed == -1 else cls.reproducible(noise_seed)

  @property
  def is_secret(self) -> bool:
    return self.noise_seed is None

  def _digest(self, purpose: str) -> bytes:
    return hashlib.sha256(self.secret + b"\0" + purpose.encode()).digest()

  def key(self, purpose: str) -> jax.Array:
    """A JAX key (``rbg``) for one purpose: 128 bits of sha256(secret, purpose)."""
    data = np.frombuffer(self._digest(purpose)[:16], np.uint32)
    return jax.random.wrap_key_data(jnp.asarray(data), impl=KEY_IMPL)

  def rng(self, purpose: str) -> np.random.Generator:
    """A NumPy generator for one purpose, seeded with 256 bits of sha256(secret, purpose)."""
    return np.random.default_rng(np.frombuffer(self._digest(purpose), np.uint32).tolist())

  def describe(self) -> dict:
    """What report.json records of the source (never the secret)."""
    if self.is_secret:
      return {"source": "secret_key", "reproducible": False, "private_release": True}
    return {"source": "noise_seed", "noise_seed": self.noise_seed, "reproducible": True,
            "private_release": False}


def abstract_key() -> jax.ShapeDtypeStruct:
  """A noise key (``KEY_IMPL``), abstract: what a compiled program that draws noise takes."""
  return jax.eval_shape(lambda: jax.random.key(0, impl=KEY_IMPL))


def normal(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
  """N(0, 1) as the halved sum of ``GAUSSIAN_DRAWS`` standard normal draws (Opacus
  secure_mode; Holohan & Braghin 2021): a Gaussian whose float32 value is not one draw's."""
  draws = jax.random.normal(key, (GAUSSIAN_DRAWS,) + tuple(shape), dtype)
  return jnp.sum(draws, axis=0) / jnp.sqrt(jnp.asarray(GAUSSIAN_DRAWS, dtype))


def numpy_normal(rng: np.random.Generator, shape=()) -> np.ndarray:
  """``normal``'s hardening for a NumPy generator (float64): the halved sum of
  ``GAUSSIAN_DRAWS`` standard normal draws, N(0, 1), whose value is not one draw's."""
  draws = rng.standard_normal((GAUSSIAN_DRAWS,) + tuple(shape))
  return np.sum(draws, axis=0) / np.sqrt(GAUSSIAN_DRAWS)


def laplace(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
  """Laplace(0, 1), one float draw (``jax.random.laplace``): used where only an argmax (LNMax)
  leaves; PRIVACY.md states what it leaves uncovered."""
  return jax.random.laplace(key, tuple(shape), dtype)


def table_index(high: jax.Array, low: jax.Array, cdf: tuple[np.ndarray, np.ndarray]) -> jax.Array:
  """The number of cumulative counts C_i <= u = high 2^32 + low (``discrete.cdf_words``'s two
  uint32 words per C_i, ascending): the inverse CDF on 64-bit integers, a branchless binary
  search comparing (high, low) lexicographically. int32, in [0, len(cdf[0])]."""
  c_high, c_low = (jnp.asarray(w, jnp.uint32) for w in cdf)
  n = int(c_high.shape[0])
  pos = jnp.zeros(jnp.shape(high), jnp.int32)
  step = 1 << max(n.bit_length() - 1, 0)
  while step and n:  # pos + step entries are all <= u: move on (Bentley's binary search)
    cand = pos + step
    i = jnp.minimum(cand, n) - 1
    h, l = c_high[i], c_low[i]
    below = (h < high) | ((h == high) & (l <= low))
    pos = jnp.where((cand <= n) & below, cand, pos)
    step >>= 1
  return pos


def from_counts(key: jax.Array, cdf: tuple[np.ndarray, np.ndarray], shape) -> jax.Array:
  """Integer indices i with P(i) = c_i / 2^64 exactly, for the table whose cumulative counts
  ``discrete.cdf_words`` gives: two uint32 words of ``jax.random.bits`` per draw, then
  ``table_index`` (exact inverse-CDF sampling; no float arithmetic on the way). int32."""
  bits = jax.random.bits(key, (2,) + tuple(shape), jnp.uint32)
  return table_index(bits[0], bits[1], cdf)
