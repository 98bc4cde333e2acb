#!/usr/bin/env bash
# Quick start: set up (Debian Fashion-MNIST + .venv) and run the main job (DGD) on Fashion-MNIST
# with the quick CPU preset. Safe to run twice: a finished run is reused from its workdir.
#   bash launch/quickstart.sh                       # quick CPU preset, workdirs/quickstart_cpu
#   bash launch/quickstart.sh paper                 # paper preset, workdirs/quickstart_paper
#   bash launch/quickstart.sh cpu --config.seed=1   # extra flags go to dgd_jax.main
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
preset="${1:-cpu}"
shift || true
workdir="${DGD_WORKDIR:-workdirs/quickstart_$preset}"
python -m dgd_jax.main --config="dgd_jax/configs/dgd.py:fashion_mnist,$preset" \
  --workdir="$workdir" "$@"
echo "report: $workdir/report.md"
