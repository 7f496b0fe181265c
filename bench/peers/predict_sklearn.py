#!/usr/bin/env python3
"""predict_sklearn.py - the scikit-learn peer of nlflow's `predict` benchmark.

Reads what bench/domain_predict.c wrote into --data: data.nii (4D), mask.nii,
atlas.nii (roi), labels.tsv (column `condition`), folds.tsv (column `fold`,
sklearn StratifiedKFold(k, shuffle=True, random_state=seed) as nlflow computes
it) and bench.json (images, voxels, folds, seed, parcels, radius_mm). Masks the
data in nltools' voxel order (numpy C order of the mask's nonzero voxels) and
decodes with Pipeline(StandardScaler(), model) on exactly the folds of
folds.tsv, doing the work nltools' BrainData.predict does:

  --mode whole_brain_svm        every fold (fit, predict, score, coef_) and a
                                refit on all images; LinearSVC(dual='auto',
                                max_iter=10000) (dual=True before sklearn 1.3)
  --mode roi_svm                the same for each parcel of atlas.nii
  --mode searchlight_svm        per sphere (every voxel within radius_mm in world
  --mode searchlight_ridge_classifier   coordinates, centre included, from
                                NearestNeighbors(ball_tree).radius_neighbors_graph
                                as nltools) cross_val_score(...).mean(); RidgeClassifier()
  --mode searchlight_ridge_classifier_sampled   the same, timed on every s-th
                                sphere (about 2000) and scaled to all of them

Searchlight spheres run in joblib processes, --threads of them (nltools'
n_jobs), each with single-threaded BLAS; the neighbourhoods are computed
outside the timing (nltools caches them on disk). Other modes use --threads
BLAS threads, set before NumPy is imported.

The result line also says whether StratifiedKFold(shuffle=True,
random_state=seed) gives the folds of folds.tsv (folds_match_sklearn) and the
mean score, for a sanity check against nlflow's. Timing follows nlflow bench
(peerlib): one warm-up, then --reps timed runs, the whole run (reading the
NIfTI files included). When numpy, nibabel or scikit-learn cannot be imported
it prints {"skipped": reason} and exits 0.
"""
import json
import os
import resource
import statistics
import sys
import time

import peerlib

MODES = ["whole_brain_svm", "roi_svm", "searchlight_svm", "searchlight_ridge_classifier",
         "searchlight_ridge_classifier_sampled"]
SAMPLED_SPHERES = 2000


def main():
    args = peerlib.arguments(__doc__, "folder with data.nii, mask.nii, labels.tsv, folds.tsv, bench.json", MODES)
    searchlight = args.mode.startswith("searchlight")
    # searchlight: parallel over spheres in processes, each single-threaded
    peerlib.set_blas_threads(1 if searchlight else args.threads)
    try:
        import numpy as np
        import nibabel as nib
        import sklearn
        from joblib import Parallel, delayed
        from sklearn.base import clone
        from sklearn.linear_model import RidgeClassifier
        from sklearn.model_selection import PredefinedSplit, StratifiedKFold, cross_val_score
        from sklearn.neighbors import NearestNeighbors
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import LinearSVC
    except ImportError as e:
        return peerlib.skip_import(e)

    with open(os.path.join(args.data, "bench.json")) as f:
        meta = json.load(f)

    def read_column(name):
        with open(os.path.join(args.data, name)) as f:
            return [line.rstrip("\n") for line in f][1:]

    y = np.array(read_column("labels.tsv"))
    folds = np.array([int(v) for v in read_column("folds.tsv")])
    k = meta["folds"]
    splits = list(PredefinedSplit(folds).split())
    sk_folds = np.empty_like(folds)
    for f, (_, test) in enumerate(StratifiedKFold(k, shuffle=True, random_state=meta["seed"]).split(folds, y)):
        sk_folds[test] = f
    folds_match = bool((sk_folds == folds).all())

    # nltools' LinearSVC(dual='auto') needs scikit-learn >= 1.3; before it,
    # dual=True is what 'auto' picks when features outnumber training
    # samples, as in every condition here (whole brain, parcels, spheres)
    sk_version = tuple(int(v) for v in sklearn.__version__.split(".")[:2])
    dual = "auto" if sk_version >= (1, 3) else True
    model = LinearSVC(dual=dual, max_iter=10000) if "svm" in args.mode else RidgeClassifier()
    pipe = Pipeline([("scaler", StandardScaler()), ("model", model)])

    mask_img = nib.load(os.path.join(args.data, "mask.nii"))
    mask = np.asarray(mask_img.dataobj) != 0

    def load_X():
        data = np.asarray(nib.load(os.path.join(args.data, "data.nii")).dataobj, dtype=np.float32)
        return np.ascontiguousarray(data[mask].T)   # images x voxels, np.nonzero (C) order

    def folds_and_refit(X):
        """nltools whole_brain: per fold fit, predict, score, coef_; then a refit."""
        scores, coefs = [], []
        for train, test in splits:
            est = clone(pipe).fit(X[train], y[train])
            scores.append(float((est.predict(X[test]) == y[test]).mean()))
            coefs.append(est.named_steps["model"].coef_)
        clone(pipe).fit(X, y)
        return float(np.mean(scores))

    extra = {"folds_match_sklearn": folds_match}
    if args.mode == "whole_brain_svm":
        def run():
            return folds_and_refit(load_X())
    elif args.mode == "roi_svm":
        atlas = np.asarray(nib.load(os.path.join(args.data, "atlas.nii")).dataobj)[mask].astype(np.int64)
        rois = [r for r in np.unique(atlas) if r != 0]

        def run():
            X = load_X()
            return float(np.mean([folds_and_refit(X[:, atlas == r]) for r in rois]))
    else:
        # world coordinates of the in-mask voxels, nltools' neighbourhoods
        ijk = np.array(np.nonzero(mask)).T
        xyz = ijk @ mask_img.affine[:3, :3].T + mask_img.affine[:3, 3]
        graph = NearestNeighbors(radius=meta["radius_mm"], algorithm="ball_tree").fit(xyz) \
            .radius_neighbors_graph(xyz, mode="connectivity")
        neighbours = [graph.indices[graph.indptr[i]:graph.indptr[i + 1]] for i in range(graph.shape[0])]
        centres = np.arange(len(neighbours))
        if args.mode.endswith("_sampled") and len(centres) > SAMPLED_SPHERES:
            centres = centres[::len(centres) // SAMPLED_SPHERES]
            extra.update(spheres=len(neighbours), sampled_spheres=len(centres))
        n_jobs = max(args.threads, 1)
        parallel = Parallel(n_jobs=n_jobs)
        chunks = np.array_split(centres, n_jobs * 8)

        def score_chunk(X, spheres):
            out = []
            for nb in spheres:
                if len(nb) < 2:
                    out.append(np.nan)
                    continue
                try:
                    out.append(cross_val_score(clone(pipe), X[:, nb], y, cv=splits).mean())
                except Exception:   # as nltools: a failing sphere is NaN
                    out.append(np.nan)
            return out

        def run():
            X = load_X()
            spheres = [[neighbours[c] for c in ch] for ch in chunks]
            if n_jobs == 1:
                parts = [score_chunk(X, sp) for sp in spheres]
            else:
                parts = parallel(delayed(score_chunk)(X, sp) for sp in spheres)
            return float(np.nanmean(np.concatenate([np.asarray(p, dtype=float) for p in parts])))

    # as peerlib.measure_and_print, but the warm-up's score is kept and a
    # sampled searchlight's times are scaled to every sphere
    scale = extra.get("spheres", 1) / extra.get("sampled_spheres", 1)
    baseline = peerlib.rss_now()
    extra["mean_score"] = run()
    sampler = peerlib.RssSampler()
    sampler.start()
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * scale)
    peak = sampler.stop()
    result = {"peer": f"scikit-learn {sklearn.__version__} Pipeline(StandardScaler, {type(model).__name__}) "
                      f"+ numpy {np.__version__} + nibabel {nib.__version__}, Python {sys.version.split()[0]}",
              "mode": args.mode, "times_s": times, "median_s": statistics.median(times),
              "min_s": min(times), "max_s": max(times), "scaled_by": scale}
    result.update(extra)
    result.update({"rss_baseline": baseline, "rss_peak_sampled": peak,
                   "rss_peak_getrusage": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
