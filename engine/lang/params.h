/* params.h — filling a node's params struct from YAML through its parameter
 * table (engine-internal; node.h has the table types). */
#ifndef NF_PARAMS_H
#define NF_PARAMS_H

#include "node.h"
#include "ytree.h"

/* Parse v into the field of p inside params. On error adds one diagnostic
 * (located at v, naming node) and returns NF_EINVAL; the field keeps its
 * previous value. `base_dir` resolves relative NF_P_PATH values. */
int nf_param_set(const struct nf_param *p, void *params, const struct nf_ynode *v,
                 const char *node, const char *base_dir, struct nf_diags *d);
/* Parse a number from a scalar: strict (whole string), finite. */
bool nf_parse_double(const char *s, double *out);
bool nf_parse_int64(const char *s, int64_t *out);
bool nf_parse_bool(const char *s, bool *out);

#endif
