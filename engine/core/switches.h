/* switches.h — the NLFLOW_* environment switches, read once.
 *
 * Debugging, testing and benchmarking aids are set from the environment, never
 * from pipelines. They are read together, once (at the first call of
 * nf_switches(), from any thread), into one struct, so that each is documented
 * here and nowhere else reads the environment for them:
 *
 *   NLFLOW_DEVICES_FILE      placement rates file (cost.h) instead of
 *                            $XDG_CACHE_HOME or ~/.cache/nlflow/devices.json
 *   NLFLOW_CACHE_MAX_PAGES   SQLite max_page_count of an opened cache: a small
 *                            value makes the cache "full" (tests of SQLITE_FULL)
 *   NLFLOW_CACHE_FS_MAGIC    pretend the cache's folder is on the file system
 *                            with this statfs magic (tests of the network-FS refusal)
 *   NLFLOW_CACHE_READONLY    set and not "0": open the cache read-only (tests of
 *                            a cache that cannot be written)
 *   NLFLOW_GPU_RESIDENT      "0": copy inputs to the GPU at each use instead of
 *                            keeping them resident (gpu_context.c)
 *   NLFLOW_GPU_PROFILE       set and not "0": the GPU nodes wait for the device
 *                            at each phase mark and print each phase's wall
 *                            time when they give the context back (nf_gpu_phase;
 *                            it removes the overlap, so totals exceed a plain run)
 *   NLFLOW_PERM_TILE         reference|gemm|avx2|avx512: force permute's tile
 *                            kernel (comparing them in benchmarks)
 *   NLFLOW_PERM_TABLES       "0": permute's fused tile kernels sum rows of two
 *                            values (sign flips, group labels) by their GEMM
 *                            instead of tables of partial sums (benchmarks)
 *   NLFLOW_GLM_TILE          "0": permute's glm test computes its GEMM values
 *                            by the BLAS, then the epilogue over them, instead
 *                            of the fused tile kernel (benchmarks)
 *   NLFLOW_GLM_I8            "0": the fused glm tile sums every row in float,
 *                            not the moved nuisance rows in bytes (benchmarks)
 *   NLFLOW_KILL_AT           N > 0: SIGKILL at the N-th fault point of the run
 *                            (tests of resuming after a crash, util.h)
 *   NLFLOW_KILL_VERBOSE      set: say where the kill happened on stderr
 *   SOURCE_DATE_EPOCH        seconds since 1970 (reproducible-builds.org): the
 *                            date a report states instead of now, so that two
 *                            runs write the same bytes (the test suite sets it)
 *
 * The fault-injection switches are read once too, but by their own modules'
 * init, because nf_switches() itself allocates: NLFLOW_FAIL_ALLOC,
 * NLFLOW_FAIL_ALLOC_TRACE, NLFLOW_ALLOC_STATS (core/alloc.h) and
 * NLFLOW_FAIL_WRITE, NLFLOW_WRITE_STATS (core/fault.h).
 */
#ifndef NF_SWITCHES_H
#define NF_SWITCHES_H

#include <stdbool.h>

struct nf_switches {
    const char *devices_file;         /* NULL when unset or empty */
    bool cache_max_pages_set;
    long long cache_max_pages;
    bool cache_fs_magic_set;
    unsigned long cache_fs_magic;
    bool cache_readonly;
    bool gpu_resident;                /* true unless NLFLOW_GPU_RESIDENT=0 */
    bool gpu_profile;                 /* NLFLOW_GPU_PROFILE set and not "0" */
    const char *perm_tile;            /* NULL when unset */
    bool perm_tables;                 /* NLFLOW_PERM_TABLES unset or not "0" */
    bool glm_tile;                    /* NLFLOW_GLM_TILE unset or not "0" */
    bool glm_i8;                      /* NLFLOW_GLM_I8 unset or not "0" */
    long kill_at;                     /* 0: off */
    bool kill_verbose;
    bool source_date_set;
    long long source_date;            /* SOURCE_DATE_EPOCH, when set */
};

/* The switches, read from the environment at the first call. */
const struct nf_switches *nf_switches(void);
/* Read them again: for tests that setenv() between cases (single-threaded). */
void nf_switches_reload(void);

#endif
