/* ytree.h — a YAML document as a tree with line/column marks.
 *
 * libyaml's event parser is wrapped into a small tree so that validation can
 * walk the document freely and point every message at the exact scalar.
 * Anchors and aliases are refused (pipelines must be explicit), and so are
 * documents with more than one root.
 */
#ifndef NF_YTREE_H
#define NF_YTREE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

enum nf_ytype { NF_Y_SCALAR, NF_Y_SEQ, NF_Y_MAP };

struct nf_ynode {
    enum nf_ytype type;
    struct nf_loc loc;          /* 1-based line and column */
    char *value;                /* scalar text (owned) */
    bool quoted;                /* scalar was quoted: a string, never a number */
    bool reported;              /* an error about this value was given already (a
                                   reference to a use node that failed): no more */
    size_t n;                   /* items (seq) or pairs (map) */
    struct nf_ynode **items;    /* seq items, or map values */
    struct nf_ynode **keys;     /* map keys (scalars), NULL for seq */
};

/* Parse text; `file` is borrowed into every loc. NULL on error (syntax errors
 * carry the position libyaml reports). An empty document gives NULL with
 * NF_ESYNTAX "the file is empty". */
struct nf_ynode *nf_yaml_parse(const char *text, size_t len, const char *file,
                               struct nf_error *err);
void nf_ynode_free(struct nf_ynode *n);
/* A deep copy (locations kept), or NULL when out of memory. */
struct nf_ynode *nf_ynode_clone(const struct nf_ynode *n);
/* Value for key in a mapping (first occurrence), or NULL. */
struct nf_ynode *nf_ymap_get(const struct nf_ynode *map, const char *key);
/* The node at a dotted path of mapping keys and list indices
 * ("measure.median_s", "conditions.0.name"), or NULL. For JSON files read
 * with nf_yaml_parse (JSON is YAML). */
const struct nf_ynode *nf_ypath(const struct nf_ynode *n, const char *path);
/* The number there (an unquoted scalar that is all number), else NAN. */
double nf_ypath_num(const struct nf_ynode *n, const char *path);
/* The string there (a quoted scalar), else NULL. */
const char *nf_ypath_str(const struct nf_ynode *n, const char *path);
/* "a mapping", "a list", "'text'" for messages. */
void nf_ynode_describe(const struct nf_ynode *n, char *buf, size_t size);

#endif
