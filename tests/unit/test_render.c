/* test_render.c — the report's pictures: colour maps, rasterised slices,
 * mosaic, glass brain, colour bar, PNG and base64.
 *
 * Colour-map entries are checked against matplotlib's published numbers
 * worked out by hand (comments show the arithmetic). The pictures are drawn
 * from a tiny 5x6x7 volume whose affine flips x (as MNI templates stored LAS
 * do), and every pixel is predicted here from the orientation rules of
 * render.h written out for this affine, with the underlay's percentiles
 * computed by this file's own sort: a slice shows the overlay's colour at
 * the peak and the underlay's gray elsewhere, a glass-brain view equals the
 * largest |value| along its axis, computed here by a plain loop. Every image
 * is encoded as PNG, decoded back with libpng from memory and compared pixel
 * for pixel, and encoded twice to the same bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "report/colormap.h"
#include "report/encode.h"
#include "report/render.h"
#include "core/alloc.h"
#include "core/value.h"

#define NX 5
#define NY 6
#define NZ 7
#define NVOX (NX * NY * NZ)
#define AT(i, j, k) ((i) + NX * ((j) + NY * (k)))

/* ---- PNG decoding from memory ---- */

struct png_src {
    const uint8_t *p;
    size_t n, at;
};

static void src_read(png_structp png, png_bytep out, size_t len)
{
    struct png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at)
        png_error(png, "read past the end");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

/* The RGB pixels of a PNG (malloc'ed), failing the test unless it is 8-bit RGB. */
static uint8_t *decode_png(const uint8_t *bytes, size_t n, int *width, int *height)
{
    struct png_src src = {bytes, n, 0};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_non_null(info);
    uint8_t *volatile rgb = NULL;
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng could not decode the PNG");
    png_set_read_fn(png, &src, src_read);
    png_read_info(png, info);
    assert_int_equal(png_get_bit_depth(png, info), 8);
    assert_int_equal(png_get_color_type(png, info), PNG_COLOR_TYPE_RGB);
    assert_int_equal(png_get_interlace_type(png, info), PNG_INTERLACE_NONE);
    *width = (int)png_get_image_width(png, info);
    *height = (int)png_get_image_height(png, info);
    rgb = malloc((size_t)*width * *height * 3);
    assert_non_null(rgb);
    for (int y = 0; y < *height; y++)
        png_read_row(png, rgb + (size_t)y * *width * 3, NULL);
    png_read_end(png, NULL);
    /* no time chunk: the bytes must not depend on when they were made */
    png_timep t;
    assert_int_equal(png_get_tIME(png, info, &t), 0);
    png_destroy_read_struct(&png, &info, NULL);
    return rgb;
}

/* Encode im, decode it back and compare every pixel; encode again to the same bytes. */
static void check_png_roundtrip(const struct nf_image *im)
{
    struct nf_error err = {0};
    uint8_t *png = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    assert_int_equal(nf_png_encode(im->rgb, im->width, im->height, &png, &n, &err), 0);
    assert_true(n > 8 && memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);
    int w, h;
    uint8_t *rgb = decode_png(png, n, &w, &h);
    assert_int_equal(w, im->width);
    assert_int_equal(h, im->height);
    assert_memory_equal(rgb, im->rgb, (size_t)w * h * 3);
    assert_int_equal(nf_png_encode(im->rgb, im->width, im->height, &again, &n2, &err), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(again, png, n);
    free(rgb);
    free(png);
    free(again);
}

static const uint8_t *pixel(const struct nf_image *im, int x, int y)
{
    return im->rgb + ((size_t)y * im->width + x) * 3;
}

/* ---- colour maps ---- */

static void expect_rgb(const uint8_t got[3], int r, int g, int b)
{
    assert_int_equal(got[0], r);
    assert_int_equal(got[1], g);
    assert_int_equal(got[2], b);
}

static void test_colormaps(void **state)
{
    (void)state;
    uint8_t t[256][3];
    /* viridis, matplotlib's _viridis_data rows 0, 128, 255 times 255, truncated:
     * (0.267004, 0.004874, 0.329415) -> (68.09, 1.24, 84.0008)
     * (0.127568, 0.566949, 0.550556) -> (32.53, 144.57, 140.39)
     * (0.993248, 0.906157, 0.143936) -> (253.28, 231.07, 36.70) */
    nf_cmap_fill(NF_CMAP_VIRIDIS, t);
    expect_rgb(t[0], 68, 1, 84);
    expect_rgb(t[128], 32, 144, 140);
    expect_rgb(t[255], 253, 231, 36);
    /* RdBu_r: the ends are RdBu's last and first anchors, (5, 48, 97)/255
     * and (103, 0, 31)/255. Entry 127 lies at 127 of 255, between anchors at
     * 102 (0.4: (209, 229, 240)) and 127.5 (0.5: (247, 247, 247)): fraction
     * 25/25.5 gives (246.25, 246.65, 246.86); entry 128 lies 0.5/25.5 past the
     * centre towards (253, 219, 199): (247.12, 246.45, 246.06). */
    nf_cmap_fill(NF_CMAP_RDBU_R, t);
    expect_rgb(t[0], 5, 48, 97);
    expect_rgb(t[255], 103, 0, 31);
    expect_rgb(t[127], 246, 246, 246);
    expect_rgb(t[128], 247, 246, 246);
    /* blue below the centre, red above */
    assert_true(t[64][2] > t[64][0]);
    assert_true(t[192][0] > t[192][2]);
    /* gray: entry i is i/255 * 255 truncated, which rounding makes i - 1 for
     * some i: 33 * (1/255.) = 0.12941176470588234, times 255 is
     * 32.99999999999999 (matplotlib's gray has the same 32 at 33) */
    nf_cmap_fill(NF_CMAP_GRAY, t);
    expect_rgb(t[0], 0, 0, 0);
    expect_rgb(t[32], 32, 32, 32);
    expect_rgb(t[33], 32, 32, 32);
    expect_rgb(t[128], 128, 128, 128);
    expect_rgb(t[255], 255, 255, 255);
    for (int i = 0; i < 256; i++) {
        assert_true(t[i][0] == t[i][1] && t[i][1] == t[i][2]);
        assert_true(t[i][0] == i || t[i][0] == i - 1);
    }
    assert_string_equal(nf_cmap_name(NF_CMAP_RDBU_R), "RdBu_r");
    /* matplotlib's lookup: floor(t * 256), 1 -> 255, clipped */
    assert_int_equal(nf_cmap_index(0), 0);
    assert_int_equal(nf_cmap_index(0.5), 128);
    assert_int_equal(nf_cmap_index(255.0 / 256), 255);
    assert_int_equal(nf_cmap_index(254.99 / 256), 254);
    assert_int_equal(nf_cmap_index(1), 255);
    assert_int_equal(nf_cmap_index(-0.5), 0);
    assert_int_equal(nf_cmap_index(2), 255);
    assert_int_equal(nf_cmap_index(NAN), 0);
}

/* ---- base64 ---- */

static void test_base64(void **state)
{
    (void)state;
    /* RFC 4648 section 10 */
    static const char *const vectors[][2] = {
        {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        char *b = nf_base64(vectors[i][0], strlen(vectors[i][0]));
        assert_non_null(b);
        assert_string_equal(b, vectors[i][1]);
        free(b);
    }
    /* every byte value, through the high bits */
    uint8_t all[3] = {0xff, 0xfe, 0x00};
    char *b = nf_base64(all, 3);
    assert_string_equal(b, "//4A");
    free(b);
}

/* ---- the synthetic scene ---- */

/* Grid: 2 mm voxels, x flipped: x = -2 i + 10, y = 2 j - 6, z = 2 k - 8. */
static void make_grid(struct nf_grid *g, double shift_x)
{
    memset(g, 0, sizeof *g);
    g->dim[0] = NX;
    g->dim[1] = NY;
    g->dim[2] = NZ;
    for (int a = 0; a < 3; a++)
        g->pixdim[a] = 2;
    g->affine[0][0] = -2;
    g->affine[0][3] = 10 + shift_x;
    g->affine[1][1] = 2;
    g->affine[1][3] = -6;
    g->affine[2][2] = 2;
    g->affine[2][3] = -8;
    g->affine[3][3] = 1;
    g->sform_code = 1;
}

static float under[NVOX], over[NVOX];
static struct nf_grid grid;

/* Underlay: distinct positive values, zero on the plane j = 0 (outside the
 * brain). Overlay: a peak 5 at (1, 2, 3), -2 at (3, 4, 5), 3 at (0, 2, 3)
 * (same row along x as the peak), 1 at (2, 2, 5) (below the threshold 1.5). */
static void make_volumes(void)
{
    make_grid(&grid, 0);
    for (int k = 0; k < NZ; k++)
        for (int j = 0; j < NY; j++)
            for (int i = 0; i < NX; i++) {
                under[AT(i, j, k)] = j == 0 ? 0.0f : (float)(1 + AT(i, j, k));
                over[AT(i, j, k)] = 0;
            }
    over[AT(1, 2, 3)] = 5;
    over[AT(3, 4, 5)] = -2;
    over[AT(0, 2, 3)] = 3;
    over[AT(2, 2, 5)] = 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile of the underlay's nonzero voxels, computed afresh. */
static double under_percentile(double p)
{
    double v[NVOX];
    size_t n = 0;
    for (int i = 0; i < NVOX; i++)
        if (under[i] != 0)
            v[n++] = under[i];
    qsort(v, n, sizeof v[0], cmp_double);
    double h = (n - 1) * p / 100;
    size_t lo = (size_t)h;
    return v[lo] + (h - lo) * (v[lo + 1] - v[lo]);
}

/* What a slice pixel over voxel (i, j, k) must show. */
static void expected_voxel_rgb(int i, int j, int k, uint8_t rgb[3])
{
    uint8_t rdbu[256][3], gray[256][3];
    nf_cmap_fill(NF_CMAP_RDBU_R, rdbu);
    nf_cmap_fill(NF_CMAP_GRAY, gray);
    float v = over[AT(i, j, k)];
    if (v != 0 && fabsf(v) >= 1.5f) {
        int e = (int)floor((v + 5.0) / 10.0 * 256);
        memcpy(rgb, rdbu[e > 255 ? 255 : e], 3);
        return;
    }
    double lo = under_percentile(2), hi = under_percentile(98), u = under[AT(i, j, k)];
    int e = u <= lo ? 0 : u >= hi ? 255 : (int)floor((u - lo) / (hi - lo) * 256);
    memcpy(rgb, gray[e], 3);
}

static void init_scene(struct nf_scene *s)
{
    struct nf_error err = {0};
    struct nf_render_map u = {&grid, under, NULL}, o = {&grid, over, NULL};
    struct nf_render_style style = {.threshold = 1.5};
    assert_int_equal(nf_scene_init(s, &u, &o, &style, &err), 0);
}

static void test_scene(void **state)
{
    (void)state;
    make_volumes();
    struct nf_scene s;
    init_scene(&s);
    /* x is stored flipped; y and z are not */
    assert_int_equal(s.axis[0], 0);
    assert_int_equal(s.axis[1], 1);
    assert_int_equal(s.axis[2], 2);
    assert_int_equal(s.flip[0], 1);
    assert_int_equal(s.flip[1], 0);
    assert_int_equal(s.flip[2], 0);
    /* 200 px / 5 voxels */
    assert_int_equal(s.scale, 40);
    assert_true(s.signed_map);
    assert_int_equal(s.map, NF_CMAP_RDBU_R);
    assert_true(s.vmax == 5);
    assert_true(fabs(s.under_lo - under_percentile(2)) < 1e-4);
    assert_true(fabs(s.under_hi - under_percentile(98)) < 1e-4);
    int64_t peak[3];
    assert_true(nf_scene_peak(&s, peak));
    assert_int_equal(peak[0], 1);
    assert_int_equal(peak[1], 2);
    assert_int_equal(peak[2], 3);
    double mm[3];
    nf_scene_voxel_mm(&s, peak, mm);
    assert_true(mm[0] == 8 && mm[1] == -2 && mm[2] == -2);
    int w, h;
    nf_scene_view_size(&s, NF_VIEW_SAGITTAL, &w, &h);
    assert_int_equal(w, NY * 40);
    assert_int_equal(h, NZ * 40);
    nf_scene_view_size(&s, NF_VIEW_CORONAL, &w, &h);
    assert_int_equal(w, NX * 40);
    assert_int_equal(h, NZ * 40);
    nf_scene_view_size(&s, NF_VIEW_AXIAL, &w, &h);
    assert_int_equal(w, NX * 40);
    assert_int_equal(h, NY * 40);
    nf_scene_release(&s);
}

/* The voxel of a slice pixel, written out for this affine: columns of the
 * sagittal view are y (j), of the others x, which grows as i falls; rows go
 * up in z (sagittal, coronal) or y (axial). */
static void slice_voxel(enum nf_view view, const int64_t cut[3], int col, int row, int v[3])
{
    v[0] = (int)cut[0];
    v[1] = (int)cut[1];
    v[2] = (int)cut[2];
    switch (view) {
    case NF_VIEW_SAGITTAL: v[1] = col; v[2] = NZ - 1 - row; break;
    case NF_VIEW_CORONAL: v[0] = NX - 1 - col; v[2] = NZ - 1 - row; break;
    case NF_VIEW_AXIAL: v[0] = NX - 1 - col; v[1] = NY - 1 - row; break;
    }
}

static void test_slices(void **state)
{
    (void)state;
    make_volumes();
    struct nf_scene s;
    struct nf_error err = {0};
    init_scene(&s);
    int64_t peak[3] = {1, 2, 3};
    const enum nf_view views[3] = {NF_VIEW_SAGITTAL, NF_VIEW_CORONAL, NF_VIEW_AXIAL};
    for (int vi = 0; vi < 3; vi++) {
        struct nf_image im;
        assert_int_equal(nf_render_slice(&s, views[vi], peak, &im, &err), 0);
        for (int y = 0; y < im.height; y++)
            for (int x = 0; x < im.width; x++) {
                int v[3];
                uint8_t want[3];
                slice_voxel(views[vi], peak, x / 40, y / 40, v);
                expected_voxel_rgb(v[0], v[1], v[2], want);
                assert_memory_equal(pixel(&im, x, y), want, 3);
            }
        check_png_roundtrip(&im);
        nf_image_release(&im);
    }
    /* the peak's pixel in the axial slice: x = 8 mm is column 5 - 1 - 1 = 3,
     * y = -2 mm (j = 2) is row 6 - 1 - 2 = 3: block (120..159, 120..159),
     * drawn in RdBu_r's top colour (5 = vmax) */
    struct nf_image ax;
    assert_int_equal(nf_render_slice(&s, NF_VIEW_AXIAL, peak, &ax, &err), 0);
    expect_rgb(pixel(&ax, 120, 120), 103, 0, 31);
    expect_rgb(pixel(&ax, 159, 159), 103, 0, 31);
    /* x = 10 mm (i = 0) has 3: entry floor(0.8 * 256) = 204, red */
    assert_true(pixel(&ax, 160, 120)[0] > pixel(&ax, 160, 120)[2]);
    /* the plane j = 0 is zero in the underlay: black, at the bottom row */
    expect_rgb(pixel(&ax, 0, ax.height - 1), 0, 0, 0);
    nf_image_release(&ax);
    int64_t outside[3] = {0, NY, 0};
    assert_int_equal(nf_render_slice(&s, NF_VIEW_AXIAL, outside, &ax, &err), NF_EUSAGE);
    assert_non_null(strstr(err.msg, "outside"));
    nf_scene_release(&s);
}

static void test_glass_brain(void **state)
{
    (void)state;
    make_volumes();
    struct nf_scene s;
    struct nf_error err = {0};
    init_scene(&s);
    uint8_t rdbu[256][3];
    nf_cmap_fill(NF_CMAP_RDBU_R, rdbu);
    const enum nf_view views[3] = {NF_VIEW_SAGITTAL, NF_VIEW_CORONAL, NF_VIEW_AXIAL};
    for (int vi = 0; vi < 3; vi++) {
        struct nf_image im;
        assert_int_equal(nf_render_glass(&s, views[vi], &im, &err), 0);
        for (int y = 0; y < im.height; y++)
            for (int x = 0; x < im.width; x++) {
                int v[3];
                int64_t cut[3] = {0, 0, 0};
                slice_voxel(views[vi], cut, x / 40, y / 40, v);
                /* walk the projected axis */
                int along = vi, n = along == 0 ? NX : along == 1 ? NY : NZ;
                float best = 0;
                bool brain = false;
                for (int t = 0; t < n; t++) {
                    v[along] = t;
                    float o = over[AT(v[0], v[1], v[2])];
                    if (fabsf(o) >= 1.5f && fabsf(o) > fabsf(best))
                        best = o;
                    brain = brain || under[AT(v[0], v[1], v[2])] != 0;
                }
                uint8_t want[3];
                if (best != 0) {
                    int e = (int)floor((best + 5.0) / 10.0 * 256);
                    memcpy(want, rdbu[e > 255 ? 255 : e], 3);
                } else {
                    memset(want, brain ? NF_RENDER_SILHOUETTE : 255, 3);
                }
                assert_memory_equal(pixel(&im, x, y), want, 3);
            }
        check_png_roundtrip(&im);
        nf_image_release(&im);
    }
    /* along x the row (j, k) = (2, 3) holds 3 and the peak 5: the peak wins */
    struct nf_image sag;
    assert_int_equal(nf_render_glass(&s, NF_VIEW_SAGITTAL, &sag, &err), 0);
    expect_rgb(pixel(&sag, 2 * 40, (NZ - 1 - 3) * 40), 103, 0, 31);
    /* column j = 0 is outside the brain: white; elsewhere the silhouette */
    expect_rgb(pixel(&sag, 0, 0), 255, 255, 255);
    expect_rgb(pixel(&sag, 40, 0), NF_RENDER_SILHOUETTE, NF_RENDER_SILHOUETTE, NF_RENDER_SILHOUETTE);
    nf_image_release(&sag);
    nf_scene_release(&s);
}

static void test_mosaic(void **state)
{
    (void)state;
    make_volumes();
    struct nf_scene s;
    struct nf_error err = {0};
    init_scene(&s);
    /* the overlay's nonzero values lie on k = 3 and 5: three runs of one
     * slice each, 3, 4, 5 */
    struct nf_image im;
    int64_t slices[8];
    int n = 0;
    assert_int_equal(nf_render_mosaic(&s, 3, 2, &im, slices, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(slices[0], 3);
    assert_int_equal(slices[1], 4);
    assert_int_equal(slices[2], 5);
    assert_int_equal(im.width, 2 * NX * 40);
    assert_int_equal(im.height, 2 * NY * 40);
    /* every tile equals the axial slice at its k; the fourth is black */
    for (int t = 0; t < 4; t++) {
        struct nf_image ax = {0};
        if (t < 3) {
            int64_t cut[3] = {0, 0, slices[t]};
            assert_int_equal(nf_render_slice(&s, NF_VIEW_AXIAL, cut, &ax, &err), 0);
        }
        for (int y = 0; y < NY * 40; y++)
            for (int x = 0; x < NX * 40; x++) {
                const uint8_t *got = pixel(&im, (t % 2) * NX * 40 + x, (t / 2) * NY * 40 + y);
                if (t < 3)
                    assert_memory_equal(got, pixel(&ax, x, y), 3);
                else
                    expect_rgb(got, 0, 0, 0);
            }
        nf_image_release(&ax);
    }
    check_png_roundtrip(&im);
    nf_image_release(&im);
    /* two slices: runs of 1.5 slices, middles at 3 + 0 and 3 + 2 */
    assert_int_equal(nf_render_mosaic(&s, 2, 4, &im, slices, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(slices[0], 3);
    assert_int_equal(slices[1], 5);
    assert_int_equal(im.width, 2 * NX * 40);
    nf_image_release(&im);
    /* more slices than the extent holds: one a slice */
    assert_int_equal(nf_render_mosaic(&s, 10, 5, &im, slices, &n, &err), 0);
    assert_int_equal(n, 3);
    nf_image_release(&im);
    assert_int_equal(nf_render_mosaic(&s, 0, 5, &im, NULL, NULL, &err), NF_EUSAGE);
    nf_scene_release(&s);
}

static void test_colorbar(void **state)
{
    (void)state;
    make_volumes();
    struct nf_scene s;
    struct nf_error err = {0};
    init_scene(&s);
    struct nf_colorbar cb;
    nf_scene_colorbar(&s, &cb);
    assert_true(cb.lo == -5 && cb.hi == 5 && cb.threshold == 1.5);
    const double ticks[5] = {-5, -2.5, 0, 2.5, 5};
    for (int t = 0; t < 5; t++)
        assert_true(cb.ticks[t] == ticks[t]);
    assert_int_equal(cb.map, NF_CMAP_RDBU_R);
    expect_rgb(cb.colors[255], 103, 0, 31);
    /* 10 rows of 1 unit each: row r shows 4.5 - r */
    struct nf_image im;
    assert_int_equal(nf_render_colorbar(&s, 3, 10, &im, &err), 0);
    assert_int_equal(im.width, 3);
    assert_int_equal(im.height, 10);
    for (int r = 0; r < 10; r++) {
        double v = 4.5 - r;
        uint8_t want[3];
        if (fabs(v) < 1.5)
            memset(want, NF_RENDER_THRESHOLD_GRAY, 3);
        else
            memcpy(want, cb.colors[(int)floor((v + 5) / 10 * 256)], 3);
        for (int x = 0; x < 3; x++)
            assert_memory_equal(pixel(&im, x, r), want, 3);
    }
    check_png_roundtrip(&im);
    nf_image_release(&im);
    assert_int_equal(nf_render_colorbar(&s, 0, 10, &im, &err), NF_EUSAGE);
    nf_scene_release(&s);
}

/* A positive-only masked map (1 x V with a geometry) on a grid shifted by
 * one voxel from the underlay's: nearest-neighbour sampling through the
 * affines, viridis, NaN outside the mask. */
static void test_masked_overlay(void **state)
{
    (void)state;
    make_volumes();
    struct nf_grid ogrid;
    make_grid(&ogrid, -2);      /* overlay voxel (i, j, k) is underlay voxel (i + 1, j, k) */
    float mask[NVOX] = {0};
    mask[AT(0, 1, 1)] = mask[AT(2, 3, 4)] = mask[AT(4, 0, 0)] = 1;
    struct nf_geom *geom = nf_geom_from_mask(&ogrid, mask);
    assert_non_null(geom);
    assert_int_equal(geom->n_voxels, 3);
    struct nf_value *m = nf_value_new_matrix(1, 3, geom, &(struct nf_error){0});
    assert_non_null(m);
    /* 2 at (0,1,1), 4 at (2,3,4), 9 at (4,0,0), whatever the column order */
    for (int c = 0; c < 3; c++)
        m->u.mat.data[c] = geom->index[c] == AT(0, 1, 1) ? 2 : geom->index[c] == AT(2, 3, 4) ? 4 : 9;
    struct nf_error err = {0};
    struct nf_render_map o, u = {&grid, under, NULL};
    assert_int_equal(nf_render_map_of_value(m, 0, &o, &err), 0);
    assert_int_equal(nf_render_map_of_value(m, 1, &o, &err), NF_EDATA);
    assert_int_equal(nf_render_map_of_value(m, 0, &o, &err), 0);
    struct nf_render_style style = {0};
    struct nf_scene s;
    assert_int_equal(nf_scene_init(&s, &u, &o, &style, &err), 0);
    assert_false(s.signed_map);
    assert_int_equal(s.map, NF_CMAP_VIRIDIS);
    assert_true(s.vmax == 9);
    for (int k = 0; k < NZ; k++)
        for (int j = 0; j < NY; j++)
            for (int i = 0; i < NX; i++) {
                float got = s.over[AT(i, j, k)];
                float want = i == 0 ? NAN : mask[AT(i - 1, j, k)] ? (i - 1 == 4 ? 9 : i - 1 == 0 ? 2 : 4) : NAN;
                if (isnan(want))
                    assert_true(isnan(got));
                else
                    assert_true(got == want);
            }
    /* (4,0,0) of the overlay falls outside the underlay's grid: the peak is 4 at (3, 3, 4) */
    int64_t peak[3];
    assert_true(nf_scene_peak(&s, peak));
    assert_int_equal(peak[0], 3);
    assert_int_equal(peak[1], 3);
    assert_int_equal(peak[2], 4);
    /* its axial pixel: column 5 - 1 - 3 = 1, row 6 - 1 - 3 = 2; viridis at 4/9 */
    struct nf_image ax;
    assert_int_equal(nf_render_slice(&s, NF_VIEW_AXIAL, peak, &ax, &err), 0);
    uint8_t vir[256][3];
    nf_cmap_fill(NF_CMAP_VIRIDIS, vir);
    assert_memory_equal(pixel(&ax, 40, 80), vir[(int)floor(4.0 / 9 * 256)], 3);
    check_png_roundtrip(&ax);
    nf_image_release(&ax);
    nf_scene_release(&s);
    nf_value_unref(m);
    nf_geom_unref(geom);
}

/* Two scenes of the same maps give the same PNG bytes. */
static void test_deterministic(void **state)
{
    (void)state;
    make_volumes();
    uint8_t *png[2];
    size_t n[2];
    for (int r = 0; r < 2; r++) {
        struct nf_scene s;
        struct nf_image im;
        struct nf_error err = {0};
        init_scene(&s);
        assert_int_equal(nf_render_mosaic(&s, 3, 3, &im, NULL, NULL, &err), 0);
        assert_int_equal(nf_png_encode(im.rgb, im.width, im.height, &png[r], &n[r], &err), 0);
        nf_image_release(&im);
        nf_scene_release(&s);
    }
    assert_int_equal(n[0], n[1]);
    assert_memory_equal(png[0], png[1], n[0]);
    free(png[0]);
    free(png[1]);
}

static void test_bad_input(void **state)
{
    (void)state;
    make_volumes();
    struct nf_error err = {0};
    struct nf_scene s;
    struct nf_render_style style = {0};
    struct nf_grid flat = grid;
    flat.affine[2][2] = 0;
    struct nf_render_map o = {&flat, over, NULL};
    assert_int_equal(nf_scene_init(&s, NULL, &o, &style, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "singular"));
    nf_scene_release(&s);
    /* an overlay with a singular affine on a good underlay */
    struct nf_render_map u = {&grid, under, NULL};
    assert_int_equal(nf_scene_init(&s, &u, &o, &style, &err), NF_EDATA);
    nf_scene_release(&s);
    struct nf_grid empty = grid;
    empty.dim[1] = 0;
    o = (struct nf_render_map){&empty, over, NULL};
    assert_int_equal(nf_scene_init(&s, NULL, &o, &style, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "overlay: grid size 5x0x7"));
    nf_scene_release(&s);
    /* a geometry pointing outside its grid */
    int64_t bad_index[1] = {NVOX};
    struct nf_geom geom = {.refcount = 1, .grid = grid, .n_voxels = 1, .index = bad_index};
    o = (struct nf_render_map){&geom.grid, over, &geom};
    assert_int_equal(nf_scene_init(&s, NULL, &o, &style, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "outside its 210-voxel grid"));
    nf_scene_release(&s);
    style.threshold = -1;
    o = (struct nf_render_map){&grid, over, NULL};
    assert_int_equal(nf_scene_init(&s, NULL, &o, &style, &err), NF_EUSAGE);
    nf_scene_release(&s);
    /* a table is not a map */
    struct nf_value *t = nf_value_new_table(2, 1, &err);
    nf_value_set_label(t, "events");
    struct nf_render_map m;
    assert_int_equal(nf_render_map_of_value(t, 0, &m, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "events: a table cannot be drawn"));
    nf_value_unref(t);
    uint8_t *png;
    size_t n;
    uint8_t px[3] = {0};
    assert_int_equal(nf_png_encode(px, 0, 1, &png, &n, &err), NF_EUSAGE);
    assert_null(png);
}

/* Every allocation of a scene, a picture, its PNG and base64 may fail: each
 * failure is NF_ENOMEM (or NULL) and leaks nothing (the sanitiser checks). */
static void test_out_of_memory(void **state)
{
    (void)state;
    make_volumes();
    bool done = false;
    for (long k = 1; !done && k < 10000; k++) {
        struct nf_error err = {0};
        struct nf_scene s;
        struct nf_image im = {0};
        uint8_t *png = NULL;
        size_t n;
        char *b64 = NULL;
        struct nf_render_map u = {&grid, under, NULL}, o = {&grid, over, NULL};
        struct nf_render_style style = {.threshold = 1.5};
        nf_alloc_fail_at(k, false);
        int rc = nf_scene_init(&s, &u, &o, &style, &err);
        if (rc == 0) {
            rc = nf_render_glass(&s, NF_VIEW_AXIAL, &im, &err);
            if (rc == 0) {
                rc = nf_png_encode(im.rgb, im.width, im.height, &png, &n, &err);
                if (rc == 0) {
                    b64 = nf_base64(png, n);
                    rc = b64 ? 0 : NF_ENOMEM;
                }
            }
        }
        nf_alloc_fail_at(0, false);
        if (rc == 0)
            done = true;
        else
            assert_int_equal(rc, NF_ENOMEM);
        free(b64);
        free(png);
        nf_image_release(&im);
        nf_scene_release(&s);
    }
    assert_true(done);
}

/* Image sizes follow render.h: a voxel axis permuted and flipped by the
 * affine is shown along its world axis, the scale reaches min_short_side
 * unless the long side would pass 6 times it, and style settings win over
 * what the values suggest. */
static void test_sizes_and_style(void **state)
{
    (void)state;
    static float flat[40 * 50 * 3];
    struct nf_grid g = {0};
    g.dim[0] = 40;
    g.dim[1] = 50;
    g.dim[2] = 3;
    /* x = 2 j, y = -2 k, z = 2 i */
    g.affine[0][1] = 2;
    g.affine[1][2] = -2;
    g.affine[2][0] = 2;
    g.affine[3][3] = 1;
    flat[7] = -3;
    flat[8] = 2;
    struct nf_render_map o = {&g, flat, NULL};
    struct nf_render_style style = {.vmax = 10, .scale = NF_SCALE_POSITIVE};
    struct nf_error err = {0};
    struct nf_scene s;
    assert_int_equal(nf_scene_init(&s, NULL, &o, &style, &err), 0);
    assert_int_equal(s.axis[0], 1);
    assert_int_equal(s.axis[1], 2);
    assert_int_equal(s.axis[2], 0);
    assert_int_equal(s.flip[0], 0);
    assert_int_equal(s.flip[1], 1);
    assert_int_equal(s.flip[2], 0);
    /* shortest axis 3: 200 / 3 -> 67, but the longest (50) may reach 1200: 24 */
    assert_int_equal(s.scale, 24);
    int w, h;
    nf_scene_view_size(&s, NF_VIEW_AXIAL, &w, &h);      /* x: 50 voxels (j), y: 3 (k) */
    assert_int_equal(w, 50 * 24);
    assert_int_equal(h, 3 * 24);
    nf_scene_view_size(&s, NF_VIEW_SAGITTAL, &w, &h);   /* y: 3, z: 40 (i) */
    assert_int_equal(w, 3 * 24);
    assert_int_equal(h, 40 * 24);
    /* positive scale and vmax as asked, although values are signed and below 10 */
    assert_false(s.signed_map);
    assert_int_equal(s.map, NF_CMAP_VIRIDIS);
    struct nf_colorbar cb;
    nf_scene_colorbar(&s, &cb);
    assert_true(cb.lo == 0 && cb.hi == 10 && cb.ticks[1] == 2.5);
    nf_scene_release(&s);
    /* a smaller target: 50 / 3 -> 17, capped by the long side at 300 / 50 = 6 */
    style.min_short_side = 50;
    assert_int_equal(nf_scene_init(&s, NULL, &o, &style, &err), 0);
    assert_int_equal(s.scale, 6);
    nf_scene_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_colormaps),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_scene),
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_glass_brain),
        cmocka_unit_test(test_mosaic),
        cmocka_unit_test(test_colorbar),
        cmocka_unit_test(test_masked_overlay),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_sizes_and_style),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
