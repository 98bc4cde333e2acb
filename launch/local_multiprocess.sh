#!/usr/bin/env bash
# N CPU processes on this machine, each with D forced host devices, joined by
# jax.distributed (gloo collectives): the local stand-in for a multi-host run.
#   bash launch/local_multiprocess.sh [--dry_run] [--processes=2] [--devices_per_process=2] \
#       [--port=12355] -- --config=dgd_jax/configs/teachers.py:fashion_mnist,cpu \
#       --workdir=workdirs/teachers_2proc
# Flags after `--` go to every `python -m dgd_jax.main`. Exits non-zero if any process fails.
set -euo pipefail
dry_run=0 processes=2 devices=2 port=12355
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry_run) dry_run=1 ;;
    --processes=*) processes="${1#*=}" ;;
    --devices_per_process=*) devices="${1#*=}" ;;
    --port=*) port="${1#*=}" ;;
    --) shift; break ;;
    *) echo "unknown option $1 (main.py flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
[[ $# -gt 0 ]] || { echo "give dgd_jax.main flags after --" >&2; exit 2; }
commands=()
for ((i = 0; i < processes; i++)); do
  commands+=("JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=$devices \
python -m dgd_jax.main --coordinator_address=localhost:$port --num_processes=$processes \
--process_id=$i $(printf '%q ' "$@")")
done
if ((dry_run)); then
  printf '%s &\n' "${commands[@]}"
  echo wait
  exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
pids=()
for ((i = 0; i < processes; i++)); do
  (set -o pipefail; eval "${commands[$i]}" 2>&1 | sed -u "s/^/[process $i] /") &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
