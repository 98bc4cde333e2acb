#!/usr/bin/env bash
# A multi-host Cloud TPU VM run: create the slice, copy this checkout to every worker, set
# up, run dgd_jax.main on all workers at once (jax.distributed finds the slice by itself),
# copy the workdir back, and (with --delete) delete the slice.
#   bash launch/tpu_vm.sh [--dry_run] --name=dgd-v4 --zone=us-central2-b \
#       --bucket=gs://my-bucket [--accelerator_type=v4-32] [--version=tpu-ubuntu2204-base] \
#       [--run=teachers_v4] [--delete] -- --config=dgd_jax/configs/teachers.py:fashion_mnist
# Expects: gcloud (authenticated, TPU API on), a GCS bucket. Every worker mounts the bucket
# with gcsfuse at ~/shared, so the workdir (~/shared/<run>) is one filesystem for all
# workers (Orbax writes each worker's checkpoint shards there). --workdir is set by the
# script; pass the other dgd_jax.main flags after `--`.
set -euo pipefail
dry_run=0 name="" zone="" bucket="" type=v4-32 version=tpu-ubuntu2204-base run=run delete=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry_run) dry_run=1 ;;
    --name=*) name="${1#*=}" ;;
    --zone=*) zone="${1#*=}" ;;
    --bucket=*) bucket="${1#*=}" ;;
    --accelerator_type=*) type="${1#*=}" ;;
    --version=*) version="${1#*=}" ;;
    --run=*) run="${1#*=}" ;;
    --delete) delete=1 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (main.py flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$name" && -n "$zone" && "$bucket" == gs://* ]] || {
  echo "give --name, --zone and --bucket=gs://... (see the header of $0)" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "give dgd_jax.main flags after --" >&2; exit 2; }
tpu="gcloud compute tpus tpu-vm"
where="--zone=$zone"
main_flags="$(printf '%q ' "$@")--workdir=\$HOME/shared/$run"
commands=(
  "$tpu create $name $where --accelerator-type=$type --version=$version"
  "git archive --format=tar.gz --prefix=dgd_jax/ -o /tmp/dgd_jax.tar.gz HEAD"
  "$tpu scp /tmp/dgd_jax.tar.gz $name:~/ $where --worker=all"
  "$tpu ssh $name $where --worker=all --command='tar xzf dgd_jax.tar.gz && mkdir -p shared \
&& gcsfuse --implicit-dirs ${bucket#gs://} shared && cd dgd_jax && DGD_EXTRAS=plots,tpu \
bash launch/setup_env.sh'"
  "$tpu ssh $name $where --worker=all --command='cd dgd_jax && .venv/bin/python -m \
dgd_jax.main --distributed $main_flags'"
  "mkdir -p workdirs && gcloud storage cp -r $bucket/$run workdirs/"
)
((delete)) && commands+=("$tpu delete $name $where --quiet")
for c in "${commands[@]}"; do
  echo "$c"
  ((dry_run)) || eval "$c"
done
