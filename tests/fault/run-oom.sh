#!/usr/bin/env bash
# run-oom.sh — out of memory at the k-th allocation (NLFLOW_FAIL_ALLOC=k,
# engine/core/alloc.c) through `validate`, `plan` and a whole run of
# tests/fault/pipeline.yaml, cold (empty cache) and warm (everything cached).
# Each run must exit 1 saying "out of memory" (or 0 with the reference
# outputs when the failed allocation was a best-effort one), never crash or
# leak (the ASan build runs with detect_leaks=1), leave no partial output and
# a clean cache, and a rerun without the fault must give the reference
# outputs (checks in lib.sh).
#
# validate is tried at every k, plan at every 3rd. A run makes about 17,000
# allocations cold and 6,000 warm, too many for make check at 0.3 s a run:
# it tries every k up to 40 (start-up, parsing) and 50 more spread evenly
# (fewer under sanitizers). FAULT_FULL=1 tries every k (hours).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
. "$srcdir/tests/fault/lib.sh"
fault_setup
echo "allocations: cold run $alloc_cold, warm run $alloc_warm"
OOM='out of memory'

# validate and plan: every k, no files written
for cmd in validate plan; do
    copt=; [ $cmd = plan ] && copt="--cache ref/c/cache.db"
    n=$(cd "$work" && cp -r ref/data . && NLFLOW_ALLOC_STATS=1 "$NLFLOW" $cmd p.yaml $copt 2>&1 >/dev/null \
        | sed -n 's/^nlflow: allocations: //p')
    vstep=1; [ $cmd = plan ] && vstep=3
    [ -n "${NLFLOW_SAN:-}" ] && vstep=$((vstep * 2))
    [ "${FAULT_FULL:-0}" = 1 ] && vstep=1
    for ((k = 1; k <= n + 1; k += vstep)); do
        (cd "$work" && NLFLOW_FAIL_ALLOC=$k "$NLFLOW" $cmd p.yaml $copt >/dev/null 2>"$work/v.err")
        oom_verdict "$cmd k=$k" $? "$work/v.err"
    done
    echo "$cmd: $n allocations, k from 1 in steps of $vstep"
    rm -rf "$work/data"
done

if [ "${FAULT_FULL:-0}" = 1 ]; then
    dense=1000000000; spread=1
elif [ -n "${NLFLOW_SAN:-}" ]; then
    dense=30; spread=40
else
    dense=40; spread=50
fi
# a wider sweep by hand: FAULT_DENSE=400 FAULT_SPREAD=1500
dense=${FAULT_DENSE:-$dense}; spread=${FAULT_SPREAD:-$spread}
for state in cold warm; do
    n=$alloc_cold; [ $state = warm ] && n=$alloc_warm
    i=0
    for k in $(sample_ks "$n" "$dense" "$spread"); do
        i=$((i + 1))
        # a rerun after every fourth fault (it doubles the run's time)
        rerun=no; [ $((i % 4)) = 0 ] && rerun=yes
        fault_run "run $state k=$k" "NLFLOW_FAIL_ALLOC=$k" "$OOM" $state $rerun
    done
    # past the last allocation: no fault
    fault_run "run $state k=$((n + 1))" "NLFLOW_FAIL_ALLOC=$((n + 1))" "$OOM" $state no
done
echo "runs: $n_runs with one failed allocation, $n_absorbed of them absorbed (exit 0, reference outputs)"
echo "PASS"
