/* decoder.h — one fit of the `predict` node's pipeline and the target it
 * decodes, shared by predict (every fold and the refit on all images,
 * nodes/predict/predict.c) and bootstrap (every resample's refit,
 * nodes/bootstrap/bootstrap.c), so that both fit the same way:
 *
 *   the StandardScaler fitted on the training rows (or only PCA's centring),
 *   optionally PCA (the thin SVD of the centred training rows), then a
 *   learner of predict_models.h; weights back in voxel space (componentsᵀ
 *   coef), in standardised units (sklearn's coef_).
 *
 * The target (y) is a table column or a one-column matrix: class indices in
 * the order of the sorted unique values (numpy.unique) for classifiers, the
 * values for ridge.
 *
 * Ownership: nf_decoder_fit fills a caller-owned struct nf_decoder whose
 * arrays it allocates (nf_decoder_free); nf_target_read likewise fills a
 * struct nf_target (nf_target_release), borrowing the column from the input
 * value, which must outlive it.
 */
#ifndef NF_PREDICT_DECODER_H
#define NF_PREDICT_DECODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "node.h"
#include "predict_models.h"

struct nf_decoder_opts {
    struct nf_model_opts model;
    bool standardize;   /* StandardScaler on the training rows */
    int64_t pca;        /* principal components kept after the scaler (at most the rank); 0: none */
};

struct nf_decoder {
    int64_t p, q, r;          /* voxels; features given to the learner; the SVD's rank (PCA) */
    double *mean, *sd;        /* p: the scaler (NULL: none) */
    float *Vt;                /* r x p: the components, the first q used (NULL: no PCA) */
    struct nf_linear_model m;
};

/* Fit on the n x p training rows X (leading dimension p), standardised in
 * place. y as nf_model_fit. Returns 0 or an NF_E* code with err filled. */
int nf_decoder_fit(const struct nf_kernels *K, const struct nf_decoder_opts *o, float *X, int64_t n, int64_t p,
                   const double *y, int64_t n_classes, struct nf_decoder *d, struct nf_error *err);
/* The learner's features of n more rows X (n x p, standardised in place):
 * X itself without PCA, else their projections written to Z (n x d->q). */
const float *nf_decoder_features(const struct nf_decoder *d, const struct nf_kernels *K, float *X, int64_t n,
                                 float *Z);
/* The weights on the p voxels: score function `row` (0..m.n_out-1), or
 * with row -1 their average (nltools' rule for one-vs-rest, the predict
 * node's weights). Returns 0 or NF_ENOMEM. */
int nf_decoder_weights(const struct nf_decoder *d, int64_t row, float *w, struct nf_error *err);
void nf_decoder_free(struct nf_decoder *d);

/* ---- the target ---- */

/* One column of labels or values, borrowed from a table or a matrix. */
struct nf_label_column {
    const char *name;       /* for messages */
    int64_t n;
    const double *num;      /* numeric table column */
    const float *fl;        /* matrix values, every `stride` floats */
    int64_t stride;
    char *const *str;       /* text column */
};

double nf_label_num(const struct nf_label_column *c, int64_t i);
const char *nf_label_str(const struct nf_label_column *c, int64_t i);
/* The column `target` (NULL: the first) of a table, or a matrix's only column
 * or row (or the column named `target`); errors name `port` and the node. */
int nf_label_column_pick(const struct nf_value *v, const char *target, const char *port,
                         struct nf_label_column *col, const struct nf_run *run);
/* A value (a number, or text when str is set) and its row, ordered by
 * value then row by nf_label_entry_cmp (qsort's comparator). */
struct nf_label_entry { double num; const char *str; int64_t row; };
int nf_label_entry_cmp(const void *a, const void *b);
/* Sorted unique values of a column (numpy.unique): id[i] in 0..*n_unique-1
 * for every row, and first[u] a row holding value u (for names). Missing
 * values (NaN, "", "n/a") are an error. */
int nf_label_column_encode(const struct nf_label_column *col, int64_t *id, int64_t *first, int64_t *n_unique,
                           const struct nf_run *run);

struct nf_target {
    struct nf_label_column col;   /* borrowed from the input */
    double *y;                    /* n: class index (classifiers) or value */
    int64_t *cls;                 /* n: class index (classifiers) */
    int64_t *first;               /* n_classes: a row of each class, for its name */
    int64_t n_classes;            /* 0 for regression */
};

/* y (the input `yin`, column `target`) for n images: class indices with at
 * least two classes for a classifier, finite numbers otherwise. Errors name
 * the node; x_port names the images' input, model the learner. */
int nf_target_read(struct nf_target *t, const struct nf_value *yin, const char *target, bool classifier,
                   int64_t n, const char *x_port, const char *model, const struct nf_run *run);
/* Class u as text for messages: 'a' or 3. */
void nf_target_class_name(const struct nf_target *t, int64_t u, char *buf, size_t size);
void nf_target_release(struct nf_target *t);

#endif
