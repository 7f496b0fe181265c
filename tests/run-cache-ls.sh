#!/usr/bin/env bash
# run-cache-ls.sh — `nlflow cache ls` and a limitless `nlflow cache gc` on a
# cache shared by two pipelines (small copies of the quickstart pipeline, one
# with another ridge alpha):
#   1. ls groups results by pipeline file and node, with port names, sizes
#      stored and raw, and item counts for per-subject results;
#   2. --pipeline FILE lists that pipeline's results only (and finds the cache
#      beside it without --cache);
#   3. run records are hidden (and counted) unless --all;
#   4. gc without a limit removes nothing and says what each limit would free.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-cache-ls-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; [ -f "$work/out" ] && cat "$work/out"; exit 1; }

cp "$srcdir/pipelines/quickstart.yaml" "$work/a.yaml"
sed -i 's/subjects: 3/subjects: 2/; s/images: 40/images: 12/; s/voxel_size: 4/voxel_size: 8\n    mask: synthetic/' "$work/a.yaml"
sed 's/    cv: 5/    cv: 5\n    alpha: 3.0/; s|outputs: results/quickstart|outputs: results/b|' "$work/a.yaml" >"$work/b.yaml"
"$NLFLOW" run --quiet "$work/a.yaml" || fail "run a"
"$NLFLOW" run --quiet "$work/b.yaml" || fail "run b"
cache="$work/.nlflow/cache.db"
a=$(cd "$work" && pwd -P)/a.yaml
b=$(cd "$work" && pwd -P)/b.yaml

# 1. grouped by pipeline and node, with ports, sizes and items
(cd "$work" && "$NLFLOW" cache ls) >"$work/out" || fail "cache ls"
grep -qx "$a" "$work/out" || fail "no group for pipeline a"
grep -qx "$b" "$work/out" || fail "no group for pipeline b"
grep -qx "  fit (ridge)" "$work/out" || fail "no node line 'fit (ridge)'"
# ridge runs per subject: its weights (2 features x voxels) are one item per subject
grep -qE "^    weights +matrix +2x[0-9]+ +2 items +[0-9.]+ [KMG]?i?B stored +[0-9.]+ [KMG]?i?B raw +[0-9-]+ [0-9:]+$" \
    "$work/out" || fail "no 'weights' port line with kind, shape, count, sizes and last use"
grep -qE "^    out +matrix +12x[0-9]+ +2 items " "$work/out" || fail "mask output not shown as 2 items"
grep -q "run record" "$work/out" && ! grep -q "not shown: --all lists them" "$work/out" \
    && fail "run records listed without --all"
grep -qE "^[0-9]+ run records \([0-9.]+ [KMG]?i?B\) not shown: --all lists them$" "$work/out" \
    || fail "hidden run records not counted"
# voxels is the same result in both pipelines (same key): stored once, under a
[ "$(grep -c '^  voxels (mask)$' "$work/out")" = 1 ] || fail "a shared result listed twice"
echo "ok   cache ls groups by pipeline, node and port"

# 2. --pipeline: only that pipeline's results; the cache beside it by default
(cd / && "$NLFLOW" cache ls --pipeline "$work/b.yaml") >"$work/out" || fail "cache ls --pipeline"
grep -qx "$b" "$work/out" || fail "--pipeline b does not list b"
grep -q "^$a" "$work/out" && fail "--pipeline b lists a's results"
grep -q "results of this pipeline" "$work/out" || fail "--pipeline header"
grep -qx "  fit (ridge)" "$work/out" || fail "--pipeline b lacks its ridge node"
"$NLFLOW" cache ls --pipeline "$work/nothing.yaml" >"$work/out" 2>&1 && fail "--pipeline of a missing file succeeds"
grep -q "cannot find pipeline" "$work/out" || fail "missing pipeline message"
echo "ok   cache ls --pipeline filters to one pipeline"

# 3. --all shows the run records
"$NLFLOW" cache ls --all --cache "$cache" >"$work/out" || fail "cache ls --all"
grep -qE "^    \(run record\) +table " "$work/out" || fail "--all does not list run records"
grep -q "not shown" "$work/out" && fail "--all still hides something"
echo "ok   cache ls --all lists run records"

# 4. gc without limits: nothing removed, what each limit would do
before=$("$NLFLOW" cache info --cache "$cache" | sed -n 's/^results: \([0-9]*\).*/\1/p')
"$NLFLOW" cache gc --cache "$cache" >"$work/out" || fail "cache gc"
grep -q "^gc: no limit given, nothing removed. The cache holds $before results" "$work/out" \
    || fail "gc without limit does not say it removed nothing"
grep -qE "^  nlflow cache gc --older-than 30 +would remove 0 results, 0 B$" "$work/out" \
    || fail "gc does not preview --older-than"
line=$(grep -E "^  nlflow cache gc --max-size [0-9.]+[KMG]iB +would remove [1-9][0-9]* results" "$work/out" | head -1)
[ -n "$line" ] || fail "gc does not preview a size limit"
after=$("$NLFLOW" cache info --cache "$cache" | sed -n 's/^results: \([0-9]*\).*/\1/p')
[ "$before" = "$after" ] || fail "gc without limit removed results ($before -> $after)"
# the preview is what the limit then does
limit=$(echo "$line" | sed 's/.*--max-size \([^ ]*\) .*/\1/')
would=$(echo "$line" | sed 's/.*would remove \([0-9]*\) result.*/\1/')
"$NLFLOW" cache gc --max-size "$limit" --cache "$cache" >"$work/out" || fail "cache gc --max-size"
grep -q "^gc: removed $would results" "$work/out" || fail "gc --max-size $limit removed other than previewed ($would)"
echo "ok   cache gc without a limit says what it would do"
