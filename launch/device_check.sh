#!/usr/bin/env bash
# The prepared device check (dgd_jax.cli.device_check), as one command on the accelerator machine:
# installs the wheels launch/device_prepare.sh left in .device/wheels into .device/site (no
# registry is reached), then measures the machine, the teacher engine, every paper preset's
# programs compiled at full shapes and the paper presets' stages in their real schedules, into
# $OUT/device_check.json. Extra arguments go to the check (e.g. --budget=400, --dry_run).
#   bash launch/device_check.sh [--budget=420]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
device="$repo/.device"
out="${OUT:-$repo/.device/out}"
[ -d "$device/wheels" ] || { echo "no $device/wheels: run bash launch/device_prepare.sh here first and carry .device" >&2; exit 1; }
python -m pip install -q --no-index --no-deps --target "$device/site" "$device"/wheels/*.whl
export PYTHONPATH="$repo:$device/site${PYTHONPATH:+:$PYTHONPATH}"
peer=()
[ -f "$device/torch_teachers.py" ] && peer=(--torch_peer="$device/torch_teachers.py")
cd "$repo"
python -m dgd_jax.cli.device_check --out="$out" --data="$device/fashion-mnist" "${peer[@]}" "$@"
