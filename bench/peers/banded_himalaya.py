"""banded_himalaya.py - peer of the ridge domain's banded rows: himalaya 0.4's
BandedRidgeCV (numpy backend, solver random_search) on DATA/X.npy (n x p) and
DATA/Y.npy (n x V), three bands in the ratio 20 : 100 : 300 of p, the candidate
band weights of DATA/gammas.npy given as solver_params n_iter (the same rows
nlflow is given as `gammas`), alphas logspace(-2, 4, 20), score r2_score,
5-fold contiguous KFold, no intercept: what the nlflow condition computes.

Above 4000 voxels a fit takes many minutes on a small machine: the script then
times fits on the first 2000 and 4000 voxels (one each, no warm-up) and
extrapolates linearly in the voxels (the per-candidate SVDs are the constant
term), and says so ("extrapolated_from"; when the two probes' times are not
in line, e.g. on a busy machine, it scales the larger probe proportionally and
says so in "extrapolation"). When the nlflow condition left its
output folder in DATA/nlflow-outputs.txt, it reports over the voxels it fit
the share with the same chosen candidate and alpha (nlflow's band_alpha and
alpha against exp(-deltas_) and best_alphas_, relative 1e-4) and the largest
difference of the chosen score (nlflow's score against cv_scores_ at
himalaya's candidate).

himalaya is not a Debian package: when /usr/bin/python3 cannot import it the
script re-runs itself with the interpreter named by NLFLOW_HIMALAYA_PYTHON or
else NLFLOW_NILEARN_PYTHON (a virtual environment with himalaya 0.4), else it
prints {"skipped": reason}.
"""
import glob
import json
import os
import sys
import time

import peerlib

MODES = ["banded"]
PROBES = (2000, 4000)


def bands(p):
    e1 = p * 20 // 420
    e2 = e1 + p * 100 // 420
    groups = [0] * e1 + [1] * (e2 - e1) + [2] * (p - e2)
    return groups


def nlflow_outputs(data, np):
    """alpha, score, band_alpha (bands x V) of the nlflow condition, or None."""
    try:
        with open(os.path.join(data, "nlflow-outputs.txt")) as f:
            folder = f.read().strip()
    except OSError:
        return None
    found = {}
    for key, stat in (("alpha", "alpha"), ("score", "score"), ("band_alpha", "bandAlpha")):
        files = glob.glob(os.path.join(folder, "*_stat-%s.tsv" % stat))
        if len(files) != 1:
            return None
        found[key] = np.loadtxt(files[0], delimiter="\t", skiprows=1, ndmin=2)
    return found


def main():
    args = peerlib.arguments(__doc__, "folder with X.npy, Y.npy, gammas.npy", MODES)
    peerlib.set_blas_threads(args.threads)
    try:
        import numpy as np
        import himalaya
        from himalaya.backend import set_backend
        from himalaya.ridge import BandedRidgeCV
        from himalaya.scoring import r2_score
    except ImportError as e:
        for var in ("NLFLOW_HIMALAYA_PYTHON", "NLFLOW_NILEARN_PYTHON"):
            other = os.environ.get(var)
            if other and os.path.realpath(other) != os.path.realpath(sys.executable):
                os.execv(other, [other] + sys.argv)
        return peerlib.skip(f"{e.name or 'himalaya'} is not importable by {sys.executable} "
                            "(set NLFLOW_HIMALAYA_PYTHON to a Python with himalaya 0.4)")
    from sklearn.model_selection import KFold
    set_backend("numpy", on_error="raise")
    baseline = peerlib.rss_now()
    X = np.load(os.path.join(args.data, "X.npy")).astype(np.float32)
    Y = np.load(os.path.join(args.data, "Y.npy")).astype(np.float32)
    gammas = np.load(os.path.join(args.data, "gammas.npy")).astype(np.float32)
    alphas = np.logspace(-2, 4, 20).astype(np.float32)
    groups = np.asarray(bands(X.shape[1]))
    V = Y.shape[1]
    fitted = {}

    def fit(voxels):
        model = BandedRidgeCV(groups=groups, cv=KFold(5), solver="random_search",
                              solver_params=dict(n_iter=gammas, alphas=alphas, score_func=r2_score,
                                                 progress_bar=False))
        model.fit(X, Y[:, :voxels])
        fitted["model"] = model
        return model

    extra = {}
    if V > PROBES[1]:
        t = []
        for probe in PROBES:
            t0 = time.perf_counter()
            fit(probe)
            t.append(time.perf_counter() - t0)
        est = t[0] + (t[1] - t[0]) * (V - PROBES[0]) / (PROBES[1] - PROBES[0])
        extra["extrapolated_from"] = {str(PROBES[0]): t[0], str(PROBES[1]): t[1]}
        if not t[0] <= t[1] <= 2 * t[0]:
            # a busy machine can make the smaller probe the slower one: then the
            # line through both means nothing; scale the larger probe instead
            est = t[1] * V / PROBES[1]
            extra["extrapolation"] = "proportional to the larger probe (the probes' times were not linear)"

        def run():
            pass
        result_times = [est]
    else:
        result_times = None

        def run():
            fit(V)
    model = None
    if result_times is None:
        # measure like the harness, then compare the last fit
        import io
        import contextlib
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            peerlib.measure_and_print(run, args.reps, args.mode, "", baseline)
        measured = json.loads(buf.getvalue().strip().splitlines()[-1])
        model = fitted["model"]
    else:
        model = fitted["model"]
        measured = {"times_s": result_times, "median_s": result_times[0], "min_s": result_times[0],
                    "max_s": result_times[0], "mode": args.mode,
                    "rss_baseline": baseline, "rss_peak_sampled": peerlib.rss_now(),
                    "rss_peak_getrusage": __import__("resource").getrusage(
                        __import__("resource").RUSAGE_SELF).ru_maxrss * 1024}
    measured["peer"] = f"himalaya {himalaya.__version__} BandedRidgeCV (numpy), Python {sys.version.split()[0]}"
    measured.update(extra)

    ours = nlflow_outputs(args.data, np)
    if ours is not None:
        m = model.cv_scores_.shape[1]
        h_band = np.exp(-np.asarray(model.deltas_, dtype=np.float64))      # bands x m
        h_alpha = np.asarray(model.best_alphas_, dtype=np.float64)
        n_band = ours["band_alpha"][:, :m].astype(np.float64)
        n_alpha = ours["alpha"].ravel()[:m].astype(np.float64)
        same = np.all(np.abs(n_band - h_band) <= 1e-4 * np.abs(h_band) + 1e-30, axis=0) & \
            (np.abs(n_alpha - h_alpha) <= 1e-4 * h_alpha)
        # himalaya's score at its chosen candidate is the largest of cv_scores_ to within
        # the float32 epsilon its rule allows; nlflow's score output is the same quantity
        h_best = np.max(np.asarray(model.cv_scores_, dtype=np.float64), axis=0)
        n_score = ours["score"].ravel()[:m].astype(np.float64)
        measured["same_choice"] = float(np.mean(same))
        measured["max_score_diff"] = float(np.max(np.abs(n_score - h_best)))
        measured["compared_voxels"] = int(m)
    print(json.dumps(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
