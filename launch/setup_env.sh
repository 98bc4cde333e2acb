# Sourced by launch/quickstart.sh and launch/test.sh: makes the machine ready, idempotently.
#  1. Fashion-MNIST IDX files from the Debian package dataset-fashion-mnist (if missing).
#  2. A virtual environment .venv with dgd_jax and its test/plot extras (re-installed only
#     when setup.cfg changes).
# Environment: DGD_VENV (default <repo>/.venv), PYTHON (default python3.11, else python3),
# DGD_EXTRAS (default test,plots; e.g. plots,tpu on a Cloud TPU VM, plots,cuda on GPUs).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DGD_VENV:-$repo/.venv}"
fmnist=/usr/share/datasets/fashion-mnist

if [ ! -f "$fmnist/train-images-idx3-ubyte.gz" ]; then
  echo "[setup] installing the Debian package dataset-fashion-mnist (Fashion-MNIST IDX files)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq dataset-fashion-mnist
fi

python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$python_bin" -c 'import sys; assert sys.version_info >= (3, 10), "dgd_jax needs Python >= 3.10"'
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating the virtual environment $venv"
  "$python_bin" -m venv "$venv"
fi
extras="${DGD_EXTRAS:-test,plots}"
stamp="$venv/.dgd_jax-installed"
want="$(sha256sum "$repo/setup.cfg" | cut -d' ' -f1) $extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing dgd_jax[$extras] into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e "$repo[$extras]"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$repo"
