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
import os
import sys

import peerlib

MAX_SECONDS_PER_RUN = 120.0


def available_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    args = peerlib.arguments(__doc__, "folder with X.npy and Y.npy", ["loo"])
    peerlib.set_blas_threads(args.threads)
    try:
        import numpy as np
        import sklearn
        from sklearn.linear_model import RidgeCV
    except ImportError as e:
        return peerlib.skip_import(e)

    alphas = np.logspace(-2, 4, 20)
    baseline = peerlib.rss_now()

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
    estimate = peerlib.per_run_estimate(lambda voxels, X=X, Y=Y: fit(X, np.ascontiguousarray(Y[:, :voxels])), V)
    del X, Y
    if estimate is not None and estimate > MAX_SECONDS_PER_RUN:
        return peerlib.skip(f"too slow (estimated {estimate:.0f} s per run)")
    # Measured: the peak is about 7.5 float64 copies of Y (n x V x 8 bytes).
    working_set = 8 * n * V * 8
    if working_set > available_memory() / 2:
        return peerlib.skip(f"too much memory (about {working_set / 2**30:.1f} GiB "
                            f"of float64 work arrays)")

    return peerlib.measure_and_print(
        run, args.reps, args.mode,
        f"scikit-learn {sklearn.__version__} RidgeCV(alpha_per_target=True, cv=None: "
        f"leave-one-out, float64) + numpy {np.__version__}", baseline, estimated_s=estimate)


if __name__ == "__main__":
    sys.exit(main())
