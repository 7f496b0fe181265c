#!/usr/bin/env bash
# run-rerun-diff.sh — the quick subset of the differential rerun harness
# (tests/rerun/rerun_diff.py): every example pipeline, a few generated edits
# each, one run in five killed first; after each edit the cached rerun must
# equal a fresh --no-cache run of the edited file. `make check-rerun` runs
# hundreds of edits with a random seed (printed); replay one with
#   NLFLOW_RERUN_SEED=S NLFLOW_RERUN_EDITS=N tests/run-rerun-diff.sh
# Sanitizer builds run one edit on three pipelines (everything is slower there).
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c 'import yaml' 2>/dev/null; then
    echo "SKIPPED: the differential rerun harness needs python3 and python3-yaml (./build.sh check installs them)"
    exit 77
fi
work=$(mktemp -d /tmp/nlflow-rerun-XXXXXX)
trap 'rm -rf "$work"' EXIT
seed=${NLFLOW_RERUN_SEED:-20261208}
edits=${NLFLOW_RERUN_EDITS:-2}
pipelines=${NLFLOW_RERUN_PIPELINES:-}
kill=${NLFLOW_RERUN_KILL:-0.2}
if [ -n "${NLFLOW_SAN:-}" ] && [ -z "${NLFLOW_RERUN_EDITS:-}" ]; then
    edits=1
    pipelines=${pipelines:-quickstart.yaml,group-glm.yaml,first-level.yaml}
fi
exec "$PY" "$srcdir/tests/rerun/rerun_diff.py" --nlflow "$NLFLOW" --src "$srcdir" --work "$work" \
    --seed "$seed" --edits "$edits" --kill-rate "$kill" ${pipelines:+--pipelines "$pipelines"}
