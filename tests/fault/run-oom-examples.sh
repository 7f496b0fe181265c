#!/usr/bin/env bash
# run-oom-examples.sh — the out-of-memory countdown (NLFLOW_FAIL_ALLOC=k) over
# `validate` and `plan` of every example pipeline (pipelines/*.yaml, with the
# lab templates they use), after one run so that their data and cache exist:
# each command must exit 0 (a best-effort allocation) or 1 saying "out of
# memory", never crash (../shared/repro/02, 03: six sites in use.c and the
# glm and group_design checks were SIGSEGVs, a column list interned as "?"
# another). validate is tried at every 4th k, plan at every 8th (an offset
# per pipeline, so that together they cover every residue), under sanitizers
# every 16th and 32nd: make check's time. FAULT_FULL=1 (make check-oom) tries
# every k of both (5,000 runs: minutes).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
. "$srcdir/tests/fault/lib.sh"   # fail, oom_verdict
work=$(mktemp -d /tmp/nlflow-oom-examples-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$srcdir/pipelines" "$work/"
rm -rf "$work/pipelines/results" "$work/pipelines/data" "$work/pipelines/.nlflow"
cd "$work/pipelines"
total=0
index=0
for yaml in ${OOM_PIPELINES:-*.yaml}; do
    "$NLFLOW" run --quiet "$yaml" 2>"$work/run.err" || { cat "$work/run.err"; fail "$yaml does not run"; }
    for cmd in validate plan; do
        n=$(NLFLOW_ALLOC_STATS=1 "$NLFLOW" $cmd "$yaml" 2>&1 >/dev/null | sed -n 's/^nlflow: allocations: //p')
        [ -n "$n" ] || fail "$cmd $yaml: no allocation count"
        step=4; [ $cmd = plan ] && step=8
        [ -n "${NLFLOW_SAN:-}" ] && step=$((step * 4))
        [ "${FAULT_FULL:-0}" = 1 ] && step=1
        for ((k = 1 + index % step; k <= n + 1; k += step)); do
            NLFLOW_FAIL_ALLOC=$k "$NLFLOW" $cmd "$yaml" >/dev/null 2>"$work/v.err"
            oom_verdict "$cmd $yaml k=$k" $? "$work/v.err"
            total=$((total + 1))
        done
    done
    echo "ok   $yaml: validate and plan at each tried allocation"
    index=$((index + 1))
done
echo "ok   $total runs with one failed allocation, none crashed"
