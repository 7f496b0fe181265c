#!/usr/bin/env bash
# run-stale.sh — reruns never serve stale results. On a small copy of the
# group-permutation example:
#   1. changing settings.seed (in the file, or through a --set variable that
#      feeds it) reruns every node that draws and what depends on them, and the
#      outputs are byte-identical to a fresh run without a cache;
#   2. changing settings.outputs writes every file into the new folder (from
#      cached inputs: only the writing node runs), identical to a fresh run;
#   3. files deleted or edited in the outputs folder are written again, and
#      `plan --explain` says so beforehand.
# Which nodes computed is read from --json events, as in run-cache.sh.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-stale-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

setup() {   # $1: folder; the example, smaller
    rm -rf "$1"; mkdir -p "$1"
    sed -e 's/subjects: 12/subjects: 6/; s/images: 40/images: 16/' \
        -e 's/voxel_size: 4/voxel_size: 8\n    mask: synthetic/' \
        -e 's/seed: 8/seed: ${s}/' -e 's/^settings:/params: {s: 8}\nsettings:/' \
        "$srcdir/pipelines/group-permutation.yaml" >"$1/g.yaml"
}
computed() { grep '"event":"node_done"' "$1" | grep -v '"type":"load"' \
             | grep -E '"source":"(run|partly cached)"' | sed 's/.*"node":"\([^"]*\)".*/\1/' | sort | tr '\n' ' '; }
same_dirs() {   # $1 $2: results folders, every file byte-identical
    local a
    for a in "$1"/*; do
        cmp -s "$a" "$2/$(basename "$a")" || { echo "differs: $(basename "$a")"; return 1; }
    done
    [ "$(ls "$1" | wc -l)" = "$(ls "$2" | wc -l)" ] || { echo "file counts differ"; return 1; }
}
same_data() {   # $1 $2: the same, but for the files that name the pipeline's hash and text (JSON, report)
    local a
    for a in "$1"/*; do
        case "$a" in *.json|*_report.html) continue ;; esac
        cmp -s "$a" "$2/$(basename "$a")" || { echo "differs: $(basename "$a")"; return 1; }
    done
    [ "$(ls "$1" | wc -l)" = "$(ls "$2" | wc -l)" ] || { echo "file counts differ"; return 1; }
}
fresh() {   # $1: name, rest: run arguments; a run without a cache in its own folder
    local name=$1; shift
    setup "$work/$name"
    "$NLFLOW" run --quiet --no-cache "$work/$name/g.yaml" "$@" || fail "fresh run $name"
}

d="$work/main"; setup "$d"
out="$d/results/group-permutation"
"$NLFLOW" run --quiet --json "$d/g.yaml" >"$work/ev1" || fail "first run"
cp -r "$out" "$work/seed8"

# 1a. settings.seed through a --set variable
"$NLFLOW" plan --explain "$d/g.yaml" --set s=9 >"$work/explain1" || fail "plan --explain --set s=9"
grep -qE "^sim +simulate +will run: parameter 'seed' changed \(8 -> 9\)" "$work/explain1" \
    || { cat "$work/explain1"; fail "explain does not see the seed change"; }
"$NLFLOW" run --quiet --json "$d/g.yaml" --set s=9 >"$work/ev2" || fail "run --set s=9"
[ "$(computed "$work/ev2")" = "beta group maps page sim voxels " ] || fail "seed 9 computed: $(computed "$work/ev2")"
fresh seed9 --set s=9
same_dirs "$work/seed9/results/group-permutation" "$out" || fail "seed 9 from the cache is not a fresh seed 9 run"
cmp -s "$work/seed8/group_stat-t_statmap.nii.gz" "$out/group_stat-t_statmap.nii.gz" \
    && fail "seed 9 gave seed 8's t map"
echo "ok   a seed changed through --set reruns the random nodes; outputs equal a fresh run"

# 1b. settings.seed in the file
sed -i 's/^params: {s: 8}/# edited: no variables/; s/seed: ${s}/seed: 11/' "$d/g.yaml"
"$NLFLOW" run --quiet --json "$d/g.yaml" >"$work/ev3" || fail "run seed 11"
[ "$(computed "$work/ev3")" = "beta group maps page sim voxels " ] || fail "seed 11 computed: $(computed "$work/ev3")"
fresh seed11 --set s=11
# (the two pipeline texts differ, and so do the hashes their JSON files name)
same_data "$work/seed11/results/group-permutation" "$out" || fail "seed 11 from the cache is not a fresh seed 11 run"
echo "ok   a seed changed in the file reruns the random nodes; outputs equal a fresh run"

# 2. another outputs folder: every file written there, from cached inputs
sed -i 's#outputs: results/group-permutation#outputs: results/b#' "$d/g.yaml"
"$NLFLOW" plan --explain "$d/g.yaml" >"$work/explain2" || fail "plan --explain (outputs b)"
grep -qE "^group +permute +cached" "$work/explain2" || { cat "$work/explain2"; fail "explain: permute should be cached"; }
"$NLFLOW" run --quiet --json "$d/g.yaml" >"$work/ev4" || fail "run into results/b"
[ "$(computed "$work/ev4")" = "maps page " ] || fail "outputs change computed: $(computed "$work/ev4")"
[ -d "$d/results/b" ] || fail "results/b was not written"
same_data "$out" "$d/results/b" || fail "results/b differs from the earlier outputs"
echo "ok   a new outputs folder gets every file, only the writing node runs"

# 3. files deleted or edited in the outputs folder are written again
cp -r "$d/results/b" "$work/b"
rm "$d/results/b/group_stat-t_statmap.nii.gz"
"$NLFLOW" plan --explain "$d/g.yaml" >"$work/explain3" || fail "plan --explain (deleted)"
grep -qE "^maps +summarize +files missing in .*results/b/.*will write them again" "$work/explain3" \
    || { cat "$work/explain3"; fail "explain does not say files are missing"; }
"$NLFLOW" run --quiet --json "$d/g.yaml" >"$work/ev5" || fail "run after deleting a file"
[ "$(computed "$work/ev5")" = "maps " ] || fail "deleted file computed: $(computed "$work/ev5")"
same_dirs "$work/b" "$d/results/b" || fail "deleted file not written again"
echo "edited" >>"$d/results/b/group_stat-pFwe_statmap.nii.gz"
"$NLFLOW" plan --explain "$d/g.yaml" >"$work/explain4" || fail "plan --explain (edited)"
grep -qE "^maps +summarize +file .*group_stat-pFwe_statmap.nii.gz changed on disk" "$work/explain4" \
    || { cat "$work/explain4"; fail "explain does not say a file changed"; }
"$NLFLOW" run --quiet --json "$d/g.yaml" >"$work/ev6" || fail "run after editing a file"
same_dirs "$work/b" "$d/results/b" || fail "edited file not written again"
"$NLFLOW" run --quiet --json "$d/g.yaml" >"$work/ev7" || fail "run with everything in place"
[ -z "$(computed "$work/ev7")" ] || fail "nothing changed but computed: $(computed "$work/ev7")"
echo "ok   deleted and edited outputs are written again; explain says so first"
