#!/usr/bin/env bash
# run-use.sh — pipeline files used by other pipeline files (`type: use`).
#   1. a lab file used twice with different params (one next to the pipeline,
#      one found on NLFLOW_PATH) gives the same numbers as the same nodes
#      written out by hand, and the two uses differ as their params do;
#   2. summary.json names the used files, their hashes and the use nodes;
#   3. an edit of the used file reruns exactly its nodes (and what reads
#      them), and `plan --explain` names the file;
#   4. errors: inside a used file (located there, and at the use), unknown
#      `with` params, unconnected inputs, unknown outputs, files that use each
#      other in a cycle, a file not found (NLFLOW_PATH), a file that declares
#      inputs run alone, `requires:` that this nlflow does not meet.
set -u
: "${NLFLOW:?path to the nlflow binary}"
work=$(mktemp -d /tmp/nlflow-use-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
computed() { grep '"event":"node_done"' "$1" | grep -E '"source":"(run|partly cached)"' \
             | sed 's/.*"node":"\([^"]*\)".*/\1/' | sort | tr '\n' ' '; }
cd "$work" || exit 1
mkdir -p lab shared inline

cat >lab/group.yaml <<'EOF'
# group.yaml: a lab's group analysis (ridge betas per subject, one-sample test)
nlflow: 1
name: group-template
params: {alpha: 1.0, tail: two}
inputs:
  X: the design (images x features)
  Y: masked data, one matrix per subject
outputs:
  t: test.stat
  p: test.p
nodes:
  beta:
    type: ridge
    in: {X: X, Y: Y}
    alpha: ${alpha}
    cv: 2
  test:
    type: permute
    in: {data: beta.weights}
    test: one_sample
    tail: ${tail}
    n_permutations: 100
EOF
cp lab/group.yaml shared/group.yaml
cat >main.yaml <<'EOF'
nlflow: 1
name: usetwice
requires: ">=0.1"
settings: {seed: 3, outputs: results}
nodes:
  sim: {type: simulate, subjects: 4, images: 16, features: 1, voxel_size: 8, mask: synthetic}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  faces: {type: use, path: lab/group.yaml, with: {alpha: 1.0}, in: {X: sim.X, Y: voxels}}
  houses:
    type: use
    path: group.yaml          # not here: found on NLFLOW_PATH
    with: {alpha: 10, tail: upper}
    in: {X: sim.X, Y: voxels}
  maps: {type: summarize, in: {t1: faces.t, t2: houses.t, p2: houses.p}}
EOF
cat >inline/main.yaml <<'EOF'
nlflow: 1
name: usetwice
settings: {seed: 3, outputs: results}
nodes:
  sim: {type: simulate, subjects: 4, images: 16, features: 1, voxel_size: 8, mask: synthetic}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  faces_beta: {type: ridge, in: {X: sim.X, Y: voxels}, alpha: 1.0, cv: 2}
  faces_test: {type: permute, in: {data: faces_beta.weights}, test: one_sample, tail: two, n_permutations: 100}
  houses_beta: {type: ridge, in: {X: sim.X, Y: voxels}, alpha: 10, cv: 2}
  houses_test: {type: permute, in: {data: houses_beta.weights}, test: one_sample, tail: upper, n_permutations: 100}
  maps: {type: summarize, in: {t1: faces_test.stat, t2: houses_test.stat, p2: houses_test.p}}
EOF
export NLFLOW_PATH="$work/nowhere:$work/shared"

# 1. the same numbers as written out by hand; the two uses differ
"$NLFLOW" plan main.yaml >plan.txt || fail "plan"
for id in faces.beta faces.test houses.beta houses.test; do
    grep -q "^$id " plan.txt || { cat plan.txt; fail "plan does not list $id"; }
done
"$NLFLOW" run --quiet --json main.yaml >ev1 || fail "run"
"$NLFLOW" run --quiet --no-cache inline/main.yaml || fail "inline run"
for f in t1 t2 p2; do
    cmp -s "results/usetwice_stat-${f}_statmap.nii.gz" "inline/results/usetwice_stat-${f}_statmap.nii.gz" \
        || fail "$f differs from the same nodes written out by hand"
done
cmp -s results/usetwice_stat-t1_statmap.nii.gz results/usetwice_stat-t2_statmap.nii.gz \
    && fail "the two uses (alpha 1 and 10) gave the same t map"
[ "$(computed ev1)" = "faces.beta faces.test houses.beta houses.test maps sim voxels " ] \
    || fail "first run computed: $(computed ev1)"

# 2. provenance
grep -q '"UsedFiles": \[' results/summary.json || fail "summary.json does not list the used files"
grep -q '{"path": "lab/group.yaml", "hash": "[0-9a-f]\{32\}", "commit": null, "used_by": "faces"}' \
    results/summary.json || { cat results/summary.json; fail "summary.json: lab/group.yaml used by faces"; }
grep -q "\"path\": \"$work/shared/group.yaml\".*\"used_by\": \"houses\"" results/summary.json \
    || fail "summary.json: shared/group.yaml (NLFLOW_PATH) used by houses"

# 3. nothing reruns; an edit of one used file reruns exactly its nodes
"$NLFLOW" run --quiet --json main.yaml >ev2 || fail "second run"
[ -z "$(computed ev2)" ] || fail "unchanged rerun computed: $(computed ev2)"
echo "# reviewed" >>shared/group.yaml
"$NLFLOW" plan --explain main.yaml >explain.txt || fail "plan --explain"
grep -qE "^houses.beta +ridge +will run: pipeline file $work/shared/group.yaml changed" explain.txt \
    || { cat explain.txt; fail "explain does not name the changed used file"; }
grep -qE "^faces.beta +ridge +cached" explain.txt || { cat explain.txt; fail "faces.beta should stay cached"; }
"$NLFLOW" run --quiet --json main.yaml >ev3 || fail "run after the edit"
[ "$(computed ev3)" = "houses.beta houses.test maps " ] || fail "after the edit computed: $(computed ev3)"

# a list bound through `with:` to a param written alone as "${alphas}"
cat >lab/cv.yaml <<'EOF2'
nlflow: 1
params: {alphas: [0.1, 1, 10]}
inputs: [X, Y]
outputs: {score: fit.score}
nodes:
  fit: {type: ridge, in: {X: X, Y: Y}, alphas: "${alphas}", cv: 2}
EOF2
cat >lists.yaml <<'EOF2'
nlflow: 1
settings: {seed: 3, outputs: lists}
nodes:
  sim: {type: simulate, subjects: 2, images: 16, features: 1, voxel_size: 8, mask: synthetic}
  voxels: {type: mask, in: {data: sim.data, mask: sim.mask}}
  a: {type: use, path: lab/cv.yaml, with: {alphas: [1, 100]}, in: {X: sim.X, Y: voxels}}
  b: {type: use, path: lab/cv.yaml, in: {X: sim.X, Y: voxels}}
  maps: {type: summarize, in: {a: a.score, b: b.score}}
EOF2
"$NLFLOW" plan --explain lists.yaml >lists.txt || { cat lists.txt; fail "plan lists.yaml"; }
"$NLFLOW" run --quiet lists.yaml || fail "run lists.yaml"
cmp -s lists/sub-01_lists_stat-a_statmap.nii.gz lists/sub-01_lists_stat-b_statmap.nii.gz \
    && fail "alphas [1, 100] bound by with: gave the default's scores"
# bound to the default's value, a.fit is b.fit: served from the cache
sed -i 's/with: {alphas: \[1, 100\]}/with: {alphas: [0.1, 1, 10]}/' lists.yaml
"$NLFLOW" run --quiet --json lists.yaml >ev4 || fail "run lists.yaml again"
[ "$(computed ev4)" = "maps " ] || fail "a.fit with the default's alphas computed: $(computed ev4)"
sed 's/alphas: "${alphas}"/alphas: "x${alphas}"/' lab/cv.yaml >lab/cvbad.yaml
sed 's#lab/cv.yaml, with#lab/cvbad.yaml, with#' lists.yaml >listsbad.yaml

# 4. errors
expect() {   # $1: file, $2: exit status, $3: a line stderr must contain (grep -F)
    local rc=0
    "$NLFLOW" validate "$1" 2>err.txt || rc=$?
    [ "$rc" = "$2" ] || { cat err.txt; fail "$1: exit $rc, expected $2"; }
    grep -qF -- "$3" err.txt || { cat err.txt; fail "$1: expected '$3'"; }
}
sed 's/n_permutations: 100/n_permutation: 100/' lab/group.yaml >lab/typo.yaml
sed 's#lab/group.yaml, with: {alpha: 1.0}#lab/typo.yaml, with: {alpha: 1.0}#' main.yaml >typo.yaml
expect typo.yaml 2 "lab/typo.yaml:22:5: node 'faces.test': unknown parameter 'n_permutation' for node type 'permute' (did you mean 'n_permutations'?"
expect typo.yaml 2 "(in 'lab/typo.yaml', used by node 'faces' at typo.yaml:8:3)"
sed 's/with: {alpha: 1.0}/with: {alpah: 1.0}/' main.yaml >with.yaml
expect with.yaml 2 "with.yaml:8:51: node 'faces': 'lab/group.yaml' has no param 'alpah' (did you mean 'alpha'? params: alpha, tail)"
sed 's/in: {X: sim.X, Y: voxels}}/in: {X: sim.X}}/' main.yaml >unconnected.yaml
expect unconnected.yaml 2 "node 'faces': input 'Y' of 'lab/group.yaml' is not connected (in: {Y: NODE})"
sed 's/t2: houses.t,/t2: houses.tt,/' main.yaml >output.yaml
expect output.yaml 2 "node 'maps': 'houses' has no output 'tt' (its file declares outputs: t, p)"
sed 's/t2: houses.t,/t2: houses,/' main.yaml >bare.yaml
expect bare.yaml 2 "'houses' uses another pipeline file: name one of its outputs as 'houses.OUTPUT' (outputs: t, p)"
mkdir -p cyc
printf 'nlflow: 1\ninputs: [d]\noutputs: {o: x.o}\nnodes:\n  x: {type: use, path: b.yaml, in: {d: d}}\n' >cyc/a.yaml
printf 'nlflow: 1\ninputs: [d]\noutputs: {o: x.o}\nnodes:\n  x: {type: use, path: a.yaml, in: {d: d}}\n' >cyc/b.yaml
printf 'nlflow: 1\nnodes:\n  sim: {type: simulate, subjects: 2, images: 8, voxel_size: 8, mask: synthetic}\n  c: {type: use, path: cyc/a.yaml, in: {d: sim.X}}\n' >cycle.yaml
expect cycle.yaml 2 "pipeline files use each other in a cycle: $work/cyc/a.yaml -> $work/cyc/b.yaml -> $work/cyc/a.yaml"
NLFLOW_PATH= expect main.yaml 2 "main.yaml:11:11: node 'houses': cannot find pipeline file 'group.yaml' (looked in ., "
grep -q "NLFLOW_PATH is not set)" err.txt || { cat err.txt; fail "the error does not say NLFLOW_PATH is not set"; }
! grep -q "refers to unknown node" err.txt || { cat err.txt; fail "a failed use node also reported as an unknown node"; }
expect lab/group.yaml 2 "it is meant to be used by another pipeline file"
sed 's/requires: ">=0.1"/requires: ">=99.1"/' main.yaml >newer.yaml
expect newer.yaml 2 "newer.yaml:3:11: this pipeline file requires nlflow >=99.1, but this is nlflow"
expect listsbad.yaml 2 "node 'a.fit': '\${alphas}' is a list: it can only stand alone as a whole value, not inside text ('x\${alphas}')"
printf 'nlflow: 2\nsomething_new: 1\nnodes: {}\n' >v2.yaml
expect v2.yaml 2 "format version 2, written for a newer nlflow"
sed 's/^name: usetwice/name: usetwice\nsettings_x: 1/' main.yaml >unknownkey.yaml
expect unknownkey.yaml 2 "unknown top-level key 'settings_x'"
echo "use: ok"
