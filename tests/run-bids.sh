#!/usr/bin/env bash
# run-bids.sh — from `nlflow simulate --bids` to design matrices: the data
# set has the BIDS + fMRIPrep layout promised (sidecar, events, confounds
# with n/a in the first framewise_displacement row, masks, preprocessed
# images whose header says TR 2 s in seconds), and a pipeline bids -> mask ->
# design -> summarize runs on it, one item per run labelled
# sub-XX_task-localizer_run-R_space-S and written in its subject's folder,
# with the design's conditions and confounds; fixed_effects groups the 8 runs
# into 4 subjects, labelled with the entities their runs share; group_design
# joins participants.tsv to them for a permute test: glm. The same seed gives the
# same bytes. Then a run whose events file is missing stops the pipeline at
# validation with the run named.
set -u
: "${NLFLOW:?path to the nlflow binary}"
work=$(mktemp -d /tmp/nlflow-bids-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

ds="$work/ds"
"$NLFLOW" simulate --bids "$ds" --seed 11 >/dev/null 2>"$work/sim.err" || { cat "$work/sim.err"; fail "simulate --bids failed"; }
der="$ds/derivatives/fmriprep"
[ -s "$ds/dataset_description.json" ] || fail "no dataset_description.json"
grep -q '"RepetitionTime": 2.0' "$ds/task-localizer_bold.json" || fail "the top-level sidecar has no RepetitionTime 2"
grep -q '"DatasetType": "derivative"' "$der/dataset_description.json" || fail "derivatives not described"
for s in 01 02 03 04; do
    for r in 1 2; do
        stem="sub-${s}_task-localizer_run-$r"
        for f in "$ds/sub-$s/func/${stem}_bold.nii.gz" "$ds/sub-$s/func/${stem}_events.tsv" \
                 "$der/sub-$s/func/${stem}_space-MNI152NLin2009cAsym_desc-preproc_bold.nii.gz" \
                 "$der/sub-$s/func/${stem}_space-MNI152NLin2009cAsym_desc-brain_mask.nii.gz" \
                 "$der/sub-$s/func/${stem}_desc-confounds_timeseries.tsv"; do
            [ -s "$f" ] || fail "simulate --bids did not write $f"
        done
    done
done
ev="$ds/sub-01/func/sub-01_task-localizer_run-1_events.tsv"
[ "$(head -1 "$ev")" = "$(printf 'onset\tduration\ttrial_type')" ] || fail "events header: $(head -1 "$ev")"
grep -q "faces" "$ev" && grep -q "houses" "$ev" || fail "events lack the two conditions"
conf="$der/sub-01/func/sub-01_task-localizer_run-1_desc-confounds_timeseries.tsv"
for c in trans_x trans_y trans_z rot_x rot_y rot_z csf white_matter framewise_displacement; do
    head -1 "$conf" | tr '\t' '\n' | grep -qx "$c" || fail "confounds lack $c"
done
[ "$(sed -n 2p "$conf" | cut -f4)" = "n/a" ] || fail "framewise_displacement's first row is not n/a"
[ "$(wc -l <"$conf")" = 81 ] || fail "confounds should have 80 rows"
# the header: dim[4] 80 (bytes 48-49), pixdim[4] 2.0f (bytes 92-95), xyzt_units mm|s = 10 (byte 123)
bold="$der/sub-01/func/sub-01_task-localizer_run-1_space-MNI152NLin2009cAsym_desc-preproc_bold.nii.gz"
hdr=$(gzip -dc "$bold" | head -c 348 | od -An -tx1 -v | tr -d ' \n')
[ "${hdr:96:4}" = "5000" ] || fail "dim[4] is not 80: ${hdr:96:4}"
[ "${hdr:184:8}" = "00000040" ] || fail "pixdim[4] is not 2.0: ${hdr:184:8}"
[ "${hdr:246:2}" = "0a" ] || fail "xyzt_units is not mm + s: ${hdr:246:2}"

cat >"$work/first.yaml" <<YAML
nlflow: 1
name: first
settings: {outputs: results, cache: off}
nodes:
  runs:
    type: bids
    root: ds
    derivatives: ds/derivatives/fmriprep
    task: localizer
    space: MNI152NLin2009cAsym
    require: [events, confounds, mask]
  voxels: {type: mask, in: {data: runs.bold, mask: runs.mask}}
  dm:
    type: design
    in: {events: runs.events, frames: runs.bold, confounds: runs.confounds}
    confound_columns: [trans_*, rot_*]
  fx: {type: fixed_effects, in: {effect: voxels, variance: voxels}}
  out: {type: summarize, in: {X: dm.X, fx: fx.effect}}
YAML
(cd "$work" && "$NLFLOW" validate first.yaml >/dev/null) || fail "the first-level pipeline does not validate"
(cd "$work" && "$NLFLOW" run --quiet first.yaml) || fail "the first-level pipeline does not run"
sp=space-MNI152NLin2009cAsym
n=$(ls "$work"/results/sub-0?/ | grep -c "^sub-0[1-4]_task-localizer_run-[12]_${sp}_stat-X.tsv\$")
[ "$n" = 8 ] || fail "expected 8 design tables named by run, found $n: $(ls -R "$work/results")"
X="$work/results/sub-03/sub-03_task-localizer_run-2_${sp}_stat-X.tsv"
[ "$(head -1 "$X" | cut -f1-8)" = "$(printf 'faces\thouses\ttrans_x\ttrans_y\ttrans_z\trot_x\trot_y\trot_z')" ] ||
    fail "design columns: $(head -1 "$X")"
[ "$(wc -l <"$X")" = 81 ] || fail "the design should have 80 rows"
n=$(ls "$work"/results/sub-0?/ | grep -c "^sub-0[1-4]_task-localizer_${sp}_stat-fx_statmap.nii.gz\$")
[ "$n" = 4 ] || fail "fixed_effects should give one map per subject, found $n: $(ls -R "$work/results")"

# the group design from participants.tsv: rows shuffled and one id written
# without "sub-", joined to fixed_effects' maps (sub-XX_task-localizer_space-S)
# by subject; the design's rows follow the maps (sub-01..04), checked here by
# an awk join on the original file; then a new column in participants.tsv
# reruns the design but no first-level node (the participants output is keyed
# by that file alone)
pt="$ds/participants.tsv"
[ "$(head -1 "$pt")" = "$(printf 'participant_id\tage\tsex\tgroup\thandedness')" ] || fail "participants.tsv header: $(head -1 "$pt")"
cp "$pt" "$work/participants.orig"
{ head -1 "$work/participants.orig"; tail -n +2 "$work/participants.orig" | sort -r | sed 's/^sub-03/03/'; } >"$pt"
cat >"$work/group.yaml" <<YAML
nlflow: 1
name: group
settings: {outputs: results-group}
nodes:
  runs:
    type: bids
    root: ds
    derivatives: ds/derivatives/fmriprep
    task: localizer
    space: MNI152NLin2009cAsym
  voxels: {type: mask, in: {data: runs.bold, mask: runs.mask}}
  fx: {type: fixed_effects, in: {effect: voxels, variance: voxels}}
  effect: {type: select, in: {data: fx.effect}, row: 1}
  design:
    type: group_design
    in: {participants: runs.participants, maps: effect}
    columns: [age, group]
  group:
    type: permute
    in: {data: effect, design: design}
    test: glm
    contrasts: ["mean = intercept", "patients = group[patient]"]
    exchange: sign_flip
    n_permutations: 50
  out: {type: summarize, in: {design: design, t: group.stat}}
YAML
(cd "$work" && "$NLFLOW" run --quiet group.yaml) || fail "the group-design pipeline does not run"
D="$work/results-group/group_stat-design.tsv"
[ "$(head -1 "$D")" = "$(printf 'intercept\tage\tgroup[patient]')" ] || fail "group design columns: $(head -1 "$D")"
awk -F'\t' 'NR == FNR { if (FNR > 1) { age[$1] = $2; grp[$1] = $4; sum += $2; n++ } next }
    FNR > 1 { s = sprintf("sub-%02d", FNR - 1); want = age[s] - sum / n
              if ($1 != 1 || (($2 - want) ^ 2) > 1e-10 || $3 != (grp[s] == "patient")) { print "row " FNR - 1 ": " $0; bad = 1 } }
    END { exit bad }' "$work/participants.orig" "$D" || fail "the group design's rows do not follow the maps' subjects"
(cd "$work" && "$NLFLOW" plan --explain group.yaml >"$work/explain0.txt" 2>&1) || fail "plan --explain failed"
sed -i '1s/$/\tsite/; 2,$s/$/\tA/' "$pt"
(cd "$work" && "$NLFLOW" plan --explain group.yaml >"$work/explain.txt" 2>&1) || fail "plan --explain failed"
grep -Eq '^voxels +mask +cached' "$work/explain.txt" || { cat "$work/explain.txt"; fail "a new participants column made the first level stale"; }
grep -Eq '^design +group_design +(stale|will run)' "$work/explain.txt" || { cat "$work/explain.txt"; fail "a new participants column left the design cached"; }
cp "$work/participants.orig" "$pt"

# the same seed, the same bytes
"$NLFLOW" simulate --bids "$work/again" --seed 11 >/dev/null 2>&1 || fail "second simulate failed"
(cd "$ds" && find . -type f | sort) >"$work/list1"
(cd "$work/again" && find . -type f | sort) >"$work/list2"
cmp -s "$work/list1" "$work/list2" || fail "two simulations list different files"
while read -r f; do
    cmp -s "$ds/$f" "$work/again/$f" || fail "$f differs between two simulations with seed 11"
done <"$work/list1"

# a missing events file is named at validation
rm "$ds/sub-02/func/sub-02_task-localizer_run-2_events.tsv"
(cd "$work" && "$NLFLOW" validate first.yaml >/dev/null 2>"$work/err.txt") && fail "validate passed without an events file"
grep -q "sub-02_task-localizer_run-2_space-MNI152NLin2009cAsym has no events file" "$work/err.txt" || fail "unexpected message: $(cat "$work/err.txt")"
echo "ok   simulate --bids -> bids -> mask -> design -> fixed_effects"
