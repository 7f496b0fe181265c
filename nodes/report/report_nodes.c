/* report_nodes.c — the report's sections that depend on which node made an
 * input (report_internal.h): what a reader of a paper's figures expects next
 * to each result.
 *
 *   permute  null_max     the null distribution of the maximum with the 5%
 *                         family-wise threshold marked (the exact cut, from
 *                         the p_fwe formula the node used), and the test's
 *                         parameters; the same for null_max_tfce,
 *                         null_max_cluster_size and null_max_cluster_mass
 *                         (TFCE and cluster-level FWE);
 *   permute  clusters     the clusters table with what its columns are;
 *   ridge    alpha        how many voxels chose each alpha;
 *   ridge    score        the score map and the distribution of CV scores;
 *   predict  predictions  the confusion matrix (classifiers), or observed
 *                         against predicted r (regression);
 *   predict  table        mean score per ROI as bars named by region (the
 *                         report's atlas input), then the table with a
 *                         region column;
 *   predict  map, scores  the map with its score distribution; a bar per fold.
 * Anything else falls back to report.c's section by kind.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"
#include "core/util.h"

static bool is_from(const struct nf_input_source *src, const char *type, const char *port)
{
    return src && src->node_type && src->port && strcmp(src->node_type, type) == 0 && strcmp(src->port, port) == 0;
}

static int cmp_float_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double report_fwe_threshold(const float *null, size_t n, bool exact, double alpha)
{
    float *s = nf_malloc_array(n ? n : 1, sizeof *s);
    size_t m = 0;
    if (!s)
        return NAN;
    for (size_t i = 0; i < n; i++)
        if (isfinite(null[i]))
            s[m++] = null[i];
    if (m == 0) {
        free(s);
        return NAN;
    }
    qsort(s, m, sizeof *s, cmp_float_desc);
    /* the most maxima at or above a statistic that still give p_fwe < alpha,
     * counted with the node's own formula (no rounding of alpha * N) */
    double add = exact ? 0 : 1, denom = exact ? (double)m : (double)m + 1;
    int64_t k = (int64_t)floor(alpha * denom);
    while (k >= 0 && ((double)k + add) / denom >= alpha)
        k--;
    while (((double)(k + 1) + add) / denom < alpha)
        k++;
    /* count(t) = #{s >= t} <= k exactly when t > s[k] (s descending) */
    double t = k < 0 ? INFINITY : (size_t)k >= m ? -INFINITY : (double)s[k];
    free(s);
    return t;
}

/* A JSON string's text without its quotes (a table cell reads better);
 * other JSON as it is. Takes and returns ownership. */
static char *unquoted(char *json)
{
    size_t n = json ? strlen(json) : 0;
    if (n >= 2 && json[0] == '"' && json[n - 1] == '"' && !strchr(json + 1, '\\')) {
        memmove(json, json + 1, n - 2);
        json[n - 2] = '\0';
    }
    return json;
}

/* The producing node's parameters as a table (once per node). */
static int params_table(struct report_ctx *c, const struct nf_input_source *src)
{
    if (!src->type || !src->params || !src->node_id)
        return 0;
    for (size_t i = 0; i < c->n_shown_params; i++)
        if (strcmp(c->shown_params[i], src->node_id) == 0)
            return 0;
    if (c->n_shown_params < sizeof c->shown_params / sizeof *c->shown_params)
        c->shown_params[c->n_shown_params++] = src->node_id;
    size_t n = 0;
    for (const struct nf_param *p = src->type->params; p && p->name; p++)
        n++;
    static const char *const headers[] = { "parameter", "value", "default" };
    char **cells = nf_calloc(n * 3 + 1, sizeof *cells);
    int rc = 0;
    if (!cells)
        return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    size_t r = 0;
    for (const struct nf_param *p = src->type->params; p && p->name; p++, r++) {
        char def[128];
        nf_param_default_text(p, def, sizeof def);
        cells[r * 3] = nf_strdup(p->name);
        cells[r * 3 + 1] = unquoted(nf_param_value_json(p, src->params));
        cells[r * 3 + 2] = nf_param_is_default(src->type, p, src->params) ? nf_strdup("yes") : nf_strdup(def[0] ? def : "-");
        if (!cells[r * 3] || !cells[r * 3 + 1] || !cells[r * 3 + 2]) {
            rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    char text[200];
    snprintf(text, sizeof text, "Parameters of node '%s' (%s); 'default' says yes where the value is the "
             "default, else what the default is.", src->node_id, src->node_type);
    report_page_paragraph(&c->pg, text);
    struct report_table tab = { headers, 3, n, (const char *const *)cells, -1, NULL, NULL };
    report_page_table(&c->pg, &tab);
fail:
    for (size_t i = 0; i < n * 3; i++)
        free(cells[i]);
    free(cells);
    return rc;
}

/* permute's null_max: the histogram with the 5% FWE threshold. */
static int null_max_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                            const struct nf_input_source *src)
{
    const struct nf_matrix *m = &v->u.mat;
    size_t n = (size_t)(m->rows * m->cols);
    const char *desc = v->stat.description;
    bool exact = desc && strstr(desc, NF_NULL_MAX_EXACT), known = exact || (desc && strstr(desc, NF_NULL_MAX_RANDOM));
    double thr = report_fwe_threshold(m->data, n, exact, 0.05);
    char text[900], mark[64];
    snprintf(text, sizeof text,
             "The null distribution of the maximum statistic over voxels, from %zu %s. A voxel's family-wise "
             "corrected p is %s, with count the permutations whose maximum reaches its statistic (on the scale "
             "of these maxima: |stat| for a two-tailed test, -stat for the lower tail). ",
             n, exact ? "permutations (every one, the identity included)" : known ? "random permutations" : "permutations",
             exact ? "count / N" : "(count + 1) / (N + 1)");
    if (!known) {   /* values read back from a file: how they were drawn is not recorded */
        size_t len0 = strlen(text);
        snprintf(text + len0, sizeof text - len0, "(Whether every permutation was enumerated is not recorded "
                 "with these values: the cut assumes random ones; enumerated, it is one permutation lower.) ");
    }
    size_t len = strlen(text);
    if (isfinite(thr))
        snprintf(text + len, sizeof text - len, "Voxels above %.6g have p_fwe < 0.05 (the red line).", thr);
    else
        snprintf(text + len, sizeof text - len, "With %zu permutations no voxel can reach p_fwe < 0.05.", n);
    report_page_paragraph(&c->pg, text);
    snprintf(mark, sizeof mark, "p_fwe < 0.05 above");
    char *svg = report_svg_histogram(m->data, n, 40, isfinite(thr) ? thr : NAN, mark, key);
    report_page_svg(&c->pg, svg);
    free(svg);
    return params_table(c, src);
}

/* permute's TFCE and cluster nulls: the histogram with the value a voxel's
 * TFCE or a cluster's size or mass must exceed for p < 0.05. */
static int tfce_cluster_null_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                                     const struct nf_input_source *src)
{
    static const struct {
        const char *port, *what, *p_name, *passes;
    } kinds[] = {
        { "null_max_tfce", "maximum |TFCE| over voxels", "p_tfce_fwe", "Voxels whose |TFCE| is above" },
        { "null_max_cluster_size", "largest cluster size (voxels)", "cluster_p_fwe", "Clusters larger than" },
        { "null_max_cluster_mass", "largest cluster mass (sum of |stat| - T over its voxels)", "cluster_mass_p_fwe",
          "Clusters whose mass is above" },
    };
    size_t kind = 0;
    while (strcmp(kinds[kind].port, src->port) != 0)
        kind++;
    const struct nf_matrix *m = &v->u.mat;
    size_t n = (size_t)(m->rows * m->cols);
    const char *desc = v->stat.description;
    bool exact = desc && strstr(desc, "= count / N"), known = exact || (desc && strstr(desc, "= (count + 1) / (N + 1)"));
    double thr = report_fwe_threshold(m->data, n, exact, 0.05);
    char text[900], mark[64];
    int len = snprintf(text, sizeof text,
                       "The null distribution of the %s, from %zu %s. %s is %s, with count the permutations whose "
                       "value reaches the observed one. ",
                       kinds[kind].what, n,
                       exact ? "permutations (every one, the identity included)"
                       : known ? "random permutations" : "permutations",
                       kinds[kind].p_name, exact ? "count / N" : "(count + 1) / (N + 1)");
    if (isfinite(thr))
        snprintf(text + len, sizeof text - (size_t)len, "%s %.6g have %s < 0.05 (the red line).",
                 kinds[kind].passes, thr, kinds[kind].p_name);
    else
        snprintf(text + len, sizeof text - (size_t)len, "With %zu permutations nothing can reach %s < 0.05.", n,
                 kinds[kind].p_name);
    report_page_paragraph(&c->pg, text);
    snprintf(mark, sizeof mark, "%s < 0.05 above", kinds[kind].p_name);
    char *svg = report_svg_histogram(m->data, n, 40, isfinite(thr) ? thr : NAN, mark, key);
    report_page_svg(&c->pg, svg);
    free(svg);
    return params_table(c, src);
}

/* permute's clusters table: what its columns are, then the table. */
static int permute_clusters_section(struct report_ctx *c, const struct nf_value *v,
                                    const struct nf_input_source *src)
{
    report_page_paragraph(&c->pg,
                          "The clusters of the observed map beyond the cluster-forming threshold, positive clusters "
                          "first, each numbered at its first voxel: sign, size (voxels), mass (sum of |stat| - T), "
                          "peak (the statistic at the largest |stat|) and its x, y, z in mm, and the family-wise "
                          "corrected p of its size and of its mass (each against the largest cluster of every "
                          "permutation).");
    int rc = report_table_section(c, &v->u.tab);
    if (rc < 0)
        return rc;
    return params_table(c, src);
}

/* Distinct values of a map and how many voxels have each (sorted); at most
 * `max` distinct, else *n_distinct = 0. Owned arrays. */
static int distinct_counts(const float *v, size_t n, size_t max, double **values, size_t **counts,
                           size_t *n_distinct)
{
    double *all = nf_malloc_array(n ? n : 1, sizeof *all);
    size_t m = 0;
    *values = NULL;
    *counts = NULL;
    *n_distinct = 0;
    if (!all)
        return NF_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            all[m++] = v[i];
    qsort(all, m, sizeof *all, cmp_double);
    size_t d = 0;
    for (size_t i = 0; i < m; i++)
        if (i == 0 || all[i] != all[i - 1])
            d++;
    if (d == 0 || d > max) {
        free(all);
        return 0;
    }
    *values = nf_malloc_array(d, sizeof **values);
    *counts = nf_calloc(d, sizeof **counts);
    if (!*values || !*counts) {
        free(all);
        free(*values);
        free(*counts);
        *values = NULL;
        *counts = NULL;
        return NF_ENOMEM;
    }
    for (size_t i = 0, j = 0; i < m; i++) {
        if (i > 0 && all[i] != all[i - 1])
            j++;
        (*values)[j] = all[i];
        (*counts)[j]++;
    }
    *n_distinct = d;
    free(all);
    return 0;
}

/* ridge's alpha: voxels per chosen alpha. */
static int alpha_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                         const struct nf_input_source *src)
{
    const struct nf_matrix *m = &v->u.mat;
    size_t n = (size_t)(m->rows * m->cols), d = 0;
    double *values = NULL;
    size_t *counts = NULL;
    if (distinct_counts(m->data, n, 60, &values, &counts, &d) < 0)
        return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    int rc = 0;
    if (d == 0) {   /* a continuum (or nothing): its histogram */
        char *svg = report_svg_histogram(m->data, n, 40, NAN, "", key);
        report_page_svg(&c->pg, svg);
        free(svg);
        return params_table(c, src);
    }
    char **labels = nf_calloc(d + 1, sizeof *labels);
    double *share = nf_malloc_array(d, sizeof *share);
    if (!labels || !share) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    size_t total = 0;
    for (size_t i = 0; i < d; i++)
        total += counts[i];
    for (size_t i = 0; i < d; i++) {
        share[i] = 100.0 * (double)counts[i] / (double)total;
        if (!(labels[i] = nf_asprintf("alpha %.4g (%zu voxels)", values[i], counts[i]))) {
            rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    char text[200];
    snprintf(text, sizeof text, "The alpha each voxel's cross-validation chose: %zu distinct values over %zu voxels.",
             d, total);
    report_page_paragraph(&c->pg, text);
    char *svg = report_svg_bars((const char *const *)labels, share, d, 100, NAN, "% of voxels");
    report_page_svg(&c->pg, svg);
    free(svg);
    rc = params_table(c, src);
fail:
    for (size_t i = 0; labels && i < d; i++)
        free(labels[i]);
    free(labels);
    free(share);
    free(values);
    free(counts);
    return rc;
}

/* A score map: the map, then the distribution of its scores with the median. */
static int score_map_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                             const struct nf_input_source *src)
{
    int rc = report_map_section(c, key, v);
    if (rc < 0)
        return rc;
    const float *data = v->kind == NF_KIND_MATRIX ? v->u.mat.data : v->u.vol.data;
    size_t n = v->kind == NF_KIND_MATRIX ? (size_t)(v->u.mat.rows * v->u.mat.cols)
                                         : (size_t)nf_grid_nvox(&v->u.vol.grid);
    float *s = nf_malloc_array(n ? n : 1, sizeof *s);
    size_t m = 0;
    if (!s)
        return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (isfinite(data[i]))
            s[m++] = data[i];
    qsort(s, m, sizeof *s, cmp_float_desc);
    double median = m == 0 ? NAN : m % 2 ? s[m / 2] : 0.5 * ((double)s[m / 2 - 1] + (double)s[m / 2]);
    char text[240];
    snprintf(text, sizeof text, "Cross-validated scores of %zu voxels: median %.4g, best %.4g.", m, median,
             m ? (double)s[0] : NAN);
    report_page_paragraph(&c->pg, text);
    char *svg = report_svg_histogram(s, m, 40, median, "median", key);
    report_page_svg(&c->pg, svg);
    free(svg);
    free(s);
    return params_table(c, src);
}

/* The text of cell r of a column (a number as %g). */
static void cell_text(const struct nf_column *col, int64_t r, char *buf, size_t size)
{
    if (col->str)
        snprintf(buf, size, "%s", col->str[r] ? col->str[r] : "");
    else
        snprintf(buf, size, "%.6g", col->num[r]);
}

static int cmp_class(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    char *ex, *ey;
    double dx = strtod(x, &ex), dy = strtod(y, &ey);
    if (*x && *y && !*ex && !*ey)   /* both numbers: numeric order */
        return (dx > dy) - (dx < dy);
    return strcmp(x, y);
}

/* predict's predictions: a confusion matrix for classes, r for values. */
static int predictions_section(struct report_ctx *c, const struct nf_value *v, const struct nf_input_source *src)
{
    const struct nf_table *t = &v->u.tab;
    int64_t io = nf_table_find(t, "observed"), ip = nf_table_find(t, "predicted");
    if (io < 0 || ip < 0 || t->n_rows == 0)
        return report_table_section(c, t);
    const struct nf_column *obs = &t->cols[io], *pred = &t->cols[ip];
    size_t n = (size_t)t->n_rows, n_cls = 0;
    enum { MAX_CLASSES = 20 };
    char *cls[2 * MAX_CLASSES + 1];
    char a[64], b[64];
    bool too_many = false;
    for (size_t r = 0; r < n && !too_many; r++)
        for (int which = 0; which < 2 && !too_many; which++) {
            cell_text(which ? pred : obs, (int64_t)r, a, sizeof a);
            size_t k = 0;
            while (k < n_cls && strcmp(cls[k], a) != 0)
                k++;
            if (k < n_cls)
                continue;
            if (n_cls == MAX_CLASSES) {
                too_many = true;
                break;
            }
            if (!(cls[n_cls] = nf_strdup(a))) {
                for (size_t i = 0; i < n_cls; i++)
                    free(cls[i]);
                return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
            }
            n_cls++;
        }
    int rc = 0;
    char text[240];
    if (too_many && obs->num && pred->num) {   /* regression: observed against predicted */
        double so = 0, sp = 0, soo = 0, spp = 0, sop = 0;
        for (size_t r = 0; r < n; r++) {
            so += obs->num[r];
            sp += pred->num[r];
        }
        so /= (double)n;
        sp /= (double)n;
        for (size_t r = 0; r < n; r++) {
            double x = obs->num[r] - so, y = pred->num[r] - sp;
            soo += x * x;
            spp += y * y;
            sop += x * y;
        }
        snprintf(text, sizeof text, "%zu out-of-fold predictions of a continuous target: Pearson r between "
                 "observed and predicted %.4f.", n, sop / sqrt(soo * spp));
        report_page_paragraph(&c->pg, text);
        goto done;
    }
    if (too_many) {
        snprintf(text, sizeof text, "%zu out-of-fold predictions over more than %d classes (no confusion matrix).",
                 n, MAX_CLASSES);
        report_page_paragraph(&c->pg, text);
        goto done;
    }
    qsort(cls, n_cls, sizeof *cls, cmp_class);
    size_t *count = nf_calloc(n_cls * n_cls + 1, sizeof *count), correct = 0;
    char **cells = nf_calloc(n_cls * (n_cls + 1) + 1, sizeof *cells);
    const char **headers = nf_calloc(n_cls + 2, sizeof *headers);
    if (!count || !cells || !headers) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto confusion_done;
    }
    for (size_t r = 0; r < n; r++) {
        cell_text(obs, (int64_t)r, a, sizeof a);
        cell_text(pred, (int64_t)r, b, sizeof b);
        size_t i = 0, j = 0;
        while (strcmp(cls[i], a) != 0)
            i++;
        while (strcmp(cls[j], b) != 0)
            j++;
        count[i * n_cls + j]++;
        correct += i == j;
    }
    headers[0] = "observed \\ predicted";
    for (size_t j = 0; j < n_cls; j++)
        headers[j + 1] = cls[j];
    for (size_t i = 0; i < n_cls; i++) {
        cells[i * (n_cls + 1)] = nf_strdup(cls[i]);
        for (size_t j = 0; j < n_cls; j++)
            cells[i * (n_cls + 1) + j + 1] = nf_asprintf("%zu", count[i * n_cls + j]);
    }
    for (size_t i = 0; i < n_cls * (n_cls + 1); i++)
        if (!cells[i]) {
            rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
            goto confusion_done;
        }
    snprintf(text, sizeof text, "Confusion matrix of %zu out-of-fold predictions (rows: observed class, columns: "
             "predicted): %zu correct, accuracy %.4f.", n, correct, (double)correct / (double)n);
    report_page_paragraph(&c->pg, text);
    struct report_table tab = { headers, n_cls + 1, n_cls, (const char *const *)cells, -1, NULL, NULL };
    report_page_table(&c->pg, &tab);
confusion_done:
    for (size_t i = 0; cells && i < n_cls * (n_cls + 1); i++)
        free(cells[i]);
    free(cells);
    free(headers);
    free(count);
done:
    for (size_t i = 0; i < n_cls; i++)
        free(cls[i]);
    return rc < 0 ? rc : params_table(c, src);
}

/* predict's ROI table: the best ROIs by mean score as bars named by region
 * (up to 40), then the whole table. */
struct roi_bar { double score, label; int64_t row; };

static int cmp_roi_bar(const void *a, const void *b)
{
    const struct roi_bar *x = a, *y = b;
    bool fx = isfinite(x->score), fy = isfinite(y->score);
    if (fx != fy)
        return fx ? -1 : 1;   /* NaN (too few voxels) last */
    if (fx && x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* A copy of table t with a `region` column after its label column (label
 * `il`): the atlas's name of each label, "" where it has none. */
static int with_region_column(struct report_ctx *c, const struct nf_table *t, int64_t il, struct nf_value **out)
{
    struct nf_error *err = c->run->err;
    struct nf_value *named = nf_value_new_table(t->n_rows, t->n_cols + 1, err);
    if (!named)
        return err->code;
    int rc = 0;
    for (int64_t j = 0, k = 0; j <= t->n_cols; j++, k++) {
        bool region = j == il + 1;
        const struct nf_column *from = region ? NULL : &t->cols[k];
        if (region)
            k--;
        rc = region || from->str ? nf_table_column_string(named, j, region ? "region" : from->name, err)
                                 : nf_table_column_numeric(named, j, from->name, err);
        for (int64_t r = 0; rc == 0 && r < t->n_rows; r++) {
            struct nf_column *to = &named->u.tab.cols[j];
            if (region) {
                const char *name = nf_label_name(&c->names, (int64_t)t->cols[il].num[r]);
                if (!(to->str[r] = nf_strdup(name ? name : "")))
                    rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            } else if (from->str) {
                if (!(to->str[r] = nf_strdup(from->str[r] ? from->str[r] : "")))
                    rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            } else {
                to->num[r] = from->num[r];
            }
        }
        if (rc < 0) {
            nf_value_unref(named);
            return rc;
        }
    }
    *out = named;
    return 0;
}

static int roi_table_section(struct report_ctx *c, const struct nf_value *v, const struct nf_input_source *src)
{
    enum { MAX_BARS = 40 };
    const struct nf_table *t = &v->u.tab;
    int64_t il = nf_table_find(t, "label"), is = nf_table_find(t, "mean_score");
    if (il < 0 || is < 0 || !t->cols[il].num || !t->cols[is].num)
        return report_table_section(c, t);
    size_t n_rows = (size_t)t->n_rows, n = n_rows > MAX_BARS ? MAX_BARS : n_rows;
    struct roi_bar *bars = nf_malloc_array(n_rows ? n_rows : 1, sizeof *bars);
    struct nf_value *named_table = NULL;
    char **labels = nf_calloc(n + 1, sizeof *labels);
    double *score = nf_malloc_array(n ? n : 1, sizeof *score);
    int rc = 0;
    if (!bars || !labels || !score) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t r = 0; r < n_rows; r++)
        bars[r] = (struct roi_bar){ t->cols[is].num[r], t->cols[il].num[r], (int64_t)r };
    qsort(bars, n_rows, sizeof *bars, cmp_roi_bar);
    size_t named = 0;
    for (size_t r = 0; r < n; r++) {
        double label = bars[r].label;
        const char *name = c->names.n ? nf_label_name(&c->names, (int64_t)label) : NULL;
        named += name != NULL;
        score[r] = bars[r].score;
        labels[r] = name ? nf_asprintf("%s (%g)", name, label) : nf_asprintf("label %g", label);
        if (!labels[r]) {
            rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    char text[300];
    snprintf(text, sizeof text, "Mean cross-validated score per ROI, %s%zu ROIs%s.",
             n < n_rows ? "the best " : "all ", n,
             named ? ", named from the atlas's label file" : " (connect the atlas to the report's atlas input to "
                     "name them)");
    report_page_paragraph(&c->pg, text);
    char *svg = report_svg_bars((const char *const *)labels, score, n, 0, NAN, "mean score");
    report_page_svg(&c->pg, svg);
    free(svg);
    if (named) {
        NF_TRY(rc = with_region_column(c, t, il, &named_table));
        t = &named_table->u.tab;
    }
    NF_TRY(rc = report_table_section(c, t));
    rc = params_table(c, src);
fail:
    for (size_t r = 0; labels && r < n; r++)
        free(labels[r]);
    free(labels);
    free(score);
    free(bars);
    nf_value_unref(named_table);
    return rc;
}

/* predict's scores: one bar per fold (whole_brain: 1 x folds). */
static int fold_scores_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                               const struct nf_input_source *src)
{
    const struct nf_matrix *m = &v->u.mat;
    size_t n = (size_t)m->cols;
    char **labels = nf_calloc(n + 1, sizeof *labels);
    double *score = nf_malloc_array(n ? n : 1, sizeof *score), mean = 0;
    int rc = 0;
    if (!labels || !score) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t f = 0; f < n; f++) {
        score[f] = m->data[f];
        mean += score[f] / (double)n;
        if (!(labels[f] = nf_asprintf("fold %zu", f + 1))) {
            rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    char text[160];
    snprintf(text, sizeof text, "%s per fold; mean over %zu folds %.4f.", key, n, mean);
    report_page_paragraph(&c->pg, text);
    char *svg = report_svg_bars((const char *const *)labels, score, n, 0, NAN, key);
    report_page_svg(&c->pg, svg);
    free(svg);
    rc = params_table(c, src);
fail:
    for (size_t f = 0; labels && f < n; f++)
        free(labels[f]);
    free(labels);
    free(score);
    return rc;
}

static bool is_map(const struct nf_value *v)
{
    return (v->kind == NF_KIND_MATRIX && v->u.mat.geom && v->u.mat.rows == 1) ||
           (v->kind == NF_KIND_VOLUME && v->u.vol.nt == 1);
}

int report_node_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                        const struct nf_input_source *src, bool *handled)
{
    *handled = true;
    bool column = v->kind == NF_KIND_MATRIX && (v->u.mat.rows == 1 || v->u.mat.cols == 1);
    if (is_from(src, "permute", "null_max") && column)
        return null_max_section(c, key, v, src);
    if ((is_from(src, "permute", "null_max_tfce") || is_from(src, "permute", "null_max_cluster_size") ||
         is_from(src, "permute", "null_max_cluster_mass")) &&
        column)
        return tfce_cluster_null_section(c, key, v, src);
    if (is_from(src, "permute", "clusters") && v->kind == NF_KIND_TABLE)
        return permute_clusters_section(c, v, src);
    if (is_from(src, "ridge", "alpha") && v->kind == NF_KIND_MATRIX)
        return alpha_section(c, key, v, src);
    if ((is_from(src, "ridge", "score") || is_from(src, "predict", "map")) && is_map(v))
        return score_map_section(c, key, v, src);
    if (is_from(src, "predict", "predictions") && v->kind == NF_KIND_TABLE)
        return predictions_section(c, v, src);
    if (is_from(src, "predict", "table") && v->kind == NF_KIND_TABLE)
        return roi_table_section(c, v, src);
    if (is_from(src, "predict", "scores") && v->kind == NF_KIND_MATRIX && v->u.mat.rows == 1)
        return fold_scores_section(c, key, v, src);
    *handled = false;
    return 0;
}
