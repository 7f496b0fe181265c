/* gen.h — documents generated from the node tables: the JSON schema of the
 * pipeline language and one Markdown page per node type (engine-internal). */
#ifndef NF_GEN_H
#define NF_GEN_H

#include <stdio.h>
#include "node.h"

void nf_gen_schema(FILE *out);
void nf_gen_node_markdown(const struct nf_node_type *t, FILE *out);
/* Plain-text help for `nlflow nodes TYPE`. */
void nf_gen_node_help(const struct nf_node_type *t, FILE *out);
/* Write schemas/pipeline.schema.json and docs/nodes/<type>.md under root.
 * Returns 0 or a negative code with err set. */
int nf_gen_all(const char *root, struct nf_error *err);

#endif
