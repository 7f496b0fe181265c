#!/usr/bin/env python3
"""glm_vs_nilearn.py - the `glm` node next to nilearn's first-level GLM, case
by case (not part of make check), and optionally a timing of both.

Agreement: a synthetic run (events of two conditions, nilearn's design with
motion-like confounds, voxels with AR(1) noise of coefficients from -0.2 to
0.7, baselines from 0.5 to 2000 so that mean scaling's max(mean, 1) is
exercised) is written as design.tsv and Y.npy; an nlflow pipeline (load ->
glm -> summarize, which writes each map as TSV with 9 significant digits)
fits it, and nilearn fits the same arrays as FirstLevelModel does
(mean_scaling, then run_glm, then compute_contrast(...).z_score() and
friends). Printed per case (OLS and AR(1), mean scaling, and AR(1) without
scaling): the largest |z difference| and the share of voxels within 1e-3,
for every contrast; exit status 1 when a case has fewer than 99% of voxels
within 1e-3.

Timing (--time): n frames x V voxels x k regressors (default 300 x 230000 x
34, AR(1)), random design and data; nlflow `run` of load -> glm (the glm
node's own time from its progress line, and the whole command's) and
nilearn's mean_scaling + run_glm + one compute_contrast on the same arrays.

    python3 -m venv /tmp/nl && /tmp/nl/bin/pip install 'nilearn==0.14.*'
    /tmp/nl/bin/python bench/peers/glm_vs_nilearn.py --nlflow build/nlflow [--time]
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import warnings

import nibabel as nib
import nilearn
import numpy as np
import pandas as pd
from nilearn.glm.contrasts import compute_contrast
from nilearn.glm.first_level import FirstLevelModel, make_first_level_design_matrix, mean_scaling, run_glm

CONTRASTS = {"face_vs_house": "face - house", "mix": "2*face - (house + trans_x)", "house": "house"}


def synthetic_run(n, V, seed):
    rng = np.random.default_rng(seed)
    tr = 2.0
    onsets = np.arange(4, n * tr - 20, 12.0)
    events = pd.DataFrame({"onset": onsets, "duration": 3.0,
                           "trial_type": np.where(np.arange(onsets.size) % 2 == 0, "face", "house")})
    conf = pd.DataFrame(np.cumsum(rng.normal(scale=0.05, size=(n, 6)), axis=0),
                        columns=["trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        X = make_first_level_design_matrix(tr * np.arange(n), events, hrf_model="glover",
                                           drift_model="cosine", high_pass=0.01, add_regs=conf)
    rho = rng.uniform(-0.2, 0.7, V)
    noise = np.empty((n, V))
    noise[0] = rng.normal(size=V)
    for t in range(1, n):
        noise[t] = rho * noise[t - 1] + rng.normal(size=V)
    baseline = np.exp(rng.uniform(np.log(0.5), np.log(2000), V))
    beta = rng.normal(scale=0.02, size=(X.shape[1], V)) * baseline
    beta[list(X.columns).index("constant")] = 0
    scale = 0.01 * baseline + 0.1
    Y = (baseline + X.values @ beta + noise * scale).astype(np.float32)
    return X, Y


def nilearn_fit(X, Y, noise, scaling):
    if scaling == "mean":
        Y, _ = mean_scaling(Y, 0)
    labels, results = run_glm(Y, X.values, noise_model=noise)
    out = {}
    cols = list(X.columns)
    for name, expr in CONTRASTS.items():
        # the same expressions, through pandas as nilearn's expression_to_contrast_vector does
        w = np.asarray(pd.DataFrame(np.eye(len(cols)), columns=cols).eval(expr))
        con = compute_contrast(labels, results, w, stat_type="t")
        out[name] = dict(z=con.z_score(), t=con.stat(), effect=con.effect_size().ravel(),
                         variance=con.effect_variance(), p=con.p_value())
    return out


def nlflow_fit(nlflow, folder, noise, scaling, outputs=("z", "t", "effect", "variance", "p")):
    contrasts = ", ".join(f'"{k} = {v}"' for k, v in CONTRASTS.items())
    wires = ", ".join(f"{o}: g.{o}" for o in outputs)
    with open(os.path.join(folder, "p.yaml"), "w") as f:
        f.write("nlflow: 1\nname: glm\nsettings: {outputs: out, cache: off}\nnodes:\n"
                "  x: {type: load, path: design.tsv}\n  y: {type: load, path: Y.npy}\n"
                f"  g: {{type: glm, in: {{X: x, Y: y}}, noise: {noise}, scaling: {scaling}, "
                f"contrasts: [{contrasts}]}}\n"
                f"  s: {{type: summarize, in: {{{wires}}}}}\n")
    subprocess.run([nlflow, "run", "--quiet", "p.yaml"], cwd=folder, check=True)
    return {o: pd.read_csv(os.path.join(folder, "out", f"glm_stat-{o}.tsv"), sep="\t", header=None,
                           comment=None) for o in outputs}


def read_maps(frame, names):
    """summarize's TSV of a c x V matrix: rows are contrasts (maybe with a name column)."""
    a = frame.to_numpy()
    if a.shape[0] == len(names) + 1:   # a header row
        a = a[1:]
    if a.shape[1] > 0 and isinstance(a[0, 0], str) and not re.match(r"^[-+0-9.eE]+$", a[0, 0]):
        a = a[:, 1:]
    return a.astype(np.float64)


def agreement(nlflow, work, n, V, seed):
    X, Y = synthetic_run(n, V, seed)
    folder = os.path.join(work, "agree")
    os.makedirs(folder, exist_ok=True)
    X.to_csv(os.path.join(folder, "design.tsv"), sep="\t", index=False, float_format="%.17g")
    np.save(os.path.join(folder, "Y.npy"), Y)
    worst = 1.0
    print(f"{n} frames x {V} voxels x {X.shape[1]} regressors ({', '.join(X.columns[:3])}, ...)")
    for noise, scaling in (("ols", "mean"), ("ar1", "mean"), ("ar1", "none"), ("ols", "none")):
        ours = nlflow_fit(nlflow, folder, noise, scaling)
        theirs = nilearn_fit(X, Y, noise, scaling)
        names = list(CONTRASTS)
        z = read_maps(ours["z"], names)
        t = read_maps(ours["t"], names)
        for i, name in enumerate(names):
            dz = np.abs(z[i] - theirs[name]["z"])
            dt = np.abs(t[i] - theirs[name]["t"])
            share = np.mean(dz <= 1e-3)
            worst = min(worst, share)
            print(f"  {noise:>3}, scaling {scaling:>4}, {name:>13}: max |dz| = {dz.max():.2e}, "
                  f"voxels within 1e-3: {100 * share:.3f}%, max |dt| = {dt.max():.2e}, "
                  f"|z| up to {np.abs(theirs[name]['z']).max():.1f}")
    return worst


def first_level_model(nlflow, work, seed):
    """The whole path on images: nilearn's FirstLevelModel (defaults: AR(1),
    signal_scaling=0) on a 4D NIfTI and its mask against load -> mask -> glm
    -> summarize (a NIfTI z map), compared voxel by voxel inside the mask."""
    shape = (24, 20, 30)
    X, Y = synthetic_run(120, int(np.prod(shape)), seed)
    folder = os.path.join(work, "flm")
    os.makedirs(folder, exist_ok=True)
    affine = np.diag([3.0, 3.0, 3.0, 1.0])
    data = Y.T.reshape(*shape, Y.shape[0])
    mask = np.ones(shape, np.uint8)
    mask[0], mask[:, 0], mask[:, :, -1] = 0, 0, 0
    img = nib.Nifti1Image(data, affine)
    img.header.set_zooms((3, 3, 3, 2.0))
    img.header.set_xyzt_units("mm", "sec")
    nib.save(img, os.path.join(folder, "bold.nii.gz"))
    nib.save(nib.Nifti1Image(mask, affine), os.path.join(folder, "mask.nii.gz"))
    X.to_csv(os.path.join(folder, "design.tsv"), sep="\t", index=False, float_format="%.17g")
    with open(os.path.join(folder, "p.yaml"), "w") as f:
        f.write("nlflow: 1\nname: flm\nsettings: {outputs: out, cache: off}\nnodes:\n"
                "  x: {type: load, path: design.tsv}\n  bold: {type: load, path: bold.nii.gz}\n"
                "  brain: {type: load, path: mask.nii.gz}\n  y: {type: mask, in: {data: bold, mask: brain}}\n"
                "  g: {type: glm, in: {X: x, Y: y}, contrasts: [\"fh = face - house\"]}\n"
                "  s: {type: summarize, in: {z: g.z}}\n")
    subprocess.run([nlflow, "run", "--quiet", "p.yaml"], cwd=folder, check=True)
    ours = np.asarray(nib.load(os.path.join(folder, "out", "flm_stat-z_statmap.nii.gz")).dataobj)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flm = FirstLevelModel(t_r=2.0, mask_img=nib.Nifti1Image(mask, affine), minimize_memory=True)
        flm.fit(img, design_matrices=X)
        theirs = np.asarray(flm.compute_contrast("face - house", output_type="z_score").dataobj)
    inside = mask > 0
    dz = np.abs(ours.reshape(shape)[inside] - theirs[inside])
    share = np.mean(dz <= 1e-3)
    print(f"  FirstLevelModel on a 4D image ({inside.sum()} voxels in the mask, ar1, signal_scaling=0), "
          f"face - house: max |dz| = {dz.max():.2e}, voxels within 1e-3: {100 * share:.3f}%")
    return share


def timing(nlflow, work, n, V, k, threads):
    rng = np.random.default_rng(7)
    X = pd.DataFrame(rng.normal(size=(n, k - 1)), columns=[f"r{j}" for j in range(k - 1)])
    X["r0"] = np.convolve(rng.random(n) < 0.1, np.exp(-np.arange(10) / 3))[:n]
    X["r1"] = np.convolve(rng.random(n) < 0.1, np.exp(-np.arange(10) / 3))[:n]
    X["constant"] = 1.0
    noise = np.empty((n, V), np.float32)
    rho = rng.uniform(-0.1, 0.6, V).astype(np.float32)
    noise[0] = rng.standard_normal(V, dtype=np.float32)
    for t in range(1, n):
        noise[t] = rho * noise[t - 1] + rng.standard_normal(V, dtype=np.float32)
    Y = (1000 + X.values[:, :2] @ rng.normal(size=(2, V)) + 10 * noise).astype(np.float32)
    del noise
    folder = os.path.join(work, "time")
    os.makedirs(folder, exist_ok=True)
    X.to_csv(os.path.join(folder, "design.tsv"), sep="\t", index=False, float_format="%.17g")
    np.save(os.path.join(folder, "Y.npy"), Y)
    with open(os.path.join(folder, "p.yaml"), "w") as f:
        f.write(f"nlflow: 1\nname: glm\nsettings: {{outputs: out, cache: off, threads: {threads}, memory: 8GiB}}\n"
                "nodes:\n  x: {type: load, path: design.tsv}\n  y: {type: load, path: Y.npy}\n"
                "  g: {type: glm, in: {X: x, Y: y}, noise: ar1, contrasts: [\"c = r0 - r1\"]}\n"
                "  s: {type: summarize, in: {z: g.z}}\n")
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-v", nlflow, "run", "p.yaml"], cwd=folder, check=True,
                       capture_output=True, text=True)
    wall = time.time() - t0
    node = re.search(r"g \(glm\): done in ([0-9.]+) s", r.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    print(f"nlflow: glm node {node.group(1) if node else '?'} s, whole run (load .npy, glm, write z) "
          f"{wall:.2f} s, peak RSS {int(rss.group(1)) / 1024:.0f} MiB, threads {threads}")
    t0 = time.time()
    Ys, _ = mean_scaling(Y, 0)
    labels, results = run_glm(Ys, X.values, noise_model="ar1")
    w = np.zeros(k)
    w[0], w[1] = 1, -1
    z = compute_contrast(labels, results, w, stat_type="t").z_score()
    nl = time.time() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"nilearn: mean_scaling + run_glm(ar1) + compute_contrast {nl:.2f} s, "
          f"peak RSS of this Python process {peak:.0f} MiB (data generation included), "
          f"{len(results)} AR bins")
    ours = pd.read_csv(os.path.join(folder, "out", "glm_stat-z.tsv"), sep="\t").to_numpy()[0]
    if ours.size == z.size:
        print(f"  z agreement on this case: max |dz| = {np.abs(ours - z).max():.2e}, "
              f"within 1e-3: {100 * np.mean(np.abs(ours - z) <= 1e-3):.3f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nlflow", default="build/nlflow", help="the nlflow binary")
    ap.add_argument("--frames", type=int, default=160)
    ap.add_argument("--voxels", type=int, default=20000)
    ap.add_argument("--time", action="store_true", help="also time both on a large case")
    ap.add_argument("--time-frames", type=int, default=300)
    ap.add_argument("--time-voxels", type=int, default=230000)
    ap.add_argument("--time-regressors", type=int, default=34)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    nlflow = os.path.abspath(args.nlflow)
    print(f"nilearn {nilearn.__version__}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="glm-vs-nilearn-") as work:
        worst = agreement(nlflow, work, args.frames, args.voxels, 1)
        worst = min(worst, first_level_model(nlflow, work, 2))
        if args.time:
            timing(nlflow, work, args.time_frames, args.time_voxels, args.time_regressors, args.threads)
    print(f"smallest share of voxels with |dz| <= 1e-3 over all cases: {100 * worst:.3f}% (goal >= 99%)")
    return 0 if worst >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
