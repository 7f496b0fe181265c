#!/usr/bin/env bash
# run-no-overwrite.sh — nlflow never writes over data it did not write.
#   1. `nlflow simulate` (the command, and the node in a pipeline, also under
#      `validate`) into a non-empty folder that simulate did not make exits 2,
#      names the folder and the way out (--force, overwrite: true), and
#      changes no byte of it (checksums before and after);
#   2. the example pipelines simulate into folders of their own: running one
#      with --set data=DIR pointed at someone's dataset reads it and writes
#      none of it;
#   3. simulate rewriting its own folder with fewer subjects leaves none of the
#      old ones behind (participants.tsv and the subject folders agree);
#   4. --force / overwrite: true write into a foreign folder, adding files and
#      removing nothing of the owner's;
#   5. a failed run leaves the results in place, its summary marked failed.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-overwrite-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
cd "$work"

# someone's dataset: a simulated one without simulate's marker, plus a file of theirs
"$NLFLOW" simulate --bids mydata --subjects 3 --runs 1 >/dev/null 2>&1 || fail "simulate --bids mydata"
rm mydata/.nlflow-simulate
echo "my notes" >mydata/README
sums mydata >before.txt

# 1a. the command
"$NLFLOW" simulate --bids mydata --subjects 2 >out.txt 2>err.txt; rc=$?
[ "$rc" = 2 ] || fail "simulate --bids into someone's folder exits $rc, not 2"
grep -q "'mydata' is not empty" err.txt && grep -q -- "--force" err.txt \
    || fail "the message does not name the folder and --force: $(cat err.txt)"
sums mydata | cmp -s - before.txt || fail "simulate --bids changed mydata"
"$NLFLOW" simulate --out mydata >/dev/null 2>&1; rc=$?
[ "$rc" = 2 ] || fail "simulate --out into someone's folder exits $rc, not 2"
sums mydata | cmp -s - before.txt || fail "simulate --out changed mydata"
echo "ok   nlflow simulate refuses someone's folder, changes nothing"

# 1b. the node, in validate and run
cat >sim.yaml <<'Y'
nlflow: 1
settings: {outputs: out}
nodes:
  sim: {type: simulate, subjects: 2, runs: 1, images: 30, mask: synthetic, voxel_size: 6, bids: mydata}
Y
for cmd in validate run; do
    "$NLFLOW" $cmd sim.yaml >out.txt 2>err.txt; rc=$?
    [ "$rc" = 2 ] || fail "$cmd of a simulate node writing into mydata exits $rc, not 2: $(cat err.txt)"
    grep -q "sim.yaml:4:3: node 'sim':.*'.*mydata' is not empty" err.txt && grep -q "overwrite: true" err.txt \
        || fail "$cmd: the message is not located or does not name the folder and overwrite: $(cat err.txt)"
done
sums mydata | cmp -s - before.txt || fail "the simulate node changed mydata"
[ ! -e out ] || fail "a refused pipeline wrote its outputs folder"
echo "ok   a simulate node refuses someone's folder at validate and run (exit 2, located), changes nothing"

# 2. an example pipeline pointed at someone's dataset
cp -r "$srcdir/pipelines" ex
rm -rf ex/results ex/data ex/.nlflow
"$NLFLOW" run --quiet ex/first-level.yaml --set data="$work/mydata" 2>err.txt \
    || fail "first-level.yaml --set data=mydata: $(cat err.txt)"
sums mydata | cmp -s - before.txt || fail "first-level.yaml --set data=mydata changed mydata"
ls ex/results/first-level/sub-03/*.nii.gz >/dev/null 2>&1 || fail "first-level.yaml did not analyse mydata's sub-03"
[ -e ex/data/localizer/.nlflow-simulate ] || fail "the example's simulate did not write a folder of its own"
echo "ok   first-level.yaml --set data=DIR analyses DIR and writes none of it"

# 3. simulate's own folder, rewritten smaller
"$NLFLOW" simulate --bids own --subjects 5 --runs 1 >/dev/null 2>&1 || fail "simulate --bids own (5)"
"$NLFLOW" simulate --bids own --subjects 2 --runs 1 >/dev/null 2>&1 || fail "simulate --bids own (2) again"
[ "$(ls -d own/sub-* | wc -l)" = 2 ] || fail "own/ holds $(ls -d own/sub-*) after a 2-subject rewrite"
[ "$(ls -d own/derivatives/fmriprep/sub-* | wc -l)" = 2 ] || fail "old subjects left in own/derivatives"
[ "$(tail -n +2 own/participants.tsv | wc -l)" = 2 ] || fail "participants.tsv: $(cat own/participants.tsv)"
echo "ok   simulate rewrites its own folder without leftovers"

# 4. --force
"$NLFLOW" simulate --bids mydata --subjects 2 --runs 1 --force >/dev/null 2>&1 || fail "simulate --force"
[ "$(cat mydata/README)" = "my notes" ] || fail "--force removed or changed the owner's README"
[ -e mydata/sub-03 ] || fail "--force removed a subject simulate did not write"
[ ! -e mydata/.nlflow-simulate ] || fail "--force marked someone's folder as simulate's"
echo "ok   --force writes into a foreign folder and removes nothing"

# 5. a run that fails leaves the previous results in place, their summary
#    marked (Status: failed, the node, its place, the message); the next
#    successful run writes it again
cp -r "$srcdir/pipelines" fl
rm -rf fl/results fl/data fl/.nlflow
"$NLFLOW" run --quiet fl/group-glm.yaml || fail "group-glm.yaml"
s=fl/results/group-glm/summary.json
grep -q '^  "Status": "complete",$' "$s" || fail "summary.json does not say complete: $(head -3 "$s")"
sums fl/results >before-fail.txt
cp fl/group-glm.yaml good.yaml
printf '  boom:\n    type: debug_fault\n    fail_after: 1\n    in: {in: group.p}\n' >>fl/group-glm.yaml
"$NLFLOW" run --quiet fl/group-glm.yaml 2>/dev/null; rc=$?
[ "$rc" = 1 ] || fail "a failing node exits $rc, not 1"
grep -q '"Status": {"state": "failed", .*"node": "boom", "at": "[^"]*group-glm.yaml:[0-9]*:3", "message": "failing on request' "$s" \
    || fail "summary.json is not marked failed: $(head -3 "$s")"
# nodes that finished before the failure may have replaced files (whole, by
# rename); none is lost and none is half-written
(cd fl/results && find . -type f | sort) | grep -v '\.tmp' >after.txt
cut -c35- before-fail.txt | sort | cmp -s - after.txt || fail "a failed run lost or left files: $(diff <(cut -c35- before-fail.txt | sort) after.txt)"
cp good.yaml fl/group-glm.yaml
"$NLFLOW" run --quiet fl/group-glm.yaml || fail "group-glm.yaml after the failure"
sums fl/results | cmp -s - before-fail.txt || fail "the run after a failure does not restore the summary"
echo "ok   a failed run marks the summary it leaves; the next run writes it again"
