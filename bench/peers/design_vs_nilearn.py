#!/usr/bin/env python3
"""design_vs_nilearn.py - the `design` node next to nilearn's
make_first_level_design_matrix, case by case (not part of make check).

For each case it writes an events table, a confounds table and a small 4D
image whose header holds the TR, runs an nlflow pipeline (load -> design ->
summarize, which writes the design as TSV with 9 significant digits) and
builds nilearn's matrix from the same files with
frame_times = tr * (arange(n) + slice_time_ref). It prints, per case, the
column names of both and the largest absolute difference, and exits 1 when
names differ or a difference exceeds 1e-5.

    python3 -m venv /tmp/nl && /tmp/nl/bin/pip install 'nilearn==0.14.*'
    /tmp/nl/bin/python bench/peers/design_vs_nilearn.py --nlflow build/nlflow
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import nibabel as nib
import nilearn
import numpy as np
import pandas as pd
from nilearn.glm.first_level import make_first_level_design_matrix

EVENTS = """onset\tduration\ttrial_type\tmodulation
0\t2\tface\t1
10\t0\thouse\t2
10.5\t3\tface\t1
31.2\t5\thouse\t0.5
-30\t1\thouse\t1
63\t2\tface\t1.5
63\t2\tface\t1
80\t0\tscrambled\t1
118\t4\thouse\t1
"""

# name, design parameters (nlflow YAML), nilearn keywords, frames, TR, confounds
CASES = [
    ("glover", "hrf: glover", dict(hrf_model="glover"), 60, 2.0, None),
    ("spm + derivative + dispersion, modulation, confounds",
     "hrf: spm + derivative + dispersion, modulation: modulation, confound_columns: [trans_*, csf]",
     dict(hrf_model="spm + derivative + dispersion"), 64, 2.0, ["trans_x", "trans_y", "csf"]),
    ("glover + derivative + dispersion, tr 0.8, slice_time_ref 0.5, high_pass 0.02",
     "hrf: glover + derivative + dispersion, slice_time_ref: 0.5, high_pass: 0.02",
     dict(hrf_model="glover + derivative + dispersion", high_pass=0.02), 180, 0.8, None),
    ("fir [0, 1, 3], polynomial order 3", "hrf: fir, fir_delays: [0, 1, 3], drift: polynomial, drift_order: 3",
     dict(hrf_model="fir", fir_delays=[0, 1, 3], drift_model="polynomial", drift_order=3), 60, 2.0, None),
    ("spm + derivative, no drift, oversampling 16, min_onset -10",
     "hrf: spm + derivative, drift: none, oversampling: 16, min_onset: -10",
     dict(hrf_model="spm + derivative", drift_model=None, oversampling=16, min_onset=-10), 70, 1.5, None),
]
SLICE_TIME_REF = {2: 0.5}


def run_case(nlflow, work, index, case):
    name, params, kwargs, n, tr, confounds = case
    folder = os.path.join(work, f"case{index}")
    os.makedirs(folder)
    with open(os.path.join(folder, "events.tsv"), "w") as f:
        f.write(EVENTS)
    rng = np.random.default_rng(index)
    conf = pd.DataFrame({"trans_x": rng.normal(size=n), "trans_y": rng.normal(size=n),
                         "rot_x": rng.normal(size=n), "csf": rng.normal(size=n)})
    conf.to_csv(os.path.join(folder, "confounds.tsv"), sep="\t", index=False, float_format="%.17g")
    img = nib.Nifti1Image(np.zeros((2, 2, 2, n), np.float32), np.eye(4))
    img.header.set_zooms((1, 1, 1, tr))
    img.header.set_xyzt_units("mm", "sec")
    nib.save(img, os.path.join(folder, "bold.nii.gz"))
    wiring = "events: ev, frames: bold" + (", confounds: conf" if confounds else "")
    with open(os.path.join(folder, "p.yaml"), "w") as f:
        f.write("nlflow: 1\nname: d\nsettings: {outputs: out, cache: off}\nnodes:\n"
                "  ev: {type: load, path: events.tsv}\n  bold: {type: load, path: bold.nii.gz}\n"
                "  conf: {type: load, path: confounds.tsv}\n"
                f"  d: {{type: design, in: {{{wiring}}}, {params}}}\n"
                "  s: {type: summarize, in: {X: d.X}}\n")
    subprocess.run([nlflow, "run", "--quiet", "p.yaml"], cwd=folder, check=True)
    ours = pd.read_csv(os.path.join(folder, "out", "d_stat-X.tsv"), sep="\t")

    events = pd.read_csv(os.path.join(folder, "events.tsv"), sep="\t")
    frame_times = tr * (np.arange(n) + SLICE_TIME_REF.get(index, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = make_first_level_design_matrix(
            frame_times, events, add_regs=conf[confounds] if confounds else None, **kwargs)
    same_names = list(ours.columns) == list(theirs.columns)
    diff = np.max(np.abs(ours.to_numpy() - theirs.to_numpy())) if same_names else np.inf
    print(f"{name}: {n} frames x {theirs.shape[1]} columns, max |nlflow - nilearn| = {diff:.3g}")
    if not same_names:
        print(f"  columns differ:\n  nlflow  {list(ours.columns)}\n  nilearn {list(theirs.columns)}")
    return diff


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nlflow", default="build/nlflow", help="the nlflow binary")
    args = ap.parse_args()
    nlflow = os.path.abspath(args.nlflow)
    print(f"nilearn {nilearn.__version__}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="design-vs-nilearn-") as work:
        worst = max(run_case(nlflow, work, i, c) for i, c in enumerate(CASES))
    print(f"largest difference over all cases: {worst:.3g} (tolerance 1e-5)")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
