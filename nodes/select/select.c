/* select.c — the `select` node: one named row of a maps matrix.
 *
 * Nodes that fit several things at once give one row per thing: glm a row
 * per contrast (effect, t, z ...), fixed_effects the same per subject, ridge
 * a row per feature. A group test wants one map per subject: `select` takes
 * the row with the given name (or 1-based number) out of each matrix, keeping
 * its voxel geometry, its statistic kind and its name, so that a collection
 * of per-subject contrasts x voxels maps becomes a collection of 1 x V maps
 * that permute stacks. Mapped over collections like any one-item node.
 */
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"

struct select_params {
    char *row;
};

static const struct nf_param select_params_table[] = {
    NF_PARAM_STR_F("row", offsetof(struct select_params, row), NULL, NF_PF_REQUIRED,
                   "the row to keep: its name (a contrast, a design column) or its number from 1"),
    NF_PARAM_END
};

static const struct nf_port select_inputs[] = {
    { "data", "a matrix with one map per row (contrasts x voxels, ...), or a collection of them",
      NF_PT_MATRIX, 0 },
    NF_PORT_END
};
enum { SELECT_IN_DATA, SELECT_N_IN };
enum { SELECT_OUT_OUT, SELECT_N_OUT };
static const struct nf_port select_outputs[] = {
    { "out", "1 x voxels: the chosen row, with its name, geometry and statistic kind", NF_PT_MATRIX, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(select_inputs, SELECT_N_IN);
NF_PORTS_MATCH(select_outputs, SELECT_N_OUT);

static char *select_methods(const void *params)
{
    const struct select_params *p = params;
    return nf_asprintf("The map '%s' was taken from each result.", p->row);
}

/* A row number: all digits, from 1. 0 when the text is not one. */
static int64_t row_number(const char *s)
{
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 12)
        return 0;
    return strtoll(s, NULL, 10);
}

static int select_run(struct nf_run *run)
{
    const struct select_params *p = run->params;
    const struct nf_value *in = run->in[SELECT_IN_DATA];
    const struct nf_matrix *m = &in->u.mat;
    int64_t r = -1;
    for (int64_t i = 0; m->row_names && i < m->rows; i++)
        if (m->row_names[i] && strcmp(m->row_names[i], p->row) == 0)
            r = i;
    int64_t number = row_number(p->row);
    if (r < 0 && number >= 1 && number <= m->rows)
        r = number - 1;
    if (r < 0) {
        struct nf_strbuf sb;
        nf_strbuf_init(&sb);
        for (int64_t i = 0; m->row_names && i < m->rows && i < 50; i++)
            nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", m->row_names[i] ? m->row_names[i] : "?");
        int rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                            "%s%s%s has no row '%s' (%lld rows%s%s)", in->label ? "'" : "",
                            in->label ? in->label : "'data'", in->label ? "'" : "", p->row, (long long)m->rows,
                            sb.len ? ": " : ", unnamed: give a number from 1", sb.len ? sb.buf : "");
        nf_strbuf_release(&sb);
        return rc;
    }
    struct nf_value *out = nf_value_new_matrix(1, m->cols, m->geom, run->err);
    if (!out)
        return run->err->code;
    memcpy(out->u.mat.data, m->data + r * m->cols, (size_t)m->cols * sizeof *m->data);
    nf_value_set_stat(out, in->stat.kind, in->stat.dof, in->stat.description);
    const char *name = m->row_names && m->row_names[r] ? m->row_names[r] : NULL;
    if (name && nf_matrix_set_row_names(out, &name, run->err) < 0) {
        nf_value_unref(out);
        return run->err->code;
    }
    run->out[SELECT_OUT_OUT] = out;
    return 0;
}

static int select_resolve(struct nf_resolve *r)
{
    const struct select_params *p = r->params;
    const struct nf_shape *in = &r->in[SELECT_IN_DATA];
    if (in->kind == NF_KIND_NONE)
        return 0;
    if (in->kind != NF_KIND_MATRIX)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "input 'data' must be a matrix of maps (got a %s)", nf_kind_name(in->kind));
    int64_t number = row_number(p->row);
    if (number > 0 && in->dim[0] > 0 && number > in->dim[0])
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "row %lld asked for, but 'data' has %lld rows", (long long)number,
                          (long long)in->dim[0]);
    r->out[SELECT_OUT_OUT].kind = NF_KIND_MATRIX;
    r->out[SELECT_OUT_OUT].dim[0] = 1;
    r->out[SELECT_OUT_OUT].dim[1] = in->dim[1];
    r->out[SELECT_OUT_OUT].cols_upper_bound = in->cols_upper_bound;
    r->out[SELECT_OUT_OUT].has_geom = in->has_geom;
    return 0;
}

static uint64_t select_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    (void)params;
    (void)in;
    return (uint64_t)out[SELECT_OUT_OUT].dim[1] * sizeof(float);
}

const struct nf_node_type nf_node_select = {
    .name = "select",
    .summary = "one named row of a maps matrix (a contrast, a design column), e.g. for a group test",
    .description =
        "Keeps the row called `row` (or the row with that number, from 1) of a matrix whose "
        "rows are maps: glm's and fixed_effects' contrasts x voxels maps, ridge's features x "
        "voxels weights. The row keeps its name, the voxel geometry and what its numbers are "
        "(t, z, effect), so it is written and reported like the original. Mapped over a "
        "collection (one matrix per run or subject), it gives a collection of 1 x V maps, which "
        "permute stacks into subjects x voxels. A row that is not there is an error listing "
        "the rows.",
    .version = 1,
    .params = select_params_table,
    .params_size = sizeof(struct select_params),
    .inputs = select_inputs,
    .outputs = select_outputs,
    .resolve = select_resolve,
    .estimate = select_estimate,
    .run_cpu = select_run,
    .methods = select_methods,
};
