#!/usr/bin/env bash
# run-fsl.sh — summarize's `naming: fsl` (FSL randomise's names) on a small
# group permutation test (pipelines/group-permutation.yaml, smaller), read back
# by an independent reader (tests/check-fsl.py: Python's standard library):
#   1. naming: fsl writes fsl/<name>_tstat1 (= the t map bit for bit),
#      _vox_p_tstat1 (= 1.0f - p) and _vox_corrp_tstat1 (= 1.0f - p_fwe),
#      0 outside the mask, sidecars agreeing with the headers, listed in
#      summary.json with the input each holds;
#   2. the default (bids) writes no FSL name anywhere and the same BIDS files
#      byte for byte;
#   3. inputs found by the permute ports they come from, whatever their keys;
#   4. inputs found by their keys (t, p, p_fwe) when loaded from files, as
#      volumes without a mask: the same values.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
PY=$(command -v python3 || true)
if [ -z "$PY" ]; then
    echo "skip: python3 is not installed (tests/check-fsl.py reads the files)"
    exit 77
fi
CHECK="$PY $srcdir/tests/check-fsl.py"
work=$(mktemp -d /tmp/nlflow-fsl-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# $1: the summarize node's lines, $2: outputs folder
pipeline() {
    cat <<EOF
nlflow: 1
name: group
settings:
  seed: 8
  outputs: $2
nodes:
  sim:
    type: simulate
    subjects: 8
    images: 20
    features: 1
    voxel_size: 8
    effect_size: 0.8
    write: data
  voxels:
    type: mask
    in: {data: sim.data, mask: sim.mask}
    standardize: zscore
  beta:
    type: ridge
    in: {X: sim.X, Y: voxels}
    alpha: 1.0
    cv: 2
  group:
    type: permute
    in: {data: beta.weights}
    test: one_sample
    stat: t
    tail: two
    n_permutations: 300
$1
EOF
}
run() {   # $1: case name, then the pipeline text on stdin
    cat >"$work/$1.yaml"
    (cd "$work" && "$NLFLOW" run --quiet --no-cache "$1.yaml") || fail "$1 does not run"
}

# 1. naming: fsl, the statistic named by threshold_key
pipeline '  maps:
    type: summarize
    in: {t: group.stat, p: group.p, p_fwe: group.p_fwe, q_fdr: group.q_fdr}
    threshold_key: t
    p_key: p_fwe
    p_below: 0.05
    naming: fsl' named-fsl | run named-fsl
a="$work/named-fsl"
$CHECK maps "$work/data/mask.nii.gz" "$a/group_stat-t_statmap.nii.gz" "$a/group_stat-p_statmap.nii.gz" \
    "$a/group_stat-pFwe_statmap.nii.gz" "$a/fsl/group_tstat1.nii.gz" "$a/fsl/group_vox_p_tstat1.nii.gz" \
    "$a/fsl/group_vox_corrp_tstat1.nii.gz" || fail "naming: fsl files do not check out"
[ "$(cd "$a/fsl" && ls | tr '\n' ' ')" = "group_tstat1.json group_tstat1.nii.gz group_vox_corrp_tstat1.json group_vox_corrp_tstat1.nii.gz group_vox_p_tstat1.json group_vox_p_tstat1.nii.gz " ] \
    || fail "fsl/ holds other files: $(ls "$a/fsl")"
grep -q '"fsl": {"tstat1": "t", "vox_p_tstat1": "p", "vox_corrp_tstat1": "p_fwe"}' "$a/summary.json" \
    || fail "summary.json does not say which input each FSL name holds"
for f in tstat1 vox_p_tstat1 vox_corrp_tstat1; do
    grep -q "\"fsl/group_$f.nii.gz\", \"fsl/group_$f.json\"" "$a/summary.json" \
        || fail "summary.json does not list fsl/group_$f"
done
echo "ok   naming: fsl writes randomise's names, listed in summary.json"

# 2. the default: BIDS names only, the same files
pipeline '  maps:
    type: summarize
    in: {t: group.stat, p: group.p, p_fwe: group.p_fwe, q_fdr: group.q_fdr}
    threshold_key: t
    p_key: p_fwe
    p_below: 0.05' bids | run bids
b="$work/bids"
[ -z "$(find "$b" -name '*tstat1*' -o -name fsl)" ] || fail "the default naming wrote FSL names: $(find "$b" -name '*tstat1*' -o -name fsl)"
! grep -q '"fsl"' "$b/summary.json" || fail "the default naming's summary.json mentions fsl"
for f in "$b"/*; do
    case "$(basename "$f")" in summary.json|dataset_description.json) continue ;; esac  # hash of the text
    cmp -s "$f" "$a/$(basename "$f")" || fail "$(basename "$f") differs between naming: bids and fsl"
done
[ "$(ls "$b" | wc -l)" = "$(( $(ls "$a" | wc -l) - 1 ))" ] || fail "naming: fsl changed the BIDS file set"
echo "ok   naming: bids (the default) writes no FSL names and the same BIDS files"

# 3. no threshold_key, other keys: the inputs are found by their permute ports
pipeline '  maps:
    type: summarize
    in: {unc: group.p, statistic_map: group.stat, fwe: group.p_fwe}
    naming: fsl' ports | run ports
c="$work/ports"
grep -q '"fsl": {"tstat1": "statistic_map", "vox_p_tstat1": "unc", "vox_corrp_tstat1": "fwe"}' "$c/summary.json" \
    || fail "the FSL roles were not found by permute's ports: $(grep '"fsl"' "$c/summary.json")"
for f in tstat1 vox_p_tstat1 vox_corrp_tstat1; do
    $CHECK same "$a/fsl/group_$f.nii.gz" "$c/fsl/group_$f.nii.gz" || fail "$f found by port differs"
done
echo "ok   the statistic, p and p_fwe found by permute's ports"

# 4. the BIDS maps loaded from files (volumes, no mask): found by their keys
cat >"$work/loaded.yaml" <<EOF
nlflow: 1
name: group
settings: {outputs: loaded}
nodes:
  t: {type: load, path: named-fsl/group_stat-t_statmap.nii.gz}
  p: {type: load, path: named-fsl/group_stat-p_statmap.nii.gz}
  p_fwe: {type: load, path: named-fsl/group_stat-pFwe_statmap.nii.gz}
  maps: {type: summarize, in: {p_fwe: p_fwe, p: p, t: t}, naming: fsl}
EOF
(cd "$work" && "$NLFLOW" run --quiet --no-cache loaded.yaml) || fail "loaded does not run"
for f in tstat1 vox_p_tstat1 vox_corrp_tstat1; do
    $CHECK same "$a/fsl/group_$f.nii.gz" "$work/loaded/fsl/group_$f.nii.gz" || fail "$f of loaded volumes differs"
done
echo "ok   loaded volumes keyed t, p, p_fwe give the same FSL files"
