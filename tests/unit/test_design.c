/* test_design.c — the `design` node against a direct double-precision
 * computation of what nilearn's make_first_level_design_matrix defines:
 * Glover's and SPM's HRFs from the closed-form gamma densities (nilearn's
 * parameters, 32 s, normalised to sum 1) and their finite-difference
 * derivatives, the boxcar of each condition on the oversampled grid, its
 * dense convolution with the kernel, linear interpolation at the frame times,
 * orthogonalisation of the derivative columns, and the cosine drift basis.
 * Onsets are chosen off the grid points, so the reference need not reproduce
 * the node's bit-exact grid. Also: column order and names, FIR columns (the
 * fraction of each TR an event covers, shifted by whole frames), confounds
 * copied, polynomial drifts orthogonal, and every malformed input refused
 * with a clear message.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"
#include "design/design.h"

/* ---- inputs ---- */

struct ev { double onset, duration, amplitude; const char *type; };

/* An events table: onset, duration, trial_type (when types), modulation
 * (when amplitudes). */
static struct nf_value *events_table(const struct ev *ev, size_t n, bool types, bool amplitudes)
{
    struct nf_error err = { 0 };
    int64_t cols = 2 + types + amplitudes, c = 0;
    struct nf_value *t = nf_value_new_table((int64_t)n, cols, &err);
    assert_non_null(t);
    assert_int_equal(nf_table_column_numeric(t, c++, "onset", &err), 0);
    assert_int_equal(nf_table_column_numeric(t, c++, "duration", &err), 0);
    if (types)
        assert_int_equal(nf_table_column_string(t, c++, "trial_type", &err), 0);
    if (amplitudes)
        assert_int_equal(nf_table_column_numeric(t, c++, "modulation", &err), 0);
    for (size_t i = 0; i < n; i++) {
        t->u.tab.cols[0].num[i] = ev[i].onset;
        t->u.tab.cols[1].num[i] = ev[i].duration;
        if (types)
            t->u.tab.cols[2].str[i] = nf_strdup(ev[i].type);
        if (amplitudes)
            t->u.tab.cols[2 + types].num[i] = ev[i].amplitude;
    }
    return t;
}

static struct nf_value *frames_matrix(int64_t n)
{
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(n, 3, NULL, &err);
    assert_non_null(m);
    return m;
}

static struct nf_value *frames_volume(int64_t n, double header_tr)
{
    struct nf_error err = { 0 };
    struct nf_grid g = { .dim = { 2, 2, 2 }, .pixdim = { 1, 1, 1 } };
    for (int i = 0; i < 4; i++)
        g.affine[i][i] = 1;
    struct nf_value *v = nf_value_new_volume(&g, 4, n, &err);
    assert_non_null(v);
    v->u.vol.tr = header_tr;
    return v;
}

/* ---- running the node ---- */

static const struct nf_node_type *design_type(struct design_params *p)
{
    const struct nf_node_type *t = nf_node_type_find("design");
    assert_non_null(t);
    memset(p, 0, sizeof *p);
    nf_params_defaults(t, p);
    return t;
}

/* Run the node; the X table (owned) or NULL with *err set. */
static struct nf_value *run_design(const struct design_params *p, struct nf_value *events,
                                   struct nf_value *frames, struct nf_value *confounds, struct nf_error *err)
{
    struct nf_value *in[DESIGN_N_IN] = { events, frames, confounds }, *out[DESIGN_N_OUT] = { NULL };
    struct nf_run run = { .params = p, .in = in, .out = out, .err = err };
    *err = (struct nf_error){ 0 };
    int rc = nf_node_design.run_cpu(&run);
    if (rc < 0) {
        assert_null(out[0]);
        assert_true(err->code != 0);
        return NULL;
    }
    assert_non_null(out[0]);
    return out[0];
}

static const double *column(const struct nf_value *x, const char *name)
{
    int64_t c = nf_table_find(&x->u.tab, name);
    if (c < 0)
        fail_msg("no column '%s' in the design", name);
    assert_true(x->u.tab.cols[c].numeric);
    return x->u.tab.cols[c].num;
}

static void expect_names(const struct nf_value *x, const char *const *names)
{
    size_t n = 0;
    while (names[n])
        n++;
    if ((size_t)x->u.tab.n_cols != n) {
        for (int64_t c = 0; c < x->u.tab.n_cols; c++)
            fprintf(stderr, "column %lld: %s\n", (long long)c, x->u.tab.cols[c].name);
        fail_msg("%lld columns, expected %zu", (long long)x->u.tab.n_cols, n);
    }
    for (size_t c = 0; c < n; c++)
        assert_string_equal(x->u.tab.cols[c].name, names[c]);
}
#define NAMES(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- the reference ---- */

/* scipy.stats.gamma.pdf(x, a, scale=s) from its formula. */
static double gamma_density(double x, double a, double s)
{
    if (x <= 0)
        return 0;
    return pow(x, a - 1) * exp(-x / s) / (tgamma(a) * pow(s, a));
}

struct hrf_shape { double delay, undershoot, dispersion, u_dispersion, ratio; };
static const struct hrf_shape GLOVER = { 6, 12, 0.9, 0.9, 0.48 }, SPM = { 6, 16, 1, 1, 0.167 };

/* nilearn's _gamma_difference_hrf: 32 s in round(32 / dt) points (both ends
 * included), the densities shifted by dt and by `shift` seconds. */
static double *hrf(const struct hrf_shape *s, double tr, int os, double shift, int64_t *len)
{
    double dt = tr / os, sum = 0;
    *len = lround(32 / dt);
    double *h = calloc((size_t)*len, sizeof *h);
    for (int64_t i = 0; i < *len; i++) {
        double t = 32.0 * (double)i / (double)(*len - 1) - shift - dt;
        h[i] = gamma_density(t, s->delay / s->dispersion, s->dispersion) -
               s->ratio * gamma_density(t, s->undershoot / s->u_dispersion, s->u_dispersion);
        sum += h[i];
    }
    for (int64_t i = 0; i < *len; i++)
        h[i] /= sum;
    return h;
}

/* The three kernels of "X + derivative + dispersion": the HRF, its time
 * derivative (h(t) - h(t - 0.1)) / 0.1 and nilearn's dispersion derivative,
 * which varies the peak dispersion by 0.01 with delay 6 and an undershoot
 * dispersion of 1 (for Glover too). */
static double *kernel_of(const struct hrf_shape *s, int which, double tr, int os, int64_t *len)
{
    double *h = hrf(s, tr, os, 0, len);
    if (which == 0)
        return h;
    struct hrf_shape d = { 6, s->undershoot, s->dispersion, 1, s->ratio }, d2 = d;
    d2.dispersion += 0.01;
    double *a = which == 1 ? h : hrf(&d, tr, os, 0, len);
    double *b = which == 1 ? hrf(s, tr, os, 0.1, len) : hrf(&d2, tr, os, 0, len);
    double step = which == 1 ? 0.1 : 0.01;
    for (int64_t i = 0; i < *len; i++)
        a[i] = (a[i] - b[i]) / step;
    if (a != h)
        free(h);
    free(b);
    return a;
}

struct grid { int64_t n; double *t; };

/* The oversampled grid: first frame + min_onset to last frame * n / (n - 1). */
static struct grid fine_grid(const double *ft, int64_t n, double min_onset, int os)
{
    double start = ft[0] + min_onset, stop = ft[n - 1] * (double)n / (double)(n - 1);
    struct grid g;
    g.n = lround((double)(n - 1) / (ft[n - 1] - ft[0]) * (stop - ft[0] - min_onset) * os + 1);
    g.t = calloc((size_t)g.n, sizeof *g.t);
    for (int64_t i = 0; i < g.n; i++)
        g.t[i] = start + (stop - start) * (double)i / (double)(g.n - 1);
    return g;
}

/* A condition's boxcar on the grid: the amplitude where onset <= t < onset +
 * duration, one grid point for a duration of 0. */
static double *boxcar(const struct grid *g, const struct ev *ev, size_t n_ev, const char *type)
{
    double *b = calloc((size_t)g->n, sizeof *b);
    for (size_t e = 0; e < n_ev; e++) {
        if (strcmp(ev[e].type, type) != 0)
            continue;
        bool first = true;
        for (int64_t j = 0; j < g->n; j++)
            if (g->t[j] >= ev[e].onset && (g->t[j] < ev[e].onset + ev[e].duration || (ev[e].duration == 0 && first))) {
                b[j] += ev[e].amplitude;
                first = false;
            }
    }
    return b;
}

/* Dense convolution, truncated to the grid, read at the frame times. */
static void convolve_sample(const struct grid *g, const double *b, const double *h, int64_t len, const double *ft,
                            int64_t n, double *out)
{
    double *conv = calloc((size_t)g->n, sizeof *conv);
    for (int64_t i = 0; i < g->n; i++)
        for (int64_t j = 0; j < len && j <= i; j++)
            conv[i] += b[i - j] * h[j];
    for (int64_t f = 0; f < n; f++) {
        int64_t i = 0;
        while (i + 2 < g->n && g->t[i + 1] <= ft[f])
            i++;
        double w = (ft[f] - g->t[i]) / (g->t[i + 1] - g->t[i]);
        out[f] = (1 - w) * conv[i] + w * conv[i + 1];
    }
    free(conv);
}

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The reference columns of one condition: k kernels, later columns minus
 * their least-squares projection on the earlier ones (normal equations). */
static void reference_condition(const struct hrf_shape *s, int k, double tr, int os, double min_onset,
                                const double *ft, int64_t n, const struct ev *ev, size_t n_ev, const char *type,
                                double **cols)
{
    struct grid g = fine_grid(ft, n, min_onset, os);
    double *b = boxcar(&g, ev, n_ev, type);
    for (int w = 0; w < k; w++) {
        int64_t len;
        double *h = kernel_of(s, w, tr, os, &len);
        convolve_sample(&g, b, h, len, ft, n, cols[w]);
        free(h);
    }
    if (k >= 2) {
        double c = dot(cols[1], cols[0], n) / dot(cols[0], cols[0], n);
        for (int64_t f = 0; f < n; f++)
            cols[1][f] -= c * cols[0][f];
    }
    if (k == 3) {
        /* cols[0] and cols[1] are orthogonal now */
        double c0 = dot(cols[2], cols[0], n) / dot(cols[0], cols[0], n);
        double c1 = dot(cols[2], cols[1], n) / dot(cols[1], cols[1], n);
        for (int64_t f = 0; f < n; f++)
            cols[2][f] -= c0 * cols[0][f] + c1 * cols[1][f];
    }
    free(b);
    free(g.t);
}

static double max_abs_diff(const double *a, const double *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* ---- tests ---- */

/* Onsets off the 0.04 s grid of TR 2 / 50 (and of TR 2.5 / 50). */
static const struct ev EVENTS[] = {
    { 4.013, 3.0, 1.0, "house" }, { 12.31, 0.0, 2.0, "face" }, { 20.57, 6.2, 1.0, "face" },
    { 33.33, 2.0, 0.5, "house" }, { 47.11, 1.0, 1.0, "face" }, { 61.07, 9.5, 1.5, "house" },
};
#define N_EVENTS (sizeof EVENTS / sizeof *EVENTS)

static void check_model(int hrf_choice, const struct hrf_shape *shape, int k, double tr, double slice_time_ref)
{
    const int64_t n = 48;
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    p.hrf = hrf_choice;
    p.tr = tr;
    p.slice_time_ref = slice_time_ref;
    struct nf_error err;
    struct nf_value *events = events_table(EVENTS, N_EVENTS, true, true), *frames = frames_matrix(n);
    struct nf_value *x = run_design(&p, events, frames, NULL, &err);
    assert_non_null(x);
    assert_int_equal(x->u.tab.n_rows, n);

    double ft[48];
    for (int64_t f = 0; f < n; f++)
        ft[f] = tr * ((double)f + slice_time_ref);
    static const char *const suffix[] = { "", "_derivative", "_dispersion" };
    const char *types[] = { "face", "house" };
    for (int c = 0; c < 2; c++) {
        double *ref[3];
        for (int w = 0; w < k; w++)
            ref[w] = calloc((size_t)n, sizeof(double));
        reference_condition(shape, k, tr, 50, -24, ft, n, EVENTS, N_EVENTS, types[c], ref);
        for (int w = 0; w < k; w++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", types[c], suffix[w]);
            double d = max_abs_diff(column(x, name), ref[w], n);
            if (!(d <= 1e-6))
                fail_msg("column %s: max |node - reference| = %g", name, d);
            free(ref[w]);
        }
    }
    /* the cosine basis below 0.01 Hz, then the constant */
    int64_t order = (int64_t)floor(2 * n * 0.01 * tr);
    assert_int_equal(x->u.tab.n_cols, 2 * k + order + 1);
    for (int64_t j = 1; j <= order; j++) {
        char name[32];
        snprintf(name, sizeof name, "drift_%lld", (long long)j);
        const double *v = column(x, name);
        for (int64_t f = 0; f < n; f++)
            assert_true(fabs(v[f] - sqrt(2.0 / n) * cos(M_PI * (f + 0.5) * j / n)) <= 1e-12);
    }
    const double *one = column(x, "constant");
    for (int64_t f = 0; f < n; f++)
        assert_true(one[f] == 1.0);
    nf_value_unref(x);
    nf_value_unref(events);
    nf_value_unref(frames);
    nf_params_release(t, &p);
}

static void test_glover(void **state)
{
    (void)state;
    check_model(DESIGN_HRF_GLOVER, &GLOVER, 1, 2.0, 0);
}

static void test_spm_derivative(void **state)
{
    (void)state;
    check_model(DESIGN_HRF_SPM_DERIV, &SPM, 2, 2.0, 0);
}

static void test_glover_dispersion_tr_2_5(void **state)
{
    (void)state;
    check_model(DESIGN_HRF_GLOVER_DERIV_DISP, &GLOVER, 3, 2.5, 0.5);
}

static void test_spm_dispersion(void **state)
{
    (void)state;
    check_model(DESIGN_HRF_SPM_DERIV_DISP, &SPM, 3, 2.0, 0);
}

/* An event that runs past the grid's end (its offset clipped to the last
 * point) before an event of duration 0 in the table: the short event still
 * lasts one grid point. */
static void test_clipped_then_instant(void **state)
{
    (void)state;
    const int64_t n = 30;
    const struct ev ev[] = { { 40.01, 100, 1, "a" }, { 12.31, 0, 3, "a" }, { 20.57, 0, 2, "a" } };
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    p.tr = 2;
    struct nf_error err;
    struct nf_value *events = events_table(ev, 3, true, true), *frames = frames_matrix(n);
    struct nf_value *x = run_design(&p, events, frames, NULL, &err);
    assert_non_null(x);
    double ft[30], ref[30], *cols[1] = { ref };
    for (int64_t f = 0; f < n; f++)
        ft[f] = 2.0 * (double)f;
    reference_condition(&GLOVER, 1, 2.0, 50, -24, ft, n, ev, 3, "a", cols);
    double d = max_abs_diff(column(x, "a"), ref, n);
    if (!(d <= 1e-6))
        fail_msg("column a: max |node - reference| = %g", d);
    nf_value_unref(x);
    nf_value_unref(events);
    nf_value_unref(frames);
    nf_params_release(t, &p);
}

/* Conditions sorted, derivative columns beside theirs, confounds (by glob,
 * in the listed order, copied exactly), drifts, constant; no trial_type:
 * one condition 'dummy'. */
static void test_columns_and_confounds(void **state)
{
    (void)state;
    const int64_t n = 30;
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    p.hrf = DESIGN_HRF_GLOVER_DERIV;
    p.tr = 2;
    p.confound_columns.v = nf_calloc(2, sizeof *p.confound_columns.v);
    p.confound_columns.v[0] = nf_strdup("rot_*");
    p.confound_columns.v[1] = nf_strdup("csf");
    p.confound_columns.n = 2;
    const struct ev ev[] = { { 3.01, 1, 1, "zebra" }, { 9.01, 1, 1, "apple" }, { 15.01, 1, 1, "mango" } };
    struct nf_error err = { 0 };
    struct nf_value *conf = nf_value_new_table(n, 4, &err);
    const char *names[] = { "csf", "rot_x", "trans_x", "rot_y" };
    for (int c = 0; c < 4; c++) {
        assert_int_equal(nf_table_column_numeric(conf, c, names[c], &err), 0);
        for (int64_t r = 0; r < n; r++)
            conf->u.tab.cols[c].num[r] = sin(0.3 * (double)r + c) * (c + 1);
    }
    struct nf_value *events = events_table(ev, 3, true, false), *frames = frames_matrix(n);
    struct nf_value *x = run_design(&p, events, frames, conf, &err);
    assert_non_null(x);
    expect_names(x, NAMES("apple", "apple_derivative", "mango", "mango_derivative", "zebra", "zebra_derivative",
                          "rot_x", "rot_y", "csf", "drift_1", "constant"));
    assert_memory_equal(column(x, "rot_y"), conf->u.tab.cols[3].num, (size_t)n * sizeof(double));
    assert_memory_equal(column(x, "csf"), conf->u.tab.cols[0].num, (size_t)n * sizeof(double));
    nf_value_unref(x);
    nf_value_unref(events);

    /* no trial_type: 'dummy'; without confounds listed, every column */
    nf_params_release(t, &p);
    t = design_type(&p);
    p.hrf = DESIGN_HRF_SPM;
    p.tr = 2;
    p.drift = DESIGN_DRIFT_NONE;
    events = events_table(ev, 3, false, false);
    x = run_design(&p, events, frames, conf, &err);
    assert_non_null(x);
    expect_names(x, NAMES("dummy", "csf", "rot_x", "trans_x", "rot_y", "constant"));
    nf_value_unref(x);
    nf_value_unref(events);
    nf_value_unref(frames);
    nf_value_unref(conf);
    nf_params_release(t, &p);
}

/* FIR: delay 0 is the fraction of the TR after each frame an event covers
 * (on the 50-point grid), times its amplitude; delay d is delay 0 moved d
 * frames later. */
static void test_fir(void **state)
{
    (void)state;
    const int64_t n = 40;
    const double tr = 2;
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    p.hrf = DESIGN_HRF_FIR;
    p.tr = tr;
    free(p.fir_delays.v);
    p.fir_delays.v = nf_calloc(3, sizeof(double));
    p.fir_delays.v[1] = 1;
    p.fir_delays.v[2] = 4;
    p.fir_delays.n = 3;
    const struct ev ev[] = { { 10.31, 5.0, 1.0, "go" }, { 30.05, 0.97, 2.0, "go" } };
    struct nf_error err;
    struct nf_value *events = events_table(ev, 2, true, true), *frames = frames_matrix(n);
    struct nf_value *x = run_design(&p, events, frames, NULL, &err);
    assert_non_null(x);
    expect_names(x, NAMES("go_delay_0", "go_delay_1", "go_delay_4", "drift_1", "constant"));
    const double *d0 = column(x, "go_delay_0"), *d1 = column(x, "go_delay_1"), *d4 = column(x, "go_delay_4");
    for (int64_t f = 0; f < n; f++) {
        double covered = 0;
        for (int m = 0; m < 50; m++) {
            double s = tr * (double)f + tr * m / 50.0;
            for (int e = 0; e < 2; e++)
                if (s >= ev[e].onset && s < ev[e].onset + ev[e].duration)
                    covered += ev[e].amplitude / 50.0;
        }
        if (fabs(d0[f] - covered) > 1e-9)
            fail_msg("go_delay_0 at frame %lld: %.12g, expected %.12g", (long long)f, d0[f], covered);
        assert_true(fabs(d1[f] - (f >= 1 ? d0[f - 1] : 0)) <= 1e-9);
        assert_true(fabs(d4[f] - (f >= 4 ? d0[f - 4] : 0)) <= 1e-9);
    }
    nf_value_unref(x);
    nf_value_unref(events);
    nf_value_unref(frames);
    nf_params_release(t, &p);
}

/* Polynomial drifts: orthogonal to each other and to the constant, the
 * first one the centred t / t_max, the constant last. */
static void test_polynomial_drift(void **state)
{
    (void)state;
    const int64_t n = 50;
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    p.drift = DESIGN_DRIFT_POLYNOMIAL;
    p.drift_order = 4;
    p.tr = 1.5;
    struct nf_error err;
    struct nf_value *events = events_table(EVENTS, N_EVENTS, true, false), *frames = frames_matrix(n);
    struct nf_value *x = run_design(&p, events, frames, NULL, &err);
    assert_non_null(x);
    expect_names(x, NAMES("face", "house", "drift_1", "drift_2", "drift_3", "drift_4", "constant"));
    const double *cols[5] = { column(x, "constant"), column(x, "drift_1"), column(x, "drift_2"),
                              column(x, "drift_3"), column(x, "drift_4") };
    for (int i = 0; i < 5; i++) {
        assert_true(dot(cols[i], cols[i], n) > 1e-8);
        for (int j = 0; j < i; j++) {
            double cosine = dot(cols[i], cols[j], n) / sqrt(dot(cols[i], cols[i], n) * dot(cols[j], cols[j], n));
            if (fabs(cosine) > 1e-10)
                fail_msg("drift columns %d and %d: cosine %g", i, j, cosine);
        }
    }
    double tmax = 1.5 * (double)(n - 1);
    for (int64_t f = 0; f < n; f++)
        assert_true(fabs(cols[1][f] - (1.5 * (double)f / tmax - 0.5)) <= 1e-12);
    nf_value_unref(x);
    nf_value_unref(events);
    nf_value_unref(frames);
    nf_params_release(t, &p);
}

/* The TR: the header's when tr is not given, the same either way, refused
 * when they disagree or when neither says it. */
static void test_tr(void **state)
{
    (void)state;
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    struct nf_error err;
    struct nf_value *events = events_table(EVENTS, N_EVENTS, true, false);
    struct nf_value *vol = frames_volume(40, 2.0), *mat = frames_matrix(40);
    struct nf_value *from_header = run_design(&p, events, vol, NULL, &err);
    assert_non_null(from_header);
    p.tr = 2;
    struct nf_value *given = run_design(&p, events, mat, NULL, &err);
    assert_non_null(given);
    for (int64_t c = 0; c < given->u.tab.n_cols; c++)
        assert_memory_equal(from_header->u.tab.cols[c].num, given->u.tab.cols[c].num, 40 * sizeof(double));
    p.tr = 2.5;
    assert_null(run_design(&p, events, vol, NULL, &err));
    assert_int_equal(err.code, NF_EDATA);
    assert_non_null(strstr(err.msg, "tr is 2.5 s but the header of the frames image says 2 s"));
    p.tr = NAN;
    assert_null(run_design(&p, events, mat, NULL, &err));
    assert_non_null(strstr(err.msg, "the repetition time is unknown"));
    nf_value_unref(from_header);
    nf_value_unref(given);
    nf_value_unref(events);
    nf_value_unref(vol);
    nf_value_unref(mat);
    nf_params_release(t, &p);
}

/* Malformed events and confounds: an error naming the problem, no output. */
static void test_errors(void **state)
{
    (void)state;
    struct design_params p;
    const struct nf_node_type *t = design_type(&p);
    p.tr = 2;
    struct nf_error err = { 0 };
    struct nf_value *frames = frames_matrix(20);

    /* no onset column */
    struct nf_value *ev = nf_value_new_table(2, 2, &err);
    assert_int_equal(nf_table_column_numeric(ev, 0, "start", &err), 0);
    assert_int_equal(nf_table_column_numeric(ev, 1, "duration", &err), 0);
    assert_null(run_design(&p, ev, frames, NULL, &err));
    assert_non_null(strstr(err.msg, "no 'onset' column"));
    nf_value_unref(ev);

    /* a negative duration, a missing onset */
    const struct ev bad[] = { { 1, 2, 1, "a" }, { 5, -1, 1, "a" } };
    ev = events_table(bad, 2, true, false);
    assert_null(run_design(&p, ev, frames, NULL, &err));
    assert_non_null(strstr(err.msg, "events row 2 has a negative duration (-1 s)"));
    ev->u.tab.cols[1].num[1] = 1;
    ev->u.tab.cols[0].num[0] = NAN;
    assert_null(run_design(&p, ev, frames, NULL, &err));
    assert_non_null(strstr(err.msg, "events column 'onset' has a missing value (n/a or NaN) in row 1"));
    nf_value_unref(ev);

    /* text onsets */
    ev = nf_value_new_table(2, 2, &err);
    assert_int_equal(nf_table_column_string(ev, 0, "onset", &err), 0);
    assert_int_equal(nf_table_column_numeric(ev, 1, "duration", &err), 0);
    ev->u.tab.cols[0].str[0] = nf_strdup("3");
    ev->u.tab.cols[0].str[1] = nf_strdup("soon");
    assert_null(run_design(&p, ev, frames, NULL, &err));
    assert_non_null(strstr(err.msg, "events column 'onset' is not numeric: row 2 is 'soon'"));
    nf_value_unref(ev);

    /* a glob that matches no confound, a confound with n/a, a repeated name */
    ev = events_table(bad, 1, true, false);
    struct nf_value *conf = nf_value_new_table(20, 1, &err);
    assert_int_equal(nf_table_column_numeric(conf, 0, "trans_x", &err), 0);
    p.confound_columns.v = nf_calloc(2, sizeof *p.confound_columns.v);
    p.confound_columns.v[0] = nf_strdup("trans_*");
    p.confound_columns.v[1] = nf_strdup("rot_*");
    p.confound_columns.n = 2;
    assert_null(run_design(&p, ev, frames, conf, &err));
    assert_non_null(strstr(err.msg, "confound_columns: the glob 'rot_*' matches no column of the confounds table "
                                    "(columns: trans_x)"));
    free(p.confound_columns.v[1]);
    p.confound_columns.n = 1;
    conf->u.tab.cols[0].num[0] = NAN;
    assert_null(run_design(&p, ev, frames, conf, &err));
    assert_non_null(strstr(err.msg, "confounds column 'trans_x' has a missing value (n/a) in row 1"));
    conf->u.tab.cols[0].num[0] = 0;
    free(conf->u.tab.cols[0].name);
    conf->u.tab.cols[0].name = nf_strdup("a");
    p.confound_columns.v[0][0] = 'a';
    p.confound_columns.v[0][1] = '\0';
    assert_null(run_design(&p, ev, frames, conf, &err));
    assert_non_null(strstr(err.msg, "two columns named 'a'"));
    nf_value_unref(conf);
    nf_value_unref(ev);
    nf_value_unref(frames);
    nf_params_release(t, &p);
}

int main(void)
{
    nf_log_quiet = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glover),
        cmocka_unit_test(test_spm_derivative),
        cmocka_unit_test(test_glover_dispersion_tr_2_5),
        cmocka_unit_test(test_spm_dispersion),
        cmocka_unit_test(test_clipped_then_instant),
        cmocka_unit_test(test_columns_and_confounds),
        cmocka_unit_test(test_fir),
        cmocka_unit_test(test_polynomial_drift),
        cmocka_unit_test(test_tr),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
