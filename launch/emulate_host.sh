#!/usr/bin/env bash
# Runs a command as if on a slower host: a CPU quota (Linux cgroup, v1 or v2; needs root) that
# scales this host's float32 matmul peak down to --gflops. How docs/PERFORMANCE.md measures CI's
# time on the slowest hosts of this kind (110-130 GFLOP/s) from a faster one.
#   bash launch/emulate_host.sh --gflops=130 [--peak=<this host's GFLOP/s>] -- <command ...>
# --peak defaults to a fresh reading of the matmul peak `python -m dgd_jax.bench teachers`
# prints (bench.matmul_peak_flops), by DGD_BENCH_PYTHON (default python), which must import
# dgd_jax; the command itself may be a fresh clone's `bash .ci/run`, which sets up its own
# environment inside the quota.
# It prints the quota and, first, the emulated host's own reading of the matmul peak.
set -euo pipefail
gflops="" peak=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gflops=*) gflops="${1#*=}" ;;
    --peak=*) peak="${1#*=}" ;;
    --) shift; break ;;
    *) echo "usage: $0 --gflops=N [--peak=N] -- <command ...>" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$gflops" ] && [ $# -gt 0 ] || { echo "usage: $0 --gflops=N [--peak=N] -- <command ...>" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "error: a CPU quota needs root (cgroups)." >&2; exit 1; }
bench="${DGD_BENCH_PYTHON:-python}"  # a Python with dgd_jax installed, for the readings
# the matmul peak alone (dgd_jax.cli.bench's), not the whole teacher benchmark around it
bench_peak() { "$@" "$bench" -c "from dgd_jax.cli import bench; \
print(round(bench.matmul_peak_flops() / 1e9))" 2>/dev/null; }
"$bench" -c "import dgd_jax" 2> /dev/null || { echo "error: $bench cannot import dgd_jax: set \
DGD_BENCH_PYTHON to one that can (e.g. .venv/bin/python)." >&2; exit 1; }
[ -n "$peak" ] || peak="$(bench_peak)"
cores="$(nproc)"
period=10000  # microseconds: short periods keep the quota smooth within one step
quota="$("$bench" -c "print(int($cores * $period * $gflops / $peak))")"
name="dgd_emulate_$$"
if [ -d /sys/fs/cgroup/cpu ] && [ -w /sys/fs/cgroup/cpu ]; then  # cgroup v1
  group="/sys/fs/cgroup/cpu/$name"
  mkdir "$group"
  echo "$period" > "$group/cpu.cfs_period_us"
  echo "$quota" > "$group/cpu.cfs_quota_us"
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
  group="/sys/fs/cgroup/$name"
  mkdir "$group"
  echo "$quota $period" > "$group/cpu.max"
else
  echo "error: no writable cgroup cpu controller under /sys/fs/cgroup." >&2
  exit 1
fi
trap 'rmdir "$group" 2>/dev/null || true' EXIT
in_group() { bash -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$group" "$@"; }
echo "[emulate] host peak $peak GFLOP/s, $cores cores -> quota $quota/$period us ($gflops GFLOP/s)"
echo "[emulate] the emulated host reads $(bench_peak in_group) GFLOP/s"
in_group "$@"
