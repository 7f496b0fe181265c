#!/usr/bin/env python3
"""permute_nilearn.py - the nilearn peer of nlflow's `inference` benchmark rows on a voxel grid (TFCE, clusters).

Reads data.nii (a 4D image: one volume per subject), mask.nii and
permute.json (n_permutations N, seed, cluster_p, probe_permutations) from
--data and runs nilearn 0.14's permuted_ols on the masked data: a one-sample
sign-flip test (tested_vars a column of ones, model_intercept=False,
two_sided_test=True), its t statistic and max-statistic FWE, like the nlflow
permute node with test one_sample, stat t, tail two.

  --mode one_sample_t          plain max-t FWE (tfce=False, no threshold)
  --mode one_sample_t_tfce     tfce=True (dh='auto', E 0.5, H 2, face connectivity)
  --mode one_sample_t_cluster  threshold=2 * cluster_p: nilearn's two-sided
                               p-scale threshold, t.isf(threshold / 2, n - 1),
                               the same T as nlflow's one-sided cluster_p

nilearn labels every one of its 100 thresholds per permutation with
scipy.ndimage, about 5 s per permutation at 230k voxels on this machine:
N = 5000 permutations would take 7 hours.
So each run times permuted_ols twice, with n_perm = 0 (the observed maps and
the setup) and with n_perm = probe_permutations (20), and reports
the time of N permutations extrapolated linearly from those two points:
t(0) + (t(P) - t(0)) * N / P; the measured times are in the JSON line too.
--reps is capped at 1 (one warm-up run of n_perm = 0 first); n_jobs is 1 and
BLAS threads are --threads, as for the other peers. nilearn draws its own
sign flips, so only the time compares.

nilearn is not a Debian package: the harness runs peers with /usr/bin/python3,
so when nilearn is not importable there this script re-runs itself with the
interpreter named by NLFLOW_NILEARN_PYTHON (a virtual environment:
python3 -m venv /tmp/nl && /tmp/nl/bin/pip install 'nilearn==0.14.*'), and
prints {"skipped": reason} when there is none.
"""
import json
import os
import sys
import time

import peerlib

MODES = ["one_sample_t", "one_sample_t_tfce", "one_sample_t_cluster"]


def main():
    args = peerlib.arguments(__doc__, "folder with data.nii, mask.nii and permute.json", MODES)
    peerlib.set_blas_threads(args.threads)
    try:
        import nilearn
        import numpy as np
        from nilearn.maskers import NiftiMasker
        from nilearn.mass_univariate import permuted_ols
    except ImportError as e:
        other = os.environ.get("NLFLOW_NILEARN_PYTHON")
        if other and os.path.realpath(other) != os.path.realpath(sys.executable) and os.access(other, os.X_OK):
            os.execv(other, [other] + sys.argv)
        return peerlib.skip(f"{e.name or 'nilearn'} is not importable by {sys.executable} "
                            "(set NLFLOW_NILEARN_PYTHON to a Python with nilearn 0.14)")
    with open(os.path.join(args.data, "permute.json")) as f:
        cfg = json.load(f)
    N, seed, probe = cfg["n_permutations"], cfg["seed"], cfg["probe_permutations"]
    baseline = peerlib.rss_now()
    masker = NiftiMasker(os.path.join(args.data, "mask.nii"), standardize=None).fit()
    Y = masker.transform(os.path.join(args.data, "data.nii")).astype(np.float64)
    ones = np.ones((Y.shape[0], 1))
    extra = {}
    if args.mode == "one_sample_t_tfce":
        extra = {"tfce": True, "masker": masker}
    elif args.mode == "one_sample_t_cluster":
        extra = {"threshold": 2 * cfg["cluster_p"], "masker": masker}

    def run(n_perm):
        t0 = time.perf_counter()
        permuted_ols(ones, Y, model_intercept=False, n_perm=n_perm, two_sided_test=True, random_state=seed,
                     n_jobs=1, verbose=0, output_type="dict", **extra)
        return time.perf_counter() - t0

    run(0)   # warm-up
    sampler = peerlib.RssSampler()
    sampler.start()
    fixed = run(0)
    probed = run(probe)
    peak = sampler.stop()
    estimate = fixed + (probed - fixed) * N / probe
    print(json.dumps({
        "peer": f"nilearn {nilearn.__version__} permuted_ols, Python {sys.version.split()[0]}",
        "mode": args.mode,
        "times_s": [estimate],
        "median_s": estimate,
        "min_s": estimate,
        "max_s": estimate,
        "extrapolated_from": {"permutations": probe, "seconds": probed, "seconds_without_permutations": fixed,
                              "to_permutations": N},
        "rss_baseline": baseline,
        "rss_peak_sampled": peak,
        "rss_peak_getrusage": peerlib.resource.getrusage(peerlib.resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
