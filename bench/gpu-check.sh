#!/usr/bin/env bash
# gpu-check.sh — everything issue 8 needs a GPU for, in one go (under 8 minutes
# on an H200 machine): build nlflow with CUDA, run the CPU-vs-GPU agreement
# tests (tests/unit/test_gpu: ridge, permute, and predict's searchlight with
# ridge / ridge_classifier — maps equal but for documented near ties, several
# batches, a simulated out-of-memory, checkpoints resumed across devices) and
# the CUDA probe, calibrate the placement rates, and run the GPU benchmarks
# (ridge 500x20000x50, 1000x20000x100, 1000x230000x100; permute 50 x 230k x
# 10000, t + max; the whole-brain searchlight, ridge_classifier 120 x 50000 at
# 3 mm, r = 6 mm, 5 folds) next to the CPU path under `nlflow bench --device
# all`. The summary lists, per benchmark, the GPU median, its share of the
# H200's FP32 peak (or HBM bandwidth), the CPU time and the speedup, and for
# the searchlight the share of centres whose map value is the CPU's.
#
# Usage, from the repository root:  bench/gpu-check.sh
# Results go to $OUT when set (the device tool copies that folder back), else
# /tmp/nlflow-gpu-check: gpu-check.log (everything), test_gpu.log, devices.json
# (calibrated rates), bench/gpu.json (the result file) and docs/performance.md
# (its report), summary.txt (one line per step).
#
# With the session's device tool (configure & co. are generated, git-ignored
# files, so they travel by `carry`; .gpu-deps is optional, see below):
#   run(command="bash bench/gpu-check.sh", timeout_s=560,
#       carry=["configure", "Makefile.in", "config.h.in", "aclocal.m4", "build-aux", ".gpu-deps"])
# The GPU machine reaches no package registry. If its image lacks a build
# dependency (libyaml, sqlite3, OpenBLAS, nifti2, zstd, xxhash, png, cmocka,
# make), make .gpu-deps here first: bench/gpu-deps.sh downloads the .deb files
# (apt-get download) into .gpu-deps/, and this script unpacks them under
# /tmp/nf-deps (never over /) and builds against them.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/nlflow-gpu-check}
mkdir -p "$out/bench" "$out/docs"
exec > >(tee -a "$out/gpu-check.log") 2>&1
t_start=$(date +%s)
step() { echo; echo "== [+$(( $(date +%s) - t_start ))s] $*"; }
summary() { echo "$*" | tee -a "$out/summary.txt"; }
status=0

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: not available"
echo "cores: $(nproc)"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
nvcc --version 2>/dev/null | tail -1 || { summary "FAIL no nvcc"; exit 1; }

# ---- build dependencies: the system's, else the carried .debs ----
missing=""
for h in yaml.h sqlite3.h zstd.h xxhash.h png.h cmocka.h nifti/nifti2_io.h; do
    [ -e "/usr/include/$h" ] || missing="$missing $h"
done
[ -e /usr/include/cblas.h ] || [ -e /usr/include/x86_64-linux-gnu/cblas.h ] || missing="$missing cblas.h"
command -v make >/dev/null || missing="$missing make"
if [ -n "$missing" ]; then
    if ! ls "$root"/.gpu-deps/*.deb >/dev/null 2>&1; then
        summary "FAIL missing build dependencies:$missing (make .gpu-deps with bench/gpu-deps.sh and carry it)"
        exit 1
    fi
    step "unpacking .gpu-deps under /tmp/nf-deps (missing here:$missing)"
    mkdir -p /tmp/nf-deps
    for deb in "$root"/.gpu-deps/*.deb; do dpkg-deb -x "$deb" /tmp/nf-deps || exit 1; done
    # absolute links (libz.so -> /lib/...) point into the real root: re-point them
    find /tmp/nf-deps -type l | while read -r link; do
        target=$(readlink "$link")
        case $target in /*) [ -e "/tmp/nf-deps$target" ] && ln -sfn "/tmp/nf-deps$target" "$link" ;; esac
    done
    P=/tmp/nf-deps/usr
    L=$P/lib/x86_64-linux-gnu
    export CPPFLAGS="-I$P/include -I$P/include/nifti -I$P/include/x86_64-linux-gnu -I$P/include/x86_64-linux-gnu/openblas-pthread ${CPPFLAGS:-}"
    export LDFLAGS="-L$L -L$L/openblas-pthread -Wl,-rpath,$L -Wl,-rpath,$L/openblas-pthread ${LDFLAGS:-}"
    export LD_LIBRARY_PATH="$L:$L/openblas-pthread:/tmp/nf-deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$P/bin:$PATH"
fi

# cuBLAS / cuSOLVER: the toolkit's, else the NVIDIA wheels of the image's Python
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
if [ ! -e "$cuda_home/lib64/libcublas.so" ] || [ ! -e "$cuda_home/lib64/libcusolver.so" ]; then
    step "no cuBLAS/cuSOLVER in $cuda_home/lib64: looking in the Python wheels"
    mkdir -p /tmp/nf-cuda-libs
    sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    for lib in cublas cublasLt cusolver cusparse nvJitLink; do
        f=$(find $sites -path '*nvidia*' -name "lib$lib.so*" 2>/dev/null | head -1)
        [ -n "$f" ] || continue
        ln -sf "$f" "/tmp/nf-cuda-libs/lib$lib.so"
        export LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    export LDFLAGS="-L/tmp/nf-cuda-libs ${LDFLAGS:-}"
    ls -l /tmp/nf-cuda-libs
fi

# ---- configure and build (out of tree, in /tmp: the working tree stays clean) ----
step "configure --with-cuda=yes"
cd "$root" || exit 1
if [ ! -x configure ]; then
    command -v autoreconf >/dev/null || { summary "FAIL no configure script and no autoreconf (carry configure etc.)"; exit 1; }
    autoreconf -fi || { summary "FAIL autoreconf"; exit 1; }
fi
# copied files lose their times: make the generated files newer than their
# sources so that make does not try to run automake/autoconf
touch aclocal.m4; sleep 1; touch configure config.h.in; sleep 1; find . -name Makefile.in -not -path './build*' -exec touch {} +
build=/tmp/nf-gpu-build
rm -rf "$build"
mkdir -p "$build" && cd "$build" || exit 1
"$root/configure" --with-cuda=yes >configure.log 2>&1 || { tail -30 configure.log; summary "FAIL configure"; exit 1; }
grep -q 'build the CUDA kernels... yes' configure.log || { summary "FAIL configure did not enable CUDA"; exit 1; }
step "make"
gcc --version | head -1; grep PRETTY_NAME /etc/os-release
# no -Werror here: the image's compiler may be newer than Debian 12's and warn
# where the tested one does not; warnings stay in make.log
timeout 240 make -j"$(nproc)" WARN_CFLAGS="-Wall -Wextra -Wno-format-truncation" \
    NVCC_WARN="-Xcompiler -Wall,-Wextra" nlflow tests/unit/test_gpu tests/unit/test_gpu_emu tests/unit/test_cost tests/unit/test_kernels \
    >make.log 2>&1 ||
    { tail -40 make.log; cp make.log "$out/"; summary "FAIL build"; exit 1; }
summary "ok   build with CUDA ($(( $(date +%s) - t_start )) s so far)"

# ---- tests ----
step "tests/unit/test_gpu (CPU vs GPU agreement: ridge, permute, searchlight)"
timeout 180 ./tests/unit/test_gpu 2>&1 | tee "$out/test_gpu.log"
rc=${PIPESTATUS[0]}
case $rc in
    0) summary "ok   test_gpu: CPU-vs-GPU agreement" ;;
    77) summary "SKIP test_gpu: $(grep '^SKIP:' "$out/test_gpu.log" | head -1)"; status=1 ;;
    *) summary "FAIL test_gpu (exit $rc)"; status=1 ;;
esac
step "tests/unit/test_kernels (CUDA probe), test_gpu_emu (the same tests on the CPU emulation), test_cost"
timeout 60 ./tests/unit/test_kernels >"$build/test_kernels.log" 2>&1 && summary "ok   test_kernels" ||
    { tail -20 "$build/test_kernels.log"; summary "FAIL test_kernels"; status=1; }
timeout 60 ./tests/unit/test_gpu_emu >"$build/test_gpu_emu.log" 2>&1 && summary "ok   test_gpu_emu" ||
    { grep -v 'zero variance' "$build/test_gpu_emu.log" | grep -B3 -A3 'ERROR\|FAIL' | head -60; summary "FAIL test_gpu_emu"; status=1; }
timeout 60 ./tests/unit/test_cost >"$build/test_cost.log" 2>&1 && summary "ok   test_cost" ||
    { tail -20 "$build/test_cost.log"; summary "FAIL test_cost"; status=1; }

# ---- devices and calibration ----
step "nlflow devices --calibrate"
export NLFLOW_DEVICES_FILE="$out/devices.json"
timeout 90 ./nlflow devices --calibrate && summary "ok   calibrated: $(tr -d '\n' <"$out/devices.json")" ||
    { summary "FAIL devices --calibrate"; status=1; }

# ---- benchmarks ----
step "nlflow bench --device all --domains gpu"
left=$(( 450 - ($(date +%s) - t_start) ))
[ "$left" -gt 60 ] || left=60
timeout "$left" ./nlflow bench --device all --domains gpu --reps 3 --out "$out/bench/gpu.json" --docs "$out/docs" \
    --scratch /tmp/nf-gpu-scratch
rc=$?
if [ $rc -eq 0 ]; then
    summary "ok   bench (results in bench/gpu.json, report in docs/performance.md)"
    grep -A20 '^GPU nodes' "$out/docs/performance.md" | grep '^- ' | while read -r line; do summary "     $line"; done
else
    summary "FAIL bench (exit $rc$([ $rc -eq 124 ] && echo ', time limit'))"
    status=1
fi
# ---- where the time goes: the 230k-voxel conditions once more, each phase
# timed (NLFLOW_GPU_PROFILE waits for the device at every phase mark) ----
step "phase profile of the 230k-voxel conditions (NLFLOW_GPU_PROFILE=1)"
left=$(( 500 - ($(date +%s) - t_start) ))
if [ "$left" -gt 40 ]; then
    NLFLOW_GPU_PROFILE=1 timeout "$left" ./nlflow bench --device gpu --domains gpu --conditions 'v=230000' --reps 1 \
        --out /tmp/nf-gpu-profile.json --scratch /tmp/nf-gpu-scratch >"$out/profile.log" 2>&1 &&
        summary "ok   phase profile (profile.log)" || summary "FAIL phase profile (exit $?)"
    grep -A40 'GPU phases' "$out/profile.log" | tail -60
else
    summary "SKIP phase profile: ${left} s left"
fi
step "done in $(( $(date +%s) - t_start )) s"
cat "$out/summary.txt"
exit $status
