#!/usr/bin/env python3
"""collection.py - the nibabel + NumPy peer of nlflow's `collection` benchmark.

Computes what the nlflow conditions compute, from the same files, the way
nltools does (nilearn-style masking in C order, data[mask].T, per-voxel float64
moments over every image of every subject):

  --mode read_only   load and decompress every subject, nothing else
  --mode lazy        one subject at a time: mask, then merge its per-voxel mean
                     and sum of squared deviations into running totals (Chan et al.)
  --mode in_memory   load and mask every subject first, stack, then mean/std
  --mode load_mask_nii, load_mask_gz
                     the whole-brain rows: one subject, bold.nii or bold.nii.gz,
                     loaded and masked (nibabel's dataobj, then data[mask].T)

Timing follows nlflow bench: one warm-up, then --reps timed runs; median, min,
max. Peak RSS is sampled every 5 ms during the timed runs (and getrusage's
whole-process peak). Prints one JSON line; when numpy or nibabel cannot be
imported it prints {"skipped": reason} and exits 0, so the harness reports the
peer as skipped instead of failed.
"""
import glob
import os
import sys

import peerlib


def main():
    args = peerlib.arguments(__doc__, "folder with sub-*_bold.nii.gz and mask.nii.gz",
                             ["read_only", "lazy", "in_memory", "load_mask_nii", "load_mask_gz"],
                             "unused: the NumPy steps are serial")
    try:
        import numpy as np
        import nibabel as nib
    except ImportError as e:
        return peerlib.skip_import(e)

    if args.mode.startswith("load_mask_"):
        bold = os.path.join(args.data, "bold.nii" if args.mode.endswith("_nii") else "bold.nii.gz")

        def load_mask():
            brain = np.asanyarray(nib.load(os.path.join(args.data, "mask.nii.gz")).dataobj) != 0
            return np.asanyarray(nib.load(bold).dataobj)[brain].T

        return peerlib.measure_and_print(load_mask, args.reps, args.mode,
                                         f"nibabel {nib.__version__} + numpy {np.__version__}",
                                         peerlib.rss_now())

    files = sorted(glob.glob(os.path.join(args.data, "sub-*_bold.nii.gz")))
    if not files:
        print(f"collection.py: no sub-*_bold.nii.gz in {args.data}", file=sys.stderr)
        return 1
    mask = np.asanyarray(nib.load(os.path.join(args.data, "mask.nii.gz")).dataobj) != 0

    def masked(path):
        return np.asanyarray(nib.load(path).dataobj)[mask].T   # images x voxels, C order

    def read_only():
        for f in files:
            np.asanyarray(nib.load(f).dataobj)

    def lazy():
        count, mean, m2 = 0, None, None
        for f in files:
            x = masked(f)
            n = x.shape[0]
            m = x.mean(axis=0, dtype=np.float64)
            d = x - m
            s = np.einsum("ij,ij->j", d, d)
            if mean is None:
                count, mean, m2 = n, m, s
            else:
                delta = m - mean
                total = count + n
                mean = mean + delta * (n / total)
                m2 = m2 + s + delta * delta * (count * n / total)
                count = total
        return mean, np.sqrt(m2 / count)

    def in_memory():
        x = np.vstack([masked(f) for f in files])
        return x.mean(axis=0, dtype=np.float64), x.std(axis=0, dtype=np.float64)

    run = {"read_only": read_only, "lazy": lazy, "in_memory": in_memory}[args.mode]
    return peerlib.measure_and_print(run, args.reps, args.mode,
                                     f"nibabel {nib.__version__} + numpy {np.__version__}",
                                     peerlib.rss_now())


if __name__ == "__main__":
    sys.exit(main())
