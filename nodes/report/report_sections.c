/* report_sections.c — the report's sections by what an input is
 * (report_internal.h): a map as orthogonal slices through its peak, an axial
 * mosaic, glass-brain projections and a colour bar (p maps as -log10 p); a
 * column of numbers as a histogram; a table as a table whose cluster rows
 * link to the slices through their peaks; a collection of maps as one
 * thumbnail per item. report.c picks the section; report_nodes.c uses these
 * inside its own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"
#include "encode.h"
#include "core/util.h"

/* The three orthogonal slices through a voxel side by side, 8 white pixels
 * apart, as one image (one figure a peak's link can swap). */
static int ortho_image(const struct nf_scene *s, const int64_t voxel[3], struct nf_image *out, struct nf_error *err)
{
    struct nf_image v[3] = { { 0 } };
    int rc = 0, w = 0, h = 0;
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 3; k++) {
        NF_TRY(rc = nf_render_slice(s, (enum nf_view)k, voxel, &v[k], err));
        w += v[k].width + (k ? 8 : 0);
        h = v[k].height > h ? v[k].height : h;
    }
    out->rgb = nf_malloc_array((size_t)w * (size_t)h, 3);
    if (!out->rgb) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    out->width = w;
    out->height = h;
    memset(out->rgb, 255, (size_t)w * (size_t)h * 3);
    for (int k = 0, x0 = 0; k < 3; x0 += v[k].width + 8, k++)
        for (int y = 0; y < v[k].height; y++)
            memcpy(out->rgb + ((size_t)y * (size_t)w + (size_t)x0) * 3, v[k].rgb + (size_t)y * (size_t)v[k].width * 3,
                   (size_t)v[k].width * 3);
fail:
    for (int k = 0; k < 3; k++)
        nf_image_release(&v[k]);
    if (rc < 0)
        nf_image_release(out);
    return rc;
}

/* The display voxel nearest to a point in mm (the inverse of the grid's affine). */
static void voxel_of_mm(const struct nf_scene *s, const double mm[3], int64_t voxel[3])
{
    const double (*a)[4] = s->grid.affine;
    double m[3][3], inv[3][3], b[3];
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++)
            m[r][c] = a[r][c];
        b[r] = mm[r] - a[r][3];
    }
    double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                 m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            /* the cofactor of (c, r) over the determinant */
            int r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
            inv[r][c] = (m[r1][c1] * m[r2][c2] - m[r1][c2] * m[r2][c1]) / det;
        }
    for (int r = 0; r < 3; r++) {
        double v = inv[r][0] * b[0] + inv[r][1] * b[1] + inv[r][2] * b[2];
        int64_t i = (int64_t)llround(v);
        voxel[r] = i < 0 ? 0 : i >= s->grid.dim[r] ? s->grid.dim[r] - 1 : i;
    }
}

/* Encode an image and put it on the page. */
static int add_image(struct report_ctx *c, const struct nf_image *im, const char *alt)
{
    uint8_t *png = NULL;
    size_t n = 0;
    int rc = nf_png_encode(im->rgb, im->width, im->height, &png, &n, c->run->err);
    if (rc == 0 && report_page_png(&c->pg, png, n, im->width, im->height, alt) < 0)
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    free(png);
    return rc;
}

static const char *const view_names[] = { "sagittal", "coronal", "axial" };   /* enum nf_view order */

/* What a map shows, by what it holds: a p-like map (p, p_fwe, q_fdr) as
 * -log10 p above -log10 p_below; a statistic (t, z, r) above `threshold`;
 * anything else (effects, scores, a simulation's truth) every nonzero value. */
struct map_display {
    float *transformed;     /* owned: the values shown when they differ from the map's, else NULL */
    double threshold;
    int64_t n_shown;        /* voxels of the map (its own grid) that are coloured */
    char label[96];         /* the colour bar's */
    char rule[240];         /* what is coloured, for the text */
};

static int64_t map_len(const struct nf_render_map *m)
{
    return m->geom ? m->geom->n_voxels : nf_grid_nvox(m->grid);
}

/* The values the picture will show, as a copy the display may change. */
static int own_values(const struct report_ctx *c, struct nf_render_map *over, struct map_display *d)
{
    if (d->transformed)
        return 0;
    int64_t n = map_len(over);
    if (!(d->transformed = nf_malloc_array((size_t)(n ? n : 1), sizeof *d->transformed)))
        return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    memcpy(d->transformed, over->data, (size_t)n * sizeof *d->transformed);
    over->data = d->transformed;
    return 0;
}

static bool is_shown(float v, double threshold)
{
    return isfinite(v) && v != 0 && fabs(v) >= threshold;
}

/* A statistic map shown only where the p_key map is below p_below (as
 * summarize's p_key): both must have the same voxels. */
static int mask_by_p(const struct report_ctx *c, const char *key, struct nf_render_map *over, struct map_display *d)
{
    const struct nf_run *run = c->run;
    const struct nf_value *pv = NULL;
    for (size_t i = 0; i < run->n_extra; i++)
        if (strcmp(run->extra_names[i], c->p->p_key) == 0)
            pv = run->extra_in[i];
    if (pv && pv->kind == NF_KIND_COLLECTION && pv->u.coll.n == 1)
        pv = pv->u.coll.items[0];
    struct nf_render_map pm;
    struct nf_error e = { 0 };
    if (!pv || nf_render_map_of_value(pv, 0, &pm, &e) < 0)
        return NF_FAIL(run->err, NF_EDATA, "p_key '%s' is not a map: it cannot select the voxels of '%s'",
                       c->p->p_key, key);
    bool same = (pm.geom && over->geom && pm.geom->n_voxels == over->geom->n_voxels &&
                 nf_grid_same(&pm.geom->grid, &over->geom->grid) &&
                 memcmp(pm.geom->index, over->geom->index, (size_t)pm.geom->n_voxels * sizeof *pm.geom->index) == 0) ||
                (!pm.geom && !over->geom && nf_grid_same(pm.grid, over->grid));
    if (!same)
        return NF_FAIL(run->err, NF_EDATA, "p_key '%s' and '%s' are maps of different voxels: the p map cannot "
                       "select the statistic's voxels", c->p->p_key, key);
    int rc = own_values(c, over, d);
    if (rc < 0)
        return rc;
    for (int64_t i = 0; i < map_len(over); i++)
        if (!(pm.data[i] < c->p->p_below))
            d->transformed[i] = 0;
    return 0;
}

/* Hide the shown voxels that form clusters of fewer than min_size voxels
 * (26-connected on the map's grid, positive and negative values apart, as
 * summarize's clusters). */
static int drop_small_clusters(const struct report_ctx *c, struct nf_render_map *over, struct map_display *d,
                               int64_t min_size)
{
    int rc = own_values(c, over, d);
    if (rc < 0)
        return rc;
    const struct nf_grid *g = over->grid;
    int64_t n = map_len(over), nvox = nf_grid_nvox(g);
    int64_t *col_of = over->geom ? nf_malloc_array((size_t)nvox, sizeof *col_of) : NULL;
    int64_t *stack = nf_malloc_array((size_t)(n ? n : 1), sizeof *stack);
    int64_t *members = nf_malloc_array((size_t)(n ? n : 1), sizeof *members);
    bool *seen = nf_calloc((size_t)(n ? n : 1), sizeof *seen);
    if ((over->geom && !col_of) || !stack || !members || !seen) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (col_of) {
        for (int64_t i = 0; i < nvox; i++)
            col_of[i] = -1;
        for (int64_t k = 0; k < n; k++)
            col_of[over->geom->index[k]] = k;
    }
    float *v = d->transformed;
    const int64_t nx = g->dim[0], ny = g->dim[1], nz = g->dim[2];
    for (int64_t start = 0; start < n; start++) {
        if (seen[start] || !is_shown(v[start], d->threshold))
            continue;
        bool positive = v[start] > 0;
        int64_t top = 0, size = 0;
        stack[top++] = start;
        seen[start] = true;
        while (top > 0) {
            int64_t k = stack[--top];
            members[size++] = k;
            int64_t vox = col_of ? over->geom->index[k] : k;
            int64_t x = vox % nx, y = vox / nx % ny, z = vox / (nx * ny);
            for (int dz = -1; dz <= 1; dz++)
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++) {
                        int64_t X = x + dx, Y = y + dy, Z = z + dz;
                        if ((!dx && !dy && !dz) || X < 0 || Y < 0 || Z < 0 || X >= nx || Y >= ny || Z >= nz)
                            continue;
                        int64_t nb = X + nx * (Y + ny * Z), j = col_of ? col_of[nb] : nb;
                        if (j >= 0 && !seen[j] && is_shown(v[j], d->threshold) && (v[j] > 0) == positive) {
                            seen[j] = true;
                            stack[top++] = j;
                        }
                    }
        }
        if (size < min_size)
            for (int64_t i = 0; i < size; i++)
                v[members[i]] = 0;
    }
fail:
    free(col_of);
    free(stack);
    free(members);
    free(seen);
    return rc;
}

/* What a map shows, by what it holds: a p-like map (p, p_fwe, q_fdr) as
 * -log10 p above -log10 p_below; a statistic (t, z, r) above `threshold`,
 * and where the p_key map is below p_below when p_key is set; anything else
 * (effects, scores, a simulation's truth) every nonzero value. Thresholded
 * maps lose clusters smaller than min_cluster_size. */
static int map_display_of(const struct report_ctx *c, const char *key, const struct nf_value *v,
                          struct nf_render_map *over, struct map_display *d)
{
    enum nf_stat kind = v->stat.kind;
    const struct report_params *p = c->p;
    int rc = 0;
    bool thresholded = true;
    memset(d, 0, sizeof *d);
    snprintf(d->label, sizeof d->label, "%s", key);
    if (nf_stat_is_p(kind)) {
        NF_TRY(rc = own_values(c, over, d));
        for (int64_t i = 0; i < map_len(over); i++) {
            float pv = d->transformed[i];
            /* p == 1 (nothing, and outside the mask) is 0: not shown */
            d->transformed[i] = isfinite(pv) && pv > 0 && pv < 1 ? (float)-log10((double)pv) : 0.0f;
        }
        d->threshold = -log10(p->p_below);
        snprintf(d->label, sizeof d->label, "-log10 %s", key);
        snprintf(d->rule, sizeof d->rule, "shown as -log10 p: voxels with %s < %g are coloured", key, p->p_below);
    } else if (kind == NF_STAT_T || kind == NF_STAT_Z || kind == NF_STAT_CORREL) {
        d->threshold = p->threshold;
        snprintf(d->rule, sizeof d->rule, "voxels with |%s| >= %g", nf_stat_name(kind), d->threshold);
        if (p->p_key && strcmp(p->p_key, key) != 0) {
            NF_TRY(rc = mask_by_p(c, key, over, d));
            size_t len = strlen(d->rule);
            snprintf(d->rule + len, sizeof d->rule - len, " and %s < %g", p->p_key, p->p_below);
        }
        size_t len = strlen(d->rule);
        snprintf(d->rule + len, sizeof d->rule - len, " are coloured");
    } else {
        thresholded = false;
        snprintf(d->rule, sizeof d->rule, "every nonzero voxel is coloured");
    }
    if (thresholded && p->min_cluster_size > 1) {
        NF_TRY(rc = drop_small_clusters(c, over, d, p->min_cluster_size));
        size_t len = strlen(d->rule);
        snprintf(d->rule + len, sizeof d->rule - len, " (in clusters of at least %lld voxels)",
                 (long long)p->min_cluster_size);
    }
    for (int64_t i = 0; i < map_len(over); i++)
        d->n_shown += is_shown(over->data[i], d->threshold);
fail:
    return rc;
}

int report_map_section(struct report_ctx *c, const char *key, const struct nf_value *v)
{
    struct nf_render_map over, under;
    struct map_display d = { 0 };
    struct nf_scene scene;
    struct nf_image im = { 0 };
    struct nf_error *err = c->run->err;
    int rc;
    memset(&scene, 0, sizeof scene);
    NF_TRY(rc = nf_render_map_of_value(v, 0, &over, err));
    NF_TRY(rc = map_display_of(c, key, v, &over, &d));
    struct nf_render_style style = { .threshold = d.threshold };
    bool with_under = c->underlay && nf_render_map_of_value(c->underlay, 0, &under, err) == 0;
    NF_TRY(rc = nf_scene_init(&scene, with_under ? &under : NULL, &over, &style, err));
    int64_t peak[3];
    double mm[3];
    bool shown = nf_scene_peak(&scene, peak);
    nf_scene_voxel_mm(&scene, peak, mm);
    char text[480];
    if (shown)
        snprintf(text, sizeof text, "Peak %s%.4g at (%.1f, %.1f, %.1f) mm; %s%s: %lld voxels.",
                 nf_stat_is_p(v->stat.kind) ? "-log10 p " : "|value| ", scene.vmax, mm[0], mm[1], mm[2], d.rule,
                 with_under ? " over the underlay" : "", (long long)d.n_shown);
    else
        snprintf(text, sizeof text, "Nothing to show: %s, and none is.", d.rule);
    report_page_paragraph(&c->pg, text);
    NF_TRY(rc = ortho_image(&scene, peak, &im, err));
    snprintf(text, sizeof text, "%s: sagittal, coronal and axial slices through the peak", key);
    int figure = c->pg.n_figures;
    NF_TRY(rc = add_image(c, &im, text));
    nf_image_release(&im);
    struct nf_colorbar cb;
    nf_scene_colorbar(&scene, &cb);
    char id[32];
    snprintf(id, sizeof id, "cb%d", c->n_colorbars++);
    char *svg = report_svg_colorbar(&cb.colors[0][0], cb.lo, cb.hi, d.label, id);
    report_page_svg(&c->pg, svg);
    free(svg);
    NF_TRY(rc = nf_render_mosaic(&scene, (int)c->p->mosaic, 6, &im, NULL, NULL, err));
    snprintf(text, sizeof text, "%s: axial mosaic", key);
    NF_TRY(rc = add_image(c, &im, text));
    nf_image_release(&im);
    for (int view = 0; view < 3; view++) {
        NF_TRY(rc = nf_render_glass(&scene, (enum nf_view)view, &im, err));
        snprintf(text, sizeof text, "%s: glass brain, %s projection", key, view_names[view]);
        NF_TRY(rc = add_image(c, &im, text));
        nf_image_release(&im);
    }
    if (!c->have_link) {   /* the first map: what a cluster table's peaks show */
        c->link_scene = scene;
        memset(&scene, 0, sizeof scene);
        c->have_link = true;
        c->link_figure = figure;
    }
fail:
    free(d.transformed);
    nf_image_release(&im);
    nf_scene_release(&scene);
    return rc;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A column of numbers: its histogram, the 95th percentile marked (for a
 * permutation test's null maxima, the 5% family-wise threshold). */
int report_values_section(struct report_ctx *c, const char *key, const struct nf_matrix *m)
{
    size_t n = (size_t)(m->rows * m->cols), k = 0;
    float *sorted = nf_malloc_array(n ? n : 1, sizeof *sorted);
    if (!sorted)
        return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (isfinite(m->data[i]))
            sorted[k++] = m->data[i];
    qsort(sorted, k, sizeof *sorted, cmp_float);
    double q95 = k ? sorted[(size_t)ceil(0.95 * (double)k) - 1 < k ? (size_t)ceil(0.95 * (double)k) - 1 : k - 1]
                   : NAN;
    char text[200];
    snprintf(text, sizeof text, "%zu values (%zu finite); 95th percentile %.4g.", n, k, q95);
    report_page_paragraph(&c->pg, text);
    char *svg = report_svg_histogram(m->data, n, 40, q95, "95th percentile", key);
    report_page_svg(&c->pg, svg);
    free(svg);
    free(sorted);
    return 0;
}

int report_table_section(struct report_ctx *c, const struct nf_table *t)
{
    enum { MAX_ROWS = 200 };
    size_t rows = t->n_rows > MAX_ROWS ? MAX_ROWS : (size_t)t->n_rows, cols = (size_t)t->n_cols;
    const char **headers = nf_calloc(cols + 1, sizeof *headers);
    char **cells = nf_calloc(rows * cols + 1, sizeof *cells);
    uint8_t **row_png = NULL;
    size_t *row_len = NULL;
    int rc = 0;
    if (!headers || !cells) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t j = 0; j < cols; j++)
        headers[j] = t->cols[j].name;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            const struct nf_column *col = &t->cols[j];
            cells[r * cols + j] = col->str ? nf_strdup(col->str[r] ? col->str[r] : "")
                                  : isnan(col->num[r]) ? nf_strdup("n/a") : nf_asprintf("%.6g", col->num[r]);
        }
    /* a cluster table: each row links to the slices through its peak */
    int64_t px = nf_table_find(t, "peak_x"), py = nf_table_find(t, "peak_y"), pz = nf_table_find(t, "peak_z");
    bool links = c->have_link && px >= 0 && py >= 0 && pz >= 0 && t->cols[px].num && t->cols[py].num &&
                 t->cols[pz].num && rows <= 50;
    if (links && (!(row_png = nf_calloc(rows + 1, sizeof *row_png)) || !(row_len = nf_calloc(rows + 1, sizeof *row_len)))) {
        rc = NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t r = 0; links && r < rows; r++) {
        double mm[3] = { t->cols[px].num[r], t->cols[py].num[r], t->cols[pz].num[r] };
        if (!isfinite(mm[0]) || !isfinite(mm[1]) || !isfinite(mm[2]))
            continue;
        int64_t vox[3];
        struct nf_image im = { 0 };
        voxel_of_mm(&c->link_scene, mm, vox);
        rc = ortho_image(&c->link_scene, vox, &im, c->run->err);
        if (rc == 0)
            rc = nf_png_encode(im.rgb, im.width, im.height, &row_png[r], &row_len[r], c->run->err);
        nf_image_release(&im);
        if (rc < 0)
            goto fail;
    }
    struct report_table tab = { headers, cols, rows, (const char *const *)cells, links ? c->link_figure : -1,
                                (const uint8_t *const *)row_png, row_len };
    report_page_table(&c->pg, &tab);
    if (links)
        report_page_paragraph(&c->pg, "Click a cluster to see the slices through its peak in the first map above.");
    if ((size_t)t->n_rows > rows) {
        char text[96];
        snprintf(text, sizeof text, "(the first %zu of %lld rows)", rows, (long long)t->n_rows);
        report_page_paragraph(&c->pg, text);
    }
fail:
    for (size_t i = 0; cells && i < rows * cols; i++)
        free(cells[i]);
    for (size_t r = 0; row_png && r < rows; r++)
        free(row_png[r]);
    free(row_png);
    free(row_len);
    free(cells);
    free(headers);
    return rc;
}

/* A collection of maps: one glass-brain (axial) thumbnail per item, up to 48. */
int report_collection_section(struct report_ctx *c, const char *key, const struct nf_value *v)
{
    char text[200];
    size_t n = v->u.coll.n, shown = 0;
    snprintf(text, sizeof text, "%zu items%s.", n, n > 48 ? " (the first 48 shown)" : "");
    report_page_paragraph(&c->pg, text);
    for (size_t i = 0; i < n && shown < 48; i++) {
        const struct nf_value *it = v->u.coll.items[i];
        struct nf_render_map over;
        struct nf_error e = { 0 };
        if (!it || nf_render_map_of_value(it, 0, &over, &e) < 0)
            continue;   /* not a map: nothing to draw for it */
        struct map_display d;
        int rc = map_display_of(c, key, it, &over, &d);
        if (rc < 0)
            return rc;
        struct nf_render_style style = { .threshold = d.threshold, .min_short_side = 90 };
        struct nf_scene scene;
        struct nf_image im = { 0 };
        memset(&scene, 0, sizeof scene);
        rc = nf_scene_init(&scene, NULL, &over, &style, c->run->err);
        if (rc == 0)
            rc = nf_render_glass(&scene, NF_VIEW_AXIAL, &im, c->run->err);
        double sum = 0, peak = 0;
        int64_t n_vox = over.geom ? over.geom->n_voxels : nf_grid_nvox(over.grid), n_fin = 0;
        for (int64_t k = 0; k < n_vox; k++)
            if (isfinite(over.data[k])) {
                sum += over.data[k];
                peak = n_fin++ == 0 || fabs(over.data[k]) > fabs(peak) ? over.data[k] : peak;
            }
        snprintf(text, sizeof text, "%s: %s, mean %.3g, peak %.3g", key, it->label ? it->label : "item",
                 n_fin ? sum / (double)n_fin : NAN, peak);
        if (rc == 0)
            rc = add_image(c, &im, text);
        nf_image_release(&im);
        nf_scene_release(&scene);
        free(d.transformed);
        if (rc < 0)
            return rc;
        shown++;
    }
    return 0;
}

