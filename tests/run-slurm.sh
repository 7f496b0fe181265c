#!/usr/bin/env bash
# run-slurm.sh — the SLURM executor (docs/hpc.md) on a one-node cluster that
# this test starts on the machine itself (tests/slurm/cluster.sh: munged,
# slurmctld and slurmd as root from a generated slurm.conf, stopped by pid at
# the end). One pipeline — per-subject items (mask, ridge per subject) and a
# chunked permutation test — is run:
#   1. locally (the reference), and `plan --executor slurm` shows its arrays;
#   2. with --executor slurm: outputs byte-identical, one job array per stage
#      (4 sbatch calls for 21 units);
#   3. with one array task cancelled (scancel JOB_5) before it starts: the
#      unit is resubmitted, the stages after it wait for the new array, the
#      outputs are identical;
#   4. --detach, then `nlflow status`, then (all tasks ended) one shard
#      damaged, then `nlflow run` again: the damaged shard is discarded and its
#      unit computed again, nothing else is submitted, identical outputs;
#   5. SIGINT to the coordinator: exit 130 and its jobs are cancelled;
#   6. tasks themselves: a task killed at each of its dangerous points leaves
#      no shard file (only hidden temporaries), and a task for a pipeline file
#      that changed since submission refuses to run;
#   7. subjects loaded from files on the shared folder (load stays on the
#      coordinator, mask per subject in tasks): identical outputs, and the
#      tasks take the coordinator's input file hashes instead of reading every
#      input file again;
#   8. one ridge over all voxels split into parts (its voxel blocks):
#      identical outputs, merged from its parts;
#   9. a searchlight split into parts (its sphere blocks): the same;
#  10. a running task cancelled (scancel while it computes): resubmitted,
#      identical output;
#  11. a task killed every time it runs (debug_fault kill_after): after
#      `retries` resubmissions the run fails (exit 1) naming the unit and
#      SLURM's log of it, and cancels nothing else.
# Skips (exit 77, with the reason) only where SLURM or munge is not installed
# or the daemons cannot start (build.sh installs slurm-wlm and munge).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
NLFLOW=$(cd "$(dirname "$NLFLOW")" && pwd)/$(basename "$NLFLOW")
work=$(mktemp -d /tmp/nlflow-slurm-XXXXXX)
cluster="$work/cluster"
coord=
cleanup() {
    [ -n "$coord" ] && kill -9 "$coord" 2>/dev/null
    [ -n "${SLURM_CONF:-}" ] && scancel --user=root 2>/dev/null
    bash "$srcdir/tests/slurm/cluster.sh" stop "$cluster" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$cluster/slurmctld.log" ] && tail -5 "$cluster/slurmctld.log"; exit 1; }

conf=$(bash "$srcdir/tests/slurm/cluster.sh" start "$cluster")
st=$?
if [ "$st" = 77 ]; then
    echo "SKIP: no one-node SLURM cluster on this machine (see the reason above); the SLURM executor is untested here"
    exit 77
fi
[ "$st" = 0 ] || fail "cluster.sh start exited $st"
export SLURM_CONF=$conf
export TMPDIR="$work/tmp"   # the tasks' private caches (sbatch passes it on)
mkdir -p "$TMPDIR"
echo "ok   one-node SLURM cluster up ($(sinfo -h -o '%c CPUs, %m MiB'))"

d="$work/p"
mkdir -p "$d"
cat >"$d/p.yaml" <<'EOF'
nlflow: 1
name: slurmtest
settings:
  seed: 8
  outputs: out
  executor: {min_task_seconds: 0, check_every: 2, cpus_per_task: 1, max_concurrent: 2, retries: 2}
nodes:
  sim: {type: simulate, subjects: 6, images: 30, features: 1, voxel_size: 6, effect_size: 0.5}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  beta: {type: ridge, in: {X: sim.X, Y: voxels}, alphas: [0.1, 1, 10], cv: 2}
  group: {type: permute, in: {data: beta.weights}, test: one_sample, stat: t, n_permutations: 4000, chunk: 500, exact: never}
  maps: {type: summarize, in: {t: group.stat, p: group.p, p_fwe: group.p_fwe, null_max: group.null_max}}
EOF

same_outputs() {   # $1 $2: results folders
    local a n=0
    for a in "$1"/*; do
        cmp -s "$a" "$2/$(basename "$a")" || { echo "differs: $(basename "$a")"; return 1; }
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] && [ "$(ls "$1" | wc -l)" = "$(ls "$2" | wc -l)" ]
}
fresh() { rm -rf "$d/out" "$d/.nlflow"; }
wait_idle() {   # until no job is left in the queue (120 s at most)
    local i
    for i in $(seq 1 120); do
        [ -z "$(squeue -h 2>/dev/null)" ] && return 0
        sleep 1
    done
    return 1
}

# 1. reference and plan
"$NLFLOW" run --quiet --no-cache "$d/p.yaml" || fail "local reference run"
mv "$d/out" "$work/ref"
"$NLFLOW" plan "$d/p.yaml" --executor slurm >"$work/plan.txt" 2>&1 || { cat "$work/plan.txt"; fail "plan --executor slurm"; }
grep -q "SLURM job arrays" "$work/plan.txt" && grep -qE "^  group +8 parts +8 " "$work/plan.txt" \
    && grep -qE "^  voxels +6 items +6 " "$work/plan.txt" && grep -q "on the coordinator: maps" "$work/plan.txt" \
    || { cat "$work/plan.txt"; fail "plan --executor slurm does not show the arrays"; }
[ -z "$(squeue -h)" ] || fail "plan submitted something"
echo "ok   plan --executor slurm: 4 arrays (1 run, 6 items, 6 items, 8 parts), maps on the coordinator"

# 2. the same pipeline on SLURM
fresh
t0=$(date +%s%N)
"$NLFLOW" run "$d/p.yaml" --executor slurm 2>"$work/run.err" || { cat "$work/run.err"; fail "run --executor slurm"; }
t1=$(date +%s%N)
same_outputs "$work/ref" "$d/out" || { cat "$work/run.err"; fail "SLURM outputs differ from the local run's"; }
n_sub=$(grep -c "submitted node" "$work/run.err")
[ "$n_sub" = 4 ] || { cat "$work/run.err"; fail "expected 4 sbatch calls (one array per stage), saw $n_sub"; }
grep -q "submitted node 'group': job array [0-9]*, 8 tasks for 8 units" "$work/run.err" || fail "no 8-task array for the permutation parts"
grep -q "resumed 8 of 8 chunks" "$work/run.err" || fail "the permutation test was not merged from its parts"
[ -e "$d/.nlflow/shards/"* ] 2>/dev/null && fail "the shard folder was left behind after a finished run"
echo "ok   --executor slurm: byte-identical outputs; 4 job arrays for 21 units; in $(( (t1 - t0) / 1000000 )) ms"

# 3. one array task cancelled before it ran: the partition is down (jobs
# queue, none starts) until the task is cancelled, so that a fast task cannot
# finish first
fresh
scontrol update PartitionName=debug State=DOWN || fail "scontrol: partition down"
"$NLFLOW" run "$d/p.yaml" --executor slurm 2>"$work/cancel.err" &
coord=$!
for _ in $(seq 1 1200); do grep -q "submitted node 'voxels'" "$work/cancel.err" 2>/dev/null && break; sleep 0.1; done
job=$(grep -o "submitted node 'voxels': job array [0-9]*" "$work/cancel.err" | grep -o '[0-9]*$')
[ -n "$job" ] || { cat "$work/cancel.err"; fail "no voxels array submitted"; }
scancel "${job}_5" || fail "scancel ${job}_5"
scontrol update PartitionName=debug State=UP || fail "scontrol: partition up"
wait "$coord"
st=$?
coord=
[ "$st" = 0 ] || { cat "$work/cancel.err"; fail "the run with a cancelled task exited $st"; }
grep -q "unit item-00005 ended .* without its result (try 1 of 3)" "$work/cancel.err" \
    || { cat "$work/cancel.err"; fail "the cancelled task was not noticed"; }
grep -q "submitted node 'voxels': job array [0-9]*, 1 task for 1 unit" "$work/cancel.err" \
    || { cat "$work/cancel.err"; fail "the cancelled unit was not resubmitted (alone)"; }
# beta again, behind the new array (and behind the first array's tasks still
# running then, one by one: afterok on the whole first array can never hold)
new=$(grep -o "submitted node 'voxels': job array [0-9]*, 1 task for 1 unit" "$work/cancel.err" | grep -o "array [0-9]*" | cut -d' ' -f2)
grep -E "submitted node 'beta': .*--dependency=afterok:" "$work/cancel.err" | tail -1 \
    | grep -qE "afterok:([0-9_]+:)*${new}([: )]|$)" \
    || { cat "$work/cancel.err"; fail "the stage after it was not resubmitted behind the new array ($new)"; }
same_outputs "$work/ref" "$d/out" || { cat "$work/cancel.err"; fail "outputs after a resubmission differ"; }
echo "ok   scancel ${job}_5: resubmitted as its own array, later stages chained behind it, identical outputs"

# 4. --detach, status, a damaged shard, run again
fresh
t0=$(date +%s%N)
"$NLFLOW" run "$d/p.yaml" --executor slurm --detach 2>"$work/detach.err" || { cat "$work/detach.err"; fail "--detach"; }
t1=$(date +%s%N)
grep -q "detached: 4 job arrays in flight" "$work/detach.err" || { cat "$work/detach.err"; fail "--detach did not say what is in flight"; }
[ -e "$d/out" ] && fail "--detach wrote outputs"
"$NLFLOW" status "$d/p.yaml" >"$work/status.txt" 2>&1 || { cat "$work/status.txt"; fail "nlflow status"; }
grep -qE "^group +8 parts" "$work/status.txt" || { cat "$work/status.txt"; fail "status does not list the stages"; }
wait_idle || fail "the detached jobs did not finish within 120 s"
shard=$(ls "$d"/.nlflow/shards/*/beta/item-00002.shard 2>/dev/null)
[ -n "$shard" ] || fail "no shard of beta item 2 after the detached jobs ended"
python3 - "$shard" <<'EOF' || printf '\xff' | dd of="$shard" bs=1 seek=600 conv=notrunc 2>/dev/null
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 0xff
open(sys.argv[1], 'wb').write(b)
EOF
"$NLFLOW" run "$d/p.yaml" --executor slurm 2>"$work/resume.err" || { cat "$work/resume.err"; fail "run after --detach"; }
grep -q "discarding the shard .*beta/item-00002.shard': checksum mismatch" "$work/resume.err" \
    || { cat "$work/resume.err"; fail "the damaged shard was not discarded"; }
n_sub=$(grep -c "submitted node" "$work/resume.err")
grep -q "submitted node 'beta': job array [0-9]*, 1 task for 1 unit" "$work/resume.err" && [ "$n_sub" = 1 ] \
    || { cat "$work/resume.err"; fail "expected only the damaged unit to be submitted again ($n_sub submissions)"; }
same_outputs "$work/ref" "$d/out" || { cat "$work/resume.err"; fail "outputs after --detach and a damaged shard differ"; }
echo "ok   --detach ($(( (t1 - t0) / 1000000 )) ms for 4 arrays), status, damaged shard discarded and recomputed, identical outputs"

# 5. SIGINT to the coordinator cancels its jobs (queued behind a down
# partition, so that none has finished by then)
fresh
scontrol update PartitionName=debug State=DOWN || fail "scontrol: partition down"
"$NLFLOW" run "$d/p.yaml" --executor slurm 2>"$work/int.err" &
coord=$!
for _ in $(seq 1 1200); do grep -q "submitted node 'group'" "$work/int.err" 2>/dev/null && break; sleep 0.1; done
kill -INT "$coord"
wait "$coord"
st=$?
coord=
scontrol update PartitionName=debug State=UP || fail "scontrol: partition up"
[ "$st" = 130 ] || { cat "$work/int.err"; fail "SIGINT: exit $st, expected 130"; }
grep -q "cancelled [0-9]* job arrays (scancel)" "$work/int.err" || { cat "$work/int.err"; fail "SIGINT did not cancel the jobs"; }
wait_idle || fail "jobs still queued after the coordinator was interrupted"
echo "ok   SIGINT: exit 130, jobs cancelled"

# 6. tasks: killed at every dangerous point, and a changed pipeline file
fresh
hash=$("$NLFLOW" validate --json "$d/p.yaml" 2>/dev/null | grep -o '"pipeline_hash":"[0-9a-f]*"' | cut -d'"' -f4)
[ -n "$hash" ] || fail "no pipeline hash from validate --json"
printf 'item-00001\n' >"$work/units"
killed=0
for k in $(seq 1 60); do
    rm -rf "$d/.nlflow"
    # in a subshell that outlives it, so that "Killed" is not reported here
    (NLFLOW_KILL_AT=$k "$NLFLOW" task "$d/p.yaml" --hash "$hash" --node voxels \
        --units "$work/units" --index 0; echo $? >"$work/st") >/dev/null 2>&1
    st=$(cat "$work/st")
    [ "$st" = 0 ] && break
    killed=$((killed + 1))
    left=$(find "$d/.nlflow" -name '*.shard' 2>/dev/null)
    [ -z "$left" ] || fail "a task killed at point $k (exit $st) left a shard: $left"
done
[ "$st" = 0 ] || fail "the task never finished (60 kill points?)"
[ "$killed" -gt 0 ] || fail "no kill point was reached in a task"
ls "$d"/.nlflow/shards/*/voxels/item-00001.shard >/dev/null 2>&1 || fail "the finished task wrote no shard"
echo "ok   a task killed at each of its $killed dangerous points leaves no shard; the finished one writes it"
"$NLFLOW" task "$d/p.yaml" --hash 0123456789abcdef0123456789abcdef --node voxels --units "$work/units" --index 0 \
    >/dev/null 2>"$work/task.err" && fail "a task for a changed pipeline ran"
grep -q "changed since these jobs were submitted" "$work/task.err" || { cat "$work/task.err"; fail "no message for a changed pipeline"; }
echo "ok   a task for a pipeline that changed since submission refuses to run"

# 7. inputs from files: tasks read their subject, not every file for hashing
lt="$work/lt"
mkdir -p "$lt"
"$NLFLOW" simulate --out "$lt/data" --subjects 4 --images 20 --voxel-size 6 >/dev/null 2>&1 || fail "simulate --out"
find "$lt/data" -type f -exec touch -d '-1 min' {} +   # older than the hash memo's 2 s guard
cat >"$lt/p.yaml" <<'EOF'
nlflow: 1
name: loadtest
settings: {seed: 3, outputs: out, executor: {min_task_seconds: 0, check_every: 2, cpus_per_task: 1}}
nodes:
  bold: {type: load, path: "data/sub-*/func/sub-*_task-sim_bold.nii.gz"}
  brain: {type: load, path: data/mask.nii.gz}
  voxels: {type: mask, in: {data: bold, mask: brain}, standardize: zscore}
  maps: {type: summarize, in: {bold: voxels}}
EOF
"$NLFLOW" run --quiet --no-cache "$lt/p.yaml" || fail "load pipeline: local run"
mv "$lt/out" "$work/lt-ref"
"$NLFLOW" run --executor slurm --detach "$lt/p.yaml" 2>"$work/lt.err" || { cat "$work/lt.err"; fail "load pipeline: --detach"; }
grep -q "submitted node 'voxels': job array [0-9]*, 4 tasks for 4 units" "$work/lt.err" || { cat "$work/lt.err"; fail "load pipeline: no 4-task array for mask"; }
wait_idle || fail "load pipeline: jobs did not finish"
n_zero=$(cat "$lt"/.nlflow/shards/*/logs/*.log 2>/dev/null | grep -c "keys computed, 0 bytes of input files hashed here")
[ "$n_zero" = 4 ] || { cat "$lt"/.nlflow/shards/*/logs/*.log; fail "load pipeline: tasks hashed input files themselves ($n_zero of 4 did not)"; }
"$NLFLOW" run --executor slurm "$lt/p.yaml" 2>"$work/lt2.err" || { cat "$work/lt2.err"; fail "load pipeline: collect"; }
same_outputs "$work/lt-ref" "$lt/out" || fail "load pipeline: SLURM outputs differ from the local run's"
echo "ok   subjects from shared files: identical outputs; 4 tasks took the coordinator's file hashes (0 bytes rehashed)"

# 8. one large ridge split into voxel-block parts
rd="$work/rd"
mkdir -p "$rd"
cat >"$rd/p.yaml" <<'EOF'
nlflow: 1
name: ridgeparts
settings: {seed: 5, outputs: out, executor: {min_task_seconds: 0, check_every: 2, cpus_per_task: 1}}
nodes:
  sim: {type: simulate, subjects: 1, images: 60, features: 6, voxel_size: 6}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  fit: {type: ridge, in: {X: sim.X, Y: voxels}, alphas: {logspace: [-2, 3, 6]}, cv: 3}
  maps: {type: summarize, in: {score: fit.score, alpha: fit.alpha, w: fit.weights, pred: fit.predictions, cv: fit.cv_scores}}
EOF
"$NLFLOW" run --quiet --no-cache "$rd/p.yaml" || fail "ridge parts: local run"
mv "$rd/out" "$work/rd-ref"
"$NLFLOW" plan --executor slurm "$rd/p.yaml" >"$work/rd.plan" 2>&1
# parts come from the planned shape: the mask's grid, an upper bound on its voxels
parts=$(grep -oE "^  fit +[0-9]+ parts" "$work/rd.plan" | grep -oE "[0-9]+ parts" | cut -d' ' -f1)
[ -n "$parts" ] && [ "$parts" -gt 1 ] || { cat "$work/rd.plan"; fail "ridge parts: plan shows no parts for the ridge"; }
"$NLFLOW" run --executor slurm "$rd/p.yaml" 2>"$work/rd.err" || { cat "$work/rd.err"; fail "ridge parts: run"; }
blocks=$(grep -oE "([0-9]+) of \1 voxel blocks from its parts" "$work/rd.err" | cut -d' ' -f1)
[ -n "$blocks" ] && [ "$blocks" -gt 1 ] || { cat "$work/rd.err"; fail "ridge parts: not merged from its parts"; }
grep -q "submitted node 'fit': job array [0-9]*, $parts tasks for $parts units" "$work/rd.err" || { cat "$work/rd.err"; fail "ridge parts: not one array of $parts parts"; }
same_outputs "$work/rd-ref" "$rd/out" || { cat "$work/rd.err"; fail "ridge parts: SLURM outputs differ from the local run's"; }
echo "ok   one ridge as one array of $parts parts: $blocks voxel blocks merged, identical outputs (weights, scores, alphas, predictions, cv scores)"

# 9. a searchlight split into sphere-block parts
sl="$work/sl"
mkdir -p "$sl"
cat >"$sl/p.yaml" <<'EOF'
nlflow: 1
name: slparts
settings: {seed: 5, outputs: out, executor: {min_task_seconds: 0, check_every: 2, cpus_per_task: 1, max_array_tasks: 6}}
nodes:
  sim: {type: simulate, subjects: 1, images: 60, voxel_size: 6}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  decode: {type: predict, in: {X: voxels, y: sim.y}, mode: searchlight, model: ridge_classifier, radius: 7, cv: 5}
  maps: {type: summarize, in: {accuracy: decode.map}}
EOF
"$NLFLOW" run --quiet --no-cache "$sl/p.yaml" || fail "searchlight parts: local run"
mv "$sl/out" "$work/sl-ref"
"$NLFLOW" run --executor slurm "$sl/p.yaml" 2>"$work/sl.err" || { cat "$work/sl.err"; fail "searchlight parts: run"; }
grep -q "submitted node 'decode': job array [0-9]*, 6 tasks for 6 units" "$work/sl.err" || { cat "$work/sl.err"; fail "searchlight parts: not one array of 6 parts (max_array_tasks)"; }
grep -qE "searchlight resumed ([0-9]+) of \1 spheres" "$work/sl.err" || { cat "$work/sl.err"; fail "searchlight parts: not merged from its parts"; }
same_outputs "$work/sl-ref" "$sl/out" || { cat "$work/sl.err"; fail "searchlight parts: SLURM outputs differ from the local run's"; }
echo "ok   a searchlight as one array of 6 parts: every sphere merged from them, identical outputs"

# 10. a running task cancelled
df="$work/df"
mkdir -p "$df"
cat >"$df/p.yaml" <<'EOF'
nlflow: 1
name: dfault
settings: {seed: 5, outputs: out, executor: {min_task_seconds: 0, check_every: 1, cpus_per_task: 1, retries: 1}}
nodes:
  work: {type: debug_fault, chunks: 20, chunk_size: 20000000}
  keep: {type: summarize, in: {w: work}}
EOF
"$NLFLOW" run --quiet --no-cache "$df/p.yaml" || fail "running task: local run"
mv "$df/out" "$work/df-ref"
"$NLFLOW" run --executor slurm "$df/p.yaml" 2>"$work/df.err" &
coord=$!
running=
for _ in $(seq 1 1200); do
    running=$(squeue -h -t RUNNING -n nlflow-work -o %i 2>/dev/null | head -1)
    [ -n "$running" ] && break
    sleep 0.1
done
[ -n "$running" ] || { kill "$coord"; cat "$work/df.err"; fail "running task: the task never ran"; }
scancel "$running" || fail "scancel $running"
wait "$coord"
st=$?
coord=
[ "$st" = 0 ] || { cat "$work/df.err"; fail "running task: the run exited $st after a running task was cancelled"; }
grep -qE "unit run ended \((CANCELLED|FAILED|gone from squeue)[^)]*\) without its result \(try 1 of 2\)" "$work/df.err" \
    || { cat "$work/df.err"; fail "running task: the cancelled task was not noticed"; }
[ "$(grep -c "submitted node 'work'" "$work/df.err")" = 2 ] || { cat "$work/df.err"; fail "running task: not resubmitted once"; }
same_outputs "$work/df-ref" "$df/out" || fail "running task: outputs differ"
echo "ok   a running task cancelled ($running): resubmitted, identical output"

# 11. a task that is killed every time: retries, then a clear failure
rm -rf "$df/out" "$df/.nlflow"
sed -i 's/chunk_size: 20000000}/chunk_size: 1000, kill_after: 3}/' "$df/p.yaml"
"$NLFLOW" run --executor slurm "$df/p.yaml" 2>"$work/kill.err"
st=$?
[ "$st" = 1 ] || { cat "$work/kill.err"; fail "killed task: exit $st, expected 1"; }
log=$(grep -o "unit run failed 2 times on SLURM; see its log [^ ]*" "$work/kill.err" | awk '{print $NF}')
[ -n "$log" ] || { cat "$work/kill.err"; fail "killed task: no message naming the unit and its log"; }
[ -f "$log" ] || fail "killed task: the log it names ($log) does not exist"
[ -e "$df/out" ] && fail "killed task: outputs were written"
left=$(ls -d "$TMPDIR"/nlflow-task-* 2>/dev/null | wc -l)
[ "$left" -le 1 ] || fail "killed task: $left private task caches left in \$TMPDIR (stale ones are removed by the next task)"
echo "ok   a task killed at every try: 2 tries (retries: 1), then exit 1 naming the unit and its SLURM log"
