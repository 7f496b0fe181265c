/* test_io.c — unit tests for engine/io/nifti_io.c and engine/io/table_io.c.
 *
 * Every expected value comes from an independent source: hand-built volumes and
 * index formulas, files written directly with nifti_clib or byte by byte (.npy),
 * or closed forms such as 0.5*x + 10. All files live in a mkdtemp folder that the
 * group teardown removes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nifti2_io.h>
#include <zlib.h>

#include "io/io.h"
#include "core/util.h"
#include "cache/cache.h"
#include "core/rng.h"

static char tmpdir[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/nlflow-test-io-XXXXXX", base);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A path inside the test folder (static buffer rotation: up to 4 live at once). */
static const char *tmp_path(const char *name)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
}

static long file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

/* Only the final file may be left in the folder: no temporaries. */
static int count_dir_entries(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void make_grid(struct nf_grid *g, int64_t nx, int64_t ny, int64_t nz)
{
    memset(g, 0, sizeof *g);
    g->dim[0] = nx; g->dim[1] = ny; g->dim[2] = nz;
    /* A rotated, flipped, translated affine with float-exact entries: the qform
     * must reproduce it too. Columns: i -> -y*2, j -> +x*3, k -> +z*2.5. */
    double a[4][4] = {{0, 3, 0, -30}, {-2, 0, 0, 40.5}, {0, 0, 2.5, -12}, {0, 0, 0, 1}};
    memcpy(g->affine, a, sizeof a);
    g->pixdim[0] = 2; g->pixdim[1] = 3; g->pixdim[2] = 2.5;
    g->sform_code = 4;  /* MNI */
    g->qform_code = 0;
}

/* ---- NIfTI ---- */

static void check_round_trip(const char *name, int64_t nt)
{
    const char *path = tmp_path(name);
    struct nf_grid g;
    struct nf_error err = {0};
    int64_t nx = 4, ny = 3, nz = 2, nvox = nx * ny * nz;
    float *data = malloc((size_t)(nvox * nt) * sizeof *data);

    make_grid(&g, nx, ny, nz);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t k = 0; k < nz; k++)
            for (int64_t j = 0; j < ny; j++)
                for (int64_t i = 0; i < nx; i++)
                    data[t * nvox + i + nx * (j + ny * k)] =
                        (float)(i + 10 * j + 100 * k + 1000 * t) + 0.25f;
    int before = count_dir_entries();
    assert_int_equal(nf_nifti_write(path, &g, nt, data, 1001, "round trip", &err), 0);
    assert_int_equal(count_dir_entries(), before + 1);

    struct nf_value *v = nf_nifti_read(path, &err);
    assert_non_null(v);
    assert_int_equal(v->kind, NF_KIND_VOLUME);
    assert_int_equal(v->u.vol.ndim, nt > 1 ? 4 : 3);
    assert_int_equal(v->u.vol.nt, nt);
    for (int a = 0; a < 3; a++)
        assert_int_equal(v->u.vol.grid.dim[a], g.dim[a]);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            assert_float_equal(v->u.vol.grid.affine[r][c], g.affine[r][c], 1e-6);
    assert_float_equal(v->u.vol.grid.pixdim[0], 2, 1e-6);
    assert_float_equal(v->u.vol.grid.pixdim[1], 3, 1e-6);
    assert_float_equal(v->u.vol.grid.pixdim[2], 2.5, 1e-6);
    assert_int_equal(v->u.vol.grid.sform_code, 4);
    assert_memory_equal(v->u.vol.data, data, (size_t)(nvox * nt) * sizeof *data);
    nf_value_unref(v);

    /* The qform must describe the same affine (viewers that ignore sform). */
    nifti_image *nim = nifti_image_read(path, 0);
    assert_non_null(nim);
    assert_int_equal(nim->qform_code, 1);
    assert_int_equal(nim->intent_code, 1001);
    assert_string_equal(nim->descrip, "round trip");
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            assert_float_equal(nim->qto_xyz.m[r][c], g.affine[r][c], 1e-4);
    nifti_image_free(nim);

    struct nf_nifti_info info;
    assert_int_equal(nf_nifti_read_info(path, &info, &err), 0);
    assert_int_equal(info.version, 1);
    assert_int_equal(info.datatype, DT_FLOAT32);
    assert_int_equal(info.nt, nt);
    free(data);
}

/* A finite affine beyond float32 range cannot be stored in NIfTI-1's float
 * header: the write is refused (it used to write inf, which the reader then
 * refused), and nothing is left behind. Just inside the range still works. */
static void test_nifti_write_refuses_float_overflow(void **state)
{
    (void)state;
    struct nf_grid g;
    struct nf_error err = { 0 };
    float data[2 * 2 * 2] = { 0 };
    make_grid(&g, 2, 2, 2);
    g.affine[0][3] = 1e39;
    assert_true(nf_nifti_write(tmp_path("far.nii"), &g, 1, data, 0, NULL, &err) < 0);
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "float32"));
    assert_int_equal(access(tmp_path("far.nii"), F_OK), -1);

    make_grid(&g, 2, 2, 2);
    g.affine[1][0] = 3e38;   /* each entry fits; the column's length does not */
    g.affine[2][0] = 3e38;
    memset(&err, 0, sizeof err);
    assert_true(nf_nifti_write(tmp_path("long.nii"), &g, 1, data, 0, NULL, &err) < 0);
    assert_non_null(strstr(err.msg, "float32"));

    make_grid(&g, 2, 2, 2);
    g.affine[0][3] = 1e30;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_nifti_write(tmp_path("near.nii"), &g, 1, data, 0, NULL, &err), 0);
    struct nf_nifti_info info;
    assert_int_equal(nf_nifti_read_info(tmp_path("near.nii"), &info, &err), 0);
    assert_true(info.grid.affine[0][3] == (double)1e30f);
}

static void test_nifti_round_trip_3d(void **state)
{
    (void)state;
    check_round_trip("rt3d.nii.gz", 1);
}

static void test_nifti_round_trip_4d(void **state)
{
    (void)state;
    check_round_trip("rt4d.nii", 5);
    /* .nii must really be uncompressed: header size field at byte 0. */
    FILE *fp = fopen(tmp_path("rt4d.nii"), "rb");
    int32_t sizeof_hdr = 0;
    assert_int_equal(fread(&sizeof_hdr, 4, 1, fp), 1);
    fclose(fp);
    assert_int_equal(sizeof_hdr, 348);
    assert_int_equal(file_size(tmp_path("rt4d.nii")), 352 + 4 * 3 * 2 * 5 * 4);
}

/* Write an image of any datatype with nifti_clib itself. */
static void write_with_clib(const char *path, int datatype, const void *values, int64_t n,
                            double slope, double inter)
{
    int64_t dims[8] = {3, n, 1, 1, 1, 1, 1, 1};
    nifti_image *nim = nifti_make_new_nim(dims, datatype, 1);
    assert_non_null(nim);
    memcpy(nim->data, values, (size_t)n * (size_t)nim->nbyper);
    nim->scl_slope = slope;
    nim->scl_inter = inter;
    assert_int_equal(nifti_set_filenames(nim, path, 0, 1), 0);
    nifti_image_write(nim);
    nifti_image_free(nim);
}

static void test_nifti_int16_scaling(void **state)
{
    (void)state;
    const char *path = tmp_path("scaled.nii.gz");
    int16_t raw[7] = {0, 1, -1, 2, 1000, -32768, 32767};
    struct nf_error err = {0};

    write_with_clib(path, DT_INT16, raw, 7, 0.5, 10);
    struct nf_value *v = nf_nifti_read(path, &err);
    assert_non_null(v);
    for (int i = 0; i < 7; i++)
        assert_true(v->u.vol.data[i] == (float)(0.5 * raw[i] + 10));
    nf_value_unref(v);

    /* slope 0 means "not scaled". */
    write_with_clib(path, DT_INT16, raw, 7, 0, 10);
    v = nf_nifti_read(path, &err);
    assert_non_null(v);
    for (int i = 0; i < 7; i++)
        assert_true(v->u.vol.data[i] == (float)raw[i]);
    nf_value_unref(v);
}

static void test_nifti_uint8_float64(void **state)
{
    (void)state;
    struct nf_error err = {0};
    uint8_t u8[5] = {0, 1, 127, 128, 255};
    double f64[5] = {0.1, -1e-3, 1e30, NAN, 3.141592653589793};

    write_with_clib(tmp_path("u8.nii"), DT_UINT8, u8, 5, 0, 0);
    struct nf_value *v = nf_nifti_read(tmp_path("u8.nii"), &err);
    assert_non_null(v);
    for (int i = 0; i < 5; i++)
        assert_true(v->u.vol.data[i] == (float)u8[i]);
    nf_value_unref(v);

    write_with_clib(tmp_path("f64.nii.gz"), DT_FLOAT64, f64, 5, 1, 0);
    struct nf_nifti_info info;
    assert_int_equal(nf_nifti_read_info(tmp_path("f64.nii.gz"), &info, &err), 0);
    assert_int_equal(info.datatype, DT_FLOAT64);
    assert_int_equal(info.ndim, 3);
    assert_int_equal(info.grid.dim[0], 5);
    v = nf_nifti_read(tmp_path("f64.nii.gz"), &err);
    assert_non_null(v);
    for (int i = 0; i < 5; i++) {
        if (isnan(f64[i]))
            assert_true(isnan(v->u.vol.data[i]));
        else
            assert_true(v->u.vol.data[i] == (float)f64[i]);
    }
    nf_value_unref(v);
}

/* Real int16 fMRI with scl_slope/scl_inter; nibabel reads voxel 100 as 3611.95. */
static void test_nifti_real_scaled_file(void **state)
{
    (void)state;
    const char *path = "/usr/lib/python3/dist-packages/nibabel/tests/data/functional.nii";
    struct nf_error err = {0};

    if (access(path, R_OK) != 0) {
        print_message("skipped: %s not installed (python3-nibabel)\n", path);
        skip();
    }
    struct nf_value *v = nf_nifti_read(path, &err);
    assert_non_null(v);
    assert_int_equal(v->u.vol.nt, 20);
    assert_float_equal(v->u.vol.tr, 2.0, 1e-9);
    assert_float_equal(v->u.vol.data[100], 3611.95, 0.01);
    nf_value_unref(v);
}

static void test_nifti_rgb_rejected(void **state)
{
    (void)state;
    struct nf_error err = {0};
    uint8_t rgb[6] = {1, 2, 3, 4, 5, 6};
    write_with_clib(tmp_path("rgb.nii"), DT_RGB24, rgb, 2, 0, 0);
    assert_null(nf_nifti_read(tmp_path("rgb.nii"), &err));
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "rgb.nii"));
    assert_non_null(strstr(err.msg, "not supported"));
}

static void test_nifti2_example(void **state)
{
    (void)state;
    const char *path = "/usr/lib/python3/dist-packages/nibabel/tests/data/example_nifti2.nii.gz";
    struct nf_error err = {0};
    struct nf_nifti_info info;

    if (access(path, R_OK) != 0) {
        print_message("skipped: %s not installed (python3-nibabel)\n", path);
        skip();
    }
    assert_int_equal(nf_nifti_read_info(path, &info, &err), 0);
    assert_int_equal(info.version, 2);
    assert_int_equal(info.grid.dim[0], 32);
    assert_int_equal(info.grid.dim[1], 20);
    assert_int_equal(info.grid.dim[2], 12);
    assert_int_equal(info.nt, 2);
    assert_int_equal(info.ndim, 4);
    struct nf_value *v = nf_nifti_read(path, &err);
    assert_non_null(v);
    assert_int_equal(v->u.vol.nt, 2);
    nf_value_unref(v);
}

/* A volume of incompressible values, so that half the .gz is half the data. */
static void write_noise_volume(const char *path, int64_t n, int64_t nt)
{
    struct nf_grid g;
    struct nf_error err = {0};
    uint64_t s = 42;
    float *data = malloc((size_t)(n * n * n * nt) * sizeof *data);
    make_grid(&g, n, n, n);
    for (int64_t i = 0; i < n * n * n * nt; i++)
        data[i] = (float)nf_rand_normal(&s);
    assert_int_equal(nf_nifti_write(path, &g, nt, data, 0, NULL, &err), 0);
    free(data);
}

static void test_nifti_truncated(void **state)
{
    (void)state;
    struct nf_error err = {0};
    const char *gz = tmp_path("trunc.nii.gz");
    write_noise_volume(gz, 20, 3);
    assert_int_equal(truncate(gz, file_size(gz) / 2), 0);
    assert_null(nf_nifti_read(gz, &err));
    assert_int_equal(err.code, NF_EIO);
    assert_non_null(strstr(err.msg, gz));

    /* Uncompressed: the message gives exact byte counts. */
    const char *nii = tmp_path("trunc.nii");
    write_noise_volume(nii, 10, 2);
    long half = file_size(nii) / 2;
    assert_int_equal(truncate(nii, half), 0);
    memset(&err, 0, sizeof err);
    assert_null(nf_nifti_read(nii, &err));
    assert_int_equal(err.code, NF_EIO);
    char want[256];
    snprintf(want, sizeof want, "expected %d bytes of voxel data, got %ld", 10 * 10 * 10 * 2 * 4,
             half - 352);
    assert_non_null(strstr(err.msg, nii));
    assert_non_null(strstr(err.msg, want));

    /* Truncated inside the header. */
    assert_int_equal(truncate(nii, 100), 0);
    memset(&err, 0, sizeof err);
    assert_null(nf_nifti_read(nii, &err));
    assert_int_equal(err.code, NF_EIO);
    assert_non_null(strstr(err.msg, nii));
}

/* ---- the fast readers: pread, whole-buffer inflate, masked gathering ---- */

/* A 4D image of any datatype written by nifti_clib (dims nx, ny, nz, nt). */
static void write_4d_with_clib(const char *path, int datatype, const void *values, int64_t nx,
                               int64_t ny, int64_t nz, int64_t nt, double slope, double inter)
{
    int64_t dims[8] = {4, nx, ny, nz, nt, 1, 1, 1};
    nifti_image *nim = nifti_make_new_nim(dims, datatype, 1);
    assert_non_null(nim);
    memcpy(nim->data, values, (size_t)(nx * ny * nz * nt) * (size_t)nim->nbyper);
    nim->scl_slope = slope;
    nim->scl_inter = inter;
    assert_int_equal(nifti_set_filenames(nim, path, 0, 1), 0);
    nifti_image_write(nim);
    nifti_image_free(nim);
}

/* Voxel i of raw values as the NIfTI standard scales it, computed here. */
static float expected_voxel(int dt, const void *raw, int64_t i, double slope, double inter)
{
    double x;
    switch (dt) {
    case DT_UINT8:   x = ((const uint8_t *)raw)[i]; break;
    case DT_INT16:   x = ((const int16_t *)raw)[i]; break;
    case DT_UINT16:  x = ((const uint16_t *)raw)[i]; break;
    case DT_INT32:   x = ((const int32_t *)raw)[i]; break;
    case DT_FLOAT64: x = ((const double *)raw)[i]; break;
    default:         x = ((const float *)raw)[i]; break;
    }
    if (slope == 0)
        return dt == DT_FLOAT32 ? ((const float *)raw)[i] : (float)x;
    return (float)(slope * x + inter);
}

/* The masked read of path against the whole image (whole, nt images of nvox)
 * gathered here through geom; non-finite values must come back as 0. */
static void check_masked_read(const char *path, const float *whole, int64_t nvox, int64_t nt,
                              struct nf_geom *geom, int threads)
{
    struct nf_error err = {0};
    int64_t n_nonfinite = -1, n_bad = 0;
    struct nf_value *m = nf_nifti_read_masked(path, geom, threads, &n_nonfinite, &err);
    if (!m)
        fail_msg("%s (masked, %d threads): %s", path, threads, err.msg);
    assert_int_equal(m->u.mat.rows, nt);
    assert_int_equal(m->u.mat.cols, geom->n_voxels);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t c = 0; c < geom->n_voxels; c++) {
            float want = whole[t * nvox + geom->index[c]];
            if (!isfinite(want)) {
                want = 0;
                n_bad++;
            }
            float got = m->u.mat.data[t * geom->n_voxels + c];
            if (memcmp(&want, &got, sizeof want) != 0)
                fail_msg("%s image %lld column %lld (%d threads): %.9g, expected %.9g", path,
                         (long long)t, (long long)c, threads, (double)got, (double)want);
        }
    assert_int_equal(n_nonfinite, n_bad);
    nf_value_unref(m);
}

/* The whole image bit for bit, and the masked read against the whole one
 * gathered by hand: mask = voxels v with v % 5 != 2 (all but every fifth). */
static void check_fast_read(const char *path, int dt, const void *raw, int64_t nx, int64_t ny,
                            int64_t nz, int64_t nt, double slope, double inter)
{
    struct nf_error err = {0};
    const int64_t nvox = nx * ny * nz;
    struct nf_value *v = nf_nifti_read(path, &err);
    if (!v)
        fail_msg("%s: %s", path, err.msg);
    for (int64_t i = 0; i < nvox * nt; i++) {
        float want = expected_voxel(dt, raw, i, slope, inter);
        if (isnan(want))
            assert_true(isnan(v->u.vol.data[i]));
        else if (memcmp(&want, &v->u.vol.data[i], sizeof want) != 0)
            fail_msg("%s voxel %lld: %.9g, expected %.9g", path, (long long)i,
                     (double)v->u.vol.data[i], (double)want);
    }

    struct nf_grid g = v->u.vol.grid;
    float *mask = calloc((size_t)nvox, sizeof *mask);
    for (int64_t i = 0; i < nvox; i++)
        mask[i] = i % 5 != 2;
    struct nf_geom *geom = nf_geom_from_mask(&g, mask);
    assert_non_null(geom);
    /* 1 worker, and 3 (images split between them) */
    check_masked_read(path, v->u.vol.data, nvox, nt, geom, 1);
    check_masked_read(path, v->u.vol.data, nvox, nt, geom, 3);
    nf_geom_unref(geom);
    free(mask);
    nf_value_unref(v);
}

/* Odd sizes, every common datatype, scaled and not, .nii and .nii.gz. */
static void test_nifti_fast_read_datatypes(void **state)
{
    (void)state;
    const int64_t nx = 7, ny = 5, nz = 3, nt = 4, n = nx * ny * nz * nt;
    static const struct { int dt; double slope, inter; } cases[] = {
        {DT_FLOAT32, 0, 0}, {DT_FLOAT32, 2, -1}, {DT_INT16, 0.5, 10}, {DT_INT16, 0, 0},
        {DT_UINT8, 0, 0}, {DT_UINT8, 1.5, -3}, {DT_UINT16, 0, 0}, {DT_INT32, 0.25, 0},
        {DT_FLOAT64, 0, 0},
    };
    unsigned char *raw = malloc((size_t)n * 8);
    uint64_t seed = 7;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        for (int64_t i = 0; i < n; i++) {
            double r = nf_rand_normal(&seed);
            switch (cases[k].dt) {
            case DT_UINT8:   ((uint8_t *)raw)[i] = (uint8_t)(i * 37); break;
            case DT_INT16:   ((int16_t *)raw)[i] = (int16_t)(r * 9000); break;
            case DT_UINT16:  ((uint16_t *)raw)[i] = (uint16_t)(i * 611); break;
            case DT_INT32:   ((int32_t *)raw)[i] = (int32_t)(r * 1e8); break;
            case DT_FLOAT64: ((double *)raw)[i] = i == 3 ? NAN : i == 9 ? INFINITY : r * 1e3; break;
            default:         ((float *)raw)[i] = i == 5 ? NAN : (float)r; break;
            }
        }
        for (int gz = 0; gz < 2; gz++) {
            char name[64];
            snprintf(name, sizeof name, "fast%zu.nii%s", k, gz ? ".gz" : "");
            write_4d_with_clib(tmp_path(name), cases[k].dt, raw, nx, ny, nz, nt, cases[k].slope,
                               cases[k].inter);
            check_fast_read(tmp_path(name), cases[k].dt, raw, nx, ny, nz, nt, cases[k].slope,
                            cases[k].inter);
        }
    }
    free(raw);
}

/* Images larger than the reader's chunk (2^18 voxels): chunks end inside an
 * image and the in-mask voxels of one image span several of them. */
static void test_nifti_fast_read_chunks(void **state)
{
    (void)state;
    const int64_t nx = 67, ny = 71, nz = 61, nt = 2, n = nx * ny * nz * nt;
    float *raw = malloc((size_t)n * sizeof *raw);
    uint64_t seed = 11;
    for (int64_t i = 0; i < n; i++)
        raw[i] = (float)nf_rand_normal(&seed);
    write_4d_with_clib(tmp_path("chunks.nii"), DT_FLOAT32, raw, nx, ny, nz, nt, 0, 0);
    write_4d_with_clib(tmp_path("chunks.nii.gz"), DT_FLOAT32, raw, nx, ny, nz, nt, 0, 0);
    check_fast_read(tmp_path("chunks.nii"), DT_FLOAT32, raw, nx, ny, nz, nt, 0, 0);
    check_fast_read(tmp_path("chunks.nii.gz"), DT_FLOAT32, raw, nx, ny, nz, nt, 0, 0);
    free(raw);
}

/* Whole file bytes (malloc'd), *n its size. */
static unsigned char *file_bytes(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, fp), *n);
    fclose(fp);
    return b;
}

/* One gzip member holding bytes[0..n), appended to path. */
static void append_gzip_member(const char *path, const void *bytes, size_t n)
{
    gzFile gz = gzopen(path, "ab");
    assert_non_null(gz);
    if (n > 0)
        assert_int_equal(gzwrite(gz, bytes, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
}

/* A file bigger than a few windows of the mapped reader (16 MiB each, from
 * 2 MiB boundaries): images straddle window ends, workers claim runs of
 * images, and the whole-image read walks window after window. Values are a
 * cheap hash of the position (so every byte is checked against its place),
 * with NaN and infinity planted in several images. */
static void test_nifti_fast_read_windows(void **state)
{
    (void)state;
    const int64_t nx = 101, ny = 97, nz = 89, nt = 16, nvox = nx * ny * nz, n = nvox * nt;
    float *raw = malloc((size_t)n * sizeof *raw);
    for (int64_t i = 0; i < n; i++)
        raw[i] = (float)((uint32_t)(i * 2654435761u) >> 8) / 65536.0f - 128.0f;
    for (int64_t t = 1; t < nt; t += 4) {
        raw[t * nvox + nx * 40 + 50] = NAN;          /* inside the mask below */
        raw[t * nvox + nvox - 1] = -INFINITY;
    }
    write_4d_with_clib(tmp_path("windows.nii"), DT_FLOAT32, raw, nx, ny, nz, nt, 0, 0);
    assert_true(file_size(tmp_path("windows.nii")) > 3 * (16 << 20));
    check_fast_read(tmp_path("windows.nii"), DT_FLOAT32, raw, nx, ny, nz, nt, 0, 0);
    /* scaled: the same windows, converted */
    write_4d_with_clib(tmp_path("windows2.nii"), DT_FLOAT32, raw, nx, ny, nz, nt, 0.5, 2);
    check_fast_read(tmp_path("windows2.nii"), DT_FLOAT32, raw, nx, ny, nz, nt, 0.5, 2);
    unlink(tmp_path("windows.nii"));
    unlink(tmp_path("windows2.nii"));
    free(raw);
}

/* Big-endian files on a little-endian machine (and the reverse): the bytes
 * are swapped in place, so a plain file is read into scratch, not mapped
 * (a write to a read-only mapping would crash here). The file is one that
 * nifti_clib wrote, its header and voxels swapped here. */
static void test_nifti_swapped_byte_order(void **state)
{
    (void)state;
    const int64_t nx = 9, ny = 7, nz = 5, nt = 3, n = nx * ny * nz * nt;
    int16_t *raw = malloc((size_t)n * sizeof *raw);
    for (int64_t i = 0; i < n; i++)
        raw[i] = (int16_t)(i * 97 - 9000);
    const char *native = tmp_path("native.nii");
    write_4d_with_clib(native, DT_INT16, raw, nx, ny, nz, nt, 0.25, -1);
    size_t len;
    unsigned char *b = file_bytes(native, &len);
    assert_true(len >= 352 + (size_t)n * 2);
    nifti_swap_as_nifti1((nifti_1_header *)b);
    for (size_t i = 352; i + 1 < len; i += 2) {
        unsigned char x = b[i];
        b[i] = b[i + 1];
        b[i + 1] = x;
    }
    const char *swapped = tmp_path("swapped.nii");
    FILE *fp = fopen(swapped, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, len, fp), len);
    fclose(fp);
    check_fast_read(swapped, DT_INT16, raw, nx, ny, nz, nt, 0.25, -1);
    const char *swapped_gz = tmp_path("swapped.nii.gz");
    unlink(swapped_gz);
    append_gzip_member(swapped_gz, b, len);
    check_fast_read(swapped_gz, DT_INT16, raw, nx, ny, nz, nt, 0.25, -1);
    free(b);
    free(raw);
}

/* Multi-member gzip (bgzip, pigz --independent, cat a.gz b.gz): every member
 * is read, bytes after the last member are ignored (as zlib ignores them),
 * and a last member whose size trailer is smaller than the data before it
 * makes the inflate buffer grow. */
static void test_nifti_multi_member_gzip(void **state)
{
    (void)state;
    const int64_t nx = 9, ny = 8, nz = 7, nt = 3, n = nx * ny * nz * nt;
    int16_t *raw = malloc((size_t)n * sizeof *raw);
    for (int64_t i = 0; i < n; i++)
        raw[i] = (int16_t)(i * 13 - 4000);
    write_4d_with_clib(tmp_path("members.nii"), DT_INT16, raw, nx, ny, nz, nt, 0.5, 3);
    size_t len;
    unsigned char *plain = file_bytes(tmp_path("members.nii"), &len);

    /* three members cut at odd places, then zero padding */
    const char *three = tmp_path("members3.nii.gz");
    unlink(three);
    append_gzip_member(three, plain, 100);
    append_gzip_member(three, plain + 100, len / 2 - 100);
    append_gzip_member(three, plain + len / 2, len - len / 2);
    FILE *fp = fopen(three, "ab");
    fwrite("\0\0\0\0\0\0\0\0", 1, 8, fp);
    fclose(fp);
    check_fast_read(three, DT_INT16, raw, nx, ny, nz, nt, 0.5, 3);

    /* the first member holds the image and 300 kB more; the last, 5 bytes:
     * its size trailer (5) is no guide to the room the first one needs */
    const char *grow = tmp_path("membersgrow.nii.gz");
    unlink(grow);
    unsigned char *padded = calloc(len + 300000, 1);
    memcpy(padded, plain, len);
    append_gzip_member(grow, padded, len + 300000);
    append_gzip_member(grow, "abcde", 5);
    check_fast_read(grow, DT_INT16, raw, nx, ny, nz, nt, 0.5, 3);

    /* members that end before the image does: truncated, with exact counts */
    const char *shortgz = tmp_path("membersshort.nii.gz");
    unlink(shortgz);
    append_gzip_member(shortgz, plain, 1000);
    append_gzip_member(shortgz, plain + 1000, 500);
    struct nf_error err = {0};
    assert_null(nf_nifti_read(shortgz, &err));
    assert_int_equal(err.code, NF_EIO);
    char want[200];
    snprintf(want, sizeof want, "expected %lld bytes of voxel data, got %d", (long long)n * 2,
             1500 - 352);
    assert_non_null(strstr(err.msg, want));
    assert_non_null(strstr(err.msg, shortgz));
    free(padded);
    free(plain);
    free(raw);
}

/* A truncated file read through the masked path: the error of the whole
 * read, naming the file, and no matrix. */
/* Prefaulting the masked read's rows for writing leaves every byte as it
 * was, the partly covered pages at both ends (a neighbour's row) included:
 * a large block (its own mapping) and a small one (the heap), with ranges
 * that start and end inside pages. */
static void test_populate_keeps_contents(void **state)
{
    (void)state;
    static const size_t sizes[] = { (size_t)9 << 20, 3 * 4096 + 123 };
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si] / sizeof(float);
        float *buf = nf_alloc_floats_unfilled(n);
        assert_non_null(buf);
        for (size_t i = 0; i < n; i += 7)   /* a pattern on every other page, */
            if (i / 1024 % 2 == 0)          /* the others never touched */
                buf[i] = (float)i + 0.5f;
        nf_populate_for_write(buf + 100, (n - 250) * sizeof(float));
        nf_populate_for_write(buf + 1, sizeof(float));
        nf_populate_for_write(NULL, 0);
        for (size_t i = 0; i < n; i += 7)
            if (i / 1024 % 2 == 0 && buf[i] != (float)i + 0.5f)
                fail_msg("block of %zu bytes, float %zu: %g after populating", sizes[si], i,
                         (double)buf[i]);
        nf_free_aligned(buf);
    }
}

/* A block filled while another thread prefaults it (as a .nii.gz is
 * inflated): every value written survives, whichever thread reached its
 * page first; ended early, or never begun on nothing, it is harmless. */
static void test_prefault_while_writing(void **state)
{
    (void)state;
    const size_t n = ((size_t)48 << 20) / sizeof(float);
    float *buf = nf_alloc_floats_unfilled(n);
    assert_non_null(buf);
    struct nf_prefault pf;
    nf_prefault_begin(&pf, buf, n * sizeof *buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i % 1000003);
    nf_prefault_end(&pf);
    for (size_t i = 0; i < n; i++)
        if (buf[i] != (float)(i % 1000003))
            fail_msg("float %zu: %g after a prefault beside the writes", i, (double)buf[i]);
    nf_prefault_begin(&pf, buf, n * sizeof *buf);
    nf_prefault_end(&pf);
    assert_true(buf[n - 1] == (float)((n - 1) % 1000003));
    nf_prefault_begin(&pf, NULL, 0);
    nf_prefault_end(&pf);
    nf_free_aligned(buf);
}

static void test_nifti_masked_truncated(void **state)
{
    (void)state;
    const char *names[] = { "mtrunc.nii", "mtrunc.nii.gz" };
    for (int k = 0; k < 2; k++) {
        const char *path = tmp_path(names[k]);
        write_noise_volume(path, 20, 3);
        struct nf_error err = {0};
        struct nf_value *v = nf_nifti_read(path, &err);
        assert_non_null(v);
        float *ones = malloc(20 * 20 * 20 * sizeof *ones);
        for (int i = 0; i < 20 * 20 * 20; i++)
            ones[i] = 1;
        struct nf_geom *geom = nf_geom_from_mask(&v->u.vol.grid, ones);
        nf_value_unref(v);
        long size = file_size(path);
        assert_int_equal(truncate(path, size * 2 / 3), 0);
        int64_t bad = 0;
        assert_null(nf_nifti_read_masked(path, geom, 2, &bad, &err));
        assert_int_equal(err.code, NF_EIO);
        assert_non_null(strstr(err.msg, path));
        if (k == 0) {
            char want[200];
            snprintf(want, sizeof want, "expected %d bytes of voxel data, got %ld",
                     20 * 20 * 20 * 3 * 4, size * 2 / 3 - 352);
            assert_non_null(strstr(err.msg, want));
        } else {
            assert_true(strstr(err.msg, "truncated") || strstr(err.msg, "corrupt"));
        }
        nf_geom_unref(geom);
        free(ones);
    }
}

static void test_nifti_missing(void **state)
{
    (void)state;
    struct nf_error err = {0};
    struct nf_nifti_info info;
    const char *path = tmp_path("no-such-file.nii.gz");
    assert_null(nf_nifti_read(path, &err));
    assert_int_equal(err.code, NF_EIO);
    assert_non_null(strstr(err.msg, "no-such-file.nii.gz"));
    memset(&err, 0, sizeof err);
    assert_true(nf_nifti_read_info(path, &info, &err) < 0);
    assert_non_null(strstr(err.msg, "no-such-file.nii.gz"));

    /* Not a NIfTI file at all. */
    write_text(tmp_path("text.nii"), "this is not an image\n");
    memset(&err, 0, sizeof err);
    assert_null(nf_nifti_read(tmp_path("text.nii"), &err));
    assert_int_equal(err.code, NF_EIO);
    assert_non_null(strstr(err.msg, "text.nii"));
}

static void test_nifti_lazy(void **state)
{
    (void)state;
    struct nf_error err = {0};
    const char *path = tmp_path("lazy.nii.gz");
    write_noise_volume(path, 5, 2);

    struct nf_value *lazy = nf_nifti_open_lazy(path, &err);
    assert_non_null(lazy);
    assert_true(lazy->u.vol.lazy);
    assert_null(lazy->u.vol.data);
    assert_int_equal(lazy->u.vol.nt, 2);
    assert_int_equal(lazy->u.vol.grid.dim[2], 5);
    nf_value_set_label(lazy, "sub-01");

    struct nf_value *full = nf_value_materialize(lazy, &err);
    assert_non_null(full);
    assert_ptr_not_equal(full, lazy);
    assert_false(full->u.vol.lazy);
    assert_string_equal(full->label, "sub-01");
    struct nf_value *direct = nf_nifti_read(path, &err);
    assert_memory_equal(full->u.vol.data, direct->u.vol.data, 5 * 5 * 5 * 2 * sizeof(float));

    /* A value already in memory is returned as a new reference to itself. */
    struct nf_value *same = nf_value_materialize(direct, &err);
    assert_ptr_equal(same, direct);
    nf_value_unref(same);
    nf_value_unref(direct);
    nf_value_unref(full);

    /* The file changes shape after being opened: materialize refuses. */
    write_noise_volume(path, 4, 2);
    memset(&err, 0, sizeof err);
    assert_null(nf_value_materialize(lazy, &err));
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "changed"));
    nf_value_unref(lazy);
}

static void test_nifti_write_matrix(void **state)
{
    (void)state;
    struct nf_error err = {0};
    const int64_t nx = 3, ny = 4, nz = 2;
    /* Three in-mask voxels, given by (i, j, k). */
    const int64_t ijk[3][3] = {{1, 2, 0}, {0, 0, 1}, {2, 3, 1}};
    int64_t index[3];
    float rows[2][3] = {{1.5f, -2, 3}, {4, 5, 6.25f}};
    struct nf_geom geom = {0};

    for (int c = 0; c < 3; c++)
        index[c] = ijk[c][0] + nx * (ijk[c][1] + ny * ijk[c][2]);
    geom.refcount = 1;
    make_grid(&geom.grid, nx, ny, nz);
    geom.n_voxels = 3;
    geom.index = index;
    struct nf_matrix m = {.rows = 2, .cols = 3, .data = &rows[0][0], .geom = &geom};

    const char *path = tmp_path("maps.nii.gz");
    assert_int_equal(nf_nifti_write_matrix(path, &m, 0, "maps", &err), 0);
    struct nf_value *v = nf_nifti_read(path, &err);
    assert_non_null(v);
    assert_int_equal(v->u.vol.ndim, 4);
    assert_int_equal(v->u.vol.nt, 2);
    for (int t = 0; t < 2; t++)
        for (int64_t k = 0; k < nz; k++)
            for (int64_t j = 0; j < ny; j++)
                for (int64_t i = 0; i < nx; i++) {
                    float want = 0;
                    for (int c = 0; c < 3; c++)
                        if (ijk[c][0] == i && ijk[c][1] == j && ijk[c][2] == k)
                            want = rows[t][c];
                    float got = v->u.vol.data[t * nx * ny * nz + i + nx * j + nx * ny * k];
                    assert_true(got == want);
                }
    nf_value_unref(v);

    /* One row: a 3-D image. */
    m.rows = 1;
    assert_int_equal(nf_nifti_write_matrix(path, &m, 0, NULL, &err), 0);
    v = nf_nifti_read(path, &err);
    assert_non_null(v);
    assert_int_equal(v->u.vol.ndim, 3);
    assert_true(v->u.vol.data[index[2]] == 3.0f);
    nf_value_unref(v);

    /* Wrong column count is a shape error. */
    m.cols = 2;
    memset(&err, 0, sizeof err);
    assert_true(nf_nifti_write_matrix(path, &m, 0, NULL, &err) < 0);
    assert_int_equal(err.code, NF_ESHAPE);
}

/* ---- tables ---- */

static void test_tsv_parse(void **state)
{
    (void)state;
    struct nf_error err = {0};
    const char *path = tmp_path("events.tsv");
    write_text(path, "onset\tduration\ttrial_type\tresp\n"
                     "0\t1.5\tface\tn/a\n"
                     "2.5\t1\thouse\t0.3\r\n"
                     "\n"
                     "-4e1\t\tface\tNaN\n");
    struct nf_value *v = nf_table_read(path, NULL, 0, &err);
    assert_non_null(v);
    const struct nf_table *t = &v->u.tab;
    assert_int_equal(t->n_rows, 3);
    assert_int_equal(t->n_cols, 4);
    assert_string_equal(t->cols[0].name, "onset");
    assert_true(t->cols[0].numeric);
    assert_true(t->cols[0].num[0] == 0 && t->cols[0].num[1] == 2.5 && t->cols[0].num[2] == -40);
    assert_true(t->cols[1].numeric);
    assert_true(isnan(t->cols[1].num[2]));
    assert_false(t->cols[2].numeric);
    assert_string_equal(t->cols[2].str[1], "house");
    assert_true(t->cols[3].numeric);
    assert_true(isnan(t->cols[3].num[0]) && t->cols[3].num[1] == 0.3 && isnan(t->cols[3].num[2]));
    nf_value_unref(v);

    /* A column is numeric only when every cell parses completely. */
    write_text(tmp_path("mixed.tsv"), "run\tcond\n1\t2\n2\t3b\n");
    v = nf_table_read(tmp_path("mixed.tsv"), NULL, 0, &err);
    assert_non_null(v);
    assert_true(v->u.tab.cols[0].numeric);
    assert_false(v->u.tab.cols[1].numeric);
    assert_string_equal(v->u.tab.cols[1].str[1], "3b");
    nf_value_unref(v);

    const char *pick[] = {"trial_type", "onset"};
    v = nf_table_read(path, pick, 2, &err);
    assert_non_null(v);
    assert_int_equal(v->u.tab.n_cols, 2);
    assert_string_equal(v->u.tab.cols[0].name, "trial_type");
    assert_string_equal(v->u.tab.cols[1].name, "onset");
    assert_true(v->u.tab.cols[1].num[1] == 2.5);
    nf_value_unref(v);

    int64_t rows = 0, cols = 0;
    assert_int_equal(nf_table_read_info(path, pick, 2, &rows, &cols, &err), 0);
    assert_int_equal(rows, 3);
    assert_int_equal(cols, 2);

    const char *bad[] = {"onset", "reaction_time"};
    assert_null(nf_table_read(path, bad, 2, &err));
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "'reaction_time'"));
    assert_non_null(strstr(err.msg, "onset, duration, trial_type, resp"));
}

static void test_table_errors(void **state)
{
    (void)state;
    struct nf_error err = {0};
    const char *path = tmp_path("ragged.tsv");
    write_text(path, "a\tb\n1\t2\n3\n5\t6\n");
    assert_null(nf_table_read(path, NULL, 0, &err));
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "ragged.tsv"));
    assert_non_null(strstr(err.msg, "line 3"));

    write_text(path, "");
    memset(&err, 0, sizeof err);
    assert_null(nf_table_read(path, NULL, 0, &err));
    assert_non_null(strstr(err.msg, "empty"));

    write_text(path, "a\tb\n");
    memset(&err, 0, sizeof err);
    int64_t r, c;
    assert_true(nf_table_read_info(path, NULL, 0, &r, &c, &err) < 0);
    assert_non_null(strstr(err.msg, "no data rows"));

    memset(&err, 0, sizeof err);
    assert_null(nf_table_read(tmp_path("missing.tsv"), NULL, 0, &err));
    assert_int_equal(err.code, NF_EIO);
    assert_non_null(strstr(err.msg, "missing.tsv"));
}

static void test_csv_quotes_and_write(void **state)
{
    (void)state;
    struct nf_error err = {0};
    const char *path = tmp_path("q.csv");
    write_text(path, "id,label,x\r\n1,\"x, y\",0.5\r\n2,\"say \"\"hi\"\"\",-1\r\n");
    struct nf_value *v = nf_table_read(path, NULL, 0, &err);
    assert_non_null(v);
    assert_int_equal(v->u.tab.n_rows, 2);
    assert_string_equal(v->u.tab.cols[1].str[0], "x, y");
    assert_string_equal(v->u.tab.cols[1].str[1], "say \"hi\"");
    assert_true(v->u.tab.cols[2].num[1] == -1);

    /* Write it back as CSV and read again: same table. */
    const char *out = tmp_path("q2.csv");
    assert_int_equal(nf_table_write(out, &v->u.tab, &err), 0);
    struct nf_value *w = nf_table_read(out, NULL, 0, &err);
    assert_non_null(w);
    assert_string_equal(w->u.tab.cols[1].str[0], "x, y");
    assert_string_equal(w->u.tab.cols[1].str[1], "say \"hi\"");
    assert_true(w->u.tab.cols[0].num[1] == 2);
    assert_true(w->u.tab.cols[2].num[0] == 0.5);
    nf_value_unref(w);
    nf_value_unref(v);
}

static void test_matrix_write_tsv(void **state)
{
    (void)state;
    struct nf_error err = {0};
    float data[6] = {1, 2.5f, NAN, -3, 1e-7f, 123456789.0f};
    struct nf_matrix m = {.rows = 2, .cols = 3, .data = data};
    const char *path = tmp_path("m.tsv");
    assert_int_equal(nf_matrix_write_tsv(path, &m, &err), 0);
    size_t len;
    char *text = nf_read_file(path, &len, &err);
    assert_non_null(text);
    char want[256];
    snprintf(want, sizeof want, "c0\tc1\tc2\n%.9g\t%.9g\tn/a\n%.9g\t%.9g\t%.9g\n",
             1.0, 2.5, -3.0, (double)1e-7f, (double)123456789.0f);
    assert_string_equal(text, want);
    free(text);
}

/* ---- .npy ---- */

/* Hand-written .npy: version major, dict text, raw payload. */
static void write_npy(const char *path, int major, const char *dict, const void *payload,
                      size_t n)
{
    FILE *fp = fopen(path, "wb");
    size_t hlen = strlen(dict);
    assert_non_null(fp);
    fwrite("\x93NUMPY", 1, 6, fp);
    fputc(major, fp);
    fputc(0, fp);
    if (major == 1) {
        fputc((int)(hlen & 0xff), fp);
        fputc((int)(hlen >> 8), fp);
    } else {
        uint32_t h = (uint32_t)hlen;
        fwrite(&h, 4, 1, fp);
    }
    fwrite(dict, 1, hlen, fp);
    if (n)
        fwrite(payload, 1, n, fp);
    assert_int_equal(fclose(fp), 0);
}

static void test_npy_round_trip(void **state)
{
    (void)state;
    struct nf_error err = {0};
    float data[12];
    for (int i = 0; i < 12; i++)
        data[i] = (float)i * 0.5f - 2;
    struct nf_matrix m = {.rows = 3, .cols = 4, .data = data};
    const char *path = tmp_path("a.npy");
    assert_int_equal(nf_npy_write(path, &m, &err), 0);
    /* numpy's layout: 10-byte preamble + header padded to 64, then the data. */
    assert_int_equal(file_size(path), 128 + 12 * 4);

    int64_t r = 0, c = 0;
    assert_int_equal(nf_npy_read_info(path, &r, &c, &err), 0);
    assert_int_equal(r, 3);
    assert_int_equal(c, 4);
    struct nf_value *v = nf_npy_read(path, &err);
    assert_non_null(v);
    assert_int_equal(v->u.mat.rows, 3);
    assert_int_equal(v->u.mat.cols, 4);
    assert_memory_equal(v->u.mat.data, data, sizeof data);
    nf_value_unref(v);
}

static void test_npy_f8_hand_written(void **state)
{
    (void)state;
    struct nf_error err = {0};
    double d[6] = {0.1, -2, 1e-20, 3.5, 7, -0.25};

    write_npy(tmp_path("v.npy"), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }          \n", d,
              5 * sizeof(double));
    struct nf_value *v = nf_npy_read(tmp_path("v.npy"), &err);
    assert_non_null(v);
    assert_int_equal(v->u.mat.rows, 1);
    assert_int_equal(v->u.mat.cols, 5);
    for (int i = 0; i < 5; i++)
        assert_true(v->u.mat.data[i] == (float)d[i]);
    nf_value_unref(v);

    write_npy(tmp_path("v2.npy"), 2,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", d, sizeof d);
    v = nf_npy_read(tmp_path("v2.npy"), &err);
    assert_non_null(v);
    assert_int_equal(v->u.mat.rows, 2);
    assert_int_equal(v->u.mat.cols, 3);
    assert_true(v->u.mat.data[5] == (float)d[5]);
    nf_value_unref(v);
}

static void test_npy_rejects(void **state)
{
    (void)state;
    struct nf_error err = {0};
    int32_t i4[4] = {1, 2, 3, 4};
    float f4[8] = {0};

    write_npy(tmp_path("i.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }\n",
              i4, sizeof i4);
    assert_null(nf_npy_read(tmp_path("i.npy"), &err));
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "'<i4'"));

    write_npy(tmp_path("f.npy"), 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 4), }\n",
              f4, sizeof f4);
    memset(&err, 0, sizeof err);
    assert_null(nf_npy_read(tmp_path("f.npy"), &err));
    assert_non_null(strstr(err.msg, "Fortran"));

    write_npy(tmp_path("3d.npy"), 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }\n", f4, sizeof f4);
    memset(&err, 0, sizeof err);
    assert_null(nf_npy_read(tmp_path("3d.npy"), &err));
    assert_non_null(strstr(err.msg, "(2, 2, 2)"));

    /* Truncated data: 8 floats promised, 3 present. */
    write_npy(tmp_path("t.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\n",
              f4, 3 * sizeof(float));
    memset(&err, 0, sizeof err);
    assert_null(nf_npy_read(tmp_path("t.npy"), &err));
    assert_int_equal(err.code, NF_EIO);
    assert_non_null(strstr(err.msg, "t.npy"));
    assert_non_null(strstr(err.msg, "expected 32 bytes of array data, got 12"));

    /* A shape whose byte count wraps past 2^64 once the header is added
     * (8 * (2^61 - 1) + 128): refused by the reader itself, not read. */
    write_npy(tmp_path("huge.npy"), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2305843009213693951), }\n",
              f4, sizeof f4);
    int64_t r = 0, c = 0;
    memset(&err, 0, sizeof err);
    assert_true(nf_npy_read_info(tmp_path("huge.npy"), &r, &c, &err) < 0);
    assert_non_null(strstr(err.msg, "too large"));
    memset(&err, 0, sizeof err);
    assert_null(nf_npy_read(tmp_path("huge.npy"), &err));
    assert_int_equal(err.code, NF_EDATA);

    /* Truncated inside the header. */
    write_text(tmp_path("h.npy"), "\x93NUMPY\x01");
    memset(&err, 0, sizeof err);
    assert_null(nf_npy_read(tmp_path("h.npy"), &err));
    assert_true(err.code < 0);
}

static void test_file_format_of(void **state)
{
    (void)state;
    assert_int_equal(nf_file_format_of("a/b.nii.gz"), NF_FMT_NIFTI);
    assert_int_equal(nf_file_format_of("b.NII"), NF_FMT_NIFTI);
    assert_int_equal(nf_file_format_of("e.tsv"), NF_FMT_TABLE);
    assert_int_equal(nf_file_format_of("e.csv"), NF_FMT_TABLE);
    assert_int_equal(nf_file_format_of("x.npy"), NF_FMT_NPY);
    assert_int_equal(nf_file_format_of("x.mat"), NF_FMT_UNKNOWN);
}

/* ---- special files ---- */

/* A FIFO or a device named like an input is refused by every reader and by
 * file hashing, naming what it is: before, opening the FIFO blocked for ever
 * and /dev/urandom was read until memory ran out (the alarm turns either
 * into a failure). */
static void test_special_files_refused(void **state)
{
    (void)state;
    static const char *const names[] = { "fifo.nii", "fifo.npy", "fifo.tsv",
                                          "random.nii", "random.npy", "random.tsv" };
    struct nf_error err = { 0 };
    int64_t rows, cols;
    struct nf_nifti_info info;
    struct nf_key key;
    alarm(60);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(mkfifo(tmp_path(names[i]), 0600), 0);
    for (size_t i = 3; i < 6; i++)
        assert_int_equal(symlink("/dev/urandom", tmp_path(names[i])), 0);
    for (size_t i = 0; i < 6; i++) {
        const char *path = tmp_path(names[i]), *kind = i < 3 ? "a FIFO" : "a character device";
        memset(&err, 0, sizeof err);
        if (strstr(path, ".nii"))
            assert_true(nf_nifti_read_info(path, &info, &err) < 0);
        else if (strstr(path, ".npy"))
            assert_true(nf_npy_read_info(path, &rows, &cols, &err) < 0);
        else
            assert_null(nf_table_read(path, NULL, 0, &err));
        assert_int_equal(err.code, NF_EIO);
        if (!strstr(err.msg, kind) || !strstr(err.msg, names[i]))
            fail_msg("%s: %s", names[i], err.msg);
        memset(&err, 0, sizeof err);
        assert_true(nf_file_hash(path, &key, &err) < 0);
        assert_non_null(strstr(err.msg, "not a regular file"));
    }
    alarm(0);
}

/* Repeated column names: the first name (in column order) that repeats, with
 * its first two columns; many unique columns are checked quickly (sorted, not
 * pair by pair). */
static void test_table_repeated_columns(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    write_text(tmp_path("rep.tsv"), "a\tb\tc\tb\ta\n1\t2\t3\t4\t5\n");
    assert_null(nf_table_read(tmp_path("rep.tsv"), NULL, 0, &err));
    assert_int_equal(err.code, NF_EDATA);
    if (!strstr(err.msg, "column name 'a' appears twice (columns 1 and 5)"))
        fail_msg("%s", err.msg);

    enum { WIDE = 50000 };
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < WIDE; c++)
            nf_strbuf_addf(&sb, r ? "%d%s" : "v%d%s", c, c + 1 < WIDE ? "\t" : "\n");
    assert_false(sb.oom);
    write_text(tmp_path("wide.tsv"), sb.buf);
    nf_strbuf_release(&sb);
    memset(&err, 0, sizeof err);
    int64_t rows = 0, cols = 0;
    assert_int_equal(nf_table_read_info(tmp_path("wide.tsv"), NULL, 0, &rows, &cols, &err), 0);
    assert_int_equal(rows, 1);
    assert_int_equal(cols, WIDE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nifti_round_trip_3d),
        cmocka_unit_test(test_nifti_round_trip_4d),
        cmocka_unit_test(test_nifti_int16_scaling),
        cmocka_unit_test(test_nifti_uint8_float64),
        cmocka_unit_test(test_nifti_real_scaled_file),
        cmocka_unit_test(test_nifti_rgb_rejected),
        cmocka_unit_test(test_nifti2_example),
        cmocka_unit_test(test_nifti_truncated),
        cmocka_unit_test(test_nifti_missing),
        cmocka_unit_test(test_nifti_fast_read_datatypes),
        cmocka_unit_test(test_nifti_fast_read_chunks),
        cmocka_unit_test(test_nifti_multi_member_gzip),
        cmocka_unit_test(test_nifti_fast_read_windows),
        cmocka_unit_test(test_nifti_swapped_byte_order),
        cmocka_unit_test(test_nifti_masked_truncated),
        cmocka_unit_test(test_populate_keeps_contents),
        cmocka_unit_test(test_prefault_while_writing),
        cmocka_unit_test(test_nifti_lazy),
        cmocka_unit_test(test_nifti_write_matrix),
        cmocka_unit_test(test_tsv_parse),
        cmocka_unit_test(test_table_errors),
        cmocka_unit_test(test_csv_quotes_and_write),
        cmocka_unit_test(test_matrix_write_tsv),
        cmocka_unit_test(test_npy_round_trip),
        cmocka_unit_test(test_npy_f8_hand_written),
        cmocka_unit_test(test_npy_rejects),
        cmocka_unit_test(test_file_format_of),
        cmocka_unit_test(test_special_files_refused),
        cmocka_unit_test(test_table_repeated_columns),
        cmocka_unit_test(test_nifti_write_refuses_float_overflow),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
