/* use.h — pipeline files used by other pipeline files (`type: use`, use.c). */
#ifndef NF_USE_H
#define NF_USE_H

#include <stddef.h>

#include "pipeline.h"
#include "ytree.h"

/* The pipeline's `nodes:` mapping (its ${} substituted) with every use node
 * replaced by the namespaced nodes of the file it uses; p->used_files lists
 * those files. *used_file gets, per node of the result, 1 + the index of the
 * used file it comes from (0: the pipeline file). The nodes are moved out of
 * `nodes`; the caller frees the result. Problems go to d. NULL: out of memory. */
struct nf_ynode *nf_uses_expand(struct nf_pipeline *p, struct nf_ynode *nodes, size_t **used_file,
                                struct nf_diags *d);
/* Errors d->v[from..] located in a used file say which use node brought it in. */
void nf_uses_annotate(const struct nf_pipeline *p, struct nf_diags *d, size_t from);
/* A `requires:` condition (">=0.2", ">=0.2, <1") against this version: 1 met
 * (or absent), 0 not met, -1 malformed; both reported. */
int nf_requires_check(const struct nf_ynode *req, const char *version, struct nf_diags *d);
/* Where a `use:` path written in the file `from` is found (beside it, then
 * NLFLOW_PATH's folders, then nlflow's own templates): owned, or NULL with
 * *looked (owned, may be NULL) listing the folders tried. */
char *nf_use_find(const char *from, const char *path, char **looked);

#endif
