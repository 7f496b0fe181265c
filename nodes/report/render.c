/* render.c — brain maps rasterised to RGB images for the report: orthogonal
 * slices, an axial mosaic, glass-brain projections and a colour bar.
 *
 * Everything is drawn from a scene (render.h): the underlay and the overlay
 * on one display grid, with the colour ranges fixed once, so that every
 * picture of a map agrees with its colour bar. Pictures are drawn a voxel at
 * a time and each voxel filled as a block of scale x scale pixels, which
 * keeps them exact (a test can predict every pixel) and makes small grids
 * big enough to see. The orientation rules (world axes to image axes,
 * neurological convention as nilearn draws) are stated in render.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "core/alloc.h"

#define DEFAULT_SHORT_SIDE 200
#define LONG_SIDE_FACTOR 6
#define MAX_GRID_SIZE 4096    /* voxels along an axis: keeps images within PNG's limits */

void nf_image_release(struct nf_image *im)
{
    if (!im)
        return;
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

static int image_alloc(struct nf_image *im, int width, int height, uint8_t fill, struct nf_error *err)
{
    size_t n;
    if (!nf_size_mul((size_t)width * 3, (size_t)height, &n) || !(im->rgb = nf_malloc(n)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory for a %dx%d image", width, height);
    memset(im->rgb, fill, n);
    im->width = width;
    im->height = height;
    return 0;
}

/* ---- maps ---- */

int nf_render_map_of_value(const struct nf_value *v, int64_t which, struct nf_render_map *out,
                           struct nf_error *err)
{
    const char *name = v->label ? v->label : v->path ? v->path : "the map";
    if (v->kind == NF_KIND_VOLUME) {
        const struct nf_volume *vol = &v->u.vol;
        if (!vol->data)
            return NF_FAIL(err, NF_EDATA, "%s: volume data not loaded", name);
        if (which < 0 || which >= vol->nt)
            return NF_FAIL(err, NF_EDATA, "%s: volume %lld asked for, it has %lld", name,
                           (long long)which, (long long)vol->nt);
        *out = (struct nf_render_map){&vol->grid, vol->data + which * nf_grid_nvox(&vol->grid), NULL};
        return 0;
    }
    if (v->kind == NF_KIND_MATRIX) {
        const struct nf_matrix *m = &v->u.mat;
        if (!m->geom)
            return NF_FAIL(err, NF_EDATA, "%s: a %lldx%lld matrix whose columns are not voxels "
                           "cannot be drawn as a brain map", name, (long long)m->rows, (long long)m->cols);
        if (m->cols != m->geom->n_voxels)
            return NF_FAIL(err, NF_EDATA, "%s: %lld columns but its mask has %lld voxels", name,
                           (long long)m->cols, (long long)m->geom->n_voxels);
        if (which < 0 || which >= m->rows)
            return NF_FAIL(err, NF_EDATA, "%s: row %lld asked for, it has %lld", name,
                           (long long)which, (long long)m->rows);
        *out = (struct nf_render_map){&m->geom->grid, m->data + which * m->cols, m->geom};
        return 0;
    }
    return NF_FAIL(err, NF_EDATA, "%s: a %s cannot be drawn as a brain map", name, nf_kind_name(v->kind));
}

static int check_map(const struct nf_render_map *m, const char *what, struct nf_error *err)
{
    if (!m->grid || !m->data)
        return NF_FAIL(err, NF_EUSAGE, "%s: no grid or no data", what);
    for (int a = 0; a < 3; a++)
        if (m->grid->dim[a] < 1 || m->grid->dim[a] > MAX_GRID_SIZE)
            return NF_FAIL(err, NF_EDATA, "%s: grid size %lldx%lldx%lld", what, (long long)m->grid->dim[0],
                           (long long)m->grid->dim[1], (long long)m->grid->dim[2]);
    if (m->geom) {
        int64_t nvox = nf_grid_nvox(m->grid);
        for (int64_t c = 0; c < m->geom->n_voxels; c++)
            if (m->geom->index[c] < 0 || m->geom->index[c] >= nvox)
                return NF_FAIL(err, NF_EDATA, "%s: mask voxel %lld at offset %lld, outside its %lld-voxel grid",
                               what, (long long)c, (long long)m->geom->index[c], (long long)nvox);
    }
    return 0;
}

/* The map as a volume on its own grid, NaN where a masked map has no voxel. */
static float *densify(const struct nf_render_map *m, struct nf_error *err)
{
    int64_t nvox = nf_grid_nvox(m->grid);
    float *d = nf_malloc_array((size_t)nvox, sizeof *d);
    if (!d) {
        NF_FAIL(err, NF_ENOMEM, "out of memory for a %lld-voxel map", (long long)nvox);
        return NULL;
    }
    if (!m->geom) {
        memcpy(d, m->data, (size_t)nvox * sizeof *d);
        return d;
    }
    for (int64_t i = 0; i < nvox; i++)
        d[i] = NAN;
    for (int64_t c = 0; c < m->geom->n_voxels; c++)
        d[m->geom->index[c]] = m->data[c];
    return d;
}

/* ---- geometry ---- */

/* Inverse of the affine's 3x3 part (cofactors); false when singular. */
static bool invert3(const double a[4][4], double inv[3][3])
{
    double det = a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
               - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
               + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
    if (!(fabs(det) > 1e-12))
        return false;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            int r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
            inv[r][c] = (a[r1][c1] * a[r2][c2] - a[r1][c2] * a[r2][c1]) / det;
        }
    return true;
}

/* Which voxel axis shows each world axis: the largest |affine| entry first,
 * then the largest of what is left, so the three axes always differ. */
static void orient(struct nf_scene *s)
{
    bool row_used[3] = {0}, col_used[3] = {0};
    for (int step = 0; step < 3; step++) {
        int bw = -1, ba = -1;
        double best = -1;
        for (int w = 0; w < 3; w++)
            for (int a = 0; a < 3; a++)
                if (!row_used[w] && !col_used[a] && fabs(s->grid.affine[w][a]) > best) {
                    best = fabs(s->grid.affine[w][a]);
                    bw = w;
                    ba = a;
                }
        row_used[bw] = col_used[ba] = true;
        s->axis[bw] = ba;
        s->flip[bw] = s->grid.affine[bw][ba] < 0;
    }
}

static int64_t offset_of(const struct nf_grid *g, const int64_t v[3])
{
    return v[0] + g->dim[0] * (v[1] + g->dim[1] * v[2]);
}

/* The overlay sampled on the display grid by nearest neighbour. */
static int resample_nearest(const struct nf_grid *dst, const struct nf_grid *src, const float *sdata,
                            float *out, struct nf_error *err)
{
    double inv[3][3];
    if (!invert3(src->affine, inv))
        return NF_FAIL(err, NF_EDATA, "the overlay's affine is singular");
    int64_t v[3];
    for (v[2] = 0; v[2] < dst->dim[2]; v[2]++)
        for (v[1] = 0; v[1] < dst->dim[1]; v[1]++)
            for (v[0] = 0; v[0] < dst->dim[0]; v[0]++) {
                double d[3];
                for (int r = 0; r < 3; r++)
                    d[r] = dst->affine[r][0] * v[0] + dst->affine[r][1] * v[1]
                         + dst->affine[r][2] * v[2] + dst->affine[r][3] - src->affine[r][3];
                int64_t q[3];
                bool inside = true;
                for (int r = 0; r < 3; r++) {
                    double x = inv[r][0] * d[0] + inv[r][1] * d[1] + inv[r][2] * d[2];
                    q[r] = (int64_t)floor(x + 0.5);
                    inside = inside && q[r] >= 0 && q[r] < src->dim[r];
                }
                out[offset_of(dst, v)] = inside ? sdata[offset_of(src, q)] : NAN;
            }
    return 0;
}

/* ---- ranges ---- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile (linear) of sorted a[n] at p percent. */
static double percentile(const float *a, size_t n, double p)
{
    double h = (double)(n - 1) * p / 100.0;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n)
        return a[n - 1];
    return a[lo] + (h - (double)lo) * ((double)a[lo + 1] - a[lo]);
}

/* The underlay's gray range: 2nd to 98th percentile of its finite nonzero voxels. */
static int underlay_range(struct nf_scene *s, int64_t nvox, struct nf_error *err)
{
    float *vals = nf_malloc_array((size_t)nvox, sizeof *vals);
    if (!vals)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the underlay's range");
    size_t n = 0;
    for (int64_t i = 0; i < nvox; i++)
        if (isfinite(s->under[i]) && s->under[i] != 0)
            vals[n++] = s->under[i];
    if (n == 0) {
        s->under_lo = 0;
        s->under_hi = 1;
    } else {
        qsort(vals, n, sizeof *vals, cmp_float);
        s->under_lo = percentile(vals, n, 2);
        s->under_hi = percentile(vals, n, 98);
    }
    free(vals);
    return 0;
}

static bool shown(const struct nf_scene *s, float v)
{
    return isfinite(v) && v != 0 && fabs(v) >= s->threshold;
}

static const uint8_t *overlay_color(const struct nf_scene *s, double v)
{
    double t = s->signed_map ? (v + s->vmax) / (2 * s->vmax) : v / s->vmax;
    return s->colors[nf_cmap_index(t)];
}

static const uint8_t *underlay_color(const struct nf_scene *s, float v)
{
    static const uint8_t black[3] = {0, 0, 0};
    if (!isfinite(v))
        return black;
    if (v >= s->under_hi)
        return s->gray[255];
    if (v <= s->under_lo)
        return s->gray[0];
    return s->gray[nf_cmap_index((v - s->under_lo) / (s->under_hi - s->under_lo))];
}

/* ---- the scene ---- */

static void scene_scale(struct nf_scene *s, int min_short)
{
    int64_t lo = s->grid.dim[0], hi = s->grid.dim[0];
    for (int a = 1; a < 3; a++) {
        lo = s->grid.dim[a] < lo ? s->grid.dim[a] : lo;
        hi = s->grid.dim[a] > hi ? s->grid.dim[a] : hi;
    }
    int64_t scale = (min_short + lo - 1) / lo;
    int64_t cap = (int64_t)LONG_SIDE_FACTOR * min_short / hi;
    if (scale > cap)
        scale = cap;
    s->scale = scale < 1 ? 1 : (int)scale;
}

int nf_scene_init(struct nf_scene *s, const struct nf_render_map *underlay,
                  const struct nf_render_map *overlay, const struct nf_render_style *style,
                  struct nf_error *err)
{
    memset(s, 0, sizeof *s);
    int min_short = style->min_short_side ? style->min_short_side : DEFAULT_SHORT_SIDE;
    if (min_short < 1 || min_short > 4096)
        return NF_FAIL(err, NF_EUSAGE, "min_short_side %d (expected 1 to 4096)", min_short);
    if (!(style->threshold >= 0) || !(style->vmax >= 0))
        return NF_FAIL(err, NF_EUSAGE, "threshold %g and vmax %g must be >= 0", style->threshold, style->vmax);
    int rc;
    if ((rc = check_map(overlay, "overlay", err)) < 0
        || (underlay && (rc = check_map(underlay, "underlay", err)) < 0))
        return rc;
    const struct nf_render_map *display = underlay ? underlay : overlay;
    s->grid = *display->grid;
    int64_t nvox = nf_grid_nvox(&s->grid);
    double inv[3][3];
    if (!invert3(s->grid.affine, inv))
        return NF_FAIL(err, NF_EDATA, "the %s's affine is singular", underlay ? "underlay" : "overlay");
    orient(s);
    scene_scale(s, min_short);

    float *odense = densify(overlay, err);
    if (!odense)
        return NF_ENOMEM;
    if (underlay) {
        if (!(s->under = densify(underlay, err)))
            goto fail_oom;
        if ((rc = underlay_range(s, nvox, err)) < 0)
            goto fail;
        if (nf_grid_same(underlay->grid, overlay->grid)) {
            s->over = odense;
            odense = NULL;
        } else {
            if (!(s->over = nf_malloc_array((size_t)nvox, sizeof *s->over))) {
                NF_FAIL(err, NF_ENOMEM, "out of memory for the resampled overlay");
                goto fail_oom;
            }
            if ((rc = resample_nearest(&s->grid, overlay->grid, odense, s->over, err)) < 0)
                goto fail;
        }
    } else {
        s->over = odense;
        odense = NULL;
    }
    if (!(s->brain = nf_malloc((size_t)nvox))) {
        NF_FAIL(err, NF_ENOMEM, "out of memory for the brain's silhouette");
        goto fail_oom;
    }
    for (int64_t i = 0; i < nvox; i++) {
        float b = s->under ? s->under[i] : s->over[i];
        s->brain[i] = isfinite(b) && b != 0;
    }

    /* colour range from the overlay's own values, not its resampled copy */
    double vmax = 0, vmin = 0;
    int64_t n_vals = overlay->geom ? overlay->geom->n_voxels : nf_grid_nvox(overlay->grid);
    for (int64_t i = 0; i < n_vals; i++) {
        float v = overlay->data[i];
        if (isfinite(v)) {
            vmax = fabs(v) > vmax ? fabs(v) : vmax;
            vmin = v < vmin ? v : vmin;
        }
    }
    s->vmax = style->vmax > 0 ? style->vmax : vmax > 0 ? vmax : 1;
    s->threshold = style->threshold;
    s->signed_map = style->scale == NF_SCALE_SIGNED || (style->scale == NF_SCALE_AUTO && vmin < 0);
    s->map = s->signed_map ? NF_CMAP_RDBU_R : NF_CMAP_VIRIDIS;
    nf_cmap_fill(NF_CMAP_GRAY, s->gray);
    nf_cmap_fill(s->map, s->colors);
    free(odense);
    return 0;

fail_oom:
    rc = NF_ENOMEM;
fail:
    free(odense);
    nf_scene_release(s);
    return rc;
}

void nf_scene_release(struct nf_scene *s)
{
    free(s->under);
    free(s->over);
    free(s->brain);
    s->under = s->over = NULL;
    s->brain = NULL;
}

/* ---- views ---- */

/* The world axes of a view: the one cut (or projected), the one across
 * (columns, growing to the right) and the one up (rows, growing upwards). */
static void view_axes(enum nf_view view, int *fixed, int *across, int *up)
{
    *fixed = view == NF_VIEW_SAGITTAL ? 0 : view == NF_VIEW_CORONAL ? 1 : 2;
    *across = view == NF_VIEW_SAGITTAL ? 1 : 0;
    *up = view == NF_VIEW_AXIAL ? 1 : 2;
}

static int64_t world_len(const struct nf_scene *s, int w)
{
    return s->grid.dim[s->axis[w]];
}

/* The voxel index along world axis w's voxel axis at position u counted
 * along the world axis (u = 0 at its smallest coordinate). */
static int64_t voxel_along(const struct nf_scene *s, int w, int64_t u)
{
    return s->flip[w] ? world_len(s, w) - 1 - u : u;
}

void nf_scene_view_size(const struct nf_scene *s, enum nf_view view, int *width, int *height)
{
    int fixed, across, up;
    view_axes(view, &fixed, &across, &up);
    *width = (int)(world_len(s, across) * s->scale);
    *height = (int)(world_len(s, up) * s->scale);
}

static void fill_block(struct nf_image *im, int x0, int y0, int scale, const uint8_t rgb[3])
{
    for (int y = 0; y < scale; y++) {
        uint8_t *p = im->rgb + ((size_t)(y0 + y) * im->width + x0) * 3;
        for (int x = 0; x < scale; x++, p += 3)
            memcpy(p, rgb, 3);
    }
}

/* Draw view's plane at world position u_fixed (counted as in voxel_along)
 * into im with its top-left corner at (x0, y0); u_fixed < 0: the glass brain. */
static void draw_plane(const struct nf_scene *s, enum nf_view view, int64_t u_fixed, struct nf_image *im,
                       int x0, int y0)
{
    static const uint8_t white[3] = {255, 255, 255}, black[3] = {0, 0, 0};
    static const uint8_t silhouette[3] = {NF_RENDER_SILHOUETTE, NF_RENDER_SILHOUETTE, NF_RENDER_SILHOUETTE};
    int fixed, across, up;
    view_axes(view, &fixed, &across, &up);
    int64_t n_across = world_len(s, across), n_up = world_len(s, up), n_fixed = world_len(s, fixed);
    int64_t stride_fixed = s->axis[fixed] == 0 ? 1 : s->axis[fixed] == 1 ? s->grid.dim[0]
                         : s->grid.dim[0] * s->grid.dim[1];
    for (int64_t r = 0; r < n_up; r++)
        for (int64_t c = 0; c < n_across; c++) {
            int64_t v[3];
            v[s->axis[across]] = voxel_along(s, across, c);
            v[s->axis[up]] = voxel_along(s, up, n_up - 1 - r);
            const uint8_t *rgb;
            if (u_fixed >= 0) {
                v[s->axis[fixed]] = voxel_along(s, fixed, u_fixed);
                int64_t i = offset_of(&s->grid, v);
                rgb = shown(s, s->over[i]) ? overlay_color(s, s->over[i])
                    : s->under ? underlay_color(s, s->under[i]) : black;
            } else {
                v[s->axis[fixed]] = 0;
                int64_t i0 = offset_of(&s->grid, v);
                float best = 0;
                bool any_brain = false;
                for (int64_t t = 0; t < n_fixed; t++) {
                    float x = s->over[i0 + t * stride_fixed];
                    if (shown(s, x) && fabsf(x) > fabsf(best))
                        best = x;
                    any_brain = any_brain || s->brain[i0 + t * stride_fixed];
                }
                rgb = best != 0 ? overlay_color(s, best) : any_brain ? silhouette : white;
            }
            fill_block(im, x0 + (int)c * s->scale, y0 + (int)r * s->scale, s->scale, rgb);
        }
}

int nf_render_slice(const struct nf_scene *s, enum nf_view view, const int64_t voxel[3],
                    struct nf_image *out, struct nf_error *err)
{
    memset(out, 0, sizeof *out);
    for (int a = 0; a < 3; a++)
        if (voxel[a] < 0 || voxel[a] >= s->grid.dim[a])
            return NF_FAIL(err, NF_EUSAGE, "cut at voxel (%lld, %lld, %lld), outside the %lldx%lldx%lld grid",
                           (long long)voxel[0], (long long)voxel[1], (long long)voxel[2],
                           (long long)s->grid.dim[0], (long long)s->grid.dim[1], (long long)s->grid.dim[2]);
    int w, h, fixed, across, up;
    nf_scene_view_size(s, view, &w, &h);
    view_axes(view, &fixed, &across, &up);
    int rc = image_alloc(out, w, h, 0, err);
    if (rc < 0)
        return rc;
    int64_t v = voxel[s->axis[fixed]];
    draw_plane(s, view, s->flip[fixed] ? world_len(s, fixed) - 1 - v : v, out, 0, 0);
    return 0;
}

int nf_render_glass(const struct nf_scene *s, enum nf_view view, struct nf_image *out,
                    struct nf_error *err)
{
    int w, h;
    memset(out, 0, sizeof *out);
    nf_scene_view_size(s, view, &w, &h);
    int rc = image_alloc(out, w, h, 255, err);
    if (rc < 0)
        return rc;
    draw_plane(s, view, -1, out, 0, 0);
    return 0;
}

int nf_render_mosaic(const struct nf_scene *s, int n_slices, int n_cols, struct nf_image *out,
                     int64_t *slices, int *n_out, struct nf_error *err)
{
    memset(out, 0, sizeof *out);
    if (n_slices < 1 || n_cols < 1 || n_slices > 1000 || n_cols > 1000)
        return NF_FAIL(err, NF_EUSAGE, "mosaic of %d slices in %d columns (expected 1 to 1000 each)",
                       n_slices, n_cols);
    /* the overlay's extent along z, counted from inferior */
    int az = s->axis[2];
    int64_t nz = world_len(s, 2), lo = nz, hi = -1;
    int64_t stride = az == 0 ? 1 : az == 1 ? s->grid.dim[0] : s->grid.dim[0] * s->grid.dim[1];
    int64_t nvox = nf_grid_nvox(&s->grid);
    for (int64_t i = 0; i < nvox; i++)
        if (isfinite(s->over[i]) && s->over[i] != 0) {
            int64_t k = i / stride % s->grid.dim[az];
            int64_t u = s->flip[2] ? nz - 1 - k : k;
            lo = u < lo ? u : lo;
            hi = u > hi ? u : hi;
        }
    if (hi < 0) {
        lo = 0;
        hi = nz - 1;
    }
    int64_t extent = hi - lo + 1;
    int n = n_slices > extent ? (int)extent : n_slices;
    int cols = n_cols > n ? n : n_cols, rows = (n + cols - 1) / cols;
    int tw, th;
    nf_scene_view_size(s, NF_VIEW_AXIAL, &tw, &th);
    if ((int64_t)tw * cols > 65535 || (int64_t)th * rows > 65535)
        return NF_FAIL(err, NF_EUSAGE, "a mosaic of %d x %d tiles of %dx%d pixels is too large", cols, rows, tw, th);
    int rc = image_alloc(out, tw * cols, th * rows, 0, err);
    if (rc < 0)
        return rc;
    for (int t = 0; t < n; t++) {
        int64_t u = lo + (int64_t)((2 * t + 1) * extent / (2 * n));
        draw_plane(s, NF_VIEW_AXIAL, u, out, (t % cols) * tw, (t / cols) * th);
        if (slices)
            slices[t] = voxel_along(s, 2, u);
    }
    if (n_out)
        *n_out = n;
    return 0;
}

/* ---- peak, coordinates, colour bar ---- */

bool nf_scene_peak(const struct nf_scene *s, int64_t voxel[3])
{
    int64_t nvox = nf_grid_nvox(&s->grid), best = -1;
    for (int64_t i = 0; i < nvox; i++)
        if (shown(s, s->over[i]) && (best < 0 || fabsf(s->over[i]) > fabsf(s->over[best])))
            best = i;
    if (best < 0) {
        for (int a = 0; a < 3; a++)
            voxel[a] = s->grid.dim[a] / 2;
        return false;
    }
    voxel[0] = best % s->grid.dim[0];
    voxel[1] = best / s->grid.dim[0] % s->grid.dim[1];
    voxel[2] = best / (s->grid.dim[0] * s->grid.dim[1]);
    return true;
}

void nf_scene_voxel_mm(const struct nf_scene *s, const int64_t voxel[3], double mm[3])
{
    for (int r = 0; r < 3; r++)
        mm[r] = s->grid.affine[r][0] * voxel[0] + s->grid.affine[r][1] * voxel[1]
              + s->grid.affine[r][2] * voxel[2] + s->grid.affine[r][3];
}

void nf_scene_colorbar(const struct nf_scene *s, struct nf_colorbar *cb)
{
    cb->lo = s->signed_map ? -s->vmax : 0;
    cb->hi = s->vmax;
    cb->threshold = s->threshold;
    cb->map = s->map;
    memcpy(cb->colors, s->colors, sizeof cb->colors);
    for (int t = 0; t < 5; t++)
        cb->ticks[t] = cb->lo + (cb->hi - cb->lo) * t / 4;
}

int nf_render_colorbar(const struct nf_scene *s, int width, int height, struct nf_image *out,
                       struct nf_error *err)
{
    static const uint8_t band[3] = {NF_RENDER_THRESHOLD_GRAY, NF_RENDER_THRESHOLD_GRAY, NF_RENDER_THRESHOLD_GRAY};
    memset(out, 0, sizeof *out);
    if (width < 1 || height < 1 || width > 4096 || height > 4096)
        return NF_FAIL(err, NF_EUSAGE, "colour bar of %dx%d pixels (expected 1 to 4096 each)", width, height);
    int rc = image_alloc(out, width, height, 0, err);
    if (rc < 0)
        return rc;
    double lo = s->signed_map ? -s->vmax : 0, hi = s->vmax;
    for (int r = 0; r < height; r++) {
        double v = hi - (r + 0.5) / height * (hi - lo);
        const uint8_t *rgb = fabs(v) < s->threshold ? band : overlay_color(s, v);
        for (int x = 0; x < width; x++)
            memcpy(out->rgb + ((size_t)r * width + x) * 3, rgb, 3);
    }
    return 0;
}
