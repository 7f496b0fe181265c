/* fault.h — write errors on demand, for the fault suite (tests/fault/).
 *
 * NLFLOW_FAIL_WRITE=k makes the k-th write of the process fail with ENOSPC
 * (NLFLOW_FAIL_WRITE=k:eio: with EIO), counted over all threads. A write is
 * one output file committed by nf_atomic_commit (TSV, JSON, NIfTI: every
 * file the engine writes goes through it) or one write, truncate or sync of
 * the cache's SQLite database, journal or WAL (results, checkpoints, run
 * records), through a VFS that wraps the default one. NLFLOW_WRITE_STATS=1
 * prints how many writes a run made. Read once; no effect otherwise.
 * (nf_fault_point below is the other injector: a kill at a point.)
 */
#ifndef NF_FAULT_H
#define NF_FAULT_H

/* Read the environment and, when write faults are on, make the faulting
 * VFS SQLite's default. Idempotent; the cache calls it before opening. */
void nf_fault_init(void);
/* Count one write: 0, or the errno it must fail with. */
int nf_write_fault(void);

/* Fault injection for crash tests: when the environment has
 * NLFLOW_KILL_AT=N, the N-th call of nf_fault_point in the process (counted
 * over all threads) kills the process with SIGKILL, as `kill -9` would. Points
 * sit where a crash is most dangerous: inside cache transactions, between a
 * run's outputs and its record, between tasks. No effect otherwise. */
void nf_fault_point(const char *where);

#endif
