#!/usr/bin/env bash
# run-cache.sh — the result cache end to end, on a copy of the quickstart
# pipeline (simulate writing files, lazy loads ordered after it, a mask mapped
# per subject, summarize writing NIfTI/TSV/JSON):
#   1. a second run recomputes nothing and its outputs are byte-identical;
#   2. touching input files without changing them reruns nothing;
#   3. changing one parameter reruns exactly that node and its descendants,
#      and `plan --explain` says which parameter changed;
#   4. a corrupted chunk is reported and recomputed, `cache verify` is clean after;
#   5. a kill -9 at every fault point of a run (inside cache transactions,
#      between outputs and run records, before file renames), then a rerun,
#      gives outputs identical to an uninterrupted run and a clean cache;
#   6. two concurrent runs on one cache both succeed with the same outputs.
# The node that "ran" is read from --json events ("source": run / cache /
# skipped / partly cached).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
CORRUPT=${CORRUPT:-$(dirname "$NLFLOW")/tests/corrupt-chunk}
work=$(mktemp -d /tmp/nlflow-cache-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

setup() {   # $1: folder
    rm -rf "$1"; mkdir -p "$1"
    cp "$srcdir/pipelines/quickstart.yaml" "$1/q.yaml"
    sed -i 's/subjects: 3/subjects: 2/; s/images: 40/images: 12/; s/voxel_size: 4/voxel_size: 8\n    mask: synthetic/' "$1/q.yaml"
}
# nodes that computed (not served from the cache, not skipped; loads only read)
computed() { grep '"event":"node_done"' "$1" | grep -v '"type":"load"' \
             | grep -E '"source":"(run|partly cached)"' | sed 's/.*"node":"\([^"]*\)".*/\1/' | sort | tr '\n' ' '; }
same_outputs() {   # $1 $2: results folders
    local a b
    for a in "$1"/*; do
        b="$2/$(basename "$a")"
        [ -f "$b" ] || return 1
        cmp -s "$a" "$b" || { echo "differs: $(basename "$a")"; return 1; }
    done
    [ "$(ls "$1" | wc -l)" = "$(ls "$2" | wc -l)" ]
}

d="$work/main"; setup "$d"
"$NLFLOW" run --quiet --json "$d/q.yaml" >"$work/ev1" || fail "first run"
[ "$(computed "$work/ev1")" = "fit maps page sim voxels " ] || fail "first run computed: $(computed "$work/ev1")"
cp -r "$d/results/quickstart" "$work/ref"
[ -f "$d/.nlflow/cache.db" ] || fail "no cache file beside the pipeline"

# 1. unchanged: nothing computed, same bytes
"$NLFLOW" run --quiet --json "$d/q.yaml" >"$work/ev2" || fail "second run"
[ -z "$(computed "$work/ev2")" ] || fail "second run recomputed: $(computed "$work/ev2")"
same_outputs "$work/ref" "$d/results/quickstart" || fail "second run outputs differ"
echo "ok   second run recomputes nothing, outputs identical"

# 2. touched, not changed
find "$d/data" -type f -exec touch -d '+1 minute' {} +
"$NLFLOW" run --quiet --json "$d/q.yaml" >"$work/ev3" || fail "run after touch"
[ -z "$(computed "$work/ev3")" ] || fail "touching inputs reran: $(computed "$work/ev3")"
echo "ok   touching inputs without changing them reruns nothing"

# 3. one parameter of one node
sed -i 's/threshold: 0.5/threshold: 0.25/' "$d/q.yaml"
"$NLFLOW" plan --explain "$d/q.yaml" >"$work/explain" || fail "plan --explain"
grep -q "maps .*parameter 'threshold' changed (0.5 -> 0.25)" "$work/explain" || { cat "$work/explain"; fail "explain does not name the parameter"; }
grep -qE "^voxels +mask +cached" "$work/explain" || { cat "$work/explain"; fail "explain: voxels should be cached"; }
"$NLFLOW" run --quiet --json "$d/q.yaml" >"$work/ev4" || fail "run after threshold change"
[ "$(computed "$work/ev4")" = "maps page " ] || fail "threshold change computed: $(computed "$work/ev4")"
sed -i 's/standardize: zscore/standardize: center/' "$d/q.yaml"
"$NLFLOW" run --quiet --json "$d/q.yaml" >"$work/ev5" || fail "run after standardize change"
[ "$(computed "$work/ev5")" = "fit maps page voxels " ] || fail "standardize change computed: $(computed "$work/ev5")"
sed -i 's/threshold: 0.25/threshold: 0.5/; s/standardize: center/standardize: zscore/' "$d/q.yaml"
"$NLFLOW" run --quiet --json "$d/q.yaml" >"$work/ev6" || fail "run after reverting"
# only summarize runs again: its earlier files were overwritten meanwhile
[ "$(computed "$work/ev6")" = "maps page " ] || fail "reverting computed: $(computed "$work/ev6")"
same_outputs "$work/ref" "$d/results/quickstart" || fail "outputs after reverting differ"
echo "ok   one parameter reruns exactly its node and descendants; explain names it"

# 4. corruption
key=$("$CORRUPT" "$d/.nlflow/cache.db") || fail "could not corrupt a chunk"
rm -rf "$d/results"
"$NLFLOW" run --json "$d/q.yaml" >"$work/ev7" 2>"$work/err7" || { cat "$work/err7"; fail "run over a corrupt chunk"; }
grep -q "corrupt" "$work/err7" || { cat "$work/err7"; fail "corruption not reported"; }
same_outputs "$work/ref" "$d/results/quickstart" || fail "outputs after corruption differ"
"$NLFLOW" cache verify --cache "$d/.nlflow/cache.db" >/dev/null || fail "cache verify not clean after recomputing"
echo "ok   corrupted chunk ($key) reported and recomputed"

# 5. kill -9 at every fault point
n=1
while :; do
    k="$work/kill"; setup "$k"
    { NLFLOW_KILL_AT=$n "$NLFLOW" run --quiet "$k/q.yaml" >/dev/null 2>&1; } 2>/dev/null
    status=$?
    [ "$status" = 0 ] && break                  # past the last fault point
    [ "$status" = 137 ] || fail "kill point $n: exit status $status, expected 137"
    "$NLFLOW" run --quiet "$k/q.yaml" >/dev/null 2>"$work/kerr" || { cat "$work/kerr"; fail "rerun after kill at point $n"; }
    same_outputs "$work/ref" "$k/results/quickstart" || fail "outputs after kill at point $n differ"
    "$NLFLOW" cache verify --cache "$k/.nlflow/cache.db" >/dev/null || fail "cache not clean after kill at point $n"
    n=$((n + 1))
    [ $n -le 400 ] || fail "more than 400 fault points?"
done
[ $n -gt 5 ] || fail "only $((n - 1)) fault points were exercised"
echo "ok   kill -9 at each of $((n - 1)) fault points, then a rerun: identical outputs, clean cache"

# 6. two runs at once on one cache
c="$work/conc"; setup "$c"
"$NLFLOW" run --quiet "$c/q.yaml" >"$work/c1" 2>&1 & p1=$!
"$NLFLOW" run --quiet "$c/q.yaml" >"$work/c2" 2>&1 & p2=$!
wait $p1 || { cat "$work/c1"; fail "first concurrent run"; }
wait $p2 || { cat "$work/c2"; fail "second concurrent run"; }
same_outputs "$work/ref" "$c/results/quickstart" || fail "concurrent runs' outputs differ"
"$NLFLOW" cache verify --cache "$c/.nlflow/cache.db" >/dev/null || fail "cache not clean after concurrent runs"
echo "ok   two concurrent runs on one cache"

# 7. checkpoints: a long node killed mid-way resumes from its committed chunks
ck="$work/ckpt"; mkdir -p "$ck" "$work/ckref"
cat >"$ck/c.yaml" <<'YAML'
nlflow: 1
name: ckpt
settings: {outputs: out}
params: {kill: "-1"}
nodes:
  work:
    type: debug_fault
    chunks: 40
    chunk_size: 20000
    seed: 7
    kill_after: ${kill}
  maps: {type: summarize, in: {work: work}}
YAML
cp "$ck/c.yaml" "$work/ckref/c.yaml"
"$NLFLOW" run --quiet --no-cache "$work/ckref/c.yaml" || fail "checkpoint reference run"
{ "$NLFLOW" run --quiet --set kill=15 "$ck/c.yaml" >/dev/null 2>&1; } 2>/dev/null
[ $? = 137 ] || fail "the run with kill_after did not die"
"$NLFLOW" run "$ck/c.yaml" >/dev/null 2>"$work/ckerr" || { cat "$work/ckerr"; fail "resuming run"; }
grep -q "resumed 15 of 40 chunks" "$work/ckerr" || { cat "$work/ckerr"; fail "did not resume from 15 chunks"; }
cmp -s "$ck/out/ckpt_stat-work.tsv" "$work/ckref/out/ckpt_stat-work.tsv" || fail "resumed result differs"
"$NLFLOW" cache info --cache "$ck/.nlflow/cache.db" | grep -q "checkpoint chunks: 0" || fail "checkpoint chunks not dropped after the result was stored"
echo "ok   a node killed after 15 of 40 chunks resumes from its checkpoints, identical result"

# 7b/7c. long nodes killed at points inside their checkpointed chunks resume from
# them with outputs identical to an uninterrupted run.
# kill_resume NAME PIPELINE_TEXT "KILL POINTS" RESUMED_REGEX
kill_resume() {
    local name=$1 text=$2 points=$3 pattern=$4 dir="$work/kr-$1" ref="$work/kr-$1-ref" n resumed=0
    mkdir -p "$dir" "$ref"
    printf '%s\n' "$text" >"$dir/p.yaml"
    cp "$dir/p.yaml" "$ref/p.yaml"
    "$NLFLOW" run --quiet --no-cache "$ref/p.yaml" || fail "$name: reference run"
    for n in $points; do
        rm -rf "$dir/.nlflow" "$dir/out"
        { NLFLOW_KILL_AT=$n "$NLFLOW" run --quiet "$dir/p.yaml" >/dev/null 2>&1; } 2>/dev/null
        "$NLFLOW" run "$dir/p.yaml" >/dev/null 2>"$work/krerr" || { cat "$work/krerr"; fail "$name: resuming run (kill at $n)"; }
        grep -qE "$pattern" "$work/krerr" && resumed=$((resumed + 1))
        same_outputs "$ref/out" "$dir/out" || fail "$name: resumed result differs (kill at $n)"
    done
    [ "$resumed" -ge 1 ] || fail "$name: no run resumed from checkpoints"
    echo "ok   $name killed mid-way resumes from its checkpoints ($resumed of $(echo $points | wc -w) kill points), identical outputs"
}
kill_resume permute 'nlflow: 1
name: perm
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 9, images: 2, voxel_size: 8, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  test: {type: permute, in: {data: maps}, stat: t, n_permutations: 6000, chunk: 500, exact: never}
  keep: {type: summarize, in: {p: test.p, p_fwe: test.p_fwe, q: test.q_fdr, nm: test.null_max}}' \
    "37 45 52" "resumed [1-9][0-9]* of 12 chunks"
kill_resume searchlight 'nlflow: 1
name: sl
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 1, images: 40, voxel_size: 8, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  dec: {type: predict, in: {X: maps, y: sim.y}, mode: searchlight, model: ridge_classifier, radius: 12, cv: 4}
  keep: {type: summarize, in: {acc: dec.map}}' \
    "12 20 30" "resumed [1-9][0-9]* of [0-9]* spheres"
kill_resume bootstrap 'nlflow: 1
name: boot
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 1, images: 40, voxel_size: 8, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  boot: {type: bootstrap, in: {X: sim.X, Y: maps}, n_boot: 300}
  keep: {type: summarize, in: {m: boot.mean, se: boot.se, p: boot.p, lo: boot.ci_low, hi: boot.ci_high}}' \
    "15 20 25" "[1-9][0-9]* of 8 voxel blocks from checkpoints"
# the same with the factors in chunks of 16 resamples (made again per group of
# blocks), and the predictions of test samples (here the training ones) with
# each resample's intercept, checkpointed with the weights
kill_resume bootstrap-chunked 'nlflow: 1
name: boot
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 1, images: 40, voxel_size: 8, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  boot: {type: bootstrap, in: {X: sim.X, Y: maps, X_test: sim.X}, n_boot: 300, chunk: 16, fit_intercept: true}
  keep: {type: summarize, in: {m: boot.mean, se: boot.se, p: boot.p, lo: boot.ci_low, hi: boot.ci_high,
                               pm: boot.pred_mean, pse: boot.pred_se, plo: boot.pred_ci_low}}' \
    "15 20 25" "[1-9][0-9]* of 8 voxel blocks from checkpoints"
# a decoder: chunks of 16 resamples' refits (their weight maps), then the summaries
kill_resume bootstrap-decoder 'nlflow: 1
name: boot
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 1, images: 40, voxel_size: 8, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  boot: {type: bootstrap, in: {data: maps, y: sim.y}, model: logistic, n_boot: 200}
  keep: {type: summarize, in: {m: boot.mean, se: boot.se, p: boot.p, lo: boot.ci_low, hi: boot.ci_high}}' \
    "15 20 25" "[1-9][0-9]* of 13 chunks of 16 resamples from checkpoints"

# banded ridge: the per-voxel state after each committed candidate, then the refit groups
kill_resume banded-ridge 'nlflow: 1
name: banded
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 1, images: 40, voxel_size: 8, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  fit: {type: ridge, in: {X: sim.X, Y: maps}, bands: ["a = 0:1", "b = 1:2"], n_iter: 20, cv: 4}
  keep: {type: summarize, in: {w: fit.weights, a: fit.alpha, s: fit.score, cv: fit.cv_scores, ba: fit.band_alpha, r2: fit.split_r2}}' \
    "14 20 26" "resumed [1-9][0-9]* of 20 candidates"

# 8. disk full: the run goes on without caching (warning), or fails cleanly with --strict-cache
f="$work/full"; setup "$f"
NLFLOW_CACHE_MAX_PAGES=40 "$NLFLOW" run --quiet "$f/q.yaml" 2>"$work/ferr" || { cat "$work/ferr"; fail "disk-full run should go on"; }
grep -qE "continuing without caching|running without the cache" "$work/ferr" || { cat "$work/ferr"; fail "no warning about the full cache"; }
same_outputs "$work/ref" "$f/results/quickstart" || fail "outputs of the disk-full run differ"
"$NLFLOW" cache verify --cache "$f/.nlflow/cache.db" >/dev/null || fail "cache not clean after disk full"
rm -rf "$f/results"
NLFLOW_CACHE_MAX_PAGES=40 "$NLFLOW" run --quiet --strict-cache --no-cache "$f/q.yaml" >/dev/null 2>&1 || fail "--no-cache must win"
g="$work/strict"; setup "$g"
NLFLOW_CACHE_MAX_PAGES=40 "$NLFLOW" run --quiet --strict-cache "$g/q.yaml" 2>"$work/serr"
[ $? = 1 ] || { cat "$work/serr"; fail "--strict-cache on a full cache should exit 1"; }
grep -q "cannot write to the cache" "$work/serr" || { cat "$work/serr"; fail "strict failure message"; }
echo "ok   full cache: warning and no caching, or a clean failure with --strict-cache"

# 9. network file systems are refused
h="$work/nfs"; setup "$h"
NLFLOW_CACHE_FS_MAGIC=0x6969 "$NLFLOW" run --quiet "$h/q.yaml" 2>"$work/nerr"
[ $? = 2 ] || { cat "$work/nerr"; fail "a cache on NFS should be refused with exit 2"; }
grep -q "network file system (NFS)" "$work/nerr" || { cat "$work/nerr"; fail "NFS message"; }
[ ! -d "$h/results" ] || fail "refused run wrote outputs"
echo "ok   a cache on NFS is refused"

# 10. damaged SQLite pages: `cache repair` keeps the intact entries, a rerun
# recomputes the rest and ends with the same outputs
r="$work/repair"; setup "$r"
"$NLFLOW" run --quiet "$r/q.yaml" 2>/dev/null || fail "run before damaging the cache"
db="$r/.nlflow/cache.db"
pages=$(( $(stat -c %s "$db") / 16384 ))
head -c $((3 * 16384)) /dev/zero | tr '\0' 'Z' | dd of="$db" bs=16384 seek=$((pages / 2)) conv=notrunc status=none
"$NLFLOW" cache repair --cache "$db" >"$work/rout" 2>&1 || { cat "$work/rout"; fail "cache repair"; }
grep -q "^repair: kept [1-9]" "$work/rout" || { cat "$work/rout"; fail "repair kept nothing"; }
"$NLFLOW" cache verify --cache "$db" >/dev/null || fail "repaired cache not clean"
rm -rf "$r/results"
"$NLFLOW" run --quiet "$r/q.yaml" 2>/dev/null || fail "run after repair"
same_outputs "$work/ref" "$r/results/quickstart" || fail "outputs after repair differ"
echo "ok   damaged pages: cache repair keeps the intact entries, a rerun recomputes the rest"

# --no-cache writes no cache
n="$work/nocache"; setup "$n"
"$NLFLOW" run --quiet --no-cache "$n/q.yaml" || fail "--no-cache run"
[ ! -e "$n/.nlflow" ] || fail "--no-cache created a cache"
echo "ok   --no-cache"
