#!/usr/bin/env bash
# run-events.sh — `--json` event streams validate against the documented
# schema (schemas/events.schema.json, docs/events.md), line by line, with
# tests/check-events (no Python needed):
#   1. a full run: run_start first, node_start/node_done, progress (at most 2
#      per second per node), a warning, run_end last with the outputs folder;
#   2. the same run again: node_cached;
#   3. invalid pipelines (validate, plan and run; a YAML syntax error): one
#      error event per problem, located (file, line, col), exit 2;
#   4. a node failing at run time: node_failed, error, run_end status 1;
#   5. the checker itself rejects lines that break the schema.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
CHECK=${CHECK_EVENTS:-$(dirname "$NLFLOW")/tests/check-events}
SCHEMA="$srcdir/schemas/events.schema.json"
work=$(mktemp -d /tmp/nlflow-events-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
valid() {   # FILE [EVENT...]: every line valid, each EVENT present
    local f=$1 args=() e
    shift
    for e in "$@"; do args+=(--require "$e"); done
    "$CHECK" "$SCHEMA" "$f" "${args[@]}" >/dev/null || fail "$f: events do not validate (see above)"
}

# 1. a full run
d="$work/full"; mkdir -p "$d"
cat >"$d/p.yaml" <<'YAML'
nlflow: 1
name: ev
settings: {outputs: out, seed: 2}
params: {unused: 1}
nodes:
  sim: {type: simulate, subjects: 40, images: 2, voxel_size: 3, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  test: {type: permute, in: {data: maps}, stat: t, n_permutations: 12000, chunk: 500, exact: never}
  keep: {type: summarize, in: {p: test.p}}
YAML
"$NLFLOW" run --json "$d/p.yaml" >"$d/ev" 2>"$d/err" || { cat "$d/err"; fail "full run"; }
valid "$d/ev" run_start node_start node_done progress warning run_end
head -1 "$d/ev" | grep -q '^{"event":"run_start".*"command":"run".*"pipeline_hash":"[0-9a-f]\{32\}".*"nlflow_version":' \
    || fail "the first event is not run_start with the pipeline hash and version"
tail -1 "$d/ev" | grep -q '^{"event":"run_end".*"status":0.*"outputs":".*out"' || fail "the last event is not run_end with the outputs"
grep -q '"event":"warning".*"phase":"validate".*"line":4,"col":[0-9]*,"message":"variable .unused. is never used"' "$d/ev" \
    || fail "the warning event is not located"
grep -q '"event":"node_done".*"node":"test".*"key":"[0-9a-f]\{32\}".*"rss_peak_bytes":[1-9]' "$d/ev" \
    || fail "node_done lacks the key or peak memory"
# progress of one node: at most 2 a second
awk -F'"t":' '/"event":"progress".*"node":"test"/ { split($2, a, ","); t = a[1] + 0;
    if (n++ && t - last < 0.499) { print "progress events " t - last " s apart"; bad = 1 } last = t }
    END { exit bad }' "$d/ev" || fail "progress events more often than twice a second"
[ "$(grep -c '"event":"progress".*"node":"test"' "$d/ev")" -ge 1 ] || fail "no progress from the permute node"
grep -q '"event":"progress".*"node":"maps".*"unit":"items"' "$d/ev" || fail "no item progress from the mapped node"
echo "ok   a full run's events validate ($(wc -l <"$d/ev") lines)"

# 2. cached
"$NLFLOW" run --json "$d/p.yaml" >"$d/ev2" 2>/dev/null || fail "cached run"
valid "$d/ev2" run_start node_cached node_done run_end
echo "ok   a cached run's events validate (node_cached)"

# 3. invalid pipelines
b="$work/bad"; mkdir -p "$b"
cat >"$b/p.yaml" <<'YAML'
nlflow: 1
nodes:
  a: {type: simulat}
  b: {type: mask, in: {data: a.data, mask: nowhere}, standardize: sideways}
YAML
for cmd in validate plan run; do
    "$NLFLOW" "$cmd" --json "$b/p.yaml" >"$b/ev-$cmd" 2>/dev/null
    st=$?
    [ "$st" = 2 ] || fail "$cmd of an invalid pipeline: exit $st, expected 2"
    valid "$b/ev-$cmd" run_start error run_end
    [ "$(grep -c '"event":"error".*"file":.*"line":[0-9]*,"col":[0-9]*' "$b/ev-$cmd")" -ge 3 ] \
        || { cat "$b/ev-$cmd"; fail "$cmd: fewer than 3 located error events"; }
    grep -q '"event":"error".*"phase":"validate".*"code":"invalid pipeline".*"exit_status":2' "$b/ev-$cmd" \
        || fail "$cmd: error events lack phase/code/exit status"
    tail -1 "$b/ev-$cmd" | grep -q '"event":"run_end".*"status":2' || fail "$cmd: no run_end with status 2"
done
printf 'nlflow: 1\nnodes:\n  a: {type: simulate, seed: ${s}}\n' >"$b/syntax.yaml"
"$NLFLOW" run --json "$b/syntax.yaml" >"$b/ev-syntax" 2>/dev/null
[ $? = 2 ] || fail "YAML syntax error: exit status"
valid "$b/ev-syntax" run_start error run_end
grep -q '"event":"error".*"line":3' "$b/ev-syntax" || { cat "$b/ev-syntax"; fail "the syntax error is not located"; }
echo "ok   invalid pipelines: located error events (validate, plan, run, YAML syntax)"

# 4. a failure at run time
f="$work/fail"; mkdir -p "$f"
printf 'nlflow: 1\nnodes:\n  w: {type: debug_fault, chunks: 5, fail_after: 2}\n' >"$f/p.yaml"
"$NLFLOW" run --json "$f/p.yaml" >"$f/ev" 2>/dev/null
[ $? = 1 ] || fail "a failing node: exit status"
valid "$f/ev" run_start node_start node_failed error run_end
tail -1 "$f/ev" | grep -q '"status":1' || fail "run_end of a failed run"
echo "ok   a failing node: node_failed, error and run_end validate"

# 5. the checker can fail
printf '%s\n' '{"event":"run_end","t":1.0,"status":0,"seconds":1.0,"interrupted":false}' >"$work/no-outputs"
printf '%s\n' '{"event":"node_start","t":0.5,"node":"a","type":"mask","device":"cpu","extra":1}' >"$work/extra"
printf '%s\n' '{"event":"progress","t":0.5,"node":"a","type":"t","done":"3","total":4,"unit":"x","fraction":0.7,"rate":null,"eta_s":null}' >"$work/string"
printf '%s\n' '{"event":"party","t":0.5}' >"$work/unknown"
printf '%s\n' 'not json' >"$work/text"
for bad in no-outputs extra string unknown text; do
    "$CHECK" "$SCHEMA" "$work/$bad" >/dev/null 2>&1 && fail "check-events accepted the '$bad' line"
done
"$CHECK" "$SCHEMA" "$d/ev2" --require progress >/dev/null 2>&1 && fail "check-events accepted a missing required event"
echo "ok   check-events rejects missing fields, unknown fields and events, wrong types, non-JSON"
