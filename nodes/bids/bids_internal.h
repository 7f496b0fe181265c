/* bids_internal.h — the BIDS dataset walk behind the `bids` node (bids_files.c):
 * file-name entities, sidecar inheritance, the RepetitionTime of a JSON
 * sidecar, and one scan of a dataset (plus fMRIPrep derivatives) into runs.
 * Exposed for tests/unit/test_bids.c. */
#ifndef NF_NODE_BIDS_INTERNAL_H
#define NF_NODE_BIDS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "node.h"

#define BIDS_MAX_ENTITIES 16

/* A BIDS file name "sub-01_ses-a_task-x_run-1_bold.nii.gz": key-value
 * entities in order, the suffix ("bold") and the extension (everything from
 * the first dot, ".nii.gz"). The strings point into buf. */
struct bids_name {
    char *buf;
    size_t n;
    const char *key[BIDS_MAX_ENTITIES], *value[BIDS_MAX_ENTITIES];
    const char *suffix, *ext;
};
/* 1 parsed, 0 not a BIDS entity name (out released), NF_ENOMEM. `name` may
 * have folders: only its last component is parsed. */
int bids_name_parse(const char *name, struct bids_name *out);
void bids_name_release(struct bids_name *n);
/* The value of entity `key`, or NULL. */
const char *bids_name_get(const struct bids_name *n, const char *key);

/* Whether a pattern of `subjects`/`sessions`/`runs` selects `value` (the
 * label without its "sub-"/"ses-"/"run-" key): an exact label, the label with
 * its key ("sub-01"), a glob (fnmatch), or for runs the same number ("1" and
 * "01"). An empty list selects everything. */
bool bids_filter_selects(const struct nf_str_list *filter, const char *key, const char *value);

/* The JSON sidecars that apply to `data` (a file under root) by the BIDS
 * inheritance principle: files named with suffix `suffix` and extension
 * `ext` whose entities all appear in the data file's name with the same
 * values, in root, root/sub-X, root/sub-X/ses-Y and the data file's folder;
 * in order from the top level to the nearest (later ones override earlier
 * ones). Two that apply at one level are an error (BIDS allows one). *found
 * is owned (free each entry and the array). */
int bids_inherited(const char *root, const char *data, const char *suffix, const char *ext,
                   char ***found, size_t *n, struct nf_error *err);

/* The number of top-level key `key` of the JSON object in `path`: *found
 * false when absent. Malformed JSON (or a non-number value) is NF_EDATA
 * naming path:line:col. */
int bids_json_number(const char *path, const char *key, double *value, bool *found,
                     struct nf_error *err);

/* What to look for (the node's parameters, with paths resolved). */
struct bids_query {
    const char *root, *derivatives;           /* derivatives may be NULL */
    const struct nf_str_list *subjects, *sessions, *runs;
    const char *task, *space, *desc;          /* NULL: any (desc: "preproc") */
};

/* One run: its label and the files found for it (NULL when missing). */
struct bids_item {
    char *label;            /* sub-XX[_ses-YY]_task-T[_acq-A][_run-R] */
    char *raw_bold;         /* the raw dataset's bold file */
    char *bold;             /* the image read: derivatives' preprocessed bold, else raw_bold */
    char *mask, *events, *confounds;
    double tr;              /* seconds from the sidecars, 0 when none says */
    char *tr_source;        /* the sidecar the TR came from */
    char **sidecars;        /* every sidecar that applies, top level first */
    size_t n_sidecars;
};
struct bids_scan {
    size_t n;
    struct bids_item *items;   /* sorted by label */
    char *seen;                /* what the dataset holds ("subjects sub-01, sub-02; tasks x"),
                                  for the message when nothing matches */
};
/* Walk the dataset. Missing pieces are left NULL for the caller to judge; a
 * malformed sidecar, two candidates for one piece, a missing root are
 * errors naming the files. */
int bids_scan(const struct bids_query *q, struct bids_scan *out, struct nf_error *err);
void bids_scan_release(struct bids_scan *s);

#endif
