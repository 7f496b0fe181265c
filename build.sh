#!/usr/bin/env bash
# build.sh — set up everything on a fresh Debian 12 machine, build, then either
# run the quickstart pipeline (demo) or the whole test suite (check).
#
#   ./build.sh demo    install what is missing, build, run pipelines/quickstart.yaml
#   ./build.sh check   install what is missing, build, make check (plain build and
#                      an ASan+UBSan build in a second folder)
#   ./build.sh build   install what is missing and build only
#
# `make -C build fuzz` builds the libFuzzer targets (tests/fuzz/README.md).
#
# Build folders: build/ (plain) and build-asan/ (sanitizers). Set NLFLOW_NO_ASAN=1
# to skip the sanitizer pass of `check` during quick local iterations.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)

PACKAGES=(build-essential autoconf automake pkg-config git
          libyaml-dev libsqlite3-dev libopenblas-dev libnifti2-dev zlib1g-dev
          libzstd-dev libxxhash-dev libcmocka-dev libpng-dev mricron-data libdeflate-dev
          clang libclang-rt-14-dev)   # the last two: `make fuzz` and its smoke test
# only for `check`: tests/run-slurm.sh starts a one-node SLURM cluster with
# slurm-wlm and munge; tests/run-report.sh renders the reports in chromium;
# tests/run-rerun-diff.sh edits pipelines with python3-yaml
CHECK_PACKAGES=(slurm-wlm munge chromium python3 python3-yaml)

log() { printf '==> %s\n' "$*" >&2; }

install_deps() {   # [extra packages]
    local missing=()
    for p in "${PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        return 0
    fi
    log "installing missing Debian packages: ${missing[*]}"
    local sudo=
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "build.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
        sudo=sudo
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

configure_build() {   # $1 = build folder, rest = configure options
    local dir=$1; shift
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        log "autoreconf"
        autoreconf -fi >/dev/null
    fi
    mkdir -p "$dir"
    if [ ! -f "$dir/Makefile" ] || [ configure -nt "$dir/config.status" ]; then
        log "configure ($dir) $*"
        (cd "$dir" && "$ROOT/configure" --quiet "$@")
    fi
    log "make ($dir)"
    make -C "$dir" -j"$(nproc)" >/dev/null
}

cmd=${1:-}
case "$cmd" in
    demo)
        install_deps
        configure_build build --with-cuda=auto
        log "running pipelines/quickstart.yaml"
        build/nlflow run pipelines/quickstart.yaml
        echo
        echo "Quickstart results (NIfTI maps, TSV tables, summary.json, dataset_description.json):"
        find pipelines/results/quickstart -maxdepth 1 -type f | sort | sed 's/^/  /'
        echo "Simulated input data: pipelines/data/quickstart/"
        ;;
    check)
        install_deps "${CHECK_PACKAGES[@]}"
        configure_build build --with-cuda=auto
        log "make check (build/)"
        make -C build check -j"$(nproc)" || { cat build/test-suite.log >&2 || true; exit 1; }
        if [ "${NLFLOW_NO_ASAN:-0}" != 1 ]; then
            configure_build build-asan --with-cuda=no --enable-asan --enable-ubsan
            log "make check under ASan+UBSan (build-asan/)"
            ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
                make -C build-asan check -j"$(nproc)" || { cat build-asan/test-suite.log >&2 || true; exit 1; }
        fi
        log "all tests passed"
        ;;
    build)
        install_deps
        configure_build build --with-cuda=auto
        ;;
    *)
        echo "usage: ./build.sh demo|check|build" >&2
        exit 2
        ;;
esac
