/* decoder.c — one fit of the `predict` node's pipeline (scaler, optional
 * PCA, learner; weights back in voxel space) and the target it decodes,
 * shared by predict's folds and refit and bootstrap's resamples
 * (decoder.h). Kept apart from predict.c so that bootstrap refits exactly as
 * predict does without reaching into the node, and apart from
 * predict_models.c, which knows nothing of scalers, PCA or node inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#include "decoder.h"

int nf_decoder_fit(const struct nf_kernels *K, const struct nf_decoder_opts *o, float *X, int64_t n, int64_t p,
                   const double *y, int64_t n_classes, struct nf_decoder *d, struct nf_error *err)
{
    const int64_t r = n < p ? n : p;
    float *U = NULL, *s = NULL, *Z = NULL;
    const float *F = X;
    int rc = 0;
    memset(d, 0, sizeof *d);
    d->p = p;
    d->q = p;
    /* the scaler (and PCA's centring) from the training rows only */
    if (o->standardize || o->pca > 0) {
        d->mean = nf_malloc((size_t)p * sizeof *d->mean);
        d->sd = nf_malloc((size_t)p * sizeof *d->sd);
        if (!d->mean || !d->sd) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for a fit of %lld images x %lld voxels", (long long)n,
                         (long long)p);
            goto fail;
        }
        nf_scaler_fit(X, n, p, p, d->mean, d->sd);
        if (!o->standardize)
            for (int64_t j = 0; j < p; j++)
                d->sd[j] = 1.0;
        nf_scaler_apply(X, n, p, p, d->mean, d->sd, X, p);
    }
    if (o->pca > 0) {
        /* scores Z = X_c Vt_qᵀ = U_q S_q on the training rows */
        const int64_t q = o->pca < r ? o->pca : r;
        U = nf_malloc((size_t)(n * r) * sizeof *U);
        s = nf_malloc((size_t)r * sizeof *s);
        d->Vt = nf_malloc((size_t)(r * p) * sizeof *d->Vt);
        Z = nf_malloc((size_t)(n * q) * sizeof *Z);
        if (!U || !s || !d->Vt || !Z) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the PCA of %lld images x %lld voxels", (long long)n,
                         (long long)p);
            goto fail;
        }
        rc = K->svd(X, n, p, U, s, d->Vt);
        if (rc < 0) {
            rc = NF_FAIL(err, rc == NF_ENOMEM ? NF_ENOMEM : NF_EDATA, "the SVD of %lld training images x %lld "
                         "voxels (pca) %s", (long long)n, (long long)p,
                         rc == NF_ENOMEM ? "ran out of memory" : "did not converge");
            goto fail;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < q; j++)
                Z[i * q + j] = U[i * r + j] * s[j];
        F = Z;
        d->q = q;
        d->r = r;
    }
    rc = nf_model_fit(&o->model, F, n, d->q, d->q, y, n_classes, &d->m, err);
fail:
    free(U);
    free(s);
    free(Z);
    if (rc < 0)
        nf_decoder_free(d);
    return rc;
}

const float *nf_decoder_features(const struct nf_decoder *d, const struct nf_kernels *K, float *X, int64_t n,
                                 float *Z)
{
    if (d->mean)
        nf_scaler_apply(X, n, d->p, d->p, d->mean, d->sd, X, d->p);
    if (!d->Vt)
        return X;
    if (n)
        K->sgemm(false, true, n, d->q, d->p, 1.0f, X, d->p, d->Vt, d->p, 0.0f, Z, d->q);
    return Z;
}

int nf_decoder_weights(const struct nf_decoder *d, int64_t row, float *w, struct nf_error *err)
{
    const int64_t p = d->p, q = d->q;
    float *wq = nf_malloc((size_t)q * sizeof *wq);
    double *back = d->Vt ? nf_calloc((size_t)p, sizeof *back) : NULL;
    if (!wq || (d->Vt && !back)) {
        free(wq);
        free(back);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    if (row < 0)
        nf_model_weights(&d->m, wq);
    else
        memcpy(wq, d->m.coef + row * q, (size_t)q * sizeof *wq);
    if (d->Vt) {
        /* back to voxels: w = Vt_qᵀ coef, summed in double */
        for (int64_t c = 0; c < q; c++)
            for (int64_t j = 0; j < p; j++)
                back[j] += (double)d->Vt[c * p + j] * wq[c];
        for (int64_t j = 0; j < p; j++)
            w[j] = (float)back[j];
    } else {
        memcpy(w, wq, (size_t)p * sizeof *wq);
    }
    free(wq);
    free(back);
    return 0;
}

void nf_decoder_free(struct nf_decoder *d)
{
    nf_model_free(&d->m);
    free(d->mean);
    free(d->sd);
    free(d->Vt);
    d->mean = d->sd = NULL;
    d->Vt = NULL;
}

/* ---- the target ---- */

double nf_label_num(const struct nf_label_column *c, int64_t i)
{
    return c->num ? c->num[i] : (double)c->fl[i * c->stride];
}

const char *nf_label_str(const struct nf_label_column *c, int64_t i)
{
    return c->str[i] ? c->str[i] : "";
}

int nf_label_column_pick(const struct nf_value *v, const char *target, const char *port,
                         struct nf_label_column *col, const struct nf_run *run)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    memset(col, 0, sizeof *col);
    col->name = port;
    if (v->kind == NF_KIND_TABLE) {
        const struct nf_table *t = &v->u.tab;
        int64_t c = target ? nf_table_find(t, target) : 0;
        if (t->n_cols < 1)
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "%s is a table without columns", port);
        if (c < 0) {
            struct nf_strbuf sb;
            nf_strbuf_init(&sb);
            for (int64_t j = 0; j < t->n_cols; j++)
                nf_strbuf_addf(&sb, "%s%s", j ? ", " : "", t->cols[j].name);
            NF_FAIL_AT(run->err, NF_EDATA, loc, id, "%s has no column '%s' (columns: %s)", port, target,
                       sb.buf ? sb.buf : "");
            nf_strbuf_release(&sb);
            return NF_EDATA;
        }
        col->name = t->cols[c].name;
        col->n = t->n_rows;
        if (t->cols[c].numeric)
            col->num = t->cols[c].num;
        else
            col->str = t->cols[c].str;
        return 0;
    }
    const struct nf_matrix *m = &v->u.mat;
    if (target && m->col_names) {
        for (int64_t c = 0; c < m->cols; c++)
            if (m->col_names[c] && strcmp(m->col_names[c], target) == 0) {
                col->name = m->col_names[c];
                col->n = m->rows;
                col->fl = m->data + c;
                col->stride = m->cols;
                return 0;
            }
    }
    if (target)
        return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "%s is a matrix without a column named '%s'", port, target);
    if (m->cols != 1 && m->rows != 1)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s must be one column (got a %lldx%lld matrix)", port,
                          (long long)m->rows, (long long)m->cols);
    col->n = m->rows * m->cols;
    col->fl = m->data;
    col->stride = 1;
    return 0;
}

int nf_label_entry_cmp(const void *a, const void *b)
{
    const struct nf_label_entry *x = a, *y = b;
    int c = x->str ? strcmp(x->str, y->str) : (x->num < y->num ? -1 : x->num > y->num);
    return c ? c : (x->row < y->row ? -1 : x->row > y->row);
}

int nf_label_column_encode(const struct nf_label_column *col, int64_t *id, int64_t *first, int64_t *n_unique,
                           const struct nf_run *run)
{
    int64_t n = col->n, u = 0;
    struct nf_label_entry *e = nf_malloc((size_t)(n ? n : 1) * sizeof *e);
    if (!e)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        e[i].row = i;
        e[i].str = col->str ? nf_label_str(col, i) : NULL;
        e[i].num = col->str ? 0 : nf_label_num(col, i);
        if (e[i].str ? (!e[i].str[0] || strcmp(e[i].str, "n/a") == 0) : !isfinite(e[i].num)) {
            free(e);
            return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                              "'%s' has a missing or non-finite value at image %lld", col->name, (long long)i + 1);
        }
    }
    qsort(e, (size_t)n, sizeof *e, nf_label_entry_cmp);
    for (int64_t i = 0; i < n; i++) {
        bool next = i > 0 && (e[i].str ? strcmp(e[i].str, e[i - 1].str) != 0 : e[i].num != e[i - 1].num);
        u += next;
        if (i == 0 || next)
            first[u] = e[i].row;   /* the lowest row: ties are sorted by row */
        id[e[i].row] = u;
    }
    *n_unique = n ? u + 1 : 0;
    free(e);
    return 0;
}

void nf_target_class_name(const struct nf_target *t, int64_t u, char *buf, size_t size)
{
    if (t->col.str)
        snprintf(buf, size, "'%s'", nf_label_str(&t->col, t->first[u]));
    else
        snprintf(buf, size, "%g", nf_label_num(&t->col, t->first[u]));
}

int nf_target_read(struct nf_target *t, const struct nf_value *yin, const char *target, bool classifier,
                   int64_t n, const char *x_port, const char *model, const struct nf_run *run)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    int rc = 0;
    NF_TRY(rc = nf_label_column_pick(yin, target, "y", &t->col, run));
    if (t->col.n != n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has %lld images (rows) but y has %lld values", x_port,
                          (long long)n, (long long)t->col.n);
    t->y = nf_malloc((size_t)(n ? n : 1) * sizeof *t->y);
    t->cls = nf_malloc((size_t)(n ? n : 1) * sizeof *t->cls);
    t->first = nf_malloc((size_t)(n ? n : 1) * sizeof *t->first);
    if (!t->y || !t->cls || !t->first)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    if (!classifier) {
        if (t->col.str)
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "model %s predicts numbers, but y ('%s') holds "
                              "text (class labels): use a classifier (svm, logistic, ridge_classifier)", model,
                              t->col.name);
        for (int64_t i = 0; i < n; i++) {
            t->y[i] = nf_label_num(&t->col, i);
            if (!isfinite(t->y[i]))
                return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "'%s' has a missing or non-finite value at "
                                  "image %lld", t->col.name, (long long)i + 1);
        }
        return 0;
    }
    NF_TRY(rc = nf_label_column_encode(&t->col, t->cls, t->first, &t->n_classes, run));
    for (int64_t i = 0; i < n; i++)
        t->y[i] = (double)t->cls[i];
    if (t->n_classes < 2) {
        char name[128] = "";
        if (t->n_classes == 1)
            nf_target_class_name(t, 0, name, sizeof name);
        return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "y ('%s') has a single class (%s): decoding needs at "
                          "least 2", t->col.name, name);
    }
fail:
    return rc;
}

void nf_target_release(struct nf_target *t)
{
    free(t->y);
    free(t->cls);
    free(t->first);
    t->y = NULL;
    t->cls = t->first = NULL;
}
