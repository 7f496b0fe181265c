#!/usr/bin/env bash
# run-fuzz-smoke.sh — a short run of every libFuzzer target (tests/fuzz/): it
# builds them (`make fuzz`, clang) and runs each for a fixed number of inputs
# on its seed corpus, so that a target that no longer builds, or a seed that
# crashes again, fails `make check`. Real fuzzing runs for longer by hand
# (tests/fuzz/README.md).
#
# SKIPs (77) when configure found no clang with libFuzzer, and in sanitizer
# builds (NLFLOW_SAN set): the targets carry ASan+UBSan themselves, and the
# plain build's pass already ran them. FUZZ_RUNS sets the inputs per target.
set -u
: "${srcdir:?source folder}"
runs=${FUZZ_RUNS:-2000}

if [ -n "${NLFLOW_SAN:-}" ]; then
    echo "SKIP: the fuzz targets run in the plain build's make check"
    exit 77
fi
fuzz_cc=$(sed -n 's/^FUZZ_CC = *//p' Makefile 2>/dev/null)
if [ -z "$fuzz_cc" ]; then
    echo "SKIP: configure found no clang with libFuzzer (apt-get install clang libclang-rt-14-dev, then rerun configure)"
    exit 77
fi
targets=$(sed -n 's/^FUZZ_TARGETS = *//p' Makefile)
# the parent make's jobserver is not passed down to a test script
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL ${MAKE:-make} -s -j"$(nproc)" fuzz >fuzz-build.log 2>&1; then
    cat fuzz-build.log
    echo "FAIL: make fuzz"
    exit 1
fi

work=$(mktemp -d /tmp/nlflow-fuzz-smoke-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
for t in $targets; do
    seeds=("$srcdir/tests/fuzz/corpus/$t")
    case "$t" in   # the test suite's own inputs are seeds too
        fuzz_pipeline) seeds+=("$srcdir/pipelines" "$srcdir/tests/fail" "$srcdir/tests/pipelines") ;;
    esac
    mkdir -p "$work/$t"
    # new inputs go to the first folder (scratch), never into the source tree
    if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "fuzz/$t" -runs="$runs" -seed=1 -max_len=65536 -rss_limit_mb=2048 -timeout=20 \
            -artifact_prefix="$work/" "$work/$t" "${seeds[@]}" >"$work/$t.log" 2>&1; then
        echo "ok   $t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$work/$t.log")"
    else
        echo "FAIL $t:"
        tail -n 60 "$work/$t.log"
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [ -f "$a" ] && { echo "input ($a):"; od -c "$a" | head -20; }
        done
        fails=$((fails + 1))
    fi
done
[ "$fails" -eq 0 ]
