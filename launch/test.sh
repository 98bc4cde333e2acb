#!/usr/bin/env bash
# The test command: set up (Debian Fashion-MNIST + .venv) and run the fast pytest suite on
# DGD_TEST_WORKERS pytest-xdist workers (default 2, one per core of the reference machine;
# 0 runs in this process). Extra arguments go to pytest (e.g. -m slow for the long runs,
# -k data for a subset).
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
python -m pytest -n "${DGD_TEST_WORKERS:-2}" "$@"
