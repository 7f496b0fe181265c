#!/usr/bin/env bash
# run-golden.sh — golden tests: invalid pipelines (tests/fail/) and the exact
# output of valid ones (tests/pipelines/).
#
# Each case is NN-name.yaml with NN-name.stderr (the exact expected messages),
# NN-name.exit (expected exit status), optionally NN-name.stdout (exact
# expected standard output) and NN-name.args (the command and options,
# default "run"). Cases run in a scratch folder holding the data
# files from make-fixtures, referenced as data/...; the scratch path is
# replaced by @DATA@ in messages. A case passes only on a controlled exit with
# the expected status and message, and when it left no output files behind.
# UPDATE=1 rewrites the expected files from the current behaviour (review the
# diff before committing).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
FIXTURES=${FIXTURES:-$(dirname "$NLFLOW")/tests/make-fixtures}
work=$(mktemp -d /tmp/nlflow-golden-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$FIXTURES" "$work/data" || { echo "make-fixtures failed"; exit 1; }

fails=0; count=0
nfail=0
for yaml in "$srcdir"/tests/fail/*.yaml "$srcdir"/tests/pipelines/*.yaml; do
    case_name=$(basename "$yaml" .yaml)
    base="${yaml%.yaml}"
    case "$yaml" in */tests/fail/*) nfail=$((nfail + 1)) ;; esac
    count=$((count + 1))
    cp "$yaml" "$work/$case_name.yaml"
    args="run"
    [ -f "$base.args" ] && args=$(cat "$base.args")
    rm -rf "$work/results"
    (cd "$work" && eval "\"$NLFLOW\" $args $case_name.yaml" >"$work/stdout" 2>"$work/stderr")
    status=$?
    sed -e "s|$work|@DATA@|g" "$work/stderr" >"$work/stderr.norm"
    sed -e "s|$work|@DATA@|g" "$work/stdout" >"$work/stdout.norm"
    if [ "${UPDATE:-0}" = 1 ]; then
        cp "$work/stderr.norm" "$base.stderr"
        echo "$status" >"$base.exit"
        case "$yaml" in */tests/pipelines/*) cp "$work/stdout.norm" "$base.stdout" ;; esac
    fi
    want_status=$(cat "$base.exit" 2>/dev/null || echo missing)
    problem=
    if [ "$status" -ge 128 ] && [ "$status" != 130 ]; then
        problem="killed by a signal (status $status)"
    elif [ "$status" != "$want_status" ]; then
        problem="exit status $status, expected $want_status"
    elif ! cmp -s "$work/stderr.norm" "$base.stderr"; then
        problem="stderr differs:
$(diff -u "$base.stderr" "$work/stderr.norm")"
    elif [ -f "$base.stdout" ] && ! cmp -s "$work/stdout.norm" "$base.stdout"; then
        problem="stdout differs:
$(diff -u "$base.stdout" "$work/stdout.norm")"
    elif [ "$want_status" != 0 ] && [ -d "$work/results" ] && [ -n "$(find "$work/results" -type f)" ]; then
        problem="left output files: $(find "$work/results" -type f)"
    elif [ -n "$(find "$work" -maxdepth 1 -name '.*.tmp*')" ]; then
        problem="left temporary files"
    fi
    if [ -n "$problem" ]; then
        echo "FAIL $case_name: $problem"
        fails=$((fails + 1))
    else
        echo "ok   $case_name"
    fi
done
echo "$((count - fails))/$count golden cases passed ($nfail invalid pipelines)"
[ "$nfail" -ge 15 ] || { echo "expected at least 15 invalid-pipeline cases"; exit 1; }
[ "$fails" -eq 0 ]
