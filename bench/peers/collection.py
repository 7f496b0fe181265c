#!/usr/bin/env python3
"""collection.py - the nibabel + NumPy peer of nlflow's `collection` benchmark.

Computes what the nlflow conditions compute, from the same files, the way
nltools does (nilearn-style masking in C order, data[mask].T, per-voxel float64
moments over every image of every subject):

  --mode read_only   load and decompress every subject, nothing else
  --mode lazy        one subject at a time: mask, then merge its per-voxel mean
                     and sum of squared deviations into running totals (Chan et al.)
  --mode in_memory   load and mask every subject first, stack, then mean/std

Timing follows nlflow bench: one warm-up, then --reps timed runs; median, min,
max. Peak RSS is sampled every 5 ms during the timed runs (and getrusage's
whole-process peak). Prints one JSON line; when numpy or nibabel cannot be
imported it prints {"skipped": reason} and exits 0, so the harness reports the
peer as skipped instead of failed.
"""
import argparse
import glob
import json
import os
import resource
import statistics
import sys
import threading
import time


def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssSampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak = rss_now()
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss_now())

    def stop(self):
        self.done.set()
        self.join()
        return max(self.peak, rss_now())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder with sub-*_bold.nii.gz and mask.nii.gz")
    ap.add_argument("--mode", required=True, choices=["read_only", "lazy", "in_memory"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="unused: the NumPy steps are serial")
    args = ap.parse_args()
    try:
        import numpy as np
        import nibabel as nib
    except ImportError as e:
        print(json.dumps({"skipped": f"{e.name or 'a module'} is not importable by {sys.executable}"}))
        return 0

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
    baseline = rss_now()
    run()   # warm-up
    sampler = RssSampler()
    sampler.start()
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    peak = sampler.stop()
    print(json.dumps({
        "peer": f"nibabel {nib.__version__} + numpy {np.__version__}, Python {sys.version.split()[0]}",
        "mode": args.mode,
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "rss_baseline": baseline,
        "rss_peak_sampled": peak,
        "rss_peak_getrusage": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
