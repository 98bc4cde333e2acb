#!/usr/bin/env bash
# Side-by-side speed of teacher training: the PyTorch per-teacher loop (the peer script in
# the project's shared/bench/) and dgd_jax's lifted ensemble step, one after the other, at
# the quick (16/32) and paper (64/128) widths, 250 teachers x 32 examples. One JSON line
# per run. Installs torch==2.13.0 into the venv if missing (a CPU wheel on the dev machines).
#   bash launch/bench_teachers.sh [--steps=5]
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
peer="${DGD_TORCH_PEER:-$repo/../shared/bench/torch_teachers.py}"
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
steps="${1:---steps=5}"
for width in "16 32" "64 128"; do
  set -- $width
  python "$peer" --teachers 250 --batch 32 "$steps" --conv1 "$1" --conv2 "$2"
  python -m dgd_jax.bench teachers --teachers=250 --batch=32 "$steps" --conv1="$1" --conv2="$2"
done
python -m dgd_jax.bench teachers --teachers=250 --batch=32 "$steps" --conv1=16 --conv2=32 --chunk=250
