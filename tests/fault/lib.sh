# lib.sh — shared by the fault suites (run-oom.sh, run-write.sh): the small
# pipeline (tests/fault/pipeline.yaml: simulate writing NIfTI/TSV -> load ->
# mask -> ridge -> permute -> summarize writing NIfTI/TSV/JSON) run with one
# fault injected, and the checks every such run must pass:
#   - exit 1 with the expected message, or 0 with the reference outputs (a
#     fault that the run may absorb: a best-effort cache write), never a
#     signal, a sanitizer report (ASan exits 1 with "ERROR: AddressSanitizer"
#     or 23 for a leak) or another status;
#   - no temporary file left and no half-written output: every file under the
#     outputs (out/, data/) is byte-identical to the reference run's (a
#     summary.json marked by a failed run: but for its Status line);
#   - `nlflow cache verify` clean;
#   - a rerun without the fault exits 0 with the reference outputs.
# Sourced; the caller sets NLFLOW, srcdir and calls fault_setup first.

fail() { echo "FAIL: $*"; exit 1; }

fault_setup() {
    # a tmpfs when there is one: every run fsyncs its outputs
    local tmp=${TMPDIR:-/tmp}
    [ -z "${TMPDIR:-}" ] && [ -w /dev/shm ] && tmp=/dev/shm
    work=$(mktemp -d "$tmp/nlflow-fault-XXXXXX")
    trap 'rm -rf "$work"' EXIT
    cp "$srcdir/tests/fault/pipeline.yaml" "$work/p.yaml"
    # the reference: outputs, and how many allocations a cold and a warm run make
    (cd "$work" && NLFLOW_ALLOC_STATS=1 "$NLFLOW" run p.yaml --cache c/cache.db --quiet 2>"$work/ref.err") \
        || { cat "$work/ref.err"; fail "reference run"; }
    alloc_cold=$(sed -n 's/^nlflow: allocations: //p' "$work/ref.err")
    (cd "$work" && NLFLOW_ALLOC_STATS=1 "$NLFLOW" run p.yaml --cache c/cache.db --quiet 2>"$work/ref.err") \
        || { cat "$work/ref.err"; fail "reference warm run"; }
    alloc_warm=$(sed -n 's/^nlflow: allocations: //p' "$work/ref.err")
    mkdir -p "$work/ref"
    mv "$work/out" "$work/data" "$work/c" "$work/ref/"
}

# Every file under $work/{out,data} is a reference file, byte for byte;
# with "all", every reference file is there too.
same_as_reference() {   # $1: label, $2: "all" or "subset"
    local f rel
    if [ -n "$(find "$work/out" "$work/data" "$work/c" -name '*.tmp*' 2>/dev/null)" ]; then
        find "$work/out" "$work/data" "$work/c" -name '*.tmp*'
        fail "$1: temporary files left"
    fi
    for f in $(cd "$work" && find out data -type f 2>/dev/null); do
        case "$f" in
            *summary.json)   # a failed run marks it (its Status line): the rest is the reference's
                cmp -s <(sed '2{/^  "Status": /d}' "$work/$f") <(sed '2{/^  "Status": /d}' "$work/ref/$f") \
                    || fail "$1: $f is not the reference file (partial output?)" ;;
            *) cmp -s "$work/$f" "$work/ref/$f" || fail "$1: $f is not the reference file (partial output?)" ;;
        esac
    done
    if [ "$2" = all ]; then
        for f in $(cd "$work/ref" && find out data -type f); do
            [ -f "$work/$f" ] || fail "$1: $f missing"
        done
    fi
}

cache_clean() {   # $1: label
    [ -f "$work/c/cache.db" ] || return 0
    local out
    out=$("$NLFLOW" cache verify --cache "$work/c/cache.db" 2>&1) || { echo "$out"; fail "$1: cache verify"; }
}

# One run of `nlflow $cmd` with the fault environment in $2; $3 is the
# expected message (an extended regex) of a failure.
# $1 label, $2 env assignment(s), $3 message, $4 cache state: cold|warm, $5 rerun: yes|no
fault_run() {
    local label=$1 envs=$2 msg=$3 state=$4 rerun=$5 rc
    rm -rf "$work/out" "$work/data" "$work/c"
    if [ "$state" = warm ]; then
        cp -r "$work/ref/data" "$work/ref/c" "$work/"
    fi
    (cd "$work" && env $envs "$NLFLOW" run p.yaml --cache c/cache.db --quiet >"$work/run.out" 2>"$work/run.err")
    rc=$?
    if grep -qE 'Sanitizer|runtime error|LeakSanitizer' "$work/run.err"; then
        cat "$work/run.err"; fail "$label: sanitizer report"
    fi
    case $rc in
        0) same_as_reference "$label" all ;;
        1) grep -qE "$msg" "$work/run.err" || { cat "$work/run.err"; fail "$label: exit 1 without '$msg'"; }
           same_as_reference "$label" subset ;;
        *) cat "$work/run.err"; fail "$label: exit status $rc" ;;
    esac
    [ "$rc" = 0 ] && n_absorbed=$((n_absorbed + 1))
    cache_clean "$label"
    if [ "$rerun" = yes ]; then
        (cd "$work" && "$NLFLOW" run p.yaml --cache c/cache.db --quiet >/dev/null 2>"$work/rerun.err") \
            || { cat "$work/rerun.err"; fail "$label: rerun without the fault"; }
        same_as_reference "$label rerun" all
        cache_clean "$label rerun"
    fi
    n_runs=$((n_runs + 1))
}
n_runs=0
n_absorbed=0

# The k to try out of 1..n: every k up to $2, then $3 more spread evenly
# (deterministic), and n itself.
sample_ks() {   # $1 n, $2 dense prefix, $3 spread count
    local n=$1 dense=$2 spread=$3 k step
    for ((k = 1; k <= dense && k <= n; k++)); do echo "$k"; done
    [ "$n" -le "$dense" ] && return
    step=$(( (n - dense) / spread )); [ "$step" -ge 1 ] || step=1
    for ((k = dense + step; k < n; k += step)); do echo "$k"; done
    echo "$n"
}

# The verdict on one command run with a failed allocation: exit 0 (the
# allocation was one nlflow can do without) or 1 saying "out of memory";
# never a sanitizer report, a signal or another status.
oom_verdict() {   # $1: label, $2: exit status, $3: its stderr
    grep -qE 'Sanitizer|runtime error' "$3" && { cat "$3"; fail "$1: sanitizer report"; }
    case $2 in
        0) ;;
        1) grep -q 'out of memory' "$3" || { cat "$3"; fail "$1: exit 1 without 'out of memory'"; } ;;
        *) head -5 "$3"; fail "$1: exit status $2" ;;
    esac
}
