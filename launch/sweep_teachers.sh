#!/usr/bin/env bash
# Teacher-count sweep at cluster scale: every ensemble size is trained in ONE vmapped
# program (configs/teacher_sweep.py), its members sharded over all devices of the chosen
# launcher's processes. A multi-process run needs the total member count (the sum of the
# sizes) divisible by the device count: the script checks it when it knows the count.
#   bash launch/sweep_teachers.sh [--dry_run] [--sizes=10,25,50,100,250] \
#       [--dataset=fashion_mnist] [--preset=cpu] [--workdir=workdirs/teacher_sweep] \
#       [--launcher=single|local|slurm|tpu] [--devices=N] [-- <launcher options>]
# Launcher options go to launch/{local_multiprocess,slurm,tpu_vm}.sh, e.g.
#   --launcher=local -- --processes=2 --devices_per_process=2
#   --launcher=slurm -- --nodes=4 --gpus_per_node=8
set -euo pipefail
dry_run=0 sizes=10,25,50,100,250 dataset=fashion_mnist preset="" launcher=single devices=0
workdir=workdirs/teacher_sweep
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry_run) dry_run=1 ;;
    --sizes=*) sizes="${1#*=}" ;;
    --dataset=*) dataset="${1#*=}" ;;
    --preset=*) preset="${1#*=}" ;;
    --workdir=*) workdir="${1#*=}" ;;
    --launcher=*) launcher="${1#*=}" ;;
    --devices=*) devices="${1#*=}" ;;
    --) shift; break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
launch="$(dirname "${BASH_SOURCE[0]}")"
members=$(( ${sizes//,/+} ))
if [[ "$launcher" == local ]]; then  # the local launcher's device count is known here
  p=2 d=2
  for a in "$@"; do
    case "$a" in --processes=*) p="${a#*=}" ;; --devices_per_process=*) d="${a#*=}" ;; esac
  done
  devices=$((p * d))
fi
if ((devices > 0 && members % devices)); then
  echo "the sizes $sizes give $members members, not divisible by $devices devices: pick" \
       "sizes whose sum is a multiple of $devices" >&2
  exit 2
fi
config="--config=dgd_jax/configs/teacher_sweep.py:$dataset${preset:+,$preset}"
flags=("$config" "--config.sweep.sizes=($sizes,)")
dry=(); ((dry_run)) && dry=(--dry_run)
case "$launcher" in
  single)
    if ((dry_run)); then echo "python -m dgd_jax.main $(printf '%q ' "${flags[@]}")--workdir=$workdir"
    else source "$launch/setup_env.sh"; python -m dgd_jax.main "${flags[@]}" --workdir="$workdir"; fi ;;
  local) bash "$launch/local_multiprocess.sh" "${dry[@]}" "$@" -- "${flags[@]}" --workdir="$workdir" ;;
  slurm) bash "$launch/slurm.sh" "${dry[@]}" "$@" -- "${flags[@]}" --workdir="$workdir" ;;
  tpu) bash "$launch/tpu_vm.sh" "${dry[@]}" "$@" -- "${flags[@]}" ;;
  *) echo "--launcher=$launcher: expected single, local, slurm or tpu" >&2; exit 2 ;;
esac
