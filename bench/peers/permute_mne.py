#!/usr/bin/env python3
"""permute_mne.py - the MNE peer of nlflow's `inference` benchmark (one-sample only).

Reads data.npy (n subjects x V voxels) and permute.json (n_permutations N,
seed) from --data and runs mne.stats.permutation_t_test(X, n_permutations=N,
tail=0, seed=seed): the one-sample sign-flip test with a t statistic and
max-t (single step) family-wise p-values, like the nlflow permute node with
test one_sample, stat t.

  --mode one_sample_t          the test above
  --mode two_sample_mean       skipped: MNE has no two-sample permutation test
  --mode correlation_pearson   skipped: MNE has no correlation permutation test
  (MNE's permutation_cluster_test is a cluster-level F test: a different test.)

MNE draws its sign flips with its own RNG, so its permutations, and so its
p-values, differ from nltools' (and the node's): only the time compares. It
computes in float64 and materialises every permutation's statistics at once
(N x V float64, up to five such arrays at a time): where that would not fit
in half the available memory it prints {"skipped": "too much memory ..."},
with the time a run would take from a run on 2000 voxels.
Above 20000 voxels, one run on the first 20000 (smaller slices run faster per
voxel, from cache, and underestimate) first estimates the time of a full run;
above 120 s it prints {"skipped": "too slow (estimated N s per run)"}. n_jobs
is 1 (MNE's default); BLAS threads are set to --threads (as many as nlflow
uses) before NumPy is imported, and its matmul is where the time goes.

Timing follows nlflow bench: one warm-up, then --reps timed runs; median, min,
max; peak RSS sampled every 5 ms during the timed runs. Prints one JSON line;
when numpy or MNE cannot be imported it prints {"skipped": reason} and exits 0.
"""
import json
import os
import sys

import peerlib

MAX_SECONDS_PER_RUN = 120.0
MODES = ["one_sample_t", "two_sample_mean", "correlation_pearson"]
NO_EQUIVALENT = {
    "two_sample_mean": "MNE has no two-sample permutation test (permutation_cluster_test is a "
                       "cluster-level F test)",
    "correlation_pearson": "MNE has no correlation permutation test",
}


def available_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    args = peerlib.arguments(__doc__, "folder with data.npy and permute.json", MODES)
    if args.mode in NO_EQUIVALENT:
        return peerlib.skip(NO_EQUIVALENT[args.mode])
    peerlib.set_blas_threads(args.threads)
    try:
        import numpy as np
        import mne
        from mne.stats import permutation_t_test
    except ImportError as e:
        return peerlib.skip_import(e)
    mne.set_log_level("ERROR")

    with open(os.path.join(args.data, "permute.json")) as f:
        spec = json.load(f)
    n_perm, seed = int(spec["n_permutations"]), int(spec["seed"])
    baseline = peerlib.rss_now()

    def load():
        return np.load(os.path.join(args.data, "data.npy"))

    def test(X):
        return permutation_t_test(X, n_permutations=n_perm, tail=0, n_jobs=1, seed=seed)

    def run():
        return test(load())

    X = load()
    V = X.shape[1]
    # _max_stat holds up to 5 float64 N x V arrays at once (the means, the
    # standard deviations, |means|, stds / sqrt(n) and their ratio); measured
    # peak at 30 x 5000 x 1000: 4.2 of them.
    working_set = 5 * 8 * n_perm * V
    if working_set > available_memory() / 2:
        # what it would take if it fitted: a run on a slice small enough to fit
        # (2000 voxels; a lower bound, small slices run from cache)
        estimate = peerlib.per_run_estimate(lambda voxels, X=X: test(np.ascontiguousarray(X[:, :voxels])),
                                            V, probe_voxels=2000)
        return peerlib.skip(f"too much memory (about {working_set / 2**30:.0f} GiB of float64 "
                            f"N x V arrays: MNE materialises every permutation's statistics; "
                            f"it would take at least {estimate:.0f} s per run)")
    estimate = peerlib.per_run_estimate(lambda voxels, X=X: test(np.ascontiguousarray(X[:, :voxels])), V)
    del X
    if estimate is not None and estimate > MAX_SECONDS_PER_RUN:
        return peerlib.skip(f"too slow (estimated {estimate:.0f} s per run)")
    return peerlib.measure_and_print(
        run, args.reps, args.mode,
        f"MNE {mne.__version__} permutation_t_test (own RNG, float64) + numpy {np.__version__}",
        baseline, estimated_s=estimate)


if __name__ == "__main__":
    sys.exit(main())
