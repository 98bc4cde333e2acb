#!/usr/bin/env bash
# The test command: set up (Debian Fashion-MNIST + .venv) and run the fast pytest suite.
# Extra arguments go to pytest (e.g. -m slow for the long runs, -k data for a subset).
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
python -m pytest "$@"
