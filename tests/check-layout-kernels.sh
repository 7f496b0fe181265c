#!/usr/bin/env bash
# check-layout-kernels.sh — kernels.h's rule, checked: node files (nodes/**)
# never call BLAS or CUDA themselves. They reach the CPU kernels through a
# struct nf_kernels and the device through engine/kernels/cuda/gpu.h, so a
# node's GPU path reads like its CPU path and every kernel has a reference
# version and a test. Fails, naming file and line, when a node file
#   - calls a cuda*, cublas* or cusolver* function, or a cblas_* one;
#   - chooses CPU instructions at run time (__builtin_cpu_supports,
#     <immintrin.h> intrinsics): that dispatch is engine/kernels/simd/'s.
# Comments and string contents are blanked first (line numbers kept), so
# prose naming a CUDA function is fine. Usage: srcdir=SOURCE_TREE tests/check-layout-kernels.sh
set -u
srcdir=${srcdir:-.}
status=0
files=$(cd "$srcdir" && find nodes -name '*.c' -o -name '*.h' | sort)
[ -n "$files" ] || { echo "FAIL: no node files under $srcdir/nodes"; exit 1; }
for f in $files; do
    code=$(perl -0777 -pe 's{/\*.*?\*/}{(my $c = $&) =~ s/[^\n]//g; $c}gse; s{//[^\n]*}{}g;
                            s{"(?:[^"\\\n]|\\.)*"}{""}g' "$srcdir/$f")
    hits=$(printf '%s\n' "$code" | grep -nE '\b(cuda|cublas|cusolver)[A-Za-z0-9_]*[[:space:]]*\(|\bcblas_[A-Za-z0-9_]*[[:space:]]*\(|__builtin_cpu_supports|#[[:space:]]*include[[:space:]]*<(immintrin|x86intrin)\.h>')
    if [ -n "$hits" ]; then
        echo "FAIL: $f calls BLAS/CUDA or dispatches on the CPU itself (use nf_kernels / gpu.h):"
        printf '%s\n' "$hits" | head -20 | sed 's/^/    /'
        status=1
    fi
done
[ $status -eq 0 ] && echo "ok   no node file calls cuda*/cublas*/cusolver*/cblas_* or dispatches on the CPU"
exit $status
