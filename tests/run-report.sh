#!/usr/bin/env bash
# run-report.sh — the HTML reports of the example pipelines (every example in
# pipelines/ ends in a `report` node), in a scratch copy:
#   1. each run writes exactly one *_report.html, under 10 MB, that refers to
#      nothing outside itself, and whose inline PNGs libpng decodes to the
#      sizes their tags declare (tests/check-report); group-permutation's
#      cluster table names the planted region (simulate's atlas label file);
#   2. the same run again gives the same bytes, except the date line;
#   3. headless Chromium (Debian's chromium; build.sh installs it for
#      `check`) renders each page: the screenshot is not blank, and in the
#      browser every image decodes to its declared pixel size (an onload
#      script writes naturalWidth x naturalHeight into the DOM, read back
#      with --dump-dom); in group-permutation, clicking the second row of
#      the cluster table puts the slices through that peak into the map's
#      slice figure.
# The Chromium part skips (saying so) only where chromium is not installed.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
CHECK=${CHECK_REPORT:-$(dirname "$NLFLOW")/tests/check-report}
work=$(mktemp -d /tmp/nlflow-report-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$srcdir/pipelines" "$work/"
rm -rf "$work/pipelines/results" "$work/pipelines/data"

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
    if [ "$name" = group-permutation ]; then   # the planted region, named from simulate's atlas.nii.txt
        grep -q '<td>planted_roi</td>' "$page" || fail "$name: the report's cluster table does not name planted_roi"
        grep -q 'linked images (cluster peaks) decode' "$work/check.txt" || fail "$name: the cluster table has no peak links"
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
[ -n "$CHROMIUM" ] || echo "SKIP (part): chromium is not installed; the pages were not rendered in a browser"
