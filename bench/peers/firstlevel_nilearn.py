#!/usr/bin/env python3
"""firstlevel_nilearn.py - the nilearn peer of nlflow's `firstlevel` benchmark (one run's first level).

Reads bold.nii (a 4D run, TR in firstlevel.json), mask.nii, events.tsv,
confounds.tsv and firstlevel.json (tr, high_pass, contrasts: name ->
expression) from --data and times nilearn 0.14's
FirstLevelModel(t_r, noise_model='ar1', hrf_model='glover',
drift_model='cosine', high_pass, mask_img=mask.nii, signal_scaling=0,
n_jobs=1).fit(bold, events, confounds) then compute_contrast(expression,
output_type='z_score') for each contrast: what the nlflow pipeline of the
condition does (load, mask, design, glm, z maps).

  --mode one_run

One fit of 230k voxels x 300 frames takes minutes: above 50000 voxels the
timed runs are capped at one and the warm-up is left out (the files are in
the page cache already: nlflow has just read them). Also reported:
getrusage's peak RSS of the process, and, when the nlflow condition left the
folder of its outputs in DATA/nlflow-outputs.txt, the share of in-mask voxels
whose z is within 1e-3 of nlflow's (its *_stat-z_statmap.nii.gz, one volume
per contrast in firstlevel.json's order) and the largest difference.

nilearn is not a Debian package: as permute_nilearn.py, when /usr/bin/python3
cannot import it the script re-runs itself with the interpreter named by
NLFLOW_NILEARN_PYTHON (a virtual environment with nilearn 0.14), else it
prints {"skipped": reason}.
"""
import contextlib
import glob
import io
import json
import os
import sys
import warnings

import peerlib

MODES = ["one_run"]
BIG_VOXELS = 50000


def agreement(data, mask, z_maps, names):
    """{contrast: share within 1e-3} and the largest |difference|, or None."""
    import nibabel as nib
    import numpy as np
    try:
        with open(os.path.join(data, "nlflow-outputs.txt")) as f:
            folder = f.read().strip()
    except OSError:
        return None, None
    files = sorted(glob.glob(os.path.join(folder, "*stat-z_statmap.nii*")))
    if len(files) != 1:
        return None, None
    ours = np.asarray(nib.load(files[0]).get_fdata(dtype=np.float64))
    if ours.ndim == 3:
        ours = ours[..., None]
    inside = mask > 0
    shares, worst = {}, 0.0
    for i, name in enumerate(names):
        diff = np.abs(ours[..., i][inside] - np.asarray(z_maps[name].get_fdata())[inside])
        shares[name] = float(np.mean(diff <= 1e-3))
        worst = max(worst, float(diff.max()))
    return shares, worst


def main():
    args = peerlib.arguments(__doc__, "folder with bold.nii, mask.nii, events.tsv, confounds.tsv, firstlevel.json",
                             MODES)
    peerlib.set_blas_threads(args.threads)
    try:
        import nibabel as nib
        import nilearn
        import numpy as np
        import pandas as pd
        from nilearn.glm.first_level import FirstLevelModel
    except ImportError as e:
        other = os.environ.get("NLFLOW_NILEARN_PYTHON")
        if other and os.path.realpath(other) != os.path.realpath(sys.executable) and os.access(other, os.X_OK):
            os.execv(other, [other] + sys.argv)
        return peerlib.skip(f"{e.name or 'nilearn'} is not importable by {sys.executable} "
                            "(set NLFLOW_NILEARN_PYTHON to a Python with nilearn 0.14)")
    with open(os.path.join(args.data, "firstlevel.json")) as f:
        cfg = json.load(f)
    baseline = peerlib.rss_now()
    bold = os.path.join(args.data, "bold.nii")
    mask_path = os.path.join(args.data, "mask.nii")
    events = pd.read_csv(os.path.join(args.data, "events.tsv"), sep="\t")
    confounds = pd.read_csv(os.path.join(args.data, "confounds.tsv"), sep="\t")
    mask = np.asarray(nib.load(mask_path).dataobj)
    voxels = int(np.count_nonzero(mask))
    z_maps = {}

    def run():
        model = FirstLevelModel(t_r=cfg["tr"], noise_model="ar1", hrf_model="glover", drift_model="cosine",
                                high_pass=cfg["high_pass"], mask_img=mask_path, signal_scaling=0, n_jobs=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(bold, events=events, confounds=confounds)
            for name, expr in cfg["contrasts"].items():
                z_maps[name] = model.compute_contrast(expr, output_type="z_score")

    big = voxels > BIG_VOXELS
    reps = min(args.reps, 1) if big else args.reps
    # measure, then compare the last run's z maps with nlflow's (outside the timing)
    line = io.StringIO()
    with contextlib.redirect_stdout(line):
        peerlib.measure_and_print(run, reps, args.mode,
                                  f"nilearn {nilearn.__version__} FirstLevelModel (ar1, glover, cosine)",
                                  baseline, warmup=not big, voxels=voxels)
    result = json.loads(line.getvalue().strip().splitlines()[-1])
    shares, worst = agreement(args.data, mask, z_maps, list(cfg["contrasts"]))
    if shares is not None:
        result["z_within_1e-3"] = shares
        result["z_max_abs_diff"] = worst
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
