#!/usr/bin/env bash
# check-generated.sh — the JSON schema and docs/nodes/*.md are generated from
# the node parameter tables; fail when the checked-in copies have drifted.
# Fix with `make update-generated` and commit the result.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-gen-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$NLFLOW" gen-docs "$work" || exit 1
status=0
for f in schemas/pipeline.schema.json $(cd "$work" && ls docs/nodes/*.md); do
    if ! cmp -s "$work/$f" "$srcdir/$f"; then
        echo "FAIL: $f is out of date with the node tables (run 'make update-generated'):"
        diff -u "$srcdir/$f" "$work/$f" | head -40
        status=1
    else
        echo "ok   $f"
    fi
done
# no stale pages for node types that no longer exist
for f in "$srcdir"/docs/nodes/*.md; do
    [ -e "$work/docs/nodes/$(basename "$f")" ] || { echo "FAIL: stale $f"; status=1; }
done
if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$srcdir/schemas/pipeline.schema.json" \
        || { echo "FAIL: schema is not valid JSON"; status=1; }
fi
exit $status
