#!/usr/bin/env python3
"""permute_numpy.py - the NumPy peer of nlflow's `inference` benchmark: the same test.

Reads data.npy (n subjects x V voxels), groups.npy and covariate.npy (n x 1)
and permute.json (n_permutations N, seed) from --data and does what the nlflow
permute node does (two tails), in float32, the straightforward vectorised way:

  draws as nltools: seeds = RandomState(seed).randint(2**31 - 1, size=N), then
  per permutation RandomState(seed_i).choice([1, -1], n) (one-sample sign
  flips) or RandomState(seed_i).permutation(n) (two-sample labels: group 1 =
  pooled[perm[:n1]]; correlation: data[perm] against the covariate);
  the null statistics of a block of permutations as one matmul, R (B x n) @
  data (n x V): sign rows, 0/1 group-1 indicator rows, or the standardised
  covariate scattered to the permuted rows; then the statistic, the per-voxel
  counts of |null| >= |observed| and the per-permutation maximum |null| over
  voxels, per block;
  p = (count + 1) / (N + 1); p_fwe = (#{max >= |observed|} + 1) / (N + 1).

  --mode one_sample_mean       mean of the sign-flipped data (nltools)
  --mode one_sample_t          one-sample t (as FSL randomise, MNE)
  --mode two_sample_mean       difference of means, groups column (1 = group 1)
  --mode correlation_pearson   Pearson r with the covariate (population std)

Blocks of permutations keep a block's null statistics under 64 MiB: at the
nltools sizes all permutations in one or a few blocks, at 230k voxels about 70
permutations a block. With NLFLOW_PERMUTE_SAVE_P=FILE in the environment the
p and p_fwe maps are written to FILE (.npz) after the timed runs, to compare
with the node's.

Above 20000 voxels, one run on the first 20000 first estimates the time of a
full run; above 120 s it prints {"skipped": "too slow (estimated N s per
run)"}, so that a full benchmark run stays short. BLAS threads are set to
--threads (as many as nlflow uses) before NumPy is imported.

Timing follows nlflow bench: one warm-up, then --reps timed runs; median, min,
max; peak RSS sampled every 5 ms during the timed runs. Prints one JSON line;
when numpy cannot be imported it prints {"skipped": reason} and exits 0.
"""
import json
import os
import sys

import peerlib

MAX_SECONDS_PER_RUN = 120.0
BLOCK_BYTES = 64 << 20
MODES = ["one_sample_mean", "one_sample_t", "two_sample_mean", "correlation_pearson"]


def load(np, data_dir, mode):
    """The data as the test sees it (float32), and the per-test extras."""
    X = np.load(os.path.join(data_dir, "data.npy")).astype(np.float32, copy=False)
    extra = {}
    if mode == "two_sample_mean":
        groups = np.load(os.path.join(data_dir, "groups.npy")).ravel()
        first = np.unique(groups)[0]                       # the first in sorted order is group 1
        order = np.argsort(groups != first, kind="stable")  # group 1 rows first, in order
        X = X[order]
        extra["n1"] = int(np.sum(groups == first))
    elif mode == "correlation_pearson":
        extra["covariate"] = np.load(os.path.join(data_dir, "covariate.npy")).ravel().astype(np.float32)
    return X, extra


def draw_rows(np, mode, seeds, n, n1, zc):
    """R (len(seeds) x n) for one block: nltools' per-permutation draws."""
    R = np.zeros((len(seeds), n), dtype=np.float32)
    for i, s in enumerate(seeds):
        rs = np.random.RandomState(s)
        if mode.startswith("one_sample"):
            R[i] = rs.choice([1, -1], n)
        elif mode == "two_sample_mean":
            R[i, rs.permutation(n)[:n1]] = 1.0
        else:
            R[i, rs.permutation(n)] = zc            # row[perm[j]] = zc[j]: data[perm] . zc
    return R


def permutation_test(np, X, extra, mode, n_perm, seed):
    """p and p_fwe maps (float64) of the two-tailed test."""
    n, V = X.shape
    seeds = np.random.RandomState(seed).randint(2**31 - 1, size=n_perm)
    n1 = extra.get("n1", 0)
    zc = None
    if mode.startswith("one_sample"):
        D = X
        ss = np.einsum("ij,ij->j", X, X)                  # sum x^2: fixed under sign flips

        def stat(g):
            mean = g / np.float32(n)
            if mode == "one_sample_mean":
                return np.abs(mean)
            var = (ss / np.float32(n) - mean * mean) * np.float32(n / (n - 1))
            return np.abs(mean) / np.sqrt(np.maximum(var, np.float32(1e-30)) / np.float32(n))
        observed = stat(X.sum(axis=0))
    elif mode == "two_sample_mean":
        D = X
        total = X.sum(axis=0)

        def stat(g):                                      # g = group-1 sums
            return np.abs(g / np.float32(n1) - (total - g) / np.float32(n - n1))
        observed = stat(X[:n1].sum(axis=0))
    else:
        c = extra["covariate"]
        zc = (c - c.mean()) / c.std()
        D = (X - X.mean(axis=0)) / X.std(axis=0)          # population std, as nltools

        def stat(g):
            return np.abs(g / np.float32(n))
        observed = stat(zc @ D)
    count = np.zeros(V, dtype=np.int64)
    maxima = np.empty(n_perm, dtype=np.float32)
    block = max(1, min(n_perm, BLOCK_BYTES // (4 * V)))
    for b0 in range(0, n_perm, block):
        b1 = min(n_perm, b0 + block)
        null = stat(draw_rows(np, mode, seeds[b0:b1], n, n1, zc) @ D)   # (b1 - b0) x V
        count += (null >= observed).sum(axis=0)
        maxima[b0:b1] = null.max(axis=1)
    p = (count + 1) / (n_perm + 1)
    maxima.sort()
    p_fwe = (n_perm - np.searchsorted(maxima, observed, side="left") + 1) / (n_perm + 1)
    return p, p_fwe


def main():
    args = peerlib.arguments(__doc__, "folder with data.npy, groups.npy, covariate.npy, permute.json",
                             MODES)
    peerlib.set_blas_threads(args.threads)
    try:
        import numpy as np
    except ImportError as e:
        return peerlib.skip_import(e)

    with open(os.path.join(args.data, "permute.json")) as f:
        spec = json.load(f)
    n_perm, seed = int(spec["n_permutations"]), int(spec["seed"])
    baseline = peerlib.rss_now()

    def run():
        X, extra = load(np, args.data, args.mode)
        return permutation_test(np, X, extra, args.mode, n_perm, seed)

    X, extra = load(np, args.data, args.mode)
    estimate = peerlib.per_run_estimate(
        lambda voxels, X=X, extra=extra: permutation_test(np, np.ascontiguousarray(X[:, :voxels]), extra,
                                                          args.mode, n_perm, seed), X.shape[1])
    del X, extra
    if estimate is not None and estimate > MAX_SECONDS_PER_RUN:
        return peerlib.skip(f"too slow (estimated {estimate:.0f} s per run)")
    status = peerlib.measure_and_print(run, args.reps, args.mode,
                                       f"numpy {np.__version__} (same test, nltools' draws, float32)",
                                       baseline, estimated_s=estimate)
    save = os.environ.get("NLFLOW_PERMUTE_SAVE_P")
    if save:
        p, p_fwe = run()
        np.savez(save, p=p, p_fwe=p_fwe)
    return status


if __name__ == "__main__":
    sys.exit(main())
