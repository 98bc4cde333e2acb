# Sourced by launch/quickstart.sh and launch/test.sh: makes the machine ready, idempotently,
# printing one line per step:
#  1. dataset: Fashion-MNIST IDX files from the Debian package dataset-fashion-mnist (if missing).
#  2. venv: a virtual environment .venv.
#  3. install: dgd_jax with its test/plot extras (re-installed only when setup.cfg changes).
# apt's and pip's output goes to $venv/setup.log (pip's index warnings included); a failing
# step prints its name, the fix and the log's last lines, and exits 1.
# Environment: DGD_VENV (default <repo>/.venv), PYTHON (default python3.12, else python3.11,
# else python3), DGD_EXTRAS (default test,plots; e.g. plots,tpu on a Cloud TPU VM, plots,cuda
# on GPUs).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DGD_VENV:-$repo/.venv}"
fmnist=/usr/share/datasets/fashion-mnist
log="${TMPDIR:-/tmp}/dgd_jax-setup.$$.log"  # moved into the venv once it exists
: > "$log"

say() { printf '[setup] %-8s %s\n' "$1" "$2"; }
fail() {  # step, fix
  printf '[setup] %-8s FAILED. Fix: %s\n' "$1" "$2" >&2
  if [ -s "$log" ]; then  # its error lines, else its last lines
    echo "[setup] from $log:" >&2
    { grep -m 5 -E '^ *(ERROR|E):' "$log" || tail -n 5 "$log"; } | sed 's/^/    /' >&2
  fi
  exit 1
}

if [ -f "$fmnist/train-images-idx3-ubyte.gz" ]; then
  say dataset "Fashion-MNIST in $fmnist"
else
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      $sudo_cmd apt-get install -y -qq dataset-fashion-mnist; } >> "$log" 2>&1 \
    || fail dataset "install the Debian package by hand (sudo apt-get install \
dataset-fashion-mnist), or put the four IDX files in a folder and run with \
--config=...:idx:<folder>"
  say dataset "Fashion-MNIST installed in $fmnist (Debian package dataset-fashion-mnist)"
fi

# The newest Python that runs, 3.12 first: jax >= 0.11 needs it (3.11 gets jax 0.10.2).
# pyenv's interpreters are tried too, since its shims fail for versions it has not activated.
first_python() {
  local c
  for c in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 python3.11 \
           python3; do
    if "$c" -c 'import sys' > /dev/null 2>&1; then command -v "$c"; return; fi
  done
}
python_bin="${PYTHON:-$(first_python)}"
[ -n "$python_bin" ] || fail venv "install Python >= 3.11 (apt-get install python3.12) or set PYTHON"
"$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || fail venv "$python_bin is not Python 3.11 or newer: set PYTHON to one"
if [ -x "$venv/bin/python" ]; then
  say venv "$venv"
else
  "$python_bin" -m venv "$venv" >> "$log" 2>&1 \
    || fail venv "install the venv module (apt-get install python3-venv), or set DGD_VENV to \
a writable folder"
  say venv "$venv created with $("$python_bin" --version 2>&1)"
fi
mv "$log" "$venv/setup.log" && log="$venv/setup.log"

extras="${DGD_EXTRAS:-test,plots}"
stamp="$venv/.dgd_jax-installed"
want="$(sha256sum "$repo/setup.cfg" | cut -d' ' -f1) $extras"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say install "dgd_jax[$extras] up to date"
else
  { "$venv/bin/python" -m pip install -q --upgrade pip \
      && "$venv/bin/python" -m pip install -q -e "$repo[$extras]"; } >> "$log" 2>&1 \
    || fail install "check that pip reaches its package index (proxy, PIP_INDEX_URL) and \
that DGD_EXTRAS names extras of setup.cfg, then rerun"
  echo "$want" > "$stamp"
  say install "dgd_jax[$extras] installed (pip's output: $log)"
fi
export PATH="$venv/bin:$PATH"
cd "$repo"
