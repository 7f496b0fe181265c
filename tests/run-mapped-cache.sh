#!/usr/bin/env bash
# run-mapped-cache.sh — a node mapped over a collection whose size only the run
# knows is cached as that many items, whatever the plan guessed
# (../shared/repro/01-mapped-cache). select after a `use:` first level
# downstream of `bids` maps over fixed_effects' per-subject maps, whose count
# the plan cannot know; it used to be keyed as one run, so only subject 1's
# map was stored under the whole node's key and the next run that fetched it
# got one matrix:
#   1. renaming the summarize (only a sink's parameter changes) must write the
#      same 3 subject maps again, byte for byte, from the cache;
#   2. `plan --explain` must say select is cached as 3 items;
#   3. editing the group permute's n_permutations in bids-group-glm.yaml must
#      rerun (no "design has 8 rows but data has 1 subjects"), and its outputs
#      must equal a fresh --no-cache run of the edited file.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-mapped-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cd "$work"
cp -r "$srcdir/pipelines/templates" .
"$NLFLOW" simulate --bids data --subjects 3 --runs 1 >/dev/null 2>&1 || fail "simulate --bids"
cat >p.yaml <<'Y'
nlflow: 1
name: sw
settings: {seed: 5, outputs: out, threads: 1}
nodes:
  runs: {type: bids, root: data, derivatives: data/derivatives/fmriprep, task: localizer}
  localizer:
    type: use
    path: templates/first-level.yaml
    with: {contrasts: ["faces_minus_houses = faces - houses"]}
    in: {bold: runs.bold, events: runs.events, confounds: runs.confounds, mask: runs.mask}
  effect: {type: select, in: {data: localizer.subject_effect}, row: faces_minus_houses}
  effmaps: {type: summarize, in: {effect: effect}}
Y
maps() { find "$1" -name '*stat-effect_statmap.nii.gz' | sort; }
"$NLFLOW" run --quiet p.yaml || fail "first run"
[ "$(maps out | wc -l)" = 3 ] || fail "first run: $(maps out | wc -l) subject maps, not 3"
mv out first
sed -i 's/effmaps: {type: summarize, in: {effect: effect}}/effmaps: {type: summarize, in: {effect: effect}, name: renamed}/' p.yaml
"$NLFLOW" plan --explain p.yaml >explain.txt 2>&1 || fail "plan --explain"
grep -qE '^effect +select +cached \(3 of 3 items\)' explain.txt || { cat explain.txt; fail "select is not cached as 3 items"; }
"$NLFLOW" run --quiet p.yaml || fail "rerun after renaming the summarize"
[ "$(maps out | wc -l)" = 3 ] || fail "rerun: $(maps out) instead of 3 subject maps"
for f in $(cd first && find . -name '*stat-effect_statmap.nii.gz'); do
    cmp -s "first/$f" "out/$f" || fail "rerun: $f differs from the first run's"
done
echo "ok   select over fixed_effects' subjects: 3 maps from the cache after a sink edit"

# bids-group-glm.yaml after an edit of the group node, against a fresh run
cp -r "$srcdir/pipelines" cached
rm -rf cached/results cached/data cached/.nlflow
"$NLFLOW" run --quiet cached/bids-group-glm.yaml || fail "bids-group-glm.yaml"
sed -i 's/n_permutations: 1000/n_permutations: 900/' cached/bids-group-glm.yaml
grep -q 'n_permutations: 900' cached/bids-group-glm.yaml || fail "the example's n_permutations is not 1000 any more"
"$NLFLOW" run --quiet cached/bids-group-glm.yaml 2>err.txt || { cat err.txt; fail "bids-group-glm.yaml after editing n_permutations"; }
cp -r "$srcdir/pipelines" fresh
rm -rf fresh/results fresh/data fresh/.nlflow
cp cached/bids-group-glm.yaml fresh/
"$NLFLOW" run --quiet --no-cache fresh/bids-group-glm.yaml || fail "fresh bids-group-glm.yaml"
n=0
for f in fresh/results/bids-group-glm/*.nii.gz fresh/results/bids-group-glm/*.tsv; do
    cmp -s "$f" "cached/results/bids-group-glm/$(basename "$f")" || fail "$(basename "$f"): cached rerun != fresh run"
    n=$((n + 1))
done
[ "$n" -ge 3 ] || fail "bids-group-glm wrote only $n maps and tables"
echo "ok   bids-group-glm.yaml: edited n_permutations, cached rerun = fresh run ($n files)"

# two nodes that would write one file: a cached rerun runs one of them again
# and leaves the other's, a fresh run leaves the last one's; refused at validate
# (found by the rerun harness: group-glm.yaml's two summarize nodes both wrote
# summary.json)
cat >two.yaml <<'Y'
nlflow: 1
settings: {outputs: out2}
nodes:
  sim: {type: simulate, subjects: 2, images: 10, voxel_size: 10, mask: synthetic}
  a: {type: summarize, in: {truth: sim.truth}}
  b: {type: summarize, in: {mask: sim.mask}}
  p1: {type: report, in: {truth: sim.truth}, template: none}
  p2: {type: report, in: {mask: sim.mask}, template: none, name: two}
Y
"$NLFLOW" validate two.yaml >/dev/null 2>err.txt && fail "two summarize nodes writing summary.json validate"
grep -q "^two.yaml:6:3: node 'b': this summarize and 'a' would both write summary.json" err.txt \
    || fail "two summaries: $(cat err.txt)"
grep -q "^two.yaml:8:3: node 'p2': this report and 'p1' would both write two_report.html" err.txt \
    || fail "two reports: $(cat err.txt)"
[ ! -e out2 ] || fail "a refused pipeline wrote"
echo "ok   two summarize (or report) nodes writing one file are refused at validate"
