#!/usr/bin/env bash
# check-layout.sh — the layout rules of docs/design.md that a compiler does not
# check, so that they stay true as code is added:
#  - nodes are self-contained: a file under nodes/<type>/ includes its own
#    folder's headers, engine/node.h, engine/core/*.h, io/io.h,
#    kernels/kernels.h (and kernels/cuda/gpu.h in a *_gpu.c), or another
#    node's public header (never a *_internal.h) — never the engine's phases
#    (lang/, plan/, run/, cache/, pipeline.h). What a node needs of the
#    engine is declared in node.h;
#  - one folder per node type: nodes/ itself holds only the registry;
#  - the engine and the CLI reach nodes only through the registry;
#  - an earlier phase never calls a later one: objects of engine/lang and
#    engine/plan reference no symbol defined in engine/run; and no two files
#    of engine/ or nodes/ call each other (checked on the built objects, when
#    run from the build folder);
#  - bench/ links against the library, not into it: libnlflow.a defines no
#    nf_bench_* symbol.
set -u
: "${srcdir:?source folder}"
status=0
fail() { echo "FAIL: $*"; status=1; }

# ---- nodes ----
for f in "$srcdir"/nodes/*; do
    name=$(basename "$f")
    [ -d "$f" ] || [ "$name" = node_list.c ] || [ "$name" = Makefile.am ] \
        || fail "nodes/$name: nodes/ holds only node_list.c and one folder per node type"
done

allowed_include() {   # $1 = file (relative to srcdir), $2 = included path
    local file=$1 inc=$2 dir
    dir=$(dirname "$file")
    case "$inc" in
        */*) ;;
        *) [ -e "$srcdir/$dir/$inc" ] && return 0 ;;      # own folder
    esac
    case "$inc" in
        node.h | io/io.h | kernels/kernels.h) return 0 ;;
        core/*.h) [ -e "$srcdir/engine/$inc" ] && return 0 ;;
        kernels/cuda/gpu.h) case "$file" in *_gpu.c) return 0 ;; esac ;;
        *_internal.h) ;;
        */*.h) [ -e "$srcdir/nodes/$inc" ] && return 0 ;;  # another node's public header
    esac
    return 1
}

n_files=0
while IFS= read -r rel; do
    n_files=$((n_files + 1))
    while IFS= read -r line; do
        inc=$(printf '%s\n' "$line" | sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p')
        [ -n "$inc" ] || continue
        allowed_include "$rel" "$inc" \
            || fail "$rel includes \"$inc\": a node sees only node.h, engine/core, io/io.h, kernels/kernels.h and node headers"
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include' "$srcdir/$rel")
done < <(cd "$srcdir" && find nodes -name '*.[ch]' | sort)
[ "$n_files" -gt 0 ] || fail "no node files found under $srcdir/nodes"

# ---- the engine and the CLI never include a node's header ----
node_dirs=$(cd "$srcdir/nodes" && find . -mindepth 1 -maxdepth 1 -type d | sed 's#^\./##' | tr '\n' '|' | sed 's/|$//')
if [ -n "$node_dirs" ]; then
    hits=$(cd "$srcdir" && grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"($node_dirs)/" -r engine cli \
           --include='*.c' --include='*.h' --include='*.cu' || true)
    [ -z "$hits" ] || fail "the engine includes node headers (it reaches nodes through the registry only):
$hits"
fi

# ---- built objects (when run from the build folder) ----
if [ -f libnlflow.a ] && command -v nm >/dev/null; then
    # the library's objects only: a build folder may hold objects of files
    # that have since been removed or moved
    members=" $(ar t libnlflow.a | tr '\n' ' ') "
    objects() {   # the .o files under "$@" that are members of libnlflow.a
        find "$@" -name '*.o' 2>/dev/null | sort | while read -r o; do
            case "$members" in *" $(basename "$o") "*) echo "$o" ;; esac
        done
    }
    later=$(objects engine/run | xargs -r nm -g --defined-only 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
    for o in $(objects engine/lang engine/plan); do
        for sym in $(nm -u "$o" | awk '{ print $NF }' | sort -u); do
            if printf '%s\n' "$later" | grep -qx -- "$sym"; then
                fail "$o (an earlier phase) calls $sym, defined in engine/run (a later one)"
            fi
        done
    done
    # No two files reference each other (an import circle), in engine/ or
    # nodes/. A node's registry interface is not an import: its descriptor
    # (nf_node_<type>, which a GPU path falling back to the CPU calls) and the
    # GPU entry point its descriptor wires (nf_<type>_run_gpu).
    circles=$(for o in $(objects engine nodes); do
                  nm -g "$o" | awk -v o="$o" '$NF !~ /^nf_node_|^nf_[a-z]+_run_gpu$/ {
                      print o, ($1 == "U" ? "U" : NF == 3 ? "D" : "?"), $NF }'
              done | awk '
                  $2 == "D" { def[$3] = $1 }
                  $2 == "U" { use[$1, $3] = 1; n++; uo[n] = $1; us[n] = $3 }
                  END {
                      for (i = 1; i <= n; i++) {
                          a = uo[i]; b = def[us[i]]
                          if (b == "" || b == a || !(a < b)) continue
                          for (j = 1; j <= n; j++)
                              if (uo[j] == b && def[us[j]] == a) {
                                  print a, us[i], b, us[j]; break
                              }
                      }
                  }' | sort -u -k1,1 -k3,3)
    while read -r a sa b sb; do
        [ -n "$a" ] || continue
        fail "import circle: $a calls $sa, $b calls $sb"
    done <<<"$circles"
    if nm -g --defined-only libnlflow.a 2>/dev/null | awk 'NF == 3 { print $3 }' | grep -q '^nf_bench_'; then
        fail "libnlflow.a holds the benchmark harness (bench/ must link against the library, not into it)"
    fi
fi

[ $status -eq 0 ] && echo "ok   layout: nodes see only node.h, phases in order, no import circles, bench outside the library"
exit $status
