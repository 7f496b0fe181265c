#!/usr/bin/env bash
# run-write.sh — a full or failing disk at the k-th write (NLFLOW_FAIL_WRITE=k,
# ENOSPC, or k:eio; engine/core/fault.c): an output file committed by the
# atomic writer, or a write/truncate/sync of the cache database, its journal
# or WAL (results, checkpoints, run records). Through a whole run of
# tests/fault/pipeline.yaml, cold and warm: exit 1 naming the problem, or 0
# with the reference outputs when the failed write was a best-effort cache
# write (the run warns and goes on); never a crash; no partial output; a
# clean cache; a rerun without the fault gives the reference outputs (checks
# in lib.sh). A cold run makes about 750 writes, a warm one 200: make check
# tries every 8th k with ENOSPC and every 40th with EIO (1.5x sparser under
# sanitizers; every k under FAULT_FULL=1).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
. "$srcdir/tests/fault/lib.sh"
fault_setup
count_writes() {   # $1: cold|warm
    rm -rf "$work/out" "$work/data" "$work/c"
    [ "$1" = warm ] && cp -r "$work/ref/data" "$work/ref/c" "$work/"
    (cd "$work" && NLFLOW_WRITE_STATS=1 "$NLFLOW" run p.yaml --cache c/cache.db --quiet 2>&1 >/dev/null) \
        | sed -n 's/^nlflow: writes: //p'
}
MSG='No space left on device|Input/output error|disk is full|disk I/O error|cannot write'
step=8; step_eio=40
[ -n "${NLFLOW_SAN:-}" ] && { step=12; step_eio=60; }
[ "${FAULT_FULL:-0}" = 1 ] && { step=1; step_eio=1; }
for state in cold warm; do
    n=$(count_writes $state)
    [ -n "$n" ] && [ "$n" -gt 0 ] || fail "no writes counted ($state)"
    echo "writes: $state run $n"
    for ((k = 1; k <= n + 1; k += step)); do
        fault_run "run $state ENOSPC k=$k" "NLFLOW_FAIL_WRITE=$k" "$MSG" $state yes
    done
    for ((k = 2; k <= n; k += step_eio)); do
        fault_run "run $state EIO k=$k" "NLFLOW_FAIL_WRITE=$k:eio" "$MSG" $state yes
    done
done
echo "runs: $n_runs with one failed write, $n_absorbed of them absorbed (exit 0, reference outputs)"
echo "PASS"
