/* failed_run.h — what a failed run leaves in its outputs folder
 * (engine-internal): the previous run's results stay, but their summaries say
 * that they are not this run's.
 */
#ifndef NF_FAILED_RUN_H
#define NF_FAILED_RUN_H

#include "core/error.h"

/* Mark every summary (summary.json, *_summary.json) directly in outputs_dir
 * as left by an earlier run: its "Status" becomes {"state": "failed", ...}
 * with the failing node, its place and the message of `why`. Best effort (a
 * summary that cannot be rewritten is left as it is, with a warning); the
 * rewrite is atomic. Returns how many were marked. */
int nf_outputs_mark_failed(const char *outputs_dir, const struct nf_error *why);

#endif
