#!/usr/bin/env bash
# Prepares, here, what the device check needs on an accelerator machine that reaches no package
# registry, in .device/ (git-ignored; the device tool carries it: carry [".device"]): wheels for
# Python 3.12 (manylinux x86_64, no dependencies resolved) of the packages its image lacks, at
# the versions this checkout's .venv runs, Fashion-MNIST's four IDX files, and the PyTorch peer
# of the teacher benchmark. Under 64 MiB with the tree.
#   bash launch/device_prepare.sh        # then: bash launch/device_check.sh on the device
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
out="$repo/.device"
mkdir -p "$out/wheels" "$out/fashion-mnist"
# What the image (jax, flax, optax, chex, orbax, absl, numpy, scipy, torch) lacks and dgd_jax
# imports on an idx: dataset: dp-accounting, jax-privacy, ml_collections, tensorboardX and their
# own needs.
packages="dp-accounting jax-privacy ml_collections tensorboardX attrs dm-tree mpmath pydantic
pydantic-core annotated-types typing-inspection"
pinned=$(python - $packages <<'PY'
import importlib.metadata as md, sys
print(" ".join(f"{p}=={md.version(p)}" for p in sys.argv[1:]))
PY
)
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$out/wheels" $pinned
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$out/fashion-mnist/"
peer="${DGD_TORCH_PEER:-$repo/../shared/bench/torch_teachers.py}"
[ -f "$peer" ] && cp "$peer" "$out/torch_teachers.py"
du -sh "$out"
