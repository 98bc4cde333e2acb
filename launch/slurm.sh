#!/usr/bin/env bash
# A multi-node GPU job under SLURM: one task per node, every GPU of the node visible to it;
# jax.distributed reads the job's SLURM_* variables (no coordinator flags needed).
#   bash launch/slurm.sh [--dry_run] [--nodes=2] [--gpus_per_node=8] [--time=04:00:00] \
#       [--partition=gpu] [--account=...] -- --config=dgd_jax/configs/teachers.py:fashion_mnist \
#       --workdir=/shared/workdirs/teachers_2x8
# The workdir must be on a filesystem every node sees (Orbax writes each process's shards).
# Expects: sbatch, the repository checked out on the shared filesystem, and
# `DGD_VENV=<path> bash launch/setup_env.sh` run once there with the cuda extra
# (pip install -e '.[cuda]').
set -euo pipefail
dry_run=0 nodes=2 gpus=8 time_limit=04:00:00 partition="" account=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry_run) dry_run=1 ;;
    --nodes=*) nodes="${1#*=}" ;;
    --gpus_per_node=*) gpus="${1#*=}" ;;
    --time=*) time_limit="${1#*=}" ;;
    --partition=*) partition="${1#*=}" ;;
    --account=*) account="${1#*=}" ;;
    --) shift; break ;;
    *) echo "unknown option $1 (main.py flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
[[ $# -gt 0 ]] || { echo "give dgd_jax.main flags after --" >&2; exit 2; }
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
script="#!/usr/bin/env bash
#SBATCH --job-name=dgd_jax
#SBATCH --nodes=$nodes
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=$gpus
#SBATCH --cpus-per-task=16
#SBATCH --time=$time_limit
${partition:+#SBATCH --partition=$partition
}${account:+#SBATCH --account=$account
}#SBATCH --output=dgd_jax-%j.out
set -euo pipefail
cd $repo
source \${DGD_VENV:-.venv}/bin/activate
srun python -m dgd_jax.main --distributed $(printf '%q ' "$@")"
if ((dry_run)); then
  echo "# sbatch <<'SBATCH'"
  echo "$script"
  echo "# SBATCH"
  exit 0
fi
sbatch <<<"$script"
