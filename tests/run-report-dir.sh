#!/usr/bin/env bash
# run-report-dir.sh — `nlflow report RESULTS_DIR`: the page of a run made
# before, rebuilt from its outputs folder (summary.json and the files it
# lists), in a scratch copy of pipelines/:
#   1. group-permutation runs; its page is kept and deleted from the folder;
#      `nlflow report` on the folder writes one page there that checks out
#      (tests/check-report: self-contained, every image decodes, the cluster
#      table's peak links decode), names planted_roi, has a section for every
#      key of summary.json (and the clusters), says it was rebuilt from that
#      folder by `nlflow report` with the original name and hash, and where
#      each input was made (summary.json's "source"; for a summary without
#      them, as summarize wrote before version 3, the maps' sidecars);
#   2. it shows what the original page showed: the t map's pictures are the
#      same bytes (the run's report had threshold 3, given here too), the
#      null distribution is a histogram again (the TSV column read back as
#      numbers) whose 95th percentile matches one computed here with sort/awk,
#      and the cluster table has the same rows;
#   3. a second rebuild replaces the page and says so; --output writes
#      elsewhere;
#   4. bad input fails cleanly, with its exit status and message, leaving no
#      page and no scratch folder: a missing folder, a file, a folder without
#      summary.json, malformed JSON (file and line), a listed file missing
#      or a symbolic link (anywhere: it is not read)
#      (named), nothing to show, two summaries (and --summary choosing one),
#      a file name that leaves the folder, a damaged map, a bad --threshold
#      or --template.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
CHECK=${CHECK_REPORT:-$(dirname "$NLFLOW")/tests/check-report}
work=$(cd "$(mktemp -d /tmp/nlflow-report-dir-XXXXXX)" && pwd -P)   # as nlflow names it in messages
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$srcdir/pipelines" "$work/"
rm -rf "$work/pipelines/results" "$work/pipelines/data"
mkdir "$work/tmp"
export TMPDIR="$work/tmp"   # nlflow report's scratch folders: none may be left
no_scratch() { [ -z "$(ls -A "$work/tmp")" ] || fail "$1: scratch left in TMPDIR: $(ls "$work/tmp")"; }

cd "$work/pipelines"
# a rebuilt page cannot know the original report's p_key (it is not in the
# outputs folder): the original here has none, so that pictures compare
sed -i '/^    p_key: p_fwe  *# the t map/d' group-permutation.yaml
"$NLFLOW" run --quiet --no-cache group-permutation.yaml || fail "group-permutation does not run"
res=results/group-permutation
abs_res=$(cd "$res" && pwd -P)
mv "$res/group_report.html" "$work/original.html"

# ---- 1. the rebuilt page ----
"$NLFLOW" report "$res" --threshold 3 2>"$work/log" || { cat "$work/log"; fail "nlflow report failed"; }
no_scratch "a rebuild"
grep -q "^nlflow: wrote $abs_res/group_report.html" "$work/log" || { cat "$work/log"; fail "the log does not say where the page went"; }
mapfile -t pages < <(find "$res" -name '*_report.html')
[ "${#pages[@]}" = 1 ] && [ "${pages[0]}" = "$res/group_report.html" ] || fail "expected one page, group_report.html: ${pages[*]}"
page=$res/group_report.html
"$CHECK" "$page" --max-bytes $((10 * 1024 * 1024)) --min-images 1 >"$work/check.txt" \
    || { cat "$work/check.txt"; fail "the rebuilt page does not check out"; }
grep -q 'linked images (cluster peaks) decode' "$work/check.txt" || fail "the cluster table has no peak links"
grep -q '<td>planted_roi</td>' "$page" || fail "the cluster table does not name planted_roi"
keys=$(sed -n 's/^ *{"key": "\([^"]*\)".*/\1/p' "$res/summary.json")
[ "$(echo "$keys" | wc -l)" = 7 ] || fail "summary.json should list 7 inputs: $keys"
for key in $keys clusters; do
    grep -qF "<h2>$key</h2>" "$page" || fail "no section for '$key'"
done
hash=$(sed -n 's/.*"PipelineHash": "\([0-9a-f]*\)".*/\1/p' "$res/summary.json")
[ -n "$hash" ] || fail "summary.json has no PipelineHash"
grep -qF "<dt>pipeline</dt><dd>group</dd>" "$page" || fail "the page does not name the pipeline"
grep -qF "<dt>rebuilt from</dt><dd>$abs_res by \`nlflow report\` (the run of pipeline hash $hash)</dd>" "$page" \
    || fail "the page does not say it was rebuilt from $abs_res by nlflow report, hash $hash"
grep -qF "<p>From a permute node, output &#39;stat&#39;.</p>" "$page" || fail "t's origin (permute.stat) is not shown"
grep -qF "<p>From a simulate node, output &#39;truth&#39;.</p>" "$page" || fail "truth's origin (simulate.truth) is not shown"
grep -qF "<p>From a permute node, output &#39;null_max&#39;.</p>" "$page" || fail "null_max's origin (from summary.json) is not shown"
echo "ok   rebuilt page: $(tail -1 "$work/check.txt" | cut -d: -f2- | sed 's/^ //')"

# ---- 2. what the original showed ----
section() {   # the lines of a page's section for key $2
    sed -n "/<section id=\"in-$2\">/,/<\/section>/p" "$1"
}
diff <(section "$work/original.html" t | grep -o 'src="data:image/png;base64,[^"]*"') \
     <(section "$page" t | grep -o 'src="data:image/png;base64,[^"]*"') >/dev/null \
    || fail "the t map's pictures differ from the original page's"
# null_max comes back as permute's null distribution (its origin is in
# summary.json); how it was drawn is not recorded with the values, so the
# page says so and cuts as for random permutations: above the (k+1)-th
# largest maximum, k the most with (k + 1) / (N + 1) < 0.05 (counted here
# with sort and awk)
n=$(tail -n +2 "$res/group_stat-nullMax.tsv" | wc -l)
cut=$(tail -n +2 "$res/group_stat-nullMax.tsv" | sort -gr | awk -v n="$n" \
      'BEGIN { k = 0; while ((k + 2) / (n + 1) < 0.05) k++ } NR == k + 1 { printf "%.6g", $1 }')
grep -qF "from $n permutations." "$page" && grep -qF "Voxels above $cut have p_fwe &lt; 0.05" "$page" \
    && grep -qF "is not recorded with these values" "$page" \
    || fail "null_max is not the null distribution of $n permutations cut at $cut"
grep -q '<svg' <(section "$page" null_max) || fail "null_max has no histogram"
# the maps' NIfTI intents say what they hold: read back, p maps are p maps again
grep -qF "shown as -log10 p: voxels with p_fwe &lt; 0.05 are coloured" "$page" \
    || fail "p_fwe read back from its file is not shown as a p map"
diff <(section "$work/original.html" clusters | grep '<td>' | sed 's/<a [^>]*>//g; s/<\/a>//g') \
     <(section "$page" clusters | grep '<td>' | sed 's/<a [^>]*>//g; s/<\/a>//g') >/dev/null \
    || fail "the cluster table differs from the original page's"
echo "ok   as the original: t's pictures, null_max as a null distribution (cut at $cut), the cluster table"

# ---- 3. again, and elsewhere ----
"$NLFLOW" report "$res" --threshold 3 2>"$work/log" || fail "a second rebuild failed"
grep -q "^nlflow: replaced $abs_res/group_report.html" "$work/log" || { cat "$work/log"; fail "replacing the page is not said"; }
"$NLFLOW" report "$res" --quiet --output "$work/elsewhere/page.html" --title "Old run" 2>"$work/log" \
    || fail "--output failed"
[ ! -s "$work/log" ] || { cat "$work/log"; fail "--quiet still logs"; }
grep -qF '<h1>Old run</h1>' "$work/elsewhere/page.html" || fail "--output/--title: no page titled 'Old run'"
no_scratch "--output"
echo "ok   a second rebuild replaces the page (and says so); --output, --title, --quiet"

# a summary written before summarize's version 3 names no origins: the map
# sidecars still do (a TSV column has none)
cp -r "$res" "$work/old"
perl -0pi -e 's/,\n\s*"source": \{[^}]*\}//g' "$work/old/summary.json"
! grep -q '"source"' "$work/old/summary.json" || fail "could not make an old summary"
"$NLFLOW" report "$work/old" --quiet --threshold 3 || fail "an old summary does not rebuild"
grep -qF "<p>From a permute node, output &#39;stat&#39;.</p>" "$work/old/group_report.html" \
    || fail "old summary: t's origin (from its sidecar) is not shown"
! section "$work/old/group_report.html" null_max | grep -q '<p>From ' \
    || fail "old summary: null_max shows an origin nothing recorded"
echo "ok   an old summary without origins: the maps' come from their sidecars"

# ---- 4. bad input ----
rm "$page"
# expect NAME STATUS MESSAGE FOLDER [ARGS...]: fails with STATUS, MESSAGE in
# stderr, and no page in FOLDER
expect() {
    local name=$1 status=$2 msg=$3 dir=$4
    shift 4
    "$NLFLOW" report "$@" >"$work/out" 2>"$work/err"
    local got=$?
    [ "$got" = "$status" ] || { cat "$work/err"; fail "$name: exit $got, expected $status"; }
    grep -qF -- "$msg" "$work/err" || { cat "$work/err"; fail "$name: the message does not say: $msg"; }
    [ -z "$(find "$dir" -name '*_report.html' 2>/dev/null)" ] || fail "$name: a page was left"
    no_scratch "$name"
    echo "ok   $name: $(head -1 "$work/err")"
}
bad=$work/bad
mkdir "$bad"
expect "missing folder" 1 "results folder '$bad/none': No such file or directory" "$bad" "$bad/none"
touch "$bad/file"
expect "not a folder" 1 "'$bad/file' is not a folder" "$bad" "$bad/file"
mkdir "$bad/empty"
expect "no summary" 1 "no summary.json in '$bad/empty'" "$bad/empty" "$bad/empty"
cp -r "$res" "$bad/json"
sed -i '8s/"files": \[/"files": [,/' "$bad/json/summary.json"
expect "malformed JSON" 2 "$bad/json/summary.json:8:" "$bad/json" "$bad/json"
grep -qF "invalid JSON" "$work/err" || fail "malformed JSON: the message does not say JSON"
cp -r "$res" "$bad/missing"
rm "$bad/missing/group_stat-nullMax.tsv"
expect "missing file" 1 "lists 'group_stat-nullMax.tsv' (input 'null_max'), but '$bad/missing/group_stat-nullMax.tsv' is missing" \
    "$bad/missing" "$bad/missing"
cp -r "$res" "$bad/link"
mv "$bad/link/group_stat-nullMax.tsv" "$work/outside.tsv"
ln -s "$work/outside.tsv" "$bad/link/group_stat-nullMax.tsv"
expect "symbolic link" 1 "lists 'group_stat-nullMax.tsv' (input 'null_max'), a symbolic link" "$bad/link" "$bad/link"
cp -r "$res" "$bad/damaged"
echo "not an image" >"$bad/damaged/group_stat-truth_statmap.nii.gz"
expect "damaged file" 1 "input 'truth': cannot read '$bad/damaged/group_stat-truth_statmap.nii.gz'" \
    "$bad/damaged" "$bad/damaged"
mkdir "$bad/nothing"
printf '{"Name": "x", "inputs": []}\n' >"$bad/nothing/summary.json"
expect "nothing to show" 1 "nothing to show" "$bad/nothing" "$bad/nothing"
mkdir "$bad/two"
cp "$res/summary.json" "$bad/two/a_summary.json"
cp "$res/summary.json" "$bad/two/b_summary.json"
expect "two summaries" 2 "holds 2 summaries (a_summary.json, b_summary.json): choose one with --summary FILE" \
    "$bad/two" "$bad/two"
cp -r "$res" "$bad/escape"
sed -i 's|"group_stat-t_statmap.nii.gz"|"../group-permutation/group_stat-t_statmap.nii.gz"|' "$bad/escape/summary.json"
expect "a name outside the folder" 1 "is not the name of a file in the folder" "$bad/escape" "$bad/escape"
expect "bad threshold" 2 "--threshold must be a number" "$res" "$res" --threshold x
expect "missing template" 2 "--template 'no/such.nii.gz': '$work/pipelines/no/such.nii.gz' is missing" "$res" \
    "$res" --template no/such.nii.gz
# --summary chooses: the files are beside it
cp "$res"/*.nii.gz "$res"/*_statmap.json "$res"/*.tsv "$bad/two/"
"$NLFLOW" report "$bad/two" --summary a_summary.json --quiet || fail "--summary did not choose"
[ -f "$bad/two/group_report.html" ] || fail "--summary: no page"
no_scratch "--summary"
echo "ok   --summary chooses among several"
