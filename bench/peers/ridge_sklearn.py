#!/usr/bin/env python3
"""ridge_sklearn.py - the scikit-learn peer of nlflow's `ridge` benchmark.

Reads X.npy (n x p) and Y.npy (n x V) from --data and fits
sklearn.linear_model.RidgeCV(alphas=np.logspace(-2, 4, 20), alpha_per_target=True,
fit_intercept=False, cv=None): one alpha per voxel, like nlflow's per_voxel mode.

  --mode loo   the only mode

cv=None is RidgeCV's efficient leave-one-out (generalised cross-validation)
mode: one SVD of X, U^T Y once, then per alpha one (n x p)(p x V) product and
elementwise work, in float64. That is sklearn's fast path, so the comparison is
with sklearn at its best; but it is leave-one-out, not nlflow's 5-fold, so the
scores and chosen alphas differ and only the time compares. (RidgeCV with cv=5
falls back to GridSearchCV, which refits for every alpha and fold: far slower.)

Above 20000 voxels, one fit on the first 20000 (smaller slices run faster per
voxel, from cache, and underestimate) first estimates the time of a full fit;
above 120 s it prints {"skipped": "too slow (estimated N s per run)"}, and when
the float64 working set (measured: about 7.5 n V x 8 bytes) would not fit in
half the available memory, {"skipped": "too much memory ..."}. BLAS threads are set to
--threads (as many as nlflow uses) before NumPy is imported.

Timing follows nlflow bench: one warm-up, then --reps timed runs; median, min,
max; peak RSS sampled every 5 ms during the timed runs. Prints one JSON line;
when numpy or scikit-learn cannot be imported it prints {"skipped": reason} and
exits 0.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time

MAX_SECONDS_PER_RUN = 120.0
PROBE_VOXELS = 20000   # smaller probes underestimate: caches flatter them


def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def available_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


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
    ap.add_argument("--data", required=True, help="folder with X.npy and Y.npy")
    ap.add_argument("--mode", required=True, choices=["loo"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads (0: NumPy's default)")
    args = ap.parse_args()
    if args.threads > 0:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    try:
        import numpy as np
        import sklearn
        from sklearn.linear_model import RidgeCV
    except ImportError as e:
        print(json.dumps({"skipped": f"{e.name or 'a module'} is not importable by {sys.executable}"}))
        return 0

    alphas = np.logspace(-2, 4, 20)
    baseline = rss_now()

    def load():
        return np.load(os.path.join(args.data, "X.npy")), np.load(os.path.join(args.data, "Y.npy"))

    def fit(X, Y):
        model = RidgeCV(alphas=alphas, alpha_per_target=True, fit_intercept=False, cv=None)
        return model.fit(X, Y)

    def run():
        X, Y = load()
        return fit(X, Y)

    X, Y = load()
    n, V = Y.shape
    estimate = None
    if V > PROBE_VOXELS:
        t0 = time.perf_counter()
        fit(X, np.ascontiguousarray(Y[:, :PROBE_VOXELS]))
        estimate = (time.perf_counter() - t0) * V / PROBE_VOXELS
    del X, Y
    if estimate is not None and estimate > MAX_SECONDS_PER_RUN:
        print(json.dumps({"skipped": f"too slow (estimated {estimate:.0f} s per run)"}))
        return 0
    # Measured: the peak is about 7.5 float64 copies of Y (n x V x 8 bytes).
    working_set = 8 * n * V * 8
    if working_set > available_memory() / 2:
        print(json.dumps({"skipped": f"too much memory (about {working_set / 2**30:.1f} GiB "
                                     f"of float64 work arrays)"}))
        return 0

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
        "peer": f"scikit-learn {sklearn.__version__} RidgeCV(alpha_per_target=True, cv=None: "
                f"leave-one-out, float64) + numpy {np.__version__}, Python {sys.version.split()[0]}",
        "mode": args.mode,
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "estimated_s": estimate,
        "rss_baseline": baseline,
        "rss_peak_sampled": peak,
        "rss_peak_getrusage": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
