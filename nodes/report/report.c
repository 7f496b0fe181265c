/* report.c — the `report` node: one self-contained HTML page of a pipeline's
 * results, <name>_report.html in the outputs folder, that opens offline and
 * can be mailed (every image inline, no external file; report_page.h).
 *
 * It takes named inputs like summarize (`in: {t: group.stat, null: ...}`) and
 * shows each by what it is: a map (a 1xV matrix with voxel geometry, or a 3-D
 * volume) as orthogonal slices through its peak, an axial mosaic and
 * glass-brain projections over an anatomical underlay with a colour bar
 * (render.h); a column of numbers (a permutation test's null distribution of
 * the maximum) as a histogram with its 95th percentile marked; a table as a
 * table; a collection of maps as one glass-brain thumbnail per item. The
 * header names the pipeline, its hash and nlflow's version, and holds the
 * pipeline file itself. Same inputs, same bytes, except the date line.
 *
 * The underlay is the `underlay` input, else the file named by `template`,
 * else mricron-data's ch2better template (MNI space, as the simulated
 * data) when installed; the file's content is part of the node's key.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "node.h"
#include "io/io.h"
#include "core/switches.h"
#include "core/util.h"
#include "report.h"
#include "report_page.h"
#include "render.h"
#include "encode.h"

#define DEFAULT_UNDERLAY "/usr/share/mricron/templates/ch2better.nii.gz"

struct report_params {
    char *title;        /* NULL: "<pipeline> report" */
    char *name;         /* file prefix; NULL: the pipeline's name */
    double threshold;   /* show |v| >= threshold */
    char *underlay;     /* a NIfTI file; NULL: the default template; "none": no underlay */
    int64_t mosaic;     /* axial slices in the mosaic */
    struct nf_str_list sources;   /* "key=type.port": where inputs were made (rebuilt pages) */
    char *rebuilt_from;           /* NULL, or what a rebuilt page was made from (the header says) */
};

#define FIELD(f) offsetof(struct report_params, f)
static const struct nf_param report_param_table[] = {
    NF_PARAM_STR_F("title", FIELD(title), "", NF_PF_OPTIONAL, "page title (default: '<pipeline name> report')"),
    NF_PARAM_STR_F("name", FIELD(name), "", NF_PF_OPTIONAL,
                   "file prefix: <name>_report.html (default: the pipeline's name)"),
    NF_PARAM_NUM("threshold", FIELD(threshold), 0, 0, 1e30,
                 "maps show voxels with |value| >= threshold (0: every nonzero voxel)"),
    NF_PARAM_STR_F("template", FIELD(underlay), "", NF_PF_OPTIONAL,
                    "anatomical image file under the maps, any grid in the same space (default: mricron-data's "
                    "ch2better MNI template when installed; none: no underlay); the `underlay` input wins"),
    NF_PARAM_INT("mosaic", FIELD(mosaic), 12, 1, 64, "axial slices in each map's mosaic"),
    NF_PARAM_STR_LIST_F("sources", FIELD(sources), "", 1, 0, NF_PF_OPTIONAL,
                        "where inputs were made, for reports rebuilt by `nlflow report`: key=type.port "
                        "entries, e.g. [null_max=permute.null_max, t=permute.stat] (default: the wiring)"),
    NF_PARAM_STR_F("rebuilt_from", FIELD(rebuilt_from), "", NF_PF_OPTIONAL,
                   "for reports rebuilt by `nlflow report`: the results they were rebuilt from, shown in "
                   "the header in place of this pipeline's file and hash"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port report_inputs[] = {
    { "underlay", "anatomical volume under the maps (any grid in the same space)", NF_PT_VOLUME,
      NF_PORT_OPTIONAL },
    { "*", "any named results to show, e.g. {t: perm.stat, null: perm.null_max, fit: ridge1.score}", NF_PT_ANY,
      NF_PORT_VARIADIC | NF_PORT_OPTIONAL },
    NF_PORT_END,
};
static const struct nf_port report_outputs[] = {
    { "files", "the page written: columns key and path (relative to settings.outputs)", NF_PT_TABLE, 0 },
    NF_PORT_END,
};
NF_PORTS_MATCH(report_inputs, REPORT_N_IN);
NF_PORTS_MATCH(report_outputs, REPORT_N_OUT);

/* The underlay file the node reads itself (owned: relative to the pipeline
 * file's folder), or NULL: `template: none`, or no template installed. */
static char *underlay_path(const struct report_params *p, const struct nf_env *env)
{
    if (p->underlay && strcmp(p->underlay, "none") == 0)
        return NULL;
    if (p->underlay)
        return env && env->pipeline_dir ? nf_path_join(env->pipeline_dir, p->underlay) : nf_strdup(p->underlay);
    struct stat st;
    return stat(DEFAULT_UNDERLAY, &st) == 0 ? nf_strdup(DEFAULT_UNDERLAY) : NULL;
}

static int report_key_files(const void *params, const struct nf_env *env, char ***paths, size_t *n,
                            struct nf_error *err)
{
    char *u = underlay_path(params, env);
    *paths = NULL;
    *n = 0;
    if (!u)
        return 0;
    if (!(*paths = nf_calloc(2, sizeof **paths))) {
        free(u);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    (*paths)[0] = u;
    *n = 1;
    return 0;
}

/* A `sources` entry "key=type.port": the length of its key, the node type
 * and the index of its output; false when it is not of that form or names no
 * node type or output. */
static bool source_entry(const char *entry, size_t *key_len, const struct nf_node_type **type, int *port)
{
    const char *eq = strchr(entry, '='), *dot = eq ? strchr(eq + 1, '.') : NULL;
    char name[64];
    if (!eq || eq == entry || !dot || dot == eq + 1 || (size_t)(dot - eq - 1) >= sizeof name)
        return false;
    snprintf(name, sizeof name, "%.*s", (int)(dot - eq - 1), eq + 1);
    *key_len = (size_t)(eq - entry);
    *type = nf_node_type_find(name);
    *port = *type ? nf_port_index((*type)->outputs, dot + 1) : -1;
    return *port >= 0;
}

static int report_resolve(struct nf_resolve *r)
{
    for (size_t i = 0; i < r->n_extra; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->extra_names[i], r->extra_names[j]) == 0)
                return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                                  "input '%s' is named twice", r->extra_names[i]);
    const struct report_params *p = r->params;
    if (p->underlay && strcmp(p->underlay, "none") != 0) {
        char *path = underlay_path(p, r->env);
        struct nf_nifti_info info;
        struct nf_error e = { 0 };
        int rc = path ? nf_nifti_read_info(path, &info, &e) : NF_FAIL(&e, NF_ENOMEM, "out of memory");
        free(path);
        if (rc < 0)
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "template '%s': %s", p->underlay, e.msg);
    }
    for (size_t i = 0; i < p->sources.n; i++) {
        const char *entry = p->sources.v[i];
        const struct nf_node_type *type;
        size_t key_len;
        int port;
        bool wired = false;
        if (!source_entry(entry, &key_len, &type, &port))
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "sources entry '%s' must be key=type.port: an input of this node, a node type "
                              "and one of its outputs (e.g. null_max=permute.null_max)", entry);
        for (size_t k = 0; k < r->n_extra && !wired; k++)
            wired = strlen(r->extra_names[k]) == key_len && strncmp(r->extra_names[k], entry, key_len) == 0;
        if (!wired)
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "sources entry '%s': this node has no input '%.*s'", entry, (int)key_len, entry);
        for (size_t j = 0; j < i; j++)
            if (strncmp(p->sources.v[j], entry, key_len + 1) == 0)
                return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                                  "sources names input '%.*s' twice", (int)key_len, entry);
    }
    r->out[REPORT_OUT_FILES] = (struct nf_shape){ .kind = NF_KIND_TABLE, .dim = { 1, 2 } };
    return 0;
}

/* Where input `key` was made: its `sources` entry (node_type and port filled,
 * no node id or parameters), else the node wired to it. A rebuilt page
 * (rebuilt_from) is wired to load nodes that read the files, which say
 * nothing of where the data came from: there only `sources` counts. */
static bool input_origin(const struct report_params *p, const struct nf_run *run, const char *key,
                         struct nf_input_source *src)
{
    for (size_t i = 0; i < p->sources.n; i++) {
        const struct nf_node_type *type;
        size_t key_len;
        int port;
        if (source_entry(p->sources.v[i], &key_len, &type, &port) && strlen(key) == key_len &&
            strncmp(p->sources.v[i], key, key_len) == 0) {
            *src = (struct nf_input_source){ .node_type = type->name, .port = type->outputs[port].name,
                                             .type = type };
            return true;
        }
    }
    return !p->rebuilt_from && nf_node_input_source(run->node, run->env, key, src);
}

/* The underlay at most ~1.5 million voxels: a template at 1 mm (7 million)
 * is averaged over 2x2x2 blocks. Every picture is drawn on the underlay's
 * grid, so its size sets the report's time (percentiles, sampling, PNGs),
 * and maps are rarely finer than 2 mm. Owned; NULL on out of memory. */
static struct nf_value *underlay_for_display(const struct nf_value *u, struct nf_error *err)
{
    const struct nf_grid *g = &u->u.vol.grid;
    int64_t nvox = nf_grid_nvox(g), f = 1;
    while (nvox / (f * f * f) > 1500000)
        f++;
    if (f == 1)
        return nf_value_ref((struct nf_value *)u);
    struct nf_grid d = *g;
    for (int a = 0; a < 3; a++) {
        d.dim[a] = (g->dim[a] + f - 1) / f;
        d.pixdim[a] = g->pixdim[a] * (double)f;
    }
    /* voxel i of the new grid is the block [f i, f i + f) of the old: its centre */
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++) {
            d.affine[r][3] += g->affine[r][c] * (double)(f - 1) / 2;
            d.affine[r][c] = g->affine[r][c] * (double)f;
        }
    }
    struct nf_value *out = nf_value_new_volume(&d, 3, 1, err);
    if (!out)
        return NULL;
    const float *src = u->u.vol.data;
    for (int64_t z = 0; z < d.dim[2]; z++)
        for (int64_t y = 0; y < d.dim[1]; y++)
            for (int64_t x = 0; x < d.dim[0]; x++) {
                double sum = 0;
                int64_t n = 0;
                for (int64_t k = z * f; k < z * f + f && k < g->dim[2]; k++)
                    for (int64_t j = y * f; j < y * f + f && j < g->dim[1]; j++)
                        for (int64_t i = x * f; i < x * f + f && i < g->dim[0]; i++) {
                            float v = src[(k * g->dim[1] + j) * g->dim[0] + i];
                            if (isfinite(v)) {
                                sum += v;
                                n++;
                            }
                        }
                out->u.vol.data[(z * d.dim[1] + y) * d.dim[0] + x] = n ? (float)(sum / (double)n) : NAN;
            }
    return out;
}

/* ---- sections ---- */

struct report_ctx {
    const struct report_params *p;
    struct nf_run *run;
    struct report_page pg;
    const struct nf_value *underlay;
    int n_colorbars;
    /* the first map's scene and its slice figure: a cluster table's peaks
     * link to views of it (kept until the page is done) */
    struct nf_scene link_scene;
    bool have_link;
    int link_figure;
};

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

static int map_section(struct report_ctx *c, const char *key, const struct nf_value *v)
{
    struct nf_render_map over, under;
    struct nf_render_style style = { .threshold = c->p->threshold };
    struct nf_scene scene;
    struct nf_image im = { 0 };
    struct nf_error *err = c->run->err;
    int rc;
    memset(&scene, 0, sizeof scene);
    NF_TRY(rc = nf_render_map_of_value(v, 0, &over, err));
    bool with_under = c->underlay && nf_render_map_of_value(c->underlay, 0, &under, err) == 0;
    NF_TRY(rc = nf_scene_init(&scene, with_under ? &under : NULL, &over, &style, err));
    int64_t peak[3];
    double mm[3];
    bool shown = nf_scene_peak(&scene, peak);
    nf_scene_voxel_mm(&scene, peak, mm);
    char text[320];
    if (shown)
        snprintf(text, sizeof text, "Peak |value| %.4g at (%.1f, %.1f, %.1f) mm; voxels with |value| >= %g are "
                 "coloured%s.", scene.vmax, mm[0], mm[1], mm[2], c->p->threshold,
                 with_under ? " over the underlay" : "");
    else
        snprintf(text, sizeof text, "No voxel reaches |value| >= %g.", c->p->threshold);
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
    char *svg = report_svg_colorbar(&cb.colors[0][0], cb.lo, cb.hi, key, id);
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
static int values_section(struct report_ctx *c, const char *key, const struct nf_matrix *m)
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

static int table_section(struct report_ctx *c, const struct nf_table *t)
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
static int collection_section(struct report_ctx *c, const char *key, const struct nf_value *v)
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
        struct nf_render_style style = { .threshold = c->p->threshold, .min_short_side = 90 };
        struct nf_scene scene;
        struct nf_image im = { 0 };
        memset(&scene, 0, sizeof scene);
        int rc = nf_scene_init(&scene, NULL, &over, &style, c->run->err);
        if (rc == 0)
            rc = nf_render_glass(&scene, NF_VIEW_AXIAL, &im, c->run->err);
        snprintf(text, sizeof text, "%s: %s", key, it->label ? it->label : "item");
        if (rc == 0)
            rc = add_image(c, &im, text);
        nf_image_release(&im);
        nf_scene_release(&scene);
        if (rc < 0)
            return rc;
        shown++;
    }
    return 0;
}

static int input_section(struct report_ctx *c, const char *key, const struct nf_value *v)
{
    char heading[160], anchor[160];
    snprintf(heading, sizeof heading, "%s", key);
    snprintf(anchor, sizeof anchor, "in-%s", key);
    report_page_section(&c->pg, heading, anchor);
    struct nf_input_source src;
    if (input_origin(c->p, c->run, key, &src)) {
        char from[256];
        if (src.node_id)
            snprintf(from, sizeof from, "From node '%s' (%s), output '%s'.", src.node_id, src.node_type, src.port);
        else
            snprintf(from, sizeof from, "From a %s node, output '%s'.", src.node_type, src.port);
        report_page_paragraph(&c->pg, from);
    }
    if (v->kind == NF_KIND_COLLECTION && v->u.coll.n == 1 && v->u.coll.items[0])
        v = v->u.coll.items[0];   /* one subject: shown in full */
    bool is_map = (v->kind == NF_KIND_MATRIX && v->u.mat.geom && v->u.mat.rows == 1) ||
                  (v->kind == NF_KIND_VOLUME && v->u.vol.nt == 1);
    if (is_map)
        return map_section(c, key, v);
    if (v->kind == NF_KIND_MATRIX && (v->u.mat.rows == 1 || v->u.mat.cols == 1))
        return values_section(c, key, &v->u.mat);
    if (v->kind == NF_KIND_TABLE)
        return table_section(c, &v->u.tab);
    if (v->kind == NF_KIND_COLLECTION)
        return collection_section(c, key, v);
    char text[200];
    snprintf(text, sizeof text, "A %s (not drawn: the report shows maps, columns of numbers, tables and "
             "collections of maps).", nf_kind_name(v->kind));
    report_page_paragraph(&c->pg, text);
    return 0;
}

static void header(struct report_ctx *c)
{
    const struct nf_env *env = c->run->env;
    char date[64] = "";
    const struct nf_switches *sw = nf_switches();
    time_t now = sw->source_date_set ? (time_t)sw->source_date : time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    char version[96];
    snprintf(version, sizeof version, "%s (commit %s)", NF_VERSION, NF_GIT_COMMIT);
    if (c->p->rebuilt_from) {   /* this pipeline only read the files: its own file and hash say nothing */
        const char *names[] = { "pipeline", "rebuilt from", "nlflow", "made" };
        const char *values[] = { env && env->pipeline_name ? env->pipeline_name : "", c->p->rebuilt_from, version,
                                 date };
        report_page_facts(&c->pg, names, values, 4);
        return;
    }
    const char *names[] = { "pipeline", "pipeline file", "pipeline hash", "nlflow", "made" };
    /* the file's name, not where it is: results do not depend on the folder */
    const char *file = env && env->pipeline_file ? env->pipeline_file : "";
    const char *base = strrchr(file, '/');
    const char *values[] = { env && env->pipeline_name ? env->pipeline_name : "", base ? base + 1 : file,
                             env && env->pipeline_hash ? env->pipeline_hash : "", version, date };
    report_page_facts(&c->pg, names, values, 5);
    if (env && env->pipeline_file) {
        struct nf_error e = { 0 };
        size_t len;
        char *text = nf_read_file(env->pipeline_file, &len, &e);
        if (text)
            report_page_details(&c->pg, "the pipeline file", text);
        free(text);
    }
}

static int report_run(struct nf_run *run)
{
    const struct report_params *p = run->params;
    const struct nf_env *env = run->env;
    struct report_ctx c = { .p = p, .run = run };
    struct nf_value *owned_under = NULL, *files = NULL;
    char *html = NULL, *path = NULL, *file = NULL;
    int rc = 0;
    if (!env || !env->outputs_dir)
        return NF_FAIL(run->err, NF_EBUG, "report run without an outputs folder");
    const struct nf_value *under = run->in[REPORT_IN_UNDERLAY];
    struct nf_value *read = NULL;
    char *template = under ? NULL : underlay_path(p, env);
    if (template) {
        read = nf_nifti_read(template, run->err);
        free(template);
        if (!read)
            return nf_error_on_node(run->node, run->err, run->err->code);
        under = read;
    }
    if (under && under->kind == NF_KIND_VOLUME) {
        owned_under = underlay_for_display(under, run->err);
        nf_value_unref(read);
        if (!owned_under)
            return nf_error_on_node(run->node, run->err, run->err->code ? run->err->code : NF_ENOMEM);
        c.underlay = owned_under;
    } else {
        nf_value_unref(read);
    }
    const char *pipeline = env->pipeline_name ? env->pipeline_name : "nlflow";
    char title[256];
    snprintf(title, sizeof title, "%s", p->title ? p->title : "");
    if (!p->title)
        snprintf(title, sizeof title, "%s report", pipeline);
    report_page_begin(&c.pg, title);
    header(&c);
    for (size_t i = 0; i < run->n_extra; i++)
        if (run->extra_in[i])
            NF_TRY(rc = input_section(&c, run->extra_names[i], run->extra_in[i]));
    size_t len = 0;
    html = report_page_end(&c.pg, &len);
    if (!html) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory building the report");
        goto fail;
    }
    file = nf_asprintf("%s_report.html", p->name ? p->name : pipeline);
    path = file ? nf_path_join(env->outputs_dir, file) : NULL;
    if (!path) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(env->outputs_dir, run->err));
    NF_TRY(rc = nf_write_file_atomic(path, html, len, run->err));
    if (!(files = nf_value_new_table(1, 2, run->err)) ||
        nf_table_column_string(files, 0, "key", run->err) < 0 ||
        nf_table_column_string(files, 1, "path", run->err) < 0) {
        rc = run->err->code ? run->err->code : NF_ENOMEM;
        goto fail;
    }
    files->u.tab.cols[0].str[0] = nf_strdup("report");
    files->u.tab.cols[1].str[0] = nf_strdup(file);
    if (!files->u.tab.cols[0].str[0] || !files->u.tab.cols[1].str[0]) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    run->out[REPORT_OUT_FILES] = files;
    files = NULL;
    nf_log("nlflow: node '%s': wrote %s (%.1f MB)", nf_node_id(run->node), path, (double)len / 1e6);
fail:
    if (c.have_link)
        nf_scene_release(&c.link_scene);
    report_page_release(&c.pg);
    nf_value_unref(owned_under);
    nf_value_unref(files);
    free(html);
    free(path);
    free(file);
    return rc < 0 ? nf_error_on_node(run->node, run->err, rc) : 0;
}

const struct nf_node_type nf_node_report = {
    .name = "report",
    .summary = "one self-contained HTML page of the results: maps as slices, mosaics and glass brains, charts, tables",
    .description =
        "Writes <name>_report.html under settings.outputs: one file, every image inline (PNG data: URIs, "
        "SVG charts), no external script, font or style, so it opens offline and can be mailed. Each named "
        "input is shown by what it is: a map (1xV with voxel geometry, or a 3-D volume) as sagittal, coronal "
        "and axial slices through its peak, an axial mosaic and three glass-brain projections over an "
        "underlay, thresholded at `threshold`, with a colour bar (RdBu_r for signed maps, viridis for "
        "positive ones); a column of numbers (e.g. a permutation test's null_max) as a histogram with its "
        "95th percentile marked; a table as a table; a collection of maps as one glass-brain thumbnail per "
        "item. The header names the pipeline, its hash, nlflow's version and holds the pipeline file. The "
        "same inputs give the same bytes except the date line.",
    .version = 1,
    .params = report_param_table,
    .params_size = sizeof(struct report_params),
    .inputs = report_inputs,
    .outputs = report_outputs,
    .resolve = report_resolve,
    .run_cpu = report_run,
    .key_files = report_key_files,
    .flags = NF_NODE_SINK | NF_NODE_NO_MAP,
};
