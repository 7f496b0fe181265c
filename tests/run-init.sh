#!/usr/bin/env bash
# run-init.sh — `nlflow init`: on the simulated BIDS dataset (`nlflow
# simulate --bids`) it writes a canonical pipeline that names the dataset's
# task, space and conditions, uses the shipped templates (first level per
# run, fixed effects per subject, a group test per condition), validates and
# runs, and whose summary names the templates it used; without --bids, a
# commented template. Bad input: no dataset, not BIDS, an existing file.
set -u
: "${NLFLOW:?path to the nlflow binary}"
work=$(mktemp -d /tmp/nlflow-init-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work" || exit 1

"$NLFLOW" simulate --bids ds --subjects 3 --seed 4 >/dev/null 2>&1 || fail "simulate --bids"
"$NLFLOW" init --bids ds 2>init.err || { cat init.err; fail "init --bids ds"; }
[ -s pipeline.yaml ] || fail "init wrote no pipeline.yaml"
"$NLFLOW" fmt --check pipeline.yaml || fail "init's file is not canonical"
for want in "task: localizer" "space: MNI152NLin2009cAsym" "\"faces = faces\"" "\"houses = houses\"" \
            "path: templates/first-level.yaml" "path: templates/group.yaml" "derivatives: $work/ds/derivatives/fmriprep" \
            "# Dataset \"nlflow simulated task\": 3 subjects; task: localizer (6 runs)."; do
    grep -qF -- "$want" pipeline.yaml || { cat pipeline.yaml; fail "pipeline.yaml lacks '$want'"; }
done
"$NLFLOW" validate pipeline.yaml >/dev/null || fail "init's pipeline does not validate"
"$NLFLOW" run --quiet pipeline.yaml || fail "init's pipeline does not run"
out=results/nlflow-simulated-task
for f in nlflow-simulated-task_stat-facesT_statmap.nii.gz nlflow-simulated-task_stat-housesPTfceFwe_statmap.nii.gz; do
    [ -s "$out/$f" ] || fail "the run did not write $f"
done
grep -q '"used_by": "localizer_faces_group"' "$out/summary.json" || fail "summary.json does not name the group template's use"
grep -q '"path": "[^"]*templates/first-level.yaml"' "$out/summary.json" || fail "summary.json does not name the first-level template"

# the commented template
"$NLFLOW" init -o - >template.yaml || fail "init without --bids"
grep -q "^nlflow: 1" template.yaml && grep -q "^# " template.yaml || fail "the template is not a commented pipeline"
"$NLFLOW" fmt --check template.yaml || fail "the template is not canonical"

# bad input
expect() {   # $1: exit status, $2: message (grep -F), rest: init arguments
    local want=$1 msg=$2 rc=0; shift 2
    "$NLFLOW" init "$@" 2>err.txt >/dev/null || rc=$?
    [ "$rc" = "$want" ] || { cat err.txt; fail "init $*: exit $rc, expected $want"; }
    grep -qF -- "$msg" err.txt || { cat err.txt; fail "init $*: expected '$msg'"; }
}
cp pipeline.yaml before.yaml
expect 2 "'pipeline.yaml' exists: nlflow init does not replace files" --bids ds
cmp -s pipeline.yaml before.yaml || fail "init changed an existing file"
expect 2 "--bids 'nowhere' is not a readable folder" --bids nowhere -o x.yaml
mkdir notbids
expect 2 "is not a BIDS dataset: it has no readable dataset_description.json" --bids notbids -o x.yaml
expect 2 "--derivatives 'nowhere' is not a readable folder" --bids ds --derivatives nowhere -o x.yaml
expect 2 "unknown init option '--bogus'" --bogus
[ ! -e x.yaml ] || fail "a failed init left x.yaml"
echo "init: ok"
