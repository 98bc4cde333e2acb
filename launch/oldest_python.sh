#!/usr/bin/env bash
# The oldest Python setup.cfg claims (python_requires), checked as CI checks the newest: a venv
# .venv-oldest with dgd_jax[test] (pip takes jax 0.10.2 there), every module byte-compiled,
# `import dgd_jax`, and tiny runs of the pipeline and the release (tests/test_pipeline.py's
# reuse test, tests/test_release.py's unit tests). Environment: OLDEST_PYTHON (default: the
# python3.11 on PATH, else pyenv's). Extra arguments go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
oldest="$(sed -n 's/^python_requires = >=//p' setup.cfg)"
python_bin="${OLDEST_PYTHON:-}"
if [ -z "$python_bin" ]; then
  for c in "python$oldest" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$oldest".*/bin/"python$oldest"; do
    if "$c" -c 'import sys' > /dev/null 2>&1; then python_bin="$(command -v "$c")"; break; fi
  done
fi
[ -n "$python_bin" ] || { echo "[oldest] FAILED. Fix: install Python $oldest or set OLDEST_PYTHON" >&2; exit 1; }
"$python_bin" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$oldest'.split('.'))), sys.version"
venv="$repo/.venv-oldest"
log="$venv.log"
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
{ "$venv/bin/python" -m pip install -q --upgrade pip \
    && "$venv/bin/python" -m pip install -q -e ".[test]"; } > "$log" 2>&1 \
  || { echo "[oldest] install FAILED (pip's output: $log)" >&2; tail -n 5 "$log" >&2; exit 1; }
echo "[oldest] $("$venv/bin/python" --version) with jax $("$venv/bin/python" -c 'import jax; print(jax.__version__)')"
"$venv/bin/python" -m compileall -q dgd_jax tests experiments examples
"$venv/bin/python" -c "import dgd_jax"
"$venv/bin/python" -m pytest -n 0 -p no:cacheprovider -q "$@" \
  tests/test_pipeline.py::test_run_reuse_and_conflict tests/test_release.py -m "not slow"
