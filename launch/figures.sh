#!/usr/bin/env bash
# The paper's component analysis as sweeps (DGD Fig. 3, 4, 6, 7, 8; PATE Fig. 4 protocol),
# each writing sweep.csv, sweep.md and PNG plots into workdirs/figures/<name>/.
#   bash launch/figures.sh [cpu|paper] [name ...]    # default: cpu, every sweep
# Finished stages are reused where their config slices match: those of $DGD_REUSE (a DGD
# workdir, default workdirs/quickstart_<preset>, the quick start's) and $TEACHERS_REUSE (a
# teachers workdir, default workdirs/teachers_<preset>); the rest is trained once per sweep.
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
preset="${1:-cpu}"
shift || true
out="workdirs/figures_$preset"
dgd="--config=dgd_jax/configs/dgd.py:fashion_mnist,$preset"
pate="--config=dgd_jax/configs/pate.py:fashion_mnist,$preset"
pate_reuse=(--reuse="${TEACHERS_REUSE:-workdirs/teachers_$preset}")
dgd_reuse=(--reuse="${DGD_REUSE:-workdirs/quickstart_$preset}" "${pate_reuse[@]}")
sweep() { python -m dgd_jax.sweep "$@"; }
want() { [ ${#selected[@]} -eq 0 ] || [[ " ${selected[*]} " == *" $1 "* ]]; }
selected=("$@")

# DGD Fig. 8 bottom: planned epsilon vs Laplace scale (1000 queries) and vs queries (b = 40).
want noise && sweep "$dgd" --workdir="$out/noise" --accounting_only \
  --set=queries.noise_scale=5,10,15,20,25,30,35,40,50,60,80,100 --set=queries.num_queries=1000
want accountants && sweep "$dgd" --workdir="$out/accountants" --accounting_only \
  --set=queries.num_queries=27,100,250,500,750,1000,1300,2000,3000
# DGD Fig. 3: label queries vs student accuracy and epsilon (no budget cap).
want queries && sweep "$dgd" "${dgd_reuse[@]}" --workdir="$out/queries" \
  --config.privacy.max_epsilon=inf --set=queries.num_queries=27,750,1000,3000
# DGD Fig. 4: the student's pool: the data-free generator's synthetic set vs RAW private data.
want source && sweep "$dgd" "${dgd_reuse[@]}" --workdir="$out/source" \
  --set=pool.source=synthetic,train
# DGD Fig. 7: VAE regulariser off/on x Laplace (PATE / DGD) and Gaussian (PATE+ / DGD+)
# aggregation, real data (the public pool) standing in for public data.
want vae && sweep "$pate" "${pate_reuse[@]}" --workdir="$out/vae" \
  --set=queries.aggregator,queries.noise_scale=lnmax:20,gnmax:40 \
  --set=student.w_normal,student.w_tangent,student.adversarial=0:0:false,0.1:0.1:false
# PATE Fig. 4 protocol: 100 and 1000 queries, PATE (LNMax) and PATE+ (Confident-GNMax).
want pate && sweep "$pate" "${pate_reuse[@]}" --workdir="$out/pate" \
  --set=queries.num_queries=100,1000
want pate_plus && sweep "$pate,plus" "${pate_reuse[@]}" --workdir="$out/pate_plus" \
  --set=queries.num_queries=100,1000
# DGD Fig. 6: amount of synthetic data.
want amount && sweep "$dgd" "${dgd_reuse[@]}" --workdir="$out/amount" \
  --set=generator.num_synthetic=3000,10000,30000,60000 \
  --columns=generator.synthetic_student_accuracy
# DPDFD Table 5 and Fig. 2 (500 steps; no budget guard: sigma is set, the epsilon reported):
# noise multiplier sigma, and normalisation vs clipping over the norm bound C.
dpdfd="--config=dgd_jax/configs/dpdfd.py:fashion_mnist,$preset"
dpdfd_fixed=(--config.dpdfd.num_steps=500 --config.privacy.max_epsilon=inf)
want dpdfd_sigma && sweep "$dpdfd" "${dgd_reuse[@]}" "${dpdfd_fixed[@]}" \
  --workdir="$out/dpdfd_sigma" --set=dpdfd.noise=0.01,0.1,1,10
want dpdfd_norm && sweep "$dpdfd" "${dgd_reuse[@]}" "${dpdfd_fixed[@]}" \
  --config.dpdfd.noise=0.1 --workdir="$out/dpdfd_norm" \
  --set=dpdfd.norm_bound=0.0001,0.001,0.01 --set=dpdfd.operation=per_sample,clip
echo "sweeps: $out/*/sweep.md"
