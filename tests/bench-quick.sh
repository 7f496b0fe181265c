#!/usr/bin/env bash
# bench-quick.sh — `nlflow bench --quick` end to end, wiring only (no timing
# assertions): every condition of the quick set runs in its child process, the
# result file has the machine record and per-condition measurements (ridge with
# both of its peers), domains that do not exist yet are reported as skipped (not
# failed), the report and its plot are generated (into the temporary folder,
# never over docs/), and bad options exit 2.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

NLFLOW_BENCH_QUICKSTART="$srcdir/pipelines/quickstart.yaml" TMPDIR=$work "$NLFLOW" bench --quick --reps 1 --out "$work/results/x.json" --docs "$work/docs" \
    --peers "$srcdir/bench/peers" 2>"$work/stderr" \
    || { cat "$work/stderr"; fail "nlflow bench --quick failed"; }
json="$work/results/x.json"
[ -s "$json" ] || fail "no result file"

for key in '"nlflow_bench": 1' '"host": {' '"cpu": ' '"cores": ' '"memory_bytes": ' '"blas": ' \
           '"blas_core": ' '"blas_threads": ' '"OPENBLAS_CORETYPE": ' '"compiler": ' \
           '"version": ' '"commit": ' '"date": ' '"sgemm_2048_gflops": ' \
           '"name": "2048^3"' '"name": "moments[lazy,N=3]"' '"name": "moments[in_memory,N=3]"' \
           '"name": "read_only[N=3]"' '"median_s": ' '"rss_peak_sampled": ' '"rss_peak_getrusage": ' \
           '"matched_sgemm": {' '"subject_bytes": ' '"peer": {' \
           '"name": "put[maps,8MiB]"' '"name": "get[maps,8MiB]"' '"name": "rerun[quickstart]"' \
           '"compression_ratio": ' \
           '"name": "ridge[vs_numpy,n=60,v=500,p=5]"' '"name": "ridge[vs_sklearn,n=60,v=500,p=5]"' \
           '"script": "ridge_numpy.py"' '"script": "ridge_sklearn.py"' '"y_bytes": ' \
           '"name": "searchlight[ridge_classifier,n=30,v=120,cv=3,r=8]"' '"script": "predict_sklearn.py"' \
           '"mean_sphere": ' \
           '"name": "ridge[shared,vs_numpy,n=60,v=500,p=5]"' '"alpha_mode": "shared"' \
           '"node_median_s": ' '"process_times_s": ' '"process_median_s": ' '"process_cpu_median_s": '; do
    grep -qF "$key" "$json" || fail "result file lacks $key"
done
# every ridge and inference row timed its node and whole `nlflow run` processes
if grep -qF '"process_error"' "$json"; then
    grep -oF '"process_error": [^,]*' "$json"
    fail "a whole-process run failed"
fi
for name in 'ridge[vs_numpy,n=60,v=500,p=5]' 'banded[vs_himalaya,n=100,v=500,p=42,c=10]' \
            'one_sample[mean,vs_numpy,n=30,v=300,N=200]' 'grid[tfce,vs_nilearn,n=12,v=4000,N=100]'; do
    grep -A1 -F "\"name\": \"$name\"" "$json" | grep -qF '"process_median_s": ' \
        || fail "$name has no whole-process time"
done
if grep -qF '"status": "failed"' "$json"; then
    grep -F '"status": "failed"' "$json"
    fail "a condition failed"
fi
# where scikit-learn ran the predict peer, it found nlflow's folds to be its own
if grep -qF '"folds_match_sklearn": false' "$json"; then
    fail "the predict benchmark's folds (nf_folds_stratified) differ from scikit-learn's StratifiedKFold"
fi
# every test of the inference domain ran, each next to its peer (MNE for one_sample)
for key in '"name": "one_sample[mean,vs_numpy,n=30,v=300,N=200]"' '"name": "one_sample[t,vs_mne,n=30,v=300,N=200]"' \
           '"name": "two_sample[mean,vs_numpy,n=30,v=300,N=200]"' '"name": "correlation[pearson,vs_numpy,n=30,v=300,N=200]"' \
           '"script": "permute_numpy.py"' '"script": "permute_mne.py"' '"permutations": 200'; do
    grep -qF "$key" "$json" || fail "result file lacks $key"
done
# the whole file is JSON (when a Python is there to say so)
if command -v python3 >/dev/null; then
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$json" || fail "result file is not JSON"
fi
echo "ok   bench --quick result file"

md="$work/docs/performance.md"
[ -s "$md" ] || fail "no performance.md"
head -1 "$md" | grep -q 'DO NOT EDIT' || fail "performance.md lacks DO NOT EDIT at the top"
grep -q '^### collection' "$md" || fail "performance.md has no collection table"
grep -q 'moments\[lazy,N=3\]' "$md" || fail "performance.md lacks the lazy condition"
if grep -qF 'not implemented yet (issue' "$json"; then
    grep -q 'Not measured: .*not implemented yet (issue' "$md" || fail "performance.md does not list skipped domains"
fi
grep -q 'Targets (issue 5)' "$md" || fail "performance.md lacks the inference targets note"
grep -q '^### predict' "$md" || fail "performance.md has no predict table"
grep -q 'Targets (issue 6)' "$md" || fail "performance.md lacks the predict targets note"
grep -q '^### ridge' "$md" || fail "performance.md has no ridge table"
grep -q 'Targets (issue 4)' "$md" || fail "performance.md lacks the ridge targets note"
grep -qF '| node, whole process (CPU) | speedup node / whole process |' "$md" \
    || fail "performance.md's ridge and inference tables lack the node and whole-process columns"
grep -q '^- ridge\[vs_numpy,n=60,v=500,p=5\]: .*whole process [0-9.]* [mµ]*s' "$md" \
    || fail "the ridge note lacks the whole-process time"
grep -q '</svg>' "$work/docs/performance-speedup.svg" || fail "no SVG plot"
# --report-only regenerates the same page from the result files alone
rm "$md"
"$NLFLOW" bench --report-only --out "$work/results/x.json" --docs "$work/docs" 2>/dev/null \
    || fail "--report-only failed"
[ -s "$md" ] || fail "--report-only wrote no performance.md"
# a result file from before the node and whole-process times: the columns show —
mkdir -p "$work/old"
sed -E 's/, "(node|process)_[a-z_]+": (\[[^]]*\]|[-0-9.e+]+|null)//g; s/, "(node|process)_speedup": [^,}]*//g' \
    "$json" >"$work/old/old.json"
grep -qF '"process_median_s"' "$work/old/old.json" && fail "could not strip the new fields for the old-file check"
"$NLFLOW" bench --report-only --out "$work/old/old.json" --docs "$work/old" 2>/dev/null \
    || fail "--report-only failed on a result file without node and whole-process times"
grep -qF '| ridge[vs_numpy,n=60,v=500,p=5] |' "$work/old/performance.md" || fail "old file: no ridge row"
grep -F '| ridge[vs_numpy,n=60,v=500,p=5] |' "$work/old/performance.md" | grep -qF '| —, — (— CPU) | — / — |' \
    || fail "old file: the node and whole-process cells are not —"
echo "ok   performance.md and plot"

expect_usage() {   # $1 = what, rest = arguments; must exit 2 with a message
    "$NLFLOW" bench "${@:2}" >/dev/null 2>"$work/err"
    local st=$?
    [ $st -eq 2 ] || fail "$1: exit status $st, expected 2"
    grep -qF -- "$1" "$work/err" || { cat "$work/err"; fail "message does not mention '$1'"; }
}
expect_usage "unknown domain 'nope'" --domains collection,nope
expect_usage "--reps must be" --reps 0
expect_usage "--reps must be" --reps x
expect_usage "--device must be" --device tpu
expect_usage "unknown option '--bogus'" --bogus
expect_usage "--conditions needs" --conditions ,
echo "ok   bench usage errors exit 2"

# --conditions: only the named rows (and the SGEMM yardstick) run, into a result file of their own
TMPDIR=$work "$NLFLOW" bench --quick --reps 1 --domains inference --conditions 'nope,glm[t_x+3_nuisance' \
    --out "$work/only/y.json" --docs "$work/only" --peers "$srcdir/bench/peers" 2>"$work/stderr" \
    || { cat "$work/stderr"; fail "nlflow bench --conditions failed"; }
only="$work/only/y.json"
grep -qF '"name": "glm[t_x+3_nuisance,n=30,v=300,N=200]"' "$only" || fail "--conditions: the glm row did not run"
grep -qF '"name": "glm[t_x+3_nuisance,smith,n=30,v=300,N=200]"' "$only" || fail "--conditions: the smith row did not run"
grep -qF '"name": "2048^3"' "$only" || fail "--conditions: no SGEMM yardstick"
names=$(grep -oF '"name": "' "$only" | wc -l)
for other in 'glm[one_sample_t,' 'one_sample[' 'two_sample[' 'grid['; do
    if grep -qF "\"name\": \"$other" "$only"; then fail "--conditions: $other ran too"; fi
done
echo "ok   bench --conditions ($names names in the file)"

# documentation is written only when asked: a --quick run, or a result file
# outside a source tree's bench/results/, from inside a checkout leaves its
# docs/ as they are (it used to rewrite docs/performance.md from wiring figures)
mkdir -p "$work/tree/docs" "$work/tree/bench/results"
echo "the committed page" >"$work/tree/docs/performance.md"
(cd "$work/tree" && TMPDIR=$work "$NLFLOW" bench --quick --reps 1 --domains inference --conditions nope \
    --out "$work/elsewhere/q.json" --peers "$srcdir/bench/peers" 2>"$work/stderr") \
    || { cat "$work/stderr"; fail "nlflow bench --quick --out elsewhere failed"; }
[ "$(cat "$work/tree/docs/performance.md")" = "the committed page" ] || fail "bench --quick rewrote docs/performance.md"
[ ! -e "$work/tree/docs/performance-speedup.svg" ] || fail "bench --quick wrote docs/performance-speedup.svg"
grep -q "documentation left as it is" "$work/stderr" || fail "bench did not say it left the docs alone: $(cat "$work/stderr")"
echo "ok   bench --quick writes no documentation unless --docs asks"
