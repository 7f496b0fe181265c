#!/usr/bin/env bash
# throughput.sh — what the SLURM executor costs on a one-node cluster started
# here (cluster.sh): a 20-subject pipeline (simulate, mask and ridge per
# subject, a chunked permutation test, summarize) run locally and with
# --executor slurm, REPS times each from an empty cache (medians), and the
# submission overhead per stage (--detach of the 4 stages, median).
# Not part of make check (it takes minutes); docs/hpc.md quotes its figures.
#
#   tests/slurm/throughput.sh [NLFLOW] [REPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
NLFLOW=$(realpath "${1:-$here/../../build/nlflow}")
reps=${2:-3}
work=$(mktemp -d /tmp/nlflow-slurm-tp-XXXXXX)
trap 'bash "$here/cluster.sh" stop "$work/cluster" 2>/dev/null; rm -rf "$work"' EXIT
export SLURM_CONF=$(bash "$here/cluster.sh" start "$work/cluster")
mkdir -p "$work/p"
cat >"$work/p/p.yaml" <<'EOF'
nlflow: 1
name: throughput
settings:
  seed: 8
  outputs: out
  executor: {min_task_seconds: 0, check_every: 2, cpus_per_task: 1}
nodes:
  sim: {type: simulate, subjects: 20, images: 60, features: 1, voxel_size: 4, effect_size: 0.5}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  beta: {type: ridge, in: {X: sim.X, Y: voxels}, alphas: [0.1, 1, 10], cv: 3}
  group: {type: permute, in: {data: beta.weights}, test: one_sample, stat: t, n_permutations: 20000, chunk: 2500, exact: never}
  maps: {type: summarize, in: {t: group.stat, p: group.p, p_fwe: group.p_fwe}}
EOF
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { echo $(( ($2 - $1) / 1000000 )); }
cd "$work/p"
local_t=() slurm_t=() submit_t=()
for r in $(seq 1 "$reps"); do
    rm -rf out .nlflow
    t0=$(date +%s%N); "$NLFLOW" run -q p.yaml --executor local; t1=$(date +%s%N)
    local_t+=("$(ms "$t0" "$t1")"); mv out out.local
    rm -rf .nlflow
    t0=$(date +%s%N); "$NLFLOW" run -q p.yaml --executor slurm; t1=$(date +%s%N)
    slurm_t+=("$(ms "$t0" "$t1")")
    for f in out.local/*; do cmp -s "$f" "out/$(basename "$f")" || { echo "outputs differ: $f"; exit 1; }; done
    rm -rf out out.local .nlflow
    t0=$(date +%s%N); "$NLFLOW" run -q p.yaml --executor slurm --detach; t1=$(date +%s%N)
    submit_t+=("$(ms "$t0" "$t1")")
    scancel --user="$(id -un)"; sleep 2
done
# the same with the default packing (min_task_seconds: 180): small units share tasks
sed 's/min_task_seconds: 0, //' p.yaml >packed.yaml
packed_t=()
for r in $(seq 1 "$reps"); do
    rm -rf out .nlflow
    t0=$(date +%s%N); "$NLFLOW" run -q packed.yaml --executor slurm 2>packed.err; t1=$(date +%s%N)
    packed_t+=("$(ms "$t0" "$t1")")
done
rm -rf .nlflow
"$NLFLOW" run packed.yaml --executor slurm --detach 2>packed.err >/dev/null; scancel --user="$(id -un)"
n_tasks=$(grep -o "[0-9]* tasks\? for" packed.err | awk '{s += $1} END {print s}')
lm=$(printf '%s\n' "${local_t[@]}" | median)
pm=$(printf '%s\n' "${packed_t[@]}" | median)
sm=$(printf '%s\n' "${slurm_t[@]}" | median)
dm=$(printf '%s\n' "${submit_t[@]}" | median)
echo "machine: $(nproc) cores; SLURM $(sinfo -V | awk '{print $2}'); $reps repetitions, medians"
echo "20 subjects, 4 stages (1 + 20 + 20 + 8 units = 49 units in 4 arrays):"
echo "  local run:                 $lm ms   (all: ${local_t[*]})"
echo "  --executor slurm:          $sm ms   (all: ${slurm_t[*]})   ratio slurm/local: $(awk "BEGIN {printf \"%.1f\", $sm / $lm}")"
echo "  submission (--detach):     $dm ms for 4 arrays = $(awk "BEGIN {printf \"%.0f\", $dm / 4}") ms per stage (plan + keys + sbatch)"
echo "  --executor slurm, packed:  $pm ms   (all: ${packed_t[*]})   $n_tasks tasks for the 49 units with min_task_seconds 180"
