#!/usr/bin/env bash
# run-interrupt.sh — Ctrl-C (SIGINT) and SIGTERM during long nodes:
#   1. SIGINT to a running permute (sent once its progress events show it
#      computing) exits 130 before the node's end (it saved fewer than half of
#      its chunks; the latency is printed, not asserted: no check here depends
#      on how fast the machine is), says how many checkpoint chunks were saved,
#      stores nothing as a result; the rerun resumes from the chunks and its
#      outputs are byte-identical to an uninterrupted run's;
#   2. the same for ridge (its voxel blocks are not checkpointed: the rerun
#      computes it again, from cached inputs);
#   3. SIGTERM stops a run the same way;
#   4. a second SIGINT exits at once, saying so, even while a node that never
#      polls the flag (debug_fault) is running.
# The interrupted runs' --json events validate against schemas/events.schema.json.
# Sizes: each long node runs several seconds here; a sanitizer build
# (NLFLOW_SAN, from Makefile.am) runs smaller cases.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
CHECK=${CHECK_EVENTS:-$(dirname "$NLFLOW")/tests/check-events}
work=$(mktemp -d /tmp/nlflow-intr-XXXXXX)
watchdog=
trap '[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The work grows with the cores so that the nodes still run for seconds
# (and the signal lands inside them) on a bigger machine.
cores=$(nproc 2>/dev/null || echo 2)
[ "$cores" -gt 8 ] && cores=8
if [ -n "${NLFLOW_SAN:-}" ]; then
    PERM_VOX=3; PERMS=20000; RIDGE_IMAGES=200; RIDGE_CV=4; RIDGE_ALPHAS=20
else
    PERM_VOX=2; PERMS=$((10000 * cores)); RIDGE_IMAGES=400; RIDGE_CV=8; RIDGE_ALPHAS=$((20 * cores))
fi
CHUNKS=$((PERMS / 1000))

same_outputs() {   # $1 $2: results folders
    local a n=0
    for a in "$1"/*; do
        cmp -s "$a" "$2/$(basename "$a")" || { echo "differs: $(basename "$a")"; return 1; }
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] && [ "$(ls "$1" | wc -l)" = "$(ls "$2" | wc -l)" ]
}
now_ms() { date +%s%3N; }

# start_run DIR: `nlflow run --json` in the background -> $pid; events in
# DIR/ev, stderr in DIR/err. A watchdog kills it after 120 s so that a run that
# ignores the signal fails the test instead of hanging it.
start_run() {
    "$NLFLOW" run --json "$1/p.yaml" >"$1/ev" 2>"$1/err" &
    pid=$!
    # (its sleep goes with it when it is stopped: no stray process holds our output open)
    ( s=; trap 'kill $s 2>/dev/null; exit 0' TERM; sleep 120 & s=$!; wait $s; kill -9 "$pid" 2>/dev/null ) &
    watchdog=$!
}
# wait_for DIR REGEX [FILE]: until a line of DIR/FILE (default ev, the events)
# matches, while the run lives (the watchdog bounds it)
wait_for() {
    local i
    for i in $(seq 1 2400); do
        grep -qE "$2" "$1/${3:-ev}" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
# stop SIGNAL: send it to $pid, wait; sets $status and $latency (ms)
stop() {
    local t0
    t0=$(now_ms)
    kill "-$1" "$pid"
    wait "$pid"
    status=$?
    latency=$(($(now_ms) - t0))
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    watchdog=
}

# case NAME NODE TYPE PIPELINE_TEXT: reference run, interrupted run, rerun
interrupt_case() {
    local name=$1 node=$2 type=$3 text=$4 d="$work/$1" ref="$work/$1-ref"
    mkdir -p "$d" "$ref"
    printf '%s\n' "$text" >"$d/p.yaml"
    cp "$d/p.yaml" "$ref/p.yaml"
    "$NLFLOW" run --quiet --no-cache "$ref/p.yaml" || fail "$name: reference run"

    start_run "$d"
    wait_for "$d" "\"event\":\"progress\".*\"node\":\"$node\"" || { cat "$d/err"; fail "$name: no progress event from '$node'"; }
    stop INT
    echo "     $name: SIGINT -> exit $status in $latency ms"
    [ "$status" = 0 ] && fail "$name: the run ended before the signal came (a machine much faster than the case?)"
    [ "$status" = 130 ] || { cat "$d/err"; fail "$name: exit status $status after SIGINT, expected 130"; }
    grep -q "interrupted: node '$node' ($type): " "$d/err" || { cat "$d/err"; fail "$name: no 'interrupted: node' line"; }
    grep -q '"event":"node_interrupted".*"node":"'"$node"'"' "$d/ev" || fail "$name: no node_interrupted event"
    grep -q '"event":"run_end".*"status":130' "$d/ev" || fail "$name: no run_end event with status 130"
    "$CHECK" "$srcdir/schemas/events.schema.json" "$d/ev" --require interrupt --require node_interrupted >/dev/null \
        || fail "$name: the interrupted run's events do not validate"
    grep -q '"event":"node_done".*"node":"'"$node"'"' "$d/ev" && fail "$name: '$node' reported done after the interrupt"
    [ -e "$d/out" ] && fail "$name: the interrupted run wrote outputs"

    "$NLFLOW" run --json "$d/p.yaml" >"$d/ev2" 2>"$d/err2" || { cat "$d/err2"; fail "$name: rerun"; }
    grep -q '"event":"node_done".*"node":"'"$node"'".*"source":"run"' "$d/ev2" \
        || fail "$name: the rerun served '$node' from the cache: a partial result was stored"
    same_outputs "$ref/out" "$d/out" || fail "$name: outputs after the interrupted run and a rerun differ"
}

interrupt_case permute test permute "nlflow: 1
name: perm
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 50, images: 2, voxel_size: $PERM_VOX, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}}
  test: {type: permute, in: {data: maps}, stat: t, n_permutations: $PERMS, chunk: 1000, exact: never}
  keep: {type: summarize, in: {p: test.p, p_fwe: test.p_fwe, nm: test.null_max}}"
grep -qE "interrupted: node 'test' \(permute\): [1-9][0-9]* of $CHUNKS chunks saved; rerun to resume" "$work/permute/err" \
    || { cat "$work/permute/err"; fail "permute: no 'N of $CHUNKS chunks saved' with N >= 1"; }
saved=$(grep -oE "[0-9]+ of $CHUNKS chunks saved" "$work/permute/err" | cut -d' ' -f1)
# sent at its first progress event, it stopped long before its end (a node that
# did not poll the flag would have saved all chunks but the last)
[ "$saved" -le $((CHUNKS / 2)) ] || fail "permute: $saved of $CHUNKS chunks saved: it did not stop at the signal"
grep -qE "resumed [1-9][0-9]* of $CHUNKS chunks" "$work/permute/err2" || { cat "$work/permute/err2"; fail "permute: the rerun did not resume"; }
echo "ok   permute: SIGINT -> 130 in $latency ms, $(grep -o "[0-9]* of $CHUNKS chunks saved" "$work/permute/err"); rerun resumes, identical outputs"

interrupt_case ridge fit ridge "nlflow: 1
name: rdg
settings: {outputs: out, seed: 3}
nodes:
  sim: {type: simulate, subjects: 1, images: $RIDGE_IMAGES, features: 100, voxel_size: 3, mask: synthetic}
  maps: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}
  fit: {type: ridge, in: {X: sim.X, Y: maps}, cv: $RIDGE_CV, alphas: {logspace: [-2, 4, $RIDGE_ALPHAS]}}
  keep: {type: summarize, in: {score: fit.score, alpha: fit.alpha, w: fit.weights}}"
echo "ok   ridge: SIGINT -> 130 in $latency ms; rerun identical"

# 3. SIGTERM
d="$work/ridge"
rm -rf "$d/out" "$d/.nlflow"
start_run "$d"
wait_for "$d" '"event":"progress".*"node":"fit"' || { cat "$d/err"; fail "sigterm: no progress event"; }
stop TERM
[ "$status" = 130 ] || { cat "$d/err"; fail "SIGTERM: exit status $status, expected 130"; }
grep -q '"event":"node_done".*"node":"fit"' "$d/ev" && fail "SIGTERM: 'fit' reported done after the signal"
grep -q '"event":"interrupt".*"signal":"SIGTERM"' "$d/ev" || fail "SIGTERM: no interrupt event naming it"
echo "ok   ridge: SIGTERM -> 130 in $latency ms"

# 4. a second SIGINT while a node that does not poll the flag runs
d="$work/second"; mkdir -p "$d"
cat >"$d/p.yaml" <<'YAML'
nlflow: 1
name: second
settings: {outputs: out}
nodes:
  work: {type: debug_fault, chunks: 10000, chunk_size: 2000000, seed: 1}
YAML
# (about a minute of work uninterrupted: the second signal, not its end, must stop it)
start_run "$d"
wait_for "$d" '"event":"node_start".*"node":"work"' || { cat "$d/err"; fail "second: node did not start"; }
kill -INT "$pid"
wait_for "$d" "interrupted: stopping at the next block of work" err || { cat "$d/err"; fail "second: the first SIGINT was not heard"; }
kill -0 "$pid" 2>/dev/null || { cat "$d/err"; fail "second: the first SIGINT alone ended a node that does not poll"; }
stop INT
[ "$status" = 130 ] || { cat "$d/err"; fail "second SIGINT: exit status $status, expected 130"; }
grep -q '"event":"node_done".*"node":"work"' "$d/ev" && fail "second SIGINT: the node ran to its end first"
grep -q "second interrupt: exiting now; finished checkpoint chunks are kept" "$d/err" || { cat "$d/err"; fail "second SIGINT: no message"; }
echo "ok   a second SIGINT exits at once ($latency ms), saying so"
