/* moments.c — the `moments` node: per-voxel mean and standard deviation over
 * every row of a matrix, or of every matrix of a collection (all images of all
 * subjects).
 *
 * It is the engine's streaming reduction: fed by a node mapped over subjects
 * (mask of a lazy glob), it folds each subject as soon as it is masked and the
 * subject is dropped, so memory stays O(one subject) whatever the number of
 * subjects. Each item's mean and sum of squared deviations are computed in
 * double (two passes) and merged in item order with Chan et al.'s pairwise
 * update, so results do not depend on threads or on how items arrive.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "node.h"
#include "core/util.h"

struct moments_params { int dummy; };

static const struct nf_param moments_params_table[] = { NF_PARAM_END };

/* node_type.methods (no parameters) */
static char *moments_methods(const void *params)
{
    (void)params;
    return nf_strdup("The mean and the population standard deviation of every voxel were computed over "
                     "all images of all subjects.");
}

static const struct nf_port moments_inputs[] = {
    { "data", "images x voxels matrix, or a collection of them (one per subject)",
      NF_PT_MATRIX | NF_PT_COLL, 0 },
    NF_PORT_END
};

enum { MOMENTS_IN_DATA, MOMENTS_N_IN };
enum { MOMENTS_OUT_MEAN, MOMENTS_OUT_STD, MOMENTS_N_OUT };
static const struct nf_port moments_outputs[] = {
    { "mean", "1 x voxels: mean over all rows of all items", NF_PT_MATRIX, 0 },
    { "std", "1 x voxels: population standard deviation over all rows of all items", NF_PT_MATRIX, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(moments_inputs, MOMENTS_N_IN);
NF_PORTS_MATCH(moments_outputs, MOMENTS_N_OUT);

struct moments_state {
    int64_t cols;
    double count;          /* rows folded so far */
    double *mean, *m2;     /* running mean and sum of squared deviations */
    double *item_mean;     /* scratch for one item */
    struct nf_geom *geom;  /* of the first item */
};

static void state_free(struct moments_state *st)
{
    if (!st)
        return;
    free(st->mean);
    free(st->m2);
    free(st->item_mean);
    nf_geom_unref(st->geom);
    free(st);
}

static int moments_begin(struct nf_run *run, void **state)
{
    (void)run;
    *state = nf_calloc(1, sizeof(struct moments_state));
    return *state ? 0 : NF_FAIL(run->err, NF_ENOMEM, "out of memory");
}

static int moments_item(struct nf_run *run, void *state, const struct nf_value *item, size_t index)
{
    struct moments_state *st = state;
    if (!item || item->kind != NF_KIND_MATRIX)
        return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                          "item %zu of 'data' is %s %s, expected a matrix", index + 1,
                          item ? "a" : "", item ? nf_kind_name(item->kind) : "missing");
    const struct nf_matrix *m = &item->u.mat;
    if (st->count == 0 && !st->mean) {
        st->cols = m->cols;
        size_t n = (size_t)(m->cols ? m->cols : 1);
        st->mean = nf_calloc(n, sizeof *st->mean);
        st->m2 = nf_calloc(n, sizeof *st->m2);
        st->item_mean = nf_calloc(n, sizeof *st->item_mean);
        if (!st->mean || !st->m2 || !st->item_mean)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        st->geom = nf_geom_ref(m->geom);
    } else if (m->cols != st->cols ||
               (st->geom && m->geom && st->geom != m->geom && !nf_grid_same(&st->geom->grid, &m->geom->grid))) {
        return NF_FAIL_AT(run->err, NF_ESHAPE, nf_node_loc(run->node), nf_node_id(run->node),
                          "item %zu ('%s') of 'data' has %lld voxels on %s grid, the first item %lld",
                          index + 1, item->label ? item->label : "?", (long long)m->cols,
                          m->cols == st->cols ? "another" : "a", (long long)st->cols);
    }
    if (m->rows == 0)
        return 0;
    /* item mean and M2, two passes in double, row by row (cache-friendly) */
    double nb = (double)m->rows;
    memset(st->item_mean, 0, (size_t)m->cols * sizeof *st->item_mean);
    for (int64_t r = 0; r < m->rows; r++) {
        const float *row = m->data + r * m->cols;
        for (int64_t c = 0; c < m->cols; c++)
            st->item_mean[c] += row[c];
    }
    for (int64_t c = 0; c < m->cols; c++)
        st->item_mean[c] /= nb;
    double na = st->count, n = na + nb;
    /* merge: M2 = M2a + M2b + delta^2 na nb / n (Chan, Golub, LeVeque 1979) */
    for (int64_t c = 0; c < m->cols; c++) {
        double delta = st->item_mean[c] - st->mean[c];
        st->m2[c] += delta * delta * na * nb / n;
        st->mean[c] += delta * nb / n;
    }
    for (int64_t r = 0; r < m->rows; r++) {
        const float *row = m->data + r * m->cols;
        for (int64_t c = 0; c < m->cols; c++) {
            double d = row[c] - st->item_mean[c];
            st->m2[c] += d * d;
        }
    }
    st->count = n;
    return 0;
}

static int moments_end(struct nf_run *run, void *state, bool ok)
{
    struct moments_state *st = state;
    int rc = 0;
    if (!ok)
        goto done;
    if (st->count == 0) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                        "'data' has no rows: nothing to average");
        goto done;
    }
    struct nf_value *mean = nf_value_new_matrix(1, st->cols, st->geom, run->err);
    struct nf_value *sd = mean ? nf_value_new_matrix(1, st->cols, st->geom, run->err) : NULL;
    if (!sd) {
        nf_value_unref(mean);
        rc = run->err->code ? run->err->code : NF_ENOMEM;
        goto done;
    }
    for (int64_t c = 0; c < st->cols; c++) {
        mean->u.mat.data[c] = (float)st->mean[c];
        sd->u.mat.data[c] = (float)sqrt(st->m2[c] / st->count);
    }
    nf_value_set_stat(mean, NF_STAT_ESTIMATE, 0, "mean over images");
    nf_value_set_stat(sd, NF_STAT_ESTIMATE, 0, "population standard deviation over images");
    run->out[MOMENTS_OUT_MEAN] = mean;
    run->out[MOMENTS_OUT_STD] = sd;
done:
    state_free(st);
    return rc;
}

/* Not streamed: the whole input is here; fold it the same way. */
static int moments_run(struct nf_run *run)
{
    void *state = NULL;
    int rc = moments_begin(run, &state);
    if (rc < 0)
        return rc;
    const struct nf_value *in = run->in[MOMENTS_IN_DATA];
    if (in->kind == NF_KIND_COLLECTION) {
        for (size_t i = 0; i < in->u.coll.n && rc == 0; i++) {
            struct nf_value *item = nf_value_materialize(in->u.coll.items[i], run->err);
            rc = item ? moments_item(run, state, item, i) : run->err->code;
            nf_value_unref(item);
        }
    } else {
        rc = moments_item(run, state, in, 0);
    }
    int end = moments_end(run, state, rc == 0);
    return rc < 0 ? rc : end;
}

static int moments_resolve(struct nf_resolve *r)
{
    const struct nf_shape *in = &r->in[MOMENTS_IN_DATA];
    if (in->kind == NF_KIND_NONE)
        return 0;
    enum nf_kind k = in->kind == NF_KIND_COLLECTION ? in->item_kind : in->kind;
    if (k != NF_KIND_MATRIX)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "input 'data' must be a matrix or a collection of matrices (got %s of %ss); "
                          "mask images first", in->kind == NF_KIND_COLLECTION ? "a collection" : "a",
                          nf_kind_name(k));
    for (int o = 0; o < 2; o++) {
        r->out[o].kind = NF_KIND_MATRIX;
        r->out[o].dim[0] = 1;
        r->out[o].dim[1] = in->dim[1];
        r->out[o].cols_upper_bound = in->cols_upper_bound;
        r->out[o].has_geom = in->has_geom;
    }
    return 0;
}

static uint64_t moments_estimate(const void *params, const struct nf_shape *in,
                                 const struct nf_shape *out)
{
    (void)params;
    (void)out;
    return (uint64_t)in[MOMENTS_IN_DATA].dim[1] * 3 * sizeof(double);
}

const struct nf_node_type nf_node_moments = {
    .name = "moments",
    .summary = "per-voxel mean and standard deviation over all images of all subjects, streamed",
    .description =
        "Computes, for every column (voxel), the mean and the population standard "
        "deviation over every row of `data`: one matrix, or all matrices of a "
        "collection (all images of all subjects). Fed by a node that runs once per "
        "subject (for example `mask` over a lazily loaded glob), it folds each subject "
        "as soon as it is ready and drops it, so memory holds one subject per worker "
        "whatever the number of subjects. Accumulation is in double precision and "
        "merged in subject order (Chan et al.), so results do not depend on threads.",
    .version = 1,
    .params = moments_params_table,
    .params_size = sizeof(struct moments_params),
    .inputs = moments_inputs,
    .outputs = moments_outputs,
    .resolve = moments_resolve,
    .estimate = moments_estimate,
    .run_cpu = moments_run,
    .fold_begin = moments_begin,
    .fold_item = moments_item,
    .fold_end = moments_end,
    .methods = moments_methods,
};
