#!/usr/bin/env bash
# run-report.sh — the HTML reports of the example pipelines (every example in
# pipelines/ ends in a `report` node), in a scratch copy:
#   1. each run writes exactly one *_report.html, under 10 MB, that refers to
#      nothing outside itself, and whose inline PNGs libpng decodes to the
#      sizes their tags declare (tests/check-report); group-permutation's
#      cluster table names the planted region (simulate's atlas label file);
#      every page has a methods paragraph; group-permutation's null
#      distribution marks the 5% FWE threshold, which splits the t map as
#      p_fwe < 0.05 does (python3's standard library reads the maps), and
#      shows the test's parameters; decoding-roi's ROI bars name planted_roi
#      (the report's atlas input); encoding charts the chosen alphas;
#   2. the same run again gives the same bytes, except the date line;
#   3. headless Chromium (Debian's chromium; build.sh installs it for
#      `check`) renders each page: the screenshot is not blank, and in the
#      browser every image decodes to its declared pixel size (an onload
#      script writes naturalWidth x naturalHeight into the DOM, read back
#      with --dump-dom); in group-permutation, clicking the second row of
#      the cluster table puts the slices through that peak into the map's
#      slice figure.
#   4. tests/report/whole-brain.yaml: the confusion matrix of a classifier's
#      out-of-fold predictions gives the accuracy of predict's fold scores;
#   5. tests/report/tfce-clusters.yaml: the 5% cuts marked on permute's TFCE
#      and cluster-size nulls split the TFCE map and the clusters as
#      p_tfce_fwe < 0.05 and p_size_fwe < 0.05 do.
# The Chromium part skips (saying so) only where chromium is not installed.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
CHECK=${CHECK_REPORT:-$(dirname "$NLFLOW")/tests/check-report}
work=$(mktemp -d /tmp/nlflow-report-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$srcdir/pipelines" "$work/"
rm -rf "$work/pipelines/results" "$work/pipelines/data"

# The 5% FWE threshold the page marks on permute's null distribution splits
# the t map exactly as p_fwe < 0.05 does: voxels above it = voxels with
# p_fwe < 0.05, both counted from the NIfTI files by python3's standard
# library (skipped without python3).
check_fwe_threshold() {
    local page=$1 dir=$2 thr
    thr=$(sed -n 's/.*Voxels above \([-0-9.e+]*\) have p_fwe &lt; 0.05.*/\1/p' "$page")
    [ -n "$thr" ] || fail "the group report marks no FWE threshold"
    if ! command -v python3 >/dev/null; then
        echo "skip FWE threshold cross-check (no python3)"
        return
    fi
    python3 - "$dir" "$thr" <<'PY' || fail "the FWE threshold does not split the t map as p_fwe < 0.05"
import glob, gzip, struct, sys
def floats(path):
    b = gzip.open(path).read()
    dims = struct.unpack('<8h', b[40:56])
    assert struct.unpack('<h', b[70:72])[0] == 16, 'float32 expected'
    n = 1
    for d in dims[1:1 + dims[0]]:
        n *= d
    off = int(struct.unpack('<f', b[108:112])[0])
    return struct.unpack('<%df' % n, b[off:off + 4 * n])
d, thr = sys.argv[1], float(sys.argv[2])
t = floats(glob.glob(d + '/*_stat-t_statmap.nii.gz')[0])
p = floats(glob.glob(d + '/*_stat-pFwe_statmap.nii.gz')[0])
above, sig = sum(abs(x) > thr for x in t), sum(x < 0.05 for x in p)
print('FWE threshold %g: %d voxels above it, %d with p_fwe < 0.05' % (thr, above, sig))
sys.exit(0 if above == sig and sig > 0 else 1)
PY
}

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
for yaml in "$work"/pipelines/*.yaml; do
    name=$(basename "$yaml" .yaml)
    rm -rf "$work/pipelines/results"
    t0=$(date +%s%N)
    "$NLFLOW" run --quiet --no-cache "$yaml" || fail "$name does not run"
    t1=$(date +%s%N)
    mapfile -t pages < <(find "$work/pipelines/results" -name '*_report.html' 2>/dev/null)
    [ "${#pages[@]}" = 1 ] || fail "$name: expected one report, found ${#pages[@]}"
    page=${pages[0]}
    "$CHECK" "$page" --max-bytes $((10 * 1024 * 1024)) --min-images 1 >"$work/check.txt" \
        || { cat "$work/check.txt"; fail "$name: the report does not check out"; }
    # the same run again: the same bytes but the date
    cp "$page" "$work/first.html"
    "$NLFLOW" run --quiet --no-cache "$yaml" || fail "$name does not run twice"
    diff <(grep -v '<dt>made</dt>' "$work/first.html") <(grep -v '<dt>made</dt>' "$page") >/dev/null \
        || fail "$name: two runs wrote different reports"
    grep -q '<h2>Methods</h2>' "$page" || fail "$name: the report has no methods paragraph"
    if [ "$name" = group-permutation ]; then   # the planted region, named from simulate's atlas.nii.txt
        grep -q '<td>planted_roi</td>' "$page" || fail "$name: the report's cluster table does not name planted_roi"
        grep -q 'linked images (cluster peaks) decode' "$work/check.txt" || fail "$name: the cluster table has no peak links"
        grep -q 'Parameters of node &#39;group&#39; (permute)' "$page" || fail "$name: the test's parameters are not shown"
        check_fwe_threshold "$page" "$(dirname "$page")"
        # p_key: the t map coloured where p_fwe < 0.05 — the voxels summarize kept
        kept=$(sed -n 's/.*"n_voxels": \([0-9]*\).*/\1/p' "$(dirname "$page")/summary.json")
        group_kept=$kept
        grep -q "voxels with |t| &gt;= 3 and p_fwe &lt; 0.05 are coloured over the underlay: $kept voxels\." "$page" \
            || fail "$name: the t map does not show the $kept voxels summarize kept at p_fwe < 0.05"
    fi
    if [ "$name" = decoding-roi ]; then   # ROI bars named from the atlas's label file, the planted one first
        grep -q '>planted_roi (1)</text>' "$page" || fail "$name: the ROI bars do not name planted_roi"
        grep -q '<td>planted_roi</td>' "$page" || fail "$name: the ROI table has no region column"
    fi
    if [ "$name" = first-level ]; then   # provenance of the lab template it uses
        grep -q "Node &#39;localizer&#39; used the pipeline file first-level.yaml (hash [0-9a-f]\{32\}" "$page" \
            || grep -q "Node 'localizer' used the pipeline file first-level.yaml (hash [0-9a-f]\{32\}" "$page" \
            || fail "$name: the methods paragraph does not name the used template"
    fi
    if [ "$name" = encoding ]; then
        grep -q 'The alpha each voxel.*chose: [0-9]* distinct values' "$page" || fail "$name: no chosen-alpha chart"
    fi
    echo "ok   $name: $(tail -1 "$work/check.txt" | cut -d: -f2- | sed 's/^ //') in $(( (t1 - t0) / 1000000 )) ms (whole run)"
    if [ -z "$CHROMIUM" ]; then
        continue
    fi
    shot="$work/$name.png"
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2400 \
        --screenshot="$shot" "file://$page" >/dev/null 2>&1 || fail "$name: chromium could not render the report"
    "$CHECK" --screenshot "$shot" >"$work/shot.txt" || { cat "$work/shot.txt"; fail "$name: the rendered page is blank"; }
    # every image as the browser decoded it
    sed 's|</body>|<script>window.addEventListener("load",function(){document.querySelectorAll("img").forEach(function(i){i.setAttribute("data-nat",i.naturalWidth+"x"+i.naturalHeight)})})</script></body>|' \
        "$page" >"$work/probe.html"
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom \
        "file://$work/probe.html" 2>/dev/null >"$work/dom.html" || fail "$name: chromium could not load the report"
    n_img=$(grep -o '<img[^>]*>' "$work/dom.html" | wc -l)
    n_ok=$(grep -o '<img[^>]*>' "$work/dom.html" | sed -n 's/.*width="\([0-9]*\)" height="\([0-9]*\)".*data-nat="\([0-9]*x[0-9]*\)".*/\1x\2 \3/p' \
           | awk '$1 == $2' | wc -l)
    [ "$n_img" -gt 0 ] && [ "$n_ok" = "$n_img" ] \
        || fail "$name: in the browser $n_ok of $n_img images have their declared pixel size"
    if [ "$name" = group-permutation ]; then   # a cluster's link shows the slices through its peak
        sed 's|</body>|<script>window.addEventListener("load",function(){var a=document.querySelectorAll("a.peak")[1];var want=a.getAttribute("onclick").match(/(data:[^\x27]*)/)[1];a.click();document.body.setAttribute("data-linked",document.getElementById("fig0").src===want?"yes":"no")})</script></body>|' \
            "$page" >"$work/click.html"
        timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom \
            "file://$work/click.html" 2>/dev/null | grep -q 'data-linked="yes"' \
            || fail "$name: clicking a cluster did not show the slices through its peak"
    fi
    echo "ok   $name in chromium: $(cut -d: -f2- "$work/shot.txt" | sed 's/^ //'); $n_img images at their pixel size"
done
# Without SOURCE_DATE_EPOCH (make check sets it) the header says where and
# how the page was made: the machine, the run time, nodes from the cache (a
# second run with the cache on: every node before the report from it).
mkdir -p "$work/facts" && cp "$srcdir/tests/report/whole-brain.yaml" "$work/facts/"
( cd "$work/facts" && env -u SOURCE_DATE_EPOCH "$NLFLOW" run --quiet whole-brain.yaml && rm results/*_report.html \
    && env -u SOURCE_DATE_EPOCH "$NLFLOW" run --quiet whole-brain.yaml ) || fail "whole-brain with the cache does not run"
grep -q '<dt>made</dt><dd>[^<]* UTC on [^<]*CPUs), [0-9.]* s into the run; 3 of 4 nodes had finished, 3 of them from the cache' \
    "$work/facts/results/whole-brain_report.html" || fail "the header does not give the machine, run time and cache hits"
echo "ok   header facts: $(sed -n 's/.*<dt>made<\/dt><dd>\([^<]*\)<.*/\1/p' "$work/facts/results/whole-brain_report.html")"

# min_cluster_size: group-permutation's one cluster at p_fwe < 0.05 has
# $kept voxels (summarize's table): kept at min_cluster_size $kept, gone at
# one more (the other nodes come from the cache)
kept=${group_kept:?group-permutation gave no voxel count}
rm -rf "$work/pipelines/results"
for size in "$kept" $((kept + 1)); do
    sed "s/^    p_key: p_fwe  *# the t map.*/    p_key: p_fwe\n    min_cluster_size: $size/" "$srcdir/pipelines/group-permutation.yaml" \
        >"$work/pipelines/clusters.yaml"
    ( cd "$work/pipelines" && "$NLFLOW" run --quiet clusters.yaml ) || fail "min_cluster_size $size does not run"
    page="$work/pipelines/results/group-permutation/group_report.html"
    if [ "$size" = "$kept" ]; then
        grep -q "(in clusters of at least $size voxels) over the underlay: $kept voxels\." "$page" \
            || fail "min_cluster_size $size: the $kept-voxel cluster is not shown"
    else
        grep -q "Nothing to show: voxels with |t| &gt;= 3 and p_fwe &lt; 0.05 are coloured (in clusters of at least $size voxels)" "$page" \
            || fail "min_cluster_size $size: the $kept-voxel cluster is still shown"
    fi
done
echo "ok   min_cluster_size: the $kept-voxel cluster shown at $kept, hidden at $((kept + 1))"

# A whole-brain classifier: the confusion matrix the report counts from
# predict's out-of-fold predictions gives the accuracy predict's own fold
# scores average to (4 equal folds).
mkdir -p "$work/wb" && cp "$srcdir/tests/report/whole-brain.yaml" "$work/wb/"
"$NLFLOW" run --quiet --no-cache "$work/wb/whole-brain.yaml" || fail "whole-brain does not run"
page="$work/wb/results/whole-brain_report.html"
"$CHECK" "$page" --max-bytes $((10 * 1024 * 1024)) --min-images 1 >"$work/check.txt" \
    || { cat "$work/check.txt"; fail "whole-brain: the report does not check out"; }
confusion=$(sed -n 's/.*correct, accuracy \([0-9.]*\)\..*/\1/p' "$page")
folds=$(sed -n 's/.*mean over 4 folds \([0-9.]*\)\..*/\1/p' "$page")
[ -n "$confusion" ] && [ "$confusion" = "$folds" ] \
    || fail "whole-brain: confusion matrix accuracy '$confusion', mean fold score '$folds'"
echo "ok   whole-brain: confusion matrix accuracy $confusion = mean of predict's fold scores"

# TFCE and cluster inference: the 5% cuts the report marks on permute's null
# distributions split the TFCE map as p_tfce_fwe < 0.05 does (maps read by
# python3's standard library) and the clusters as their p_size_fwe < 0.05
# does (summarize's table of permute's clusters).
mkdir -p "$work/tfce" && cp "$srcdir/tests/report/tfce-clusters.yaml" "$work/tfce/"
"$NLFLOW" run --quiet --no-cache "$work/tfce/tfce-clusters.yaml" || fail "tfce-clusters does not run"
page="$work/tfce/results/tfce-clusters_report.html"
"$CHECK" "$page" --max-bytes $((10 * 1024 * 1024)) --min-images 0 >"$work/check.txt" \
    || { cat "$work/check.txt"; fail "tfce-clusters: the report does not check out"; }
tthr=$(sed -n 's/.*Voxels whose |TFCE| is above \([-0-9.e+]*\) have p_tfce_fwe &lt; 0.05.*/\1/p' "$page")
sthr=$(sed -n 's/.*Clusters larger than \([-0-9.e+]*\) have cluster_p_fwe &lt; 0.05.*/\1/p' "$page")
grep -q "Clusters whose mass is above [-0-9.e+]* have cluster_mass_p_fwe &lt; 0.05" "$page" \
    || fail "tfce-clusters: no 5% cut on the cluster mass null"
grep -q "The clusters of the observed map beyond the cluster-forming threshold" "$page" \
    || fail "tfce-clusters: the clusters table has no caption"
[ -n "$tthr" ] && [ -n "$sthr" ] || fail "tfce-clusters: no 5% cut on the TFCE or cluster size null ('$tthr', '$sthr')"
if command -v python3 >/dev/null; then
    python3 - "$work/tfce/results" "$tthr" "$sthr" <<'PY' || fail "tfce-clusters: a 5% cut does not split the results as the p values do"
import csv, glob, gzip, struct, sys
def floats(path):
    b = gzip.open(path).read()
    dims = struct.unpack('<8h', b[40:56])
    n = 1
    for d in dims[1:1 + dims[0]]:
        n *= d
    off = int(struct.unpack('<f', b[108:112])[0])
    return struct.unpack('<%df' % n, b[off:off + 4 * n])
d, tthr, sthr = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
tfce = floats(glob.glob(d + '/*_stat-tfce_statmap.nii.gz')[0])
p = floats(glob.glob(d + '/*_stat-pTfceFwe_statmap.nii.gz')[0])
above, sig = sum(abs(x) > tthr for x in tfce), sum(x < 0.05 for x in p)
rows = list(csv.DictReader(open(glob.glob(d + '/*clusters*.tsv')[0]), delimiter='\t'))
big = [float(r['size']) > sthr for r in rows]
small_p = [float(r['p_size_fwe']) < 0.05 for r in rows]
print('TFCE cut %g: %d voxels above, %d with p_tfce_fwe < 0.05; size cut %g: %d of %d clusters'
      % (tthr, above, sig, sthr, sum(big), len(rows)))
sys.exit(0 if above == sig and sig > 0 and big == small_p and any(big) else 1)
PY
fi
echo "ok   tfce-clusters: the TFCE and cluster-size cuts split the maps and clusters as their p values do"
[ -n "$CHROMIUM" ] || echo "SKIP (part): chromium is not installed; the pages were not rendered in a browser"
