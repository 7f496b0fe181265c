#!/usr/bin/env python3
"""nltools_table.py - times nltools' own functions on the bench's data: issue 20's table.

Not a peer that `nlflow bench` runs (nothing in the build or `make check` needs
it): issue 20 compares nlflow with nltools' functions themselves, and nltools
in the form that has them (cosanlab/nltools 0.5, with nltools.algorithms) is
not on PyPI. Install it from its repository into a virtual environment and run
this script with that interpreter, or name it in NLFLOW_NLTOOLS_PYTHON.

It reads the files the bench writes for the conditions it compares with:

  --ridge DIR       X.npy (n x p) and Y.npy (n x V) of a ridge condition
                    (`nlflow bench --run-condition 'ridge/...' --size n,V,p --prepare`)
  --inference DIR   data.npy (subjects x V) and permute.json (n_permutations,
                    seed) of an inference condition

and times, with the data already in memory (loaded once, float32 as written):

  per_voxel   nltools.algorithms.ridge.solve_ridge_cv(X, Y, alphas=logspace(-2, 4, 20),
              cv=5, local_alpha=True): one alpha per voxel, the grid of the bench's
              ridge rows (with --per-voxel-grid nltools: its default [0.1, 1, 10])
  shared      nltools.algorithms.ridge.ridge_cv(X, Y, cv=5): the legacy API, one
              alpha for all voxels from its default 20-point grid logspace(-2, 4, 20)
  one_sample  nltools.algorithms.inference.one_sample_permutation_test(data,
              n_permute=N, tail=2, parallel='cpu', n_jobs=--threads, random_state=seed):
              sign flips, the mean, float64, a joblib task per permutation

Each: one warm-up, then --reps timed runs (--reps-shared for ridge_cv, which
takes about a minute a run); median, min, max of the wall time, and the median
CPU time (user + system) of this process and its worker processes over a run.
BLAS threads are set to --threads before NumPy is imported.

Issue 20's table, the data first, then nlflow and this script in turn (A B A B):

  S=/tmp/bench-scratch
  build/nlflow bench --run-condition 'ridge/ridge[vs_numpy,n=500,v=20000,p=50]' \
      --scratch $S --size 500,20000,50 --prepare        # also the shared row's data
  build/nlflow bench --run-condition 'inference/one_sample[mean,vs_numpy,n=30,v=5000,N=1000]' \
      --scratch $S --size 50,20000,5000 --prepare
  build/nlflow bench --run-condition 'ridge/ridge[shared,vs_numpy,n=500,v=20000,p=50]' \
      --scratch $S --size 500,20000,50 --reps 5 --threads 2   # node_median_s, process_median_s
  PY bench/peers/nltools_table.py --ridge $S/ridge/500x20000x50 \
      --inference $S/inference/50x20000x5000 --threads 2

Prints one JSON line: {"peer": ..., "threads": T, "per_voxel": {...}, ...}.
When nltools cannot be imported it prints {"skipped": reason} and exits 0.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peerlib  # noqa: E402


def process_tree_cpu_s():
    """User + system seconds of this process, its live descendants (joblib's
    workers) and its reaped children."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0.0, [os.getpid()], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick   # utime, stime
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue   # a worker that exited meanwhile
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + ru.ru_utime + ru.ru_stime


def measure(run, reps):
    run()   # warm-up: imports, joblib's workers, BLAS buffers
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = process_tree_cpu_s(), time.perf_counter()
        run()
        wall.append(time.perf_counter() - t0)
        cpu.append(process_tree_cpu_s() - c0)
    return {"median_s": statistics.median(wall), "min_s": min(wall), "max_s": max(wall),
            "times_s": wall, "cpu_median_s": statistics.median(cpu), "cpu_s": cpu, "reps": reps}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ridge", help="folder with X.npy and Y.npy")
    ap.add_argument("--inference", help="folder with data.npy and permute.json")
    ap.add_argument("--only", default="per_voxel,shared,one_sample",
                    help="comma-separated workloads (per_voxel, shared, one_sample)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--reps-shared", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="BLAS threads and joblib workers")
    ap.add_argument("--per-voxel-grid", choices=["bench", "nltools"], default="bench",
                    help="solve_ridge_cv's alphas: the bench's 20 or nltools' default 3")
    args = ap.parse_args()
    peerlib.set_blas_threads(args.threads)
    try:
        import numpy as np
        import nltools
        from nltools.algorithms.ridge import ridge_cv, solve_ridge_cv
        from nltools.algorithms.inference import one_sample_permutation_test
    except ImportError as e:
        other = os.environ.get("NLFLOW_NLTOOLS_PYTHON")
        if other and os.path.realpath(other) != os.path.realpath(sys.executable):
            os.execv(other, [other] + sys.argv)
        return peerlib.skip_import(e)

    only = set(args.only.split(","))
    result = {"peer": f"nltools {nltools.__version__}, numpy {np.__version__}, "
                      f"Python {sys.version.split()[0]}", "threads": args.threads}
    if args.ridge and only & {"per_voxel", "shared"}:
        X = np.load(os.path.join(args.ridge, "X.npy"))
        Y = np.load(os.path.join(args.ridge, "Y.npy"))
        result["ridge_size"] = [X.shape[0], Y.shape[1], X.shape[1]]
        if "per_voxel" in only:
            grid = np.logspace(-2, 4, 20) if args.per_voxel_grid == "bench" else [0.1, 1.0, 10.0]
            result["per_voxel_alphas"] = len(grid)
            result["per_voxel"] = measure(
                lambda: solve_ridge_cv(X, Y, alphas=grid, cv=5, local_alpha=True), args.reps)
        if "shared" in only:
            out = {}

            def shared():
                out.update(ridge_cv(X, Y, cv=5))
            result["shared"] = measure(shared, args.reps_shared)
            result["shared"]["alpha"] = float(out["alpha"])
    if args.inference and "one_sample" in only:
        data = np.load(os.path.join(args.inference, "data.npy"))
        with open(os.path.join(args.inference, "permute.json")) as f:
            perm = json.load(f)
        result["one_sample_size"] = [data.shape[0], data.shape[1], perm["n_permutations"]]
        result["one_sample"] = measure(
            lambda: one_sample_permutation_test(data, n_permute=perm["n_permutations"], tail=2,
                                                parallel="cpu", n_jobs=args.threads,
                                                random_state=perm["seed"]), args.reps)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
