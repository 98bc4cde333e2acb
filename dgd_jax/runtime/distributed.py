"""Multi-process runs on JAX's own distributed runtime (``jax.distributed``).

``initialize`` is called by ``main.py`` before any device is touched. It starts the runtime
when the environment asks for more than one process:

- explicit: ``--coordinator_address`` (with ``--num_processes`` and ``--process_id``), e.g.
  ``launch/local_multiprocess.sh`` on one machine;
- SLURM: a job step with more than one task (``SLURM_NTASKS`` > 1); JAX reads the rest;
- Cloud TPU: a multi-host TPU VM slice (``TPU_WORKER_HOSTNAMES`` lists several hosts or
  ``MEGASCALE_COORDINATOR_ADDRESS`` is set); JAX reads the rest;
- ``--distributed``: any cluster JAX detects by itself (SLURM, Cloud TPU through its
  metadata server, ...), for environments the variables above miss.

After it, ``jax.devices()`` lists every device of every process, and the teacher mesh
(``placement.teacher_mesh``) spans them. Process 0 is the writer: it alone writes
``config.json``, metrics, stage results, reports and plots. Orbax writes the checkpoint
shards of every process, so the workdir must be one shared filesystem.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Collection, Mapping

import jax
import numpy as np
from absl import logging

from dgd_jax.runtime import host
from dgd_jax.runtime.errors import ConfigError, UserInputError


class CoordinatorError(UserInputError):
  """The coordinator of a multi-process run cannot be reached or started."""


@dataclasses.dataclass(frozen=True)
class Topology:
  """How this process joins a run. ``source`` is 'single', 'explicit', 'slurm', 'tpu' or
  'auto'. For the last three the address, count and id are left to JAX's cluster
  detection."""

  source: str = "single"
  coordinator_address: str | None = None
  num_processes: int | None = None
  process_id: int | None = None

  @property
  def multiprocess(self) -> bool:
    return self.source != "single"


def detect(env: Mapping[str, str], coordinator_address: str = "", num_processes: int = 0,
           process_id: int = -1, force: bool = False) -> Topology:
  """The topology the flags and environment ask for (explicit flags win; ``force``: let JAX
  detect the cluster)."""
  if coordinator_address:
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise ConfigError(
          f"--coordinator_address={coordinator_address} needs --num_processes >= 1 and "
          f"0 <= --process_id < --num_processes; got {num_processes} and {process_id}.")
    if num_processes == 1:
      return Topology()
    return Topology("explicit", coordinator_address, num_processes, process_id)
  if num_processes > 1 or process_id >= 0:
    raise ConfigError("--num_processes/--process_id need --coordinator_address=HOST:PORT "
                      "(the address of process 0).")
  if "SLURM_JOB_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
    return Topology("slurm")
  hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
  if len(hosts) > 1 or env.get("MEGASCALE_COORDINATOR_ADDRESS"):
    return Topology("tpu")
  return Topology("auto") if force else Topology()


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
  """Polls ``address`` until it accepts a TCP connection; raises CoordinatorError after
  ``timeout_s``. (The runtime itself aborts the process when its deadline passes, so a
  process that is not the coordinator checks first and fails with a message instead.)"""
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit():
    raise ConfigError(f"--coordinator_address={address!r}: expected HOST:PORT.")
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      with socket.create_connection((host, int(port)), timeout=1.0):
        return
    except OSError as e:
      if time.monotonic() >= deadline:
        raise CoordinatorError(
            f"The coordinator {address} did not answer within {timeout_s:g} s ({e}). Start "
            "process 0 (it hosts the coordinator) with the same --coordinator_address, check "
            "the host and port are reachable from this machine, or raise "
            "--distributed_timeout.") from None
      time.sleep(0.2)


def _check_port_free(address: str) -> None:
  """The coordinator (process 0) binds ``address``'s port: refuse one already in use."""
  _, _, port = address.rpartition(":")
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind(("", int(port)))
    except OSError as e:
      raise CoordinatorError(f"Process 0 cannot host the coordinator on port {port}: {e}. "
                             "Pick a free port in --coordinator_address.") from None


def initialize(topology: Topology, timeout_s: int = 300) -> None:
  """Starts ``jax.distributed`` for a multi-process ``topology``; one process gets a CPU
  device per core instead (``host.use_every_core``). Must run before any JAX computation.
  CPU processes talk through gloo collectives."""
  if not topology.multiprocess:
    host.use_every_core()
    return
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if topology.source == "explicit":
    if topology.process_id == 0:
      _check_port_free(topology.coordinator_address)
    else:
      _wait_for_coordinator(topology.coordinator_address, timeout_s)
  logging.info("jax.distributed: %s topology; waiting up to %d s for every process to join "
               "(if this process aborts with DEADLINE_EXCEEDED, another process did not "
               "start or died).", topology.source, timeout_s)
  jax.distributed.initialize(topology.coordinator_address, topology.num_processes,
                             topology.process_id, initialization_timeout=timeout_s)
  logging.info("process %d of %d; %d local of %d devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def from_environment(coordinator_address: str = "", num_processes: int = 0,
                     process_id: int = -1, force: bool = False, timeout_s: int = 300
                     ) -> Topology:
  """``detect`` on ``os.environ`` and the flags, then ``initialize``; returns the topology."""
  topology = detect(os.environ, coordinator_address, num_processes, process_id, force)
  initialize(topology, timeout_s)
  return topology


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_writer() -> bool:
  """Whether this process writes the workdir's files (process 0)."""
  return jax.process_index() == 0


def check_multiprocess(to_run: list[str], sharded: Collection[str]) -> None:
  """A multi-process run trains teacher ensembles sharded over every process's devices
  (``sharded``: the stages that do); the other stages run on one process. Refuses a plan
  that would run one of those across processes."""
  single = [n for n in to_run if n not in sharded]
  if single and is_multiprocess():
    across = ",".join(n for n in to_run if n in sharded) or "teachers"
    raise ConfigError(
        f"Stages {single} run on one process, but this run has {jax.process_count()}. Run "
        f"--stages={across} across processes, then the same command on one process with the "
        "same --workdir: it reuses the finished teacher stages.")


def barrier(name: str) -> None:
  """Waits until every process reaches ``name`` (no-op for one process)."""
  if is_multiprocess():
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def from_process_zero(data: bytes) -> bytes:
  """Process 0's ``data`` on every process (itself for one process): e.g. the run's secret
  noise key, which process 0 alone reads or draws. Every process passes bytes of one length."""
  if not is_multiprocess():
    return data
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  sent = multihost_utils.broadcast_one_to_all(np.frombuffer(data, np.uint8))
  return np.asarray(sent, np.uint8).tobytes()


def agree_min(value: int) -> int:
  """The smallest ``value`` over all processes (itself for one process): e.g. the teachers'
  chunk, which each process plans from its own free memory, so every process compiles the
  same program."""
  if not is_multiprocess():
    return value
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return int(np.min(multihost_utils.process_allgather(np.int32(value))))
