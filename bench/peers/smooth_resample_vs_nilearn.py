#!/usr/bin/env python3
"""smooth_resample_vs_nilearn.py - the `smooth` and `resample` nodes next to
nilearn's smooth_img and resample_to_img, case by case (not part of make check).

For each case it writes the images as float32 NIfTI, runs an nlflow pipeline
(load -> smooth / resample -> summarize, which writes the results as NIfTI
float32) and computes nilearn's result from the same files. It prints, per
case, the largest absolute difference (and for nearest the number of voxels
that differ), and exits 1 when smoothing differs by more than 1e-5, linear or
continuous resampling by more than 1e-4, or nearest in any voxel.

    python3 -m venv /tmp/nl && /tmp/nl/bin/pip install 'nilearn==0.14.*'
    /tmp/nl/bin/python bench/peers/smooth_resample_vs_nilearn.py --nlflow build/nlflow

--speed also times both on a 300-volume whole-brain image at 2 mm
(91 x 109 x 91, about 1.1 GB as float32; written to the temporary folder).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import nibabel as nib
import nilearn
import numpy as np
from nilearn.image import resample_to_img, smooth_img

MNI_2MM = np.array([[-2.0, 0, 0, 90], [0, 2, 0, -126], [0, 0, 2, -72], [0, 0, 0, 1]])


def rotation(ax, ay, az):
    cx, sx, cy, sy, cz, sz = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay), np.cos(az), np.sin(az)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rz @ ry @ rx


def affine(zooms, origin, rot=np.eye(3)):
    a = np.eye(4)
    a[:3, :3] = rot @ np.diag(zooms)
    a[:3, 3] = origin
    return a


def brain_like(shape, rng):
    """Smooth blobs plus noise: values of both signs and sharp edges."""
    grid = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape[:3]], indexing="ij")
    r2 = sum(g * g for g in grid)
    base = 100 * (r2 < 0.8) + 20 * np.sin(5 * grid[0]) * np.cos(3 * grid[1] + grid[2])
    nt = shape[3] if len(shape) == 4 else 1
    vols = [base + rng.normal(scale=10, size=shape[:3]) for _ in range(nt)]
    data = np.stack(vols, axis=-1) if len(shape) == 4 else vols[0]
    return data.astype(np.float32)


def save(path, data, aff):
    img = nib.Nifti1Image(data, aff)
    img.header.set_data_dtype(np.float32)
    nib.save(img, path)
    return path


def run_nlflow(nlflow, folder, nodes, threads=None):
    with open(os.path.join(folder, "p.yaml"), "w") as f:
        f.write("nlflow: 1\nname: r\nsettings: {outputs: out, cache: off}\nnodes:\n" + nodes)
    cmd = [nlflow, "run", "p.yaml"] + (["--threads", str(threads)] if threads else [])
    done = subprocess.run(cmd, cwd=folder, check=True, capture_output=True, text=True)
    return done.stderr


def ours(folder, key):
    return np.asanyarray(nib.load(os.path.join(folder, "out", f"r_stat-{key}_statmap.nii.gz")).dataobj)


SMOOTH_CASES = [
    # name, shape, affine, fwhm (nlflow YAML), fwhm (nilearn)
    ("3 mm isotropic, fwhm 6", (40, 48, 38), affine([3, 3, 3], [-60, -80, -50]), "6", 6),
    ("2 x 2.5 x 3.5 mm oblique, fwhm 8, 4D", (30, 28, 22, 4),
     affine([2, 2.5, 3.5], [-30, -40, -20], rotation(0.2, -0.1, 0.35)), "8", 8),
    ("per-axis fwhm [4, 0, 9]", (25, 20, 18), affine([2, 2, 2], [0, 0, 0]), "[4, 0, 9]", [4, 0, 9]),
    ("kernel longer than the image (3 x 4 x 20, fwhm 10 at 1 mm)", (3, 4, 20), np.eye(4), "10", 10),
    ("MNI 2 mm, fwhm 5", (91, 109, 91), MNI_2MM, "5", 5),
]

SOURCE = (affine([3, 3, 3.3], [-70, -100, -55]), (47, 60, 44, 3))
RESAMPLE_TARGETS = [
    ("MNI 2 mm (x flipped, diagonal)", MNI_2MM, (91, 109, 91)),
    ("4 mm, shifted by a third of a voxel", affine([4, 4, 4], [-69, -101.3, -54.1]), (36, 46, 34)),
    ("2.5 mm rotated (oblique)", affine([2.5, 2.5, 2.5], [-55, -95, -40], rotation(0.15, 0.1, -0.25)),
     (50, 70, 48)),
    ("the source's grid shifted by 0.5 voxel (nearest ties)", affine([3, 3, 3.3], [-68.5, -98.5, -53.35]),
     (47, 60, 44)),
]


def smoothing(nlflow, work):
    worst = 0.0
    rng = np.random.default_rng(1)
    for index, (name, shape, aff, fwhm_yaml, fwhm) in enumerate(SMOOTH_CASES):
        folder = os.path.join(work, f"smooth{index}")
        os.makedirs(folder)
        data = brain_like(shape, rng)
        if index == 1:
            data[3, 4, 5, 0] = np.nan
        path = save(os.path.join(folder, "img.nii"), data, aff)
        run_nlflow(nlflow, folder, "  img: {type: load, path: img.nii}\n"
                   f"  sm: {{type: smooth, in: {{data: img}}, fwhm: {fwhm_yaml}}}\n"
                   "  s: {type: summarize, in: {sm: sm.out}}\n")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = np.asanyarray(smooth_img(path, fwhm).dataobj)
        mine = ours(folder, "sm")
        diff = float(np.max(np.abs(mine.astype(np.float64) - theirs)))
        scale = float(np.max(np.abs(theirs)))
        print(f"smooth  {name}: {shape}, max |nlflow - nilearn| = {diff:.3g} (values up to {scale:.3g})")
        worst = max(worst, diff)
    return worst


def resampling(nlflow, work):
    rng = np.random.default_rng(2)
    src_aff, src_shape = SOURCE
    folder = os.path.join(work, "resample")
    os.makedirs(folder)
    data = brain_like(src_shape, rng)
    src = save(os.path.join(folder, "src.nii"), data, src_aff)
    nodes = "  src: {type: load, path: src.nii}\n"
    outputs = []
    for t, (name, aff, shape) in enumerate(RESAMPLE_TARGETS):
        save(os.path.join(folder, f"target{t}.nii"), np.zeros(shape, np.float32), aff)
        nodes += f"  target{t}: {{type: load, path: target{t}.nii}}\n"
        for interp in ("linear", "nearest", "continuous"):
            nodes += (f"  {interp}{t}: {{type: resample, in: {{data: src, to: target{t}}}, "
                      f"interpolation: {interp}}}\n")
            outputs.append(f"{interp}{t}: {interp}{t}.out")
    nodes += "  s: {type: summarize, in: {" + ", ".join(outputs) + "}}\n"
    run_nlflow(nlflow, folder, nodes)
    worst = {"linear": 0.0, "nearest": 0, "continuous": 0.0}
    for t, (name, aff, shape) in enumerate(RESAMPLE_TARGETS):
        target = os.path.join(folder, f"target{t}.nii")
        for interp in ("linear", "nearest", "continuous"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = resample_to_img(src, target, interpolation=interp, force_resample=True,
                                         copy_header=True).get_fdata(dtype=np.float32)
            mine = ours(folder, f"{interp}{t}")
            diff = np.abs(mine.astype(np.float64) - theirs)
            inside = int(np.count_nonzero(theirs))
            if interp == "nearest":
                n_diff = int(np.count_nonzero(diff))
                worst["nearest"] += n_diff
                print(f"resample {name}, nearest: {n_diff} of {diff.size} voxels differ "
                      f"({inside} nonzero in nilearn's)")
            else:
                worst[interp] = max(worst[interp], float(diff.max()))
                print(f"resample {name}, {interp}: max |nlflow - nilearn| = {diff.max():.3g} "
                      f"({inside} nonzero voxels, values up to {np.abs(theirs).max():.3g})")
    return worst


def speed(nlflow, work, threads):
    folder = os.path.join(work, "speed")
    os.makedirs(folder)
    rng = np.random.default_rng(3)
    shape = (91, 109, 91, 300)
    data = np.empty(shape, np.float32)
    base = brain_like(shape[:3], rng)
    for t in range(shape[3]):
        data[..., t] = base + np.float32(t % 7)
    path = save(os.path.join(folder, "bold.nii"), data, MNI_2MM)
    del data
    log = run_nlflow(nlflow, folder, "  bold: {type: load, path: bold.nii}\n"
                     "  sm: {type: smooth, in: {data: bold}, fwhm: 6}\n"
                     "  s: {type: summarize, in: {sm: sm.out}}\n", threads)
    node_s = float(re.search(r"sm \(smooth\): done in ([0-9.]+) s", log).group(1))
    print(f"speed: nlflow smooth node, 300 x 91 x 109 x 91, fwhm 6, {threads} threads: {node_s:.2f} s")
    img = nib.load(path)
    start = time.perf_counter()
    smoothed = smooth_img(img, 6)
    np.asanyarray(smoothed.dataobj)
    print(f"speed: nilearn smooth_img on the same image (file read included): "
          f"{time.perf_counter() - start:.2f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nlflow", default="build/nlflow", help="the nlflow binary")
    ap.add_argument("--speed", action="store_true", help="also time a 300-volume 2 mm image")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="nlflow threads for --speed")
    args = ap.parse_args()
    nlflow = os.path.abspath(args.nlflow)
    print(f"nilearn {nilearn.__version__}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="smooth-resample-vs-nilearn-") as work:
        smooth_worst = smoothing(nlflow, work)
        resample_worst = resampling(nlflow, work)
        if args.speed:
            speed(nlflow, work, args.threads)
    print(f"largest differences: smooth {smooth_worst:.3g} (tolerance 1e-5), linear "
          f"{resample_worst['linear']:.3g} (1e-4), continuous {resample_worst['continuous']:.3g} (1e-4), "
          f"nearest {resample_worst['nearest']} voxels differ (0)")
    ok = (smooth_worst <= 1e-5 and resample_worst["linear"] <= 1e-4 and
          resample_worst["continuous"] <= 1e-4 and resample_worst["nearest"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
