"""peerlib.py - what every benchmark peer shares: measuring like `nlflow bench`
(one warm-up, then --reps timed runs; median, min, max; peak RSS sampled every
5 ms during the timed runs and getrusage's whole-process peak), the common
command line, BLAS thread settings, skipping, and the "too slow" probe.
"""
import argparse
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


def arguments(doc, data_help, modes, threads_help="BLAS threads (0: NumPy's default)"):
    """The peer protocol's command line (bench/peers/README.md)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data", required=True, help=data_help)
    ap.add_argument("--mode", required=True, choices=modes)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help=threads_help)
    return ap.parse_args()


def set_blas_threads(threads):
    """Must run before NumPy is imported: BLAS reads these when it loads."""
    if threads > 0:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)


def skip(why):
    print(json.dumps({"skipped": why}))
    return 0


def skip_import(e):
    return skip(f"{e.name or 'a module'} is not importable by {sys.executable}")


def per_run_estimate(run_slice, voxels, probe_voxels=20000):
    """Seconds one run would take, from a run on the first probe_voxels voxels
    (smaller probes underestimate: caches flatter them); None when small."""
    if voxels <= probe_voxels:
        return None
    t0 = time.perf_counter()
    run_slice(probe_voxels)
    return (time.perf_counter() - t0) * voxels / probe_voxels


def measure_and_print(run, reps, mode, peer, baseline, warmup=True, **extra):
    """Warm-up (unless warmup is False: runs of minutes), timed runs, one JSON
    line; returns the exit status."""
    if warmup:
        run()
    sampler = RssSampler()
    sampler.start()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    peak = sampler.stop()
    result = {
        "peer": f"{peer}, Python {sys.version.split()[0]}",
        "mode": mode,
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
    }
    result.update(extra)
    result.update({
        "rss_baseline": baseline,
        "rss_peak_sampled": peak,
        "rss_peak_getrusage": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    })
    print(json.dumps(result))
    return 0
