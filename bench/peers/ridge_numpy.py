#!/usr/bin/env python3
"""ridge_numpy.py - the NumPy peer of nlflow's `ridge` benchmark: the same algorithm.

Reads X.npy (n x p) and Y.npy (n x V) from --data and does what the nlflow ridge
node does with alpha_mode per_voxel (nltools' solve_ridge_cv), in float32:

  per fold of a contiguous, unshuffled 5-fold split (the first n mod 5 folds one
  sample larger): one np.linalg.svd(X_train, full_matrices=False); U^T Y_train as
  one matmul; the validation predictions of all 20 alphas (logspace(-2, 4, 20))
  as one stacked matmul, (X_val V diag(s / (s^2 + alpha)))_alpha @ U^T Y_train;
  R^2 per voxel = 1 - ss_res / (ss_tot + 1e-10) about the validation-fold mean.
  Then the mean over folds, argmax per voxel (first index on ties), and a refit
  with one SVD of all of X: W = V (d_alpha(v) * U^T Y).

  --mode per_voxel   as above
  --mode shared      one alpha for all voxels (the node's alpha_mode shared,
                     nltools' legacy ridge_cv): the argmax of the score's mean
                     over folds and voxels, the same refit with that alpha

Voxels go through in blocks so that the stacked predictions of one block stay
under 256 MiB (himalaya's n_targets_batch, for the same reason): at 230k voxels
they would otherwise be 3.7 GB per fold. At the nltools sizes one block or two.

Above 20000 voxels, one fit on the first 20000 (smaller slices run faster per
voxel, from cache, and underestimate) first estimates the time of a full fit;
above 120 s it prints {"skipped": "too slow (estimated N s per run)"}, so that a
full benchmark run stays short. BLAS threads are set to --threads (as
many as nlflow uses) before NumPy is imported.

Timing follows nlflow bench: one warm-up, then --reps timed runs; median, min,
max; peak RSS sampled every 5 ms during the timed runs. Prints one JSON line;
when numpy cannot be imported it prints {"skipped": reason} and exits 0.
"""
import os
import sys

import peerlib

MAX_SECONDS_PER_RUN = 120.0
BLOCK_BYTES = 256 << 20
FOLDS = 5


def fold_bounds(n, k):
    """Contiguous KFold(k, shuffle=False): (start, stop) of each validation fold."""
    bounds, start = [], 0
    for f in range(k):
        size = n // k + (1 if f < n % k else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def ridge_cv(np, X, Y, alphas, shared=False):
    """Per-voxel (or with shared, one) alpha by 5-fold CV, then the refit.
    Returns weights, alpha, score."""
    n, p = X.shape
    V = Y.shape[1]
    A = len(alphas)
    alphas32 = alphas.astype(np.float32)
    score_sum = np.zeros((A, V), dtype=np.float32)
    for start, stop in fold_bounds(n, FOLDS):
        train = np.r_[0:start, stop:n]
        X_tr, X_val = X[train], X[start:stop]
        U, s, Vt = np.linalg.svd(X_tr, full_matrices=False)
        shrink = s[None, :] / (s[None, :] ** 2 + alphas32[:, None])          # A x r
        P = X_val @ Vt.T                                                      # n_val x r
        stacked = (P[None, :, :] * shrink[:, None, :]).reshape(A * (stop - start), -1)
        n_val = stop - start
        block = max(1, BLOCK_BYTES // (4 * A * n_val))
        for v0 in range(0, V, block):
            v1 = min(V, v0 + block)
            Y_tr = Y[train, v0:v1]
            Y_val = Y[start:stop, v0:v1]
            UtY = U.T @ Y_tr                                                  # r x b
            pred = (stacked @ UtY).reshape(A, n_val, v1 - v0)
            pred -= Y_val[None]
            np.square(pred, out=pred)
            ss_res = pred.sum(axis=1)                                         # A x b
            centred = Y_val - Y_val.mean(axis=0)
            ss_tot = np.einsum("ij,ij->j", centred, centred)
            score_sum[:, v0:v1] += 1.0 - ss_res / (ss_tot + np.float32(1e-10))
    mean_score = score_sum / FOLDS
    if shared:
        best = np.full(V, np.argmax(mean_score.mean(axis=1, dtype=np.float64)))
    else:
        best = np.argmax(mean_score, axis=0)                                  # first on ties
    score = mean_score[best, np.arange(V)]
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    shrink = s[None, :] / (s[None, :] ** 2 + alphas32[:, None])              # A x r
    W = Vt.T @ (shrink[best].T * (U.T @ Y))                                   # p x V
    return W, alphas[best], score


def main():
    args = peerlib.arguments(__doc__, "folder with X.npy and Y.npy", ["per_voxel", "shared"])
    shared = args.mode == "shared"
    peerlib.set_blas_threads(args.threads)
    try:
        import numpy as np
    except ImportError as e:
        return peerlib.skip_import(e)

    alphas = np.logspace(-2, 4, 20)
    baseline = peerlib.rss_now()

    def load():
        return (np.load(os.path.join(args.data, "X.npy")).astype(np.float32, copy=False),
                np.load(os.path.join(args.data, "Y.npy")).astype(np.float32, copy=False))

    def run():
        X, Y = load()
        return ridge_cv(np, X, Y, alphas, shared)

    X, Y = load()
    estimate = peerlib.per_run_estimate(
        lambda voxels, X=X, Y=Y: ridge_cv(np, X, np.ascontiguousarray(Y[:, :voxels]), alphas, shared),
        Y.shape[1])
    del X, Y
    if estimate is not None and estimate > MAX_SECONDS_PER_RUN:
        return peerlib.skip(f"too slow (estimated {estimate:.0f} s per run)")
    return peerlib.measure_and_print(run, args.reps, args.mode,
                                     f"numpy {np.__version__} (same algorithm, float32)",
                                     baseline, estimated_s=estimate)


if __name__ == "__main__":
    sys.exit(main())
