#!/usr/bin/env bash
# run-fmt.sh — `nlflow fmt`: canonical pipeline files, comments kept.
#   1. every file in pipelines/ (and pipelines/templates/) is canonical (--check);
#   2. a messy file becomes exactly the expected canonical text, every comment
#      kept, and formatting it again changes nothing;
#   3. on every test pipeline and example: formatting is idempotent and changes
#      no meaning (`nlflow plan` prints the same before and after);
#   4. --check exits 1 and writes nothing; bad input is an error, the file untouched.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-fmt-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1.
for f in "$srcdir"/pipelines/*.yaml "$srcdir"/pipelines/templates/*.yaml; do
    [ -e "$f" ] || continue
    "$NLFLOW" fmt --check "$f" || fail "$f is not canonical"
done

# 2.
cat >"$work/messy.yaml" <<'EOF'
# header: what this pipeline does

name: messy   # its name
nodes:   # the nodes
  # sim makes data
  sim: {type: simulate, voxel_size: 8, images: 8,   # few
        subjects: 2, mask: synthetic}
  m:
    standardize: zscore

    # the inputs
    in: {mask: sim.mask, data: "sim.data"}
    type: mask
settings: {seed: 3, outputs: "out dir"}
nlflow: 1
# the end
EOF
cat >"$work/expected.yaml" <<'EOF'
# header: what this pipeline does

nlflow: 1
name: messy  # its name
settings:
  seed: 3
  outputs: "out dir"
nodes:  # the nodes
  # sim makes data
  sim:
    type: simulate
    subjects: 2
    images: 8  # few
    mask: synthetic
    voxel_size: 8
  m:
    type: mask

    # the inputs
    in: {mask: sim.mask, data: "sim.data"}
    standardize: zscore
# the end
EOF
cp "$work/messy.yaml" "$work/orig.yaml"
"$NLFLOW" fmt --check "$work/messy.yaml" >"$work/check.txt"; rc=$?
[ "$rc" = 1 ] || fail "--check on a messy file: exit $rc, expected 1"
grep -q "messy.yaml: not in canonical form" "$work/check.txt" || fail "--check does not name the file"
cmp -s "$work/messy.yaml" "$work/orig.yaml" || fail "--check changed the file"
"$NLFLOW" fmt "$work/messy.yaml" 2>/dev/null || fail "fmt messy.yaml"
diff -u "$work/expected.yaml" "$work/messy.yaml" || fail "not the expected canonical text"
"$NLFLOW" fmt --check "$work/messy.yaml" || fail "fmt is not idempotent on messy.yaml"
grep -o '#.*' "$work/orig.yaml" | sort >"$work/c1"
grep -o '#.*' "$work/messy.yaml" | sort >"$work/c2"
cmp -s "$work/c1" "$work/c2" || fail "comments lost or changed"

# 3. meaning kept: the plan of each file before and after formatting
n=0
for f in "$srcdir"/pipelines/*.yaml "$srcdir"/tests/pipelines/*.yaml "$srcdir"/tests/fail/*.yaml; do
    d="$work/p$n"; n=$((n + 1)); mkdir -p "$d"
    cp "$f" "$d/a.yaml"
    "$NLFLOW" plan "$d/a.yaml" >"$d/plan1" 2>"$d/err1"; rc1=$?
    cp "$d/a.yaml" "$d/b.yaml"
    if ! "$NLFLOW" fmt "$d/b.yaml" 2>"$d/fmterr"; then
        grep -q "block scalars" "$d/fmterr" && continue
        [ "$rc1" != 0 ] && continue   # not a pipeline file to begin with (a syntax error)
        cat "$d/fmterr"; fail "fmt failed on $f"
    fi
    "$NLFLOW" fmt --check "$d/b.yaml" || fail "fmt is not idempotent on $f"
    mv "$d/b.yaml" "$d/a.yaml"
    "$NLFLOW" plan "$d/a.yaml" >"$d/plan2" 2>"$d/err2"; rc2=$?
    [ "$rc1" = "$rc2" ] || fail "$f: plan exit $rc1 before fmt, $rc2 after"
    [ "$rc1" != 0 ] || cmp -s "$d/plan1" "$d/plan2" || { diff "$d/plan1" "$d/plan2"; fail "$f: the plan changed"; }
done
[ "$n" -gt 10 ] || fail "only $n files checked"

# 4. bad input
printf 'nlflow: 1\nnodes: {a: [\n' >"$work/broken.yaml"
cp "$work/broken.yaml" "$work/broken.orig"
"$NLFLOW" fmt "$work/broken.yaml" 2>"$work/err"; rc=$?
[ "$rc" = 2 ] || fail "fmt on a syntax error: exit $rc, expected 2"
grep -q "broken.yaml:[0-9]*:[0-9]*:" "$work/err" || { cat "$work/err"; fail "the syntax error is not located"; }
cmp -s "$work/broken.yaml" "$work/broken.orig" || fail "a file fmt could not read was changed"
"$NLFLOW" fmt "$work/none.yaml" 2>"$work/err"; rc=$?
[ "$rc" = 2 ] || fail "fmt on a missing file: exit $rc, expected 2"
"$NLFLOW" fmt 2>"$work/err"; rc=$?
[ "$rc" = 2 ] || fail "fmt without files: exit $rc, expected 2"
echo "fmt: ok ($n files)"
