/* vars.h — pipeline variables (`params:`, --set) and ${name} substitution. */
#ifndef NF_VARS_H
#define NF_VARS_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline.h"
#include "ytree.h"

/* p->vars from a `params:` mapping, then --set overrides (ov may be NULL).
 * trees: a param may be a list or mapping (a used file's; see nf_var). */
void nf_vars_parse(struct nf_pipeline *p, const struct nf_ynode *params, bool trees,
                   const struct nf_overrides *ov, struct nf_diags *d);
/* Replace ${name} in every scalar below n (keys excluded); node names the
 * node for messages (NULL outside nodes). Marks the variables used. */
void nf_vars_substitute(struct nf_pipeline *p, struct nf_ynode *n, const char *node, struct nf_diags *d);
/* The variable name[0..len), or NULL. */
struct nf_var *nf_var_find(struct nf_pipeline *p, const char *name, size_t len);

#endif
