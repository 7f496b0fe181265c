/* keys.h — cache keys of node results (engine-internal).
 *
 * A key is an XXH3-128 Merkle hash: a node run's key covers the cache format
 * version, the node type and implementation version, its canonical parameters
 * (every parameter, defaults filled in, so writing a default explicitly does
 * not change the key; paths of files whose content is hashed are left out),
 * and the keys of its inputs. Output port o of a run has key H(run, o). Files
 * enter by content: a loaded file's value key is H(load's parameters, the
 * file's content hash). Keys are computed the same way when planning (for
 * `plan --explain`) and when running.
 */
#ifndef NF_KEYS_H
#define NF_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "cache.h"
#include "node.h"
#include "pipeline.h"
#include <stdio.h>

/* Keys of what flows out of one output port: a single value (whole), or a
 * collection (items[] and whole = the hash of the items). The whole key
 * names the value whatever its shape; whether it is a collection, and of how
 * many items, decides how a consumer maps over it, so where only the run can
 * tell (fixed_effects' one item per subject, and what follows it) the shape
 * stays open (shape_open) until the run's record or its values say. */
struct nf_keyset {
    bool known;
    bool shape_open;            /* is_coll and n not known yet: consumers that
                                   might map over it are keyed at run time */
    bool is_coll;
    int item_kind;              /* a collection's items (enum nf_kind; NF_KIND_NONE:
                                   not known, which decides stacking) */
    struct nf_key whole;
    size_t n;
    struct nf_key *items;       /* owned, n entries when is_coll */
};
void nf_keyset_release(struct nf_keyset *k);
/* whole := H("collection", items...) */
void nf_keyset_seal(struct nf_keyset *k);

/* Key of the node's type, version and canonical parameters. */
struct nf_key nf_key_node_base(const struct nf_node_inst *node);
/* Run key from the base and the inputs' keys (in edge order), and output keys. */
struct nf_key nf_key_combine(struct nf_key base, const struct nf_key *inputs, size_t n);
struct nf_key nf_key_output(struct nf_key run, int port);
/* Value key of a loaded file (label: the item's label in a collection, or NULL). */
struct nf_key nf_key_file_value(struct nf_key load_base, struct nf_key content, const char *label);

/* The node's parameters as a JSON object {"name": value, ...} (for --explain
 * records); owned string, NULL on OOM. */
char *nf_params_json(const struct nf_node_inst *node);


/* ---- keys of a whole pipeline ---- */
struct nf_node_keys {
    bool known;                 /* run keys known (else: only at run time) */
    bool reads_files;           /* a file reader (load): outputs keyed by content */
    bool mapped;
    size_t n_runs;              /* 1, or one run per item */
    struct nf_key *runs;        /* owned: run keys (the run record's key) */
    struct nf_keyset *outs;     /* owned: per output port */
    size_t n_outs;
    size_t n_cached;            /* runs whose record is in the cache */
    char *components;           /* owned: "version 1\nparam x=...\ninput y=KEY\n" */
};
void nf_node_keys_release(struct nf_node_keys *k);

/* Compute node ni's keys from its sources' keys (keys[src].outs), its shapes
 * and, for file readers, the files as they are now (hashed through the cache's
 * memo). An output whose shape the plan cannot know takes it from the node's
 * cached run record when there is one, else stays open (shape_open). Unknown
 * inputs, and open ones the node might map over, leave k->known false. */
int nf_node_keys_compute(const struct nf_pipeline *p, size_t ni, struct nf_node_keys *keys,
                         struct nf_cache *cache, struct nf_error *err);

/* After a node that is not mapped made (or fetched) its outputs: each output's
 * keyset follows the value (a collection of N items is keyed as N items).
 * Returns 1 when some keyset changed its shape though the plan held it known
 * (a wrong guess: what was keyed from it must be keyed again), 0 when
 * nothing or only open shapes changed, NF_ENOMEM. */
int nf_node_keys_follow(struct nf_node_keys *k, struct nf_value *const *outs, size_t n_out,
                        struct nf_error *err);


/* Every node in topological order (for planning / --explain). Files that do
 * not exist yet (after: [...]) leave their readers and descendants unknown. */
int nf_keys_plan(const struct nf_pipeline *p, struct nf_cache *cache, struct nf_node_keys *keys,
                 struct nf_error *err);

/* What `plan --explain` prints for each node. */
void nf_explain_print(const struct nf_pipeline *p, struct nf_cache *cache,
                      const struct nf_node_keys *keys, FILE *out);

#endif
