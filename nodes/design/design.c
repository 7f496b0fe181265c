/* design.c — the `design` node: a first-level design matrix from a BIDS events
 * table, the run it models (a 4D image or an n x V matrix: its length and TR)
 * and optional confounds, equal to nilearn 0.14's
 * make_first_level_design_matrix(frame_times, events, ...) with
 * frame_times = tr * (arange(n) + slice_time_ref).
 *
 * nilearn's recipe, reproduced step by step in double precision: every
 * condition (trial_type, sorted; 'dummy' when the column is absent) becomes a
 * boxcar of its events' amplitudes on a grid `oversampling` times finer than
 * the TR, starting `min_onset` seconds before the first frame (onsets are
 * placed by a left binary search on that grid, an event of duration 0 lasts
 * one grid step, an onset before the grid starts counts from its first point);
 * the boxcar is convolved with each kernel of the HRF model (Glover's or SPM's
 * difference of two gamma densities over 32 s, normalised to sum 1; the time
 * and dispersion derivatives by nilearn's finite differences; FIR boxcars of
 * one TR delayed by whole frames), read at the frame times by linear
 * interpolation, and a condition's derivative columns are orthogonalised
 * against its earlier ones. Confound columns follow, then the drifts (DCT-II
 * cosines below high_pass, or orthogonalised polynomials) and the constant.
 *
 * The grid points decide which fine sample an onset falls on, so they are
 * computed with numpy.linspace's exact operations (i * step + start, the last
 * point `stop`), products rounded before the addition (no fused multiply-add).
 * The convolution uses the boxcar's sparse steps (conv(cumsum d, h) =
 * cumsum(conv(d, h))): O(events x kernel + grid) instead of O(grid x kernel).
 * nilearn's last step, full_rank, changes a matrix only when its condition
 * number exceeds 1e15, and then by about 1e-15 of its largest singular value;
 * it is left out.
 */
#include <ctype.h>
#include <float.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"

#include "design.h"

static const char *const hrf_names[] = {
    "glover", "spm", "glover + derivative", "spm + derivative",
    "glover + derivative + dispersion", "spm + derivative + dispersion", "fir", NULL,
};
static const char *const drift_names[] = { "cosine", "polynomial", "none", NULL };

#define FIELD(f) offsetof(struct design_params, f)
static const struct nf_param design_params_table[] = {
    NF_PARAM_ENUM("hrf", FIELD(hrf), hrf_names, DESIGN_HRF_GLOVER,
                  "hemodynamic model (nilearn's hrf_model): glover or spm, each with its time derivative "
                  "and dispersion derivative as extra columns, or fir (one column per delay in fir_delays)"),
    NF_PARAM_NUM_LIST("fir_delays", FIELD(fir_delays), "0", 0, 100000, 1, 1000,
                      "fir: delays in frames (whole numbers); column COND_delay_D per delay"),
    NF_PARAM_ENUM("drift", FIELD(drift), drift_names, DESIGN_DRIFT_COSINE,
                  "slow drifts: cosine (DCT-II up to high_pass), polynomial (orthogonalised, up to "
                  "drift_order) or none; a constant column comes last in every case"),
    NF_PARAM_NUM("high_pass", FIELD(high_pass), 0.01, 0, 1e6, "cosine drift: cut-off frequency in Hz"),
    NF_PARAM_INT("drift_order", FIELD(drift_order), 1, 0, 100, "polynomial drift: highest order"),
    NF_PARAM_INT("oversampling", FIELD(oversampling), 50, 1, 10000,
                 "fine time steps per TR on which events are convolved"),
    NF_PARAM_NUM("min_onset", FIELD(min_onset), -24, -1e6, 0,
                 "seconds before the first frame from which events are modelled (earlier onsets count "
                 "from there, as in nilearn)"),
    NF_PARAM_NUM("slice_time_ref", FIELD(slice_time_ref), 0, 0, 1,
                 "when within a TR each frame is sampled (0: at its start, 0.5: mid-way): frame times "
                 "are tr * (frame + slice_time_ref)"),
    NF_PARAM_NUM_F("tr", FIELD(tr), NAN, 1e-6, 1e6, NF_PF_OPTIONAL,
                   "repetition time in seconds; default: the frames' image header (or the BIDS sidecar "
                   "the image came with); required when frames is a matrix"),
    NF_PARAM_STR_LIST_F("confound_columns", FIELD(confound_columns), "", 0, 10000, NF_PF_OPTIONAL,
                        "columns of the confounds table to add, by name or glob (trans_*, rot_*), in this "
                        "order; default: every column"),
    NF_PARAM_STR_F("modulation", FIELD(modulation), "", NF_PF_OPTIONAL,
                   "events column of per-event amplitudes; default: the column 'modulation' when present, "
                   "else 1"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port design_inputs[] = {
    { "events", "BIDS events table: onset and duration (seconds), optional trial_type and modulation",
      NF_PT_TABLE, 0 },
    { "frames", "the run the design models: a 4D image (its length and TR) or a frames x voxels matrix",
      NF_PT_VOLUME | NF_PT_MATRIX, NF_PORT_LAZY },   /* only its header is read */
    { "confounds", "table of nuisance regressors, one row per frame (e.g. fMRIPrep's confounds)",
      NF_PT_TABLE, NF_PORT_OPTIONAL },
    NF_PORT_END
};
static const struct nf_port design_outputs[] = {
    { "X", "frames x regressors table: conditions (sorted, with their derivative or delay columns), "
      "confounds, drift_1 ... and constant", NF_PT_TABLE, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(design_inputs, DESIGN_N_IN);
NF_PORTS_MATCH(design_outputs, DESIGN_N_OUT);

#define FAIL_NODE(err, node, code, ...) NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node), __VA_ARGS__)

static bool is_fir(const struct design_params *p) { return p->hrf == DESIGN_HRF_FIR; }
static int check_hrf_grid(double tr, int64_t oversampling, const struct nf_node_inst *node, struct nf_error *err);

/* ---- methods and checks ---- */

static const char *const hrf_phrases[] = {
    "the Glover HRF", "the SPM HRF", "the Glover HRF and its time derivative",
    "the SPM HRF and its time derivative", "the Glover HRF and its time and dispersion derivatives",
    "the SPM HRF and its time and dispersion derivatives",
};

/* node_type.methods */
static char *design_methods(const void *params)
{
    const struct design_params *p = params;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "First-level design matrices were built as nilearn's make_first_level_design_matrix "
                        "builds them: each condition's events were convolved with ");
    if (is_fir(p)) {
        nf_strbuf_addf(&sb, "a finite impulse response basis (delays of");
        for (size_t i = 0; i < p->fir_delays.n; i++)
            nf_strbuf_addf(&sb, "%s %g", i ? "," : "", p->fir_delays.v[i]);
        nf_strbuf_addf(&sb, " frames)");
    } else {
        nf_strbuf_addf(&sb, "%s", hrf_phrases[p->hrf]);
    }
    nf_strbuf_addf(&sb, " at %" PRId64 " time steps per TR, from %g s before the first frame, and sampled at ",
                   p->oversampling, -p->min_onset);
    if (p->slice_time_ref == 0)
        nf_strbuf_addf(&sb, "the start of each frame");
    else
        nf_strbuf_addf(&sb, "%g of each frame (slice_time_ref)", p->slice_time_ref);
    if (!isnan(p->tr))
        nf_strbuf_addf(&sb, " (TR = %g s)", p->tr);
    if (p->modulation)
        nf_strbuf_addf(&sb, ", with amplitudes from the events column %s", p->modulation);
    nf_strbuf_addf(&sb, ". The model included ");
    if (p->confound_columns.n > 0) {
        nf_strbuf_addf(&sb, "the confounds");
        for (size_t i = 0; i < p->confound_columns.n; i++)
            nf_strbuf_addf(&sb, "%s %s", i == 0 ? "" : i + 1 == p->confound_columns.n ? " and" : ",", p->confound_columns.v[i]);
        nf_strbuf_addf(&sb, ", ");
    }
    if (p->drift == DESIGN_DRIFT_COSINE)
        nf_strbuf_addf(&sb, "a discrete cosine drift basis with a %g Hz high-pass cut-off and a constant.",
                       p->high_pass);
    else if (p->drift == DESIGN_DRIFT_POLYNOMIAL)
        nf_strbuf_addf(&sb, "orthogonalised polynomial drifts up to order %" PRId64 " and a constant.",
                       p->drift_order);
    else
        nf_strbuf_addf(&sb, "a constant and no drift terms.");
    return nf_strbuf_detach(&sb);
}

static void design_check(const void *params, const struct nf_loc *loc, const char *node, struct nf_diags *d)
{
    const struct design_params *p = params;
    for (size_t i = 0; i < p->fir_delays.n; i++)
        if (p->fir_delays.v[i] != floor(p->fir_delays.v[i]))
            NF_DIAG(d, NF_EINVAL, loc, node, "fir_delays must be whole numbers of frames (value %zu is %g)",
                    i + 1, p->fir_delays.v[i]);
}

/* Only what the chosen models read can change the matrix. */
static bool design_param_matters(const void *params, const struct nf_param *prm)
{
    const struct design_params *p = params;
    if (strcmp(prm->name, "fir_delays") == 0)
        return is_fir(p);
    if (strcmp(prm->name, "high_pass") == 0)
        return p->drift == DESIGN_DRIFT_COSINE;
    if (strcmp(prm->name, "drift_order") == 0)
        return p->drift == DESIGN_DRIFT_POLYNOMIAL;
    return true;
}

/* ---- confound column selection (names or globs) ---- */

static bool is_glob(const char *s) { return strpbrk(s, "*?[") != NULL; }

static bool pattern_matches(const char *pattern, const char *name)
{
    return is_glob(pattern) ? fnmatch(pattern, name, 0) == 0 : strcmp(pattern, name) == 0;
}

/* Does some name of a shape's "a\nb\n" list match the pattern? */
static bool names_match(const char *names, const char *pattern)
{
    char buf[1024];
    for (const char *s = names; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (len < sizeof buf) {
            memcpy(buf, s, len);
            buf[len] = '\0';
            if (pattern_matches(pattern, buf))
                return true;
        }
        s += len + (nl ? 1 : 0);
    }
    return false;
}

static int no_match(struct nf_error *err, const struct nf_node_inst *node, const char *pattern,
                    const char *columns)
{
    return FAIL_NODE(err, node, NF_EINVAL, "confound_columns: %s '%s' matches no column of the confounds table "
                     "(columns: %s)", is_glob(pattern) ? "the glob" : "the name", pattern, columns);
}

/* ---- shapes ---- */

static int design_resolve(struct nf_resolve *r)
{
    const struct design_params *p = r->params;
    const struct nf_shape *ev = &r->in[DESIGN_IN_EVENTS], *fr = &r->in[DESIGN_IN_FRAMES],
                          *cf = &r->in[DESIGN_IN_CONFOUNDS];
    char cols[1024];
    if (ev->kind == NF_KIND_TABLE) {
        const char *need[] = { "onset", "duration", p->modulation };
        for (size_t i = 0; i < 3; i++)
            if (need[i] && !nf_shape_has_column(ev, need[i])) {
                nf_shape_columns_text(ev, cols, sizeof cols);
                return FAIL_NODE(r->err, r->node, NF_EINVAL, "the events table has no '%s' column%s "
                                 "(columns: %s)", need[i], i < 2 ? ", which BIDS events require" : "", cols);
            }
    }
    if (p->confound_columns.n > 0 && !nf_node_input_wired(r->node, DESIGN_IN_CONFOUNDS))
        return FAIL_NODE(r->err, r->node, NF_EINVAL, "confound_columns lists columns but no confounds table is "
                         "connected (in: {confounds: ...})");
    if (cf->kind == NF_KIND_TABLE && cf->col_names) {
        nf_shape_columns_text(cf, cols, sizeof cols);
        for (size_t i = 0; i < p->confound_columns.n; i++)
            if (!names_match(cf->col_names, p->confound_columns.v[i]))
                return no_match(r->err, r->node, p->confound_columns.v[i], cols);
    }
    int64_t n = 0;
    if (fr->kind == NF_KIND_MATRIX) {
        n = fr->dim[0];
        if (isnan(p->tr))
            return FAIL_NODE(r->err, r->node, NF_EINVAL, "the repetition time is unknown: frames is a "
                             "matrix, which has no header; give tr (seconds)");
    } else if (fr->kind == NF_KIND_VOLUME) {
        n = fr->dim[3];
    }
    if (!isnan(p->tr) && !is_fir(p) && check_hrf_grid(p->tr, p->oversampling, r->node, r->err) < 0)
        return r->err->code;
    if (fr->kind != NF_KIND_NONE && n > 0 && n < 2)
        return FAIL_NODE(r->err, r->node, NF_EDATA, "frames has %" PRId64 " frame: a design needs at least 2", n);
    if (cf->kind == NF_KIND_TABLE && n > 0 && cf->dim[0] > 0 && cf->dim[0] != n)
        return FAIL_NODE(r->err, r->node, NF_ESHAPE, "the confounds table has %" PRId64 " rows but frames has "
                         "%" PRId64 " frames", cf->dim[0], n);
    r->out[DESIGN_OUT_X] = (struct nf_shape){ .kind = NF_KIND_TABLE, .dim = { n, 0 } };
    return 0;
}

/* ---- numerics shared by the regressors ---- */

/* x stored as a double: keeps a product from being fused with the addition
 * that follows (a fused multiply-add rounds once, numpy rounds twice). */
static double rounded(double x)
{
    volatile double r = x;
    return r;
}

/* numpy.linspace(start, stop, num) bit for bit. */
static void linspace(double start, double stop, int64_t num, double *out)
{
    if (num == 1) {
        out[0] = start;
        return;
    }
    double step = (stop - start) / (double)(num - 1);
    for (int64_t i = 0; i < num; i++)
        out[i] = rounded((double)i * step) + start;
    out[num - 1] = stop;
}

/* numpy.searchsorted(a, v) (side 'left'): how many points are below v. */
static int64_t search_left(const double *a, int64_t n, double v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* scipy.stats.gamma.pdf(x, shape, loc, scale). */
static double gamma_pdf(double x, double shape, double loc, double scale)
{
    double y = (x - loc) / scale;
    if (!(y > 0))
        return y == 0 && shape == 1 ? 1 / scale : 0;
    return exp((shape - 1) * log(y) - y - lgamma(shape)) / scale;
}

/* The difference of two gammas of nilearn's _gamma_difference_hrf on the
 * fine grid (len points over 32 s), normalised to sum 1. */
struct gamma_hrf { double delay, undershoot, dispersion, u_dispersion, ratio; };
static const struct gamma_hrf glover = { 6, 12, 0.9, 0.9, 0.48 }, spm = { 6, 16, 1, 1, 0.167 };

static int64_t hrf_length(double tr, int64_t oversampling)
{
    return (int64_t)rint(32.0 / (tr / (double)oversampling));
}

/* nilearn samples the HRF's 32 s at tr / oversampling: a TR so long (or a
 * sidecar's so absurd) that this leaves fewer than 2 points, or so short
 * that it needs more than 2^26, has no kernel to convolve with. */
static int check_hrf_grid(double tr, int64_t oversampling, const struct nf_node_inst *node, struct nf_error *err)
{
    double points = 32.0 / (tr / (double)oversampling);
    if (isfinite(tr) && tr > 0 && points >= 1.5 && points <= (double)(INT64_C(1) << 26))
        return 0;
    return FAIL_NODE(err, node, NF_EDATA, "a repetition time of %g s with oversampling %" PRId64 " samples the "
                     "HRF's 32 s at %g points: it needs at least 2 (TR <= %g s at this oversampling; is the TR in "
                     "seconds?)", tr, oversampling, isfinite(points) ? rint(points) : points,
                     32.0 * (double)oversampling / 1.5);
}

static void gamma_difference(const struct gamma_hrf *g, double tr, int64_t oversampling, double onset,
                             int64_t len, double *h)
{
    double dt = tr / (double)oversampling, sum = 0;
    linspace(0, 32, len, h);
    for (int64_t i = 0; i < len; i++) {
        double t = h[i] - onset;
        h[i] = gamma_pdf(t, g->delay / g->dispersion, dt, g->dispersion) -
               g->ratio * gamma_pdf(t, g->undershoot / g->u_dispersion, dt, g->u_dispersion);
        sum += h[i];
    }
    for (int64_t i = 0; i < len; i++)
        h[i] /= sum;
}

/* (a - b) / step as nilearn's _compute_derivative_from_values: into a. */
static void finite_difference(double *a, const double *b, int64_t len, double step)
{
    for (int64_t i = 0; i < len; i++)
        a[i] = 1.0 / step * (a[i] - b[i]);
}

/* The kernels of the HRF model on the fine grid: k of them, each len[i] long. */
struct kernels {
    int k;
    double *h[3];          /* fir: up to fir_delays.n, in `fir` */
    double **fir;
    int64_t *len;
};

static void kernels_free(struct kernels *ks)
{
    for (int i = 0; i < ks->k; i++)
        free(ks->fir ? ks->fir[i] : ks->h[i]);
    free(ks->fir);
    free(ks->len);
}

static int make_kernels(const struct design_params *p, double tr, struct kernels *ks, struct nf_error *err)
{
    int64_t os = p->oversampling;
    memset(ks, 0, sizeof *ks);
    if (is_fir(p)) {
        ks->k = (int)p->fir_delays.n;
        ks->fir = nf_calloc((size_t)ks->k, sizeof *ks->fir);
        ks->len = nf_calloc((size_t)ks->k, sizeof *ks->len);
        if (!ks->fir || !ks->len)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        for (int i = 0; i < ks->k; i++) {
            int64_t delay = (int64_t)p->fir_delays.v[i];
            ks->len[i] = (delay + 1) * os;
            if (!(ks->fir[i] = nf_calloc((size_t)ks->len[i], sizeof(double))))
                return NF_FAIL(err, NF_ENOMEM, "out of memory");
            for (int64_t j = delay * os; j < ks->len[i]; j++)
                ks->fir[i][j] = 1.0 / (double)os;
        }
        return 0;
    }
    bool is_spm = p->hrf == DESIGN_HRF_SPM || p->hrf == DESIGN_HRF_SPM_DERIV || p->hrf == DESIGN_HRF_SPM_DERIV_DISP;
    const struct gamma_hrf *g = is_spm ? &spm : &glover;
    ks->k = p->hrf <= DESIGN_HRF_SPM ? 1 : p->hrf <= DESIGN_HRF_SPM_DERIV ? 2 : 3;
    int64_t len = hrf_length(tr, os);
    if (len < 2 || len > (INT64_C(1) << 26))
        return NF_FAIL(err, NF_EDATA, "a repetition time of %g s with oversampling %" PRId64 " samples the HRF's "
                       "32 s at %" PRId64 " points: it needs at least 2 (is the TR in seconds?)", tr, os, len);
    ks->len = nf_calloc(3, sizeof *ks->len);
    double *scratch = nf_calloc((size_t)len, sizeof *scratch);
    for (int i = 0; i < ks->k; i++)
        ks->h[i] = nf_calloc((size_t)len, sizeof(double));
    bool ok = ks->len && scratch;
    for (int i = 0; i < ks->k; i++)
        ok = ok && ks->h[i];
    if (!ok) {
        free(scratch);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    for (int i = 0; i < ks->k; i++)
        ks->len[i] = len;
    gamma_difference(g, tr, os, 0, len, ks->h[0]);
    if (ks->k >= 2) {   /* time derivative: onset shifted by 0.1 s */
        gamma_difference(g, tr, os, 0, len, ks->h[1]);
        gamma_difference(g, tr, os, 0.1, len, scratch);
        finite_difference(ks->h[1], scratch, len, 0.1);
    }
    if (ks->k == 3) {
        /* dispersion derivative: nilearn passes the model's undershoot, ratio
         * and peak dispersion but keeps the default delay 6 and undershoot
         * dispersion 1 (also for Glover, whose own is 0.9) */
        struct gamma_hrf d = { 6, g->undershoot, g->dispersion, 1.0, g->ratio };
        gamma_difference(&d, tr, os, 0, len, ks->h[2]);
        d.dispersion += 0.01;
        gamma_difference(&d, tr, os, 0, len, scratch);
        finite_difference(ks->h[2], scratch, len, 0.01);
    }
    free(scratch);
    return 0;
}

static const double *kernel(const struct kernels *ks, int i) { return ks->fir ? ks->fir[i] : ks->h[i]; }

/* Orthogonalise each column of cols[0..k) (n values each) against the ones
 * before it, as nilearn's orthogonalize (X[:, i] -= its projection on
 * X[:, :i] through a pseudo-inverse): earlier columns are already orthogonal,
 * so the projection is a sum over them; a column that is zero at working
 * precision (below pinv's cut-off) projects nothing. Two passes keep the
 * result orthogonal to rounding. */
static void orthogonalize(double **cols, int k, int64_t n)
{
    for (int i = 1; i < k; i++) {
        double max_sq = 0;
        for (int j = 0; j < i; j++) {
            double sq = 0;
            for (int64_t t = 0; t < n; t++)
                sq += cols[j][t] * cols[j][t];
            max_sq = fmax(max_sq, sq);
        }
        double cut = (double)(n > i ? n : i) * DBL_EPSILON;
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < i; j++) {
                double dot = 0, sq = 0;
                for (int64_t t = 0; t < n; t++) {
                    dot += cols[i][t] * cols[j][t];
                    sq += cols[j][t] * cols[j][t];
                }
                if (!(sq > cut * cut * max_sq))
                    continue;
                double c = dot / sq;
                for (int64_t t = 0; t < n; t++)
                    cols[i][t] -= c * cols[j][t];
            }
    }
}

/* ---- events ---- */

struct event { double onset, duration, amplitude; size_t cond; };

struct events {
    size_t n, n_cond;
    struct event *ev;
    char **cond_names;     /* sorted, n_cond */
};

static void events_free(struct events *e)
{
    for (size_t i = 0; i < e->n_cond; i++)
        free(e->cond_names[i]);
    free(e->cond_names);
    free(e->ev);
}

/* What pandas.read_csv reads as a missing value (its default na_values). */
static bool is_na_text(const char *s)
{
    static const char *const na[] = { "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                                      "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a",
                                      "nan", "null", NULL };
    for (size_t i = 0; na[i]; i++)
        if (strcmp(s, na[i]) == 0)
            return true;
    return false;
}

/* A numeric events column without missing values: onset, duration, amplitudes. */
static int numeric_column(const struct nf_table *t, const char *name, const double **out,
                          const struct nf_node_inst *node, struct nf_error *err)
{
    int64_t c = nf_table_find(t, name);
    *out = NULL;
    if (c < 0)
        return 0;
    const struct nf_column *col = &t->cols[c];
    if (!col->numeric) {
        int64_t r = 0;
        for (char *end; r < t->n_rows; r++) {
            const char *s = col->str[r] ? col->str[r] : "";
            strtod(s, &end);
            if (end == s || *end)
                break;
        }
        return FAIL_NODE(err, node, NF_EDATA, "events column '%s' is not numeric: row %" PRId64 " is '%s'",
                         name, r + 1, r < t->n_rows && col->str[r] ? col->str[r] : "");
    }
    for (int64_t r = 0; r < t->n_rows; r++)
        if (!isfinite(col->num[r]))
            return FAIL_NODE(err, node, NF_EDATA, "events column '%s' has %s in row %" PRId64
                             " (onsets, durations and amplitudes must be numbers)", name,
                             isnan(col->num[r]) ? "a missing value (n/a or NaN)" : "an infinite value", r + 1);
    *out = col->num;
    return 0;
}

/* A numeric trial_type as pandas names it: 3 (integers), 3.0 (a float
 * column, which a missing value makes), 2.5. */
static char *number_name(double v, bool float_column)
{
    if (v == floor(v) && fabs(v) < 1e15)
        return float_column ? nf_asprintf("%.1f", v) : nf_asprintf("%.0f", v);
    for (int digits = 15; digits < 17; digits++) {
        char *s = nf_asprintf("%.*g", digits, v);
        if (!s || strtod(s, NULL) == v)
            return s;
        free(s);
    }
    return nf_asprintf("%.17g", v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}
static int cmp_num(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The events of a BIDS table as nilearn's check_events reads them. */
static int read_events(const struct nf_value *tab, const struct design_params *p, const struct nf_node_inst *node,
                       struct events *e, struct nf_error *err)
{
    const struct nf_table *t = &tab->u.tab;
    const double *onset, *duration, *amplitude;
    memset(e, 0, sizeof *e);
    const char *mod_name = p->modulation ? p->modulation : "modulation";
    if (numeric_column(t, "onset", &onset, node, err) < 0 || numeric_column(t, "duration", &duration, node, err) < 0 ||
        numeric_column(t, mod_name, &amplitude, node, err) < 0)
        return err->code;
    if (!onset || !duration)
        return FAIL_NODE(err, node, NF_EDATA, "the events table has no '%s' column, which BIDS events require",
                         onset ? "duration" : "onset");
    if (p->modulation && !amplitude)
        return FAIL_NODE(err, node, NF_EDATA, "the events table has no '%s' column (modulation)", p->modulation);
    for (int64_t r = 0; r < t->n_rows; r++)
        if (duration[r] < 0)
            return FAIL_NODE(err, node, NF_EDATA, "events row %" PRId64 " has a negative duration (%g s)",
                             r + 1, duration[r]);
    int64_t tc = nf_table_find(t, "trial_type");
    const struct nf_column *types = tc >= 0 ? &t->cols[tc] : NULL;
    if (!types && t->n_rows > 0)
        nf_warn(nf_node_id(node), "the events table has no trial_type column: all events form one "
                "condition, 'dummy'");
    bool float_column = false;
    for (int64_t r = 0; types && types->numeric && r < t->n_rows; r++)
        float_column |= isnan(types->num[r]);

    /* the condition of each row (NULL / NaN: missing, which pandas' groupby drops) */
    e->ev = nf_calloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *e->ev);
    const char **names = nf_calloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *names);
    double *values = nf_calloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *values);
    int rc = 0;
    if (!e->ev || !names || !values) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    size_t kept = 0, dropped = 0;
    for (int64_t r = 0; r < t->n_rows; r++) {
        bool missing = types && (types->numeric ? isnan(types->num[r]) : !types->str[r] || is_na_text(types->str[r]));
        if (missing) {
            dropped++;
            continue;
        }
        e->ev[kept] = (struct event){ onset[r], duration[r], amplitude ? amplitude[r] : 1.0, 0 };
        if (types && types->numeric)
            values[kept] = types->num[r];
        else
            names[kept] = types ? types->str[r] : "dummy";
        kept++;
    }
    if (dropped)
        nf_warn(nf_node_id(node), "%zu events without a trial_type (n/a) are not modelled", dropped);
    e->n = kept;

    /* conditions: the sorted distinct values (numpy.unique) */
    size_t n_cond = 0;
    if (types && types->numeric) {
        double *sorted = nf_malloc_array(kept ? kept : 1, sizeof *sorted);
        if (!sorted) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto done;
        }
        memcpy(sorted, values, kept * sizeof *sorted);
        qsort(sorted, kept, sizeof *sorted, cmp_num);
        for (size_t i = 0; i < kept; i++)
            if (i == 0 || sorted[i] != sorted[n_cond - 1])
                sorted[n_cond++] = sorted[i];
        e->cond_names = nf_calloc(n_cond ? n_cond : 1, sizeof *e->cond_names);
        for (size_t c = 0; e->cond_names && c < n_cond; c++)
            if (!(e->cond_names[c] = number_name(sorted[c], float_column)))
                break;
        for (size_t i = 0; i < kept; i++) {
            const double *hit = bsearch(&values[i], sorted, n_cond, sizeof *sorted, cmp_num);
            e->ev[i].cond = (size_t)(hit - sorted);
        }
        free(sorted);
    } else {
        const char **sorted = nf_malloc_array(kept ? kept : 1, sizeof *sorted);
        if (!sorted) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto done;
        }
        memcpy(sorted, names, kept * sizeof *sorted);
        qsort(sorted, kept, sizeof *sorted, cmp_str);
        for (size_t i = 0; i < kept; i++)
            if (i == 0 || strcmp(sorted[i], sorted[n_cond - 1]) != 0)
                sorted[n_cond++] = sorted[i];
        for (size_t i = 0; i < kept; i++) {
            const char **hit = bsearch(&names[i], sorted, n_cond, sizeof *sorted, cmp_str);
            e->ev[i].cond = (size_t)(hit - sorted);
        }
        e->cond_names = nf_calloc(n_cond ? n_cond : 1, sizeof *e->cond_names);
        for (size_t c = 0; e->cond_names && c < n_cond; c++)
            if (!(e->cond_names[c] = nf_strdup(sorted[c])))
                break;
        free(sorted);
    }
    e->n_cond = n_cond;
    for (size_t c = 0; c < n_cond; c++)
        if (!e->cond_names || !e->cond_names[c]) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            break;
        }
done:
    free(names);
    free(values);
    return rc;
}

/* ---- the design ---- */

/* The columns being built: owned values (n each) and names, in order. */
struct columns {
    int64_t n;
    size_t count, cap;
    double **v;
    char **names;
};

static void columns_free(struct columns *c)
{
    for (size_t i = 0; i < c->count; i++) {
        free(c->v[i]);
        free(c->names[i]);
    }
    free(c->v);
    free(c->names);
}

/* A new zeroed column named `name` (taken over), or NULL when out of memory. */
static double *column_add(struct columns *c, char *name)
{
    if (!name)
        return NULL;
    if (c->count == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        double **v = nf_realloc(c->v, cap * sizeof *v);
        if (v)
            c->v = v;
        char **names = v ? nf_realloc(c->names, cap * sizeof *names) : NULL;
        if (!names) {
            free(name);
            return NULL;
        }
        c->names = names;
        c->cap = cap;
    }
    double *col = nf_calloc((size_t)c->n, sizeof *col);
    if (!col) {
        free(name);
        return NULL;
    }
    c->v[c->count] = col;
    c->names[c->count++] = name;
    return col;
}

/* The fine grid of nilearn's _sample_condition: from the first frame +
 * min_onset to one TR past the last frame, `oversampling` points per TR. */
struct fine_grid { int64_t len; double *t; };

static int make_fine_grid(const double *ft, int64_t n, const struct design_params *p, struct fine_grid *g,
                          struct nf_error *err)
{
    double mini = ft[0], maxi = ft[n - 1], min_onset = p->min_onset;
    double per_frame = (double)(n - 1) * 1.0 / (maxi - mini);
    double span = rounded(maxi * (1 + 1.0 / (double)(n - 1))) - mini - min_onset;
    double points = rounded(per_frame * rounded(span * (double)p->oversampling)) + 1;
    g->len = (int64_t)rint(points);
    if (g->len < 2 || g->len > (INT64_C(1) << 31))
        return NF_FAIL(err, NF_EDATA, "the fine time grid would have %" PRId64 " points", g->len);
    if (!(g->t = nf_malloc_array((size_t)g->len, sizeof *g->t)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    linspace(rounded(mini + min_onset), maxi * (1 + 1.0 / (double)(n - 1)), g->len, g->t);
    return 0;
}

/* scipy's interp1d(x, y)(xq), linear: the segment from a left search,
 * clipped to the ends. */
static double interpolate(const double *x, const double *y, int64_t len, double xq)
{
    int64_t hi = search_left(x, len, xq);
    hi = hi < 1 ? 1 : hi > len - 1 ? len - 1 : hi;
    int64_t lo = hi - 1;
    double slope = (y[hi] - y[lo]) / (x[hi] - x[lo]);
    return slope * (xq - x[lo]) + y[lo];
}

/* One condition's columns (ks->k of them) at the frame times. */
static int condition_columns(const struct events *e, size_t cond, const struct fine_grid *g,
                             const struct kernels *ks, bool fir, int64_t os, const double *ft, int64_t n,
                             double **out, struct nf_error *err)
{
    int64_t N = g->len;
    double *steps = nf_calloc((size_t)N, sizeof *steps), *conv = nf_calloc((size_t)N, sizeof *conv);
    int64_t *where = nf_malloc_array(2 * (e->n ? e->n : 1), sizeof *where);
    if (!steps || !conv || !where) {
        free(steps);
        free(conv);
        free(where);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    /* the boxcar's steps: +amplitude at each onset, then -amplitude at each
     * offset (one point later for an event of duration 0) */
    size_t m = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (e->ev[i].cond != cond)
            continue;
        int64_t on = search_left(g->t, N, e->ev[i].onset);
        on = on < N - 1 ? on : N - 1;
        steps[on] += e->ev[i].amplitude;
        where[m++] = on;
    }
    for (size_t i = 0, k = 0; i < e->n; i++) {
        if (e->ev[i].cond != cond)
            continue;
        int64_t on = where[k++], off = search_left(g->t, N, e->ev[i].onset + e->ev[i].duration);
        off = off < N - 1 ? off : N - 1;
        if (off < N - 1 && off == on)
            off++;
        steps[off] -= e->ev[i].amplitude;
    }
    /* the step positions, once each */
    m = 0;
    for (int64_t t = 0; t < N; t++)
        if (steps[t] != 0)
            where[m++] = t;
    for (int k = 0; k < ks->k; k++) {
        const double *h = kernel(ks, k);
        int64_t len = ks->len[k];
        memset(conv, 0, (size_t)N * sizeof *conv);
        for (size_t s = 0; s < m; s++) {
            int64_t t0 = where[s], end = t0 + len < N ? t0 + len : N;
            double a = steps[t0];
            for (int64_t t = t0; t < end; t++)
                conv[t] += a * h[t - t0];
        }
        for (int64_t t = 1; t < N; t++)
            conv[t] += conv[t - 1];
        /* fir: nilearn reads the convolution os - 1 points late */
        int64_t shift = fir && os > 1 ? os - 1 : 0;
        for (int64_t f = 0; f < n; f++)
            out[k][f] = interpolate(g->t, conv + shift, N - shift, ft[f]);
    }
    if (!fir)
        orthogonalize(out, ks->k, n);
    free(steps);
    free(conv);
    free(where);
    return 0;
}

static int add_conditions(const struct events *e, const struct design_params *p, double tr, const double *ft,
                          int64_t n, struct columns *cols, const struct nf_node_inst *node, struct nf_error *err)
{
    struct fine_grid g = { 0 };
    struct kernels ks;
    int rc = make_kernels(p, tr, &ks, err);
    if (rc == 0)
        rc = make_fine_grid(ft, n, p, &g, err);
    size_t early = 0;
    for (size_t i = 0; rc == 0 && i < e->n; i++)
        early += e->ev[i].onset < ft[0] + p->min_onset;
    if (early)
        nf_warn(nf_node_id(node), "%zu event%s start%s before %g s (min_onset: %g s from the first frame); "
                "as in nilearn, %s modelled from that time on", early, early == 1 ? "" : "s",
                early == 1 ? "s" : "", ft[0] + p->min_onset, p->min_onset, early == 1 ? "it is" : "they are");
    for (size_t c = 0; rc == 0 && c < e->n_cond; c++) {
        double *out[1000];
        const char *name = e->cond_names[c];
        for (int k = 0; k < ks.k; k++) {
            char *col_name = is_fir(p) ? nf_asprintf("%s_delay_%d", name, (int)p->fir_delays.v[k])
                           : k == 0    ? nf_strdup(name)
                           : k == 1    ? nf_asprintf("%s_derivative", name)
                                       : nf_asprintf("%s_dispersion", name);
            if (!(out[k] = column_add(cols, col_name))) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                break;
            }
        }
        if (rc == 0)
            rc = condition_columns(e, c, &g, &ks, is_fir(p), p->oversampling, ft, n, out, err);
    }
    free(g.t);
    kernels_free(&ks);
    return rc;
}

static int add_confounds(const struct nf_value *tab, const struct design_params *p, int64_t n,
                         struct columns *cols, const struct nf_node_inst *node, struct nf_error *err)
{
    const struct nf_table *t = &tab->u.tab;
    if (t->n_rows != n)
        return FAIL_NODE(err, node, NF_ESHAPE, "the confounds table has %" PRId64 " rows but frames has %" PRId64
                         " frames", t->n_rows, n);
    bool *taken = nf_calloc((size_t)(t->n_cols ? t->n_cols : 1), sizeof *taken);
    if (!taken)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc = 0;
    size_t n_patterns = p->confound_columns.n ? p->confound_columns.n : 1;
    for (size_t i = 0; rc == 0 && i < n_patterns; i++) {
        const char *pattern = p->confound_columns.n ? p->confound_columns.v[i] : "*";
        bool matched = false;
        for (int64_t c = 0; rc == 0 && c < t->n_cols; c++) {
            const struct nf_column *col = &t->cols[c];
            if (!pattern_matches(pattern, col->name))
                continue;
            matched = true;
            if (taken[c])
                continue;
            taken[c] = true;
            if (!col->numeric) {
                rc = FAIL_NODE(err, node, NF_EDATA, "confounds column '%s' is not numeric", col->name);
                break;
            }
            for (int64_t r = 0; r < n; r++)
                if (isnan(col->num[r])) {
                    rc = FAIL_NODE(err, node, NF_EDATA, "confounds column '%s' has a missing value (n/a) in "
                                   "row %" PRId64 ": nilearn refuses NaN regressors; leave the column out or "
                                   "fill it", col->name, r + 1);
                    break;
                }
            double *v = rc == 0 ? column_add(cols, nf_strdup(col->name)) : NULL;
            if (rc == 0 && !v)
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            if (v)
                memcpy(v, col->num, (size_t)n * sizeof *v);
        }
        if (rc == 0 && !matched && p->confound_columns.n) {
            struct nf_strbuf sb;
            nf_strbuf_init(&sb);
            for (int64_t c = 0; c < t->n_cols; c++)
                nf_strbuf_addf(&sb, "%s%s", c ? ", " : "", t->cols[c].name);
            char *names = nf_strbuf_detach(&sb);
            rc = no_match(err, node, pattern, names ? names : "?");
            free(names);
        }
    }
    free(taken);
    return rc;
}

static int add_drifts(const struct design_params *p, const double *ft, int64_t n, struct columns *cols,
                      struct nf_error *err)
{
    int64_t order = 0;
    if (p->drift == DESIGN_DRIFT_COSINE) {
        double dt = (ft[n - 1] - ft[0]) / (double)(n - 1);
        double k_max = floor((double)(2 * n) * p->high_pass * dt);
        order = k_max < (double)(n - 1) ? (int64_t)k_max : n - 1;
    } else if (p->drift == DESIGN_DRIFT_POLYNOMIAL) {
        order = p->drift_order;
    }
    double **drift = nf_calloc((size_t)order + 1, sizeof *drift);
    if (!drift)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc = 0;
    for (int64_t k = 1; k <= order; k++)
        if (!(drift[k] = column_add(cols, nf_asprintf("drift_%" PRId64, k))))
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (rc == 0 && !(drift[0] = column_add(cols, nf_strdup("constant"))))
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (rc == 0 && p->drift == DESIGN_DRIFT_COSINE) {
        double normalizer = sqrt(2.0 / (double)n);
        for (int64_t k = 1; k <= order; k++)
            for (int64_t t = 0; t < n; t++)
                drift[k][t] = normalizer * cos((M_PI / (double)n) * ((double)t + 0.5) * (double)k);
    } else if (rc == 0 && p->drift == DESIGN_DRIFT_POLYNOMIAL) {
        /* (t / t_max)^k for k = 0..order, each orthogonalised against the
         * lower orders; the constant (order 0) goes last */
        double tmax = ft[n - 1];
        for (int64_t k = 1; k <= order; k++)
            for (int64_t t = 0; t < n; t++)
                drift[k][t] = pow(ft[t] / tmax, (double)k);
    }
    for (int64_t t = 0; rc == 0 && t < n; t++)
        drift[0][t] = 1.0;
    if (rc == 0 && p->drift == DESIGN_DRIFT_POLYNOMIAL)
        orthogonalize(drift, (int)order + 1, n);
    free(drift);
    return rc;
}

/* The frames' count and the TR: the parameter, checked against the image
 * header when it has one. */
static int frames_and_tr(const struct nf_value *frames, const struct design_params *p,
                         const struct nf_node_inst *node, int64_t *n, double *tr, struct nf_error *err)
{
    double header_tr = 0;
    if (frames->kind == NF_KIND_VOLUME) {
        *n = frames->u.vol.nt;
        header_tr = frames->u.vol.tr;
    } else {
        *n = frames->u.mat.rows;
    }
    const char *file = frames->path ? frames->path : "the frames image";
    if (!isnan(p->tr)) {
        if (header_tr > 0 && fabs(header_tr - p->tr) > 1e-4 * p->tr)
            return FAIL_NODE(err, node, NF_EDATA, "tr is %g s but the header of %s says %g s: correct tr, or "
                             "leave it out to use the header's", p->tr, file, header_tr);
        *tr = p->tr;
    } else if (header_tr > 0) {
        *tr = header_tr;
    } else {
        return FAIL_NODE(err, node, NF_EDATA, "the repetition time is unknown: %s has none in its header; "
                         "give tr (seconds)", frames->kind == NF_KIND_VOLUME ? file : "frames (a matrix)");
    }
    if (*n < 2)
        return FAIL_NODE(err, node, NF_EDATA, "frames has %" PRId64 " frame: a design needs at least 2", *n);
    if (!is_fir(p) && check_hrf_grid(*tr, p->oversampling, node, err) < 0)
        return err->code;
    return 0;
}

static int design_run(struct nf_run *run)
{
    const struct design_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    struct nf_error *err = run->err;
    struct events e = { 0 };
    struct columns cols = { 0 };
    double *ft = NULL;
    int64_t n = 0;
    double tr = 0;
    int rc = frames_and_tr(run->in[DESIGN_IN_FRAMES], p, node, &n, &tr, err);
    if (rc == 0)
        rc = read_events(run->in[DESIGN_IN_EVENTS], p, node, &e, err);
    if (rc == 0 && p->confound_columns.n && !run->in[DESIGN_IN_CONFOUNDS])
        rc = FAIL_NODE(err, node, NF_EINVAL, "confound_columns lists columns but no confounds table is connected");
    if (rc == 0 && !(ft = nf_malloc_array((size_t)n, sizeof *ft)))
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    /* nilearn takes the TR of the kernels from the frame times: their
     * smallest difference */
    double kernel_tr = INFINITY;
    for (int64_t f = 0; rc == 0 && f < n; f++) {
        ft[f] = tr * ((double)f + p->slice_time_ref);
        if (f > 0)
            kernel_tr = fmin(kernel_tr, ft[f] - ft[f - 1]);
    }
    cols.n = n;
    if (rc == 0 && e.n_cond > 0)
        rc = add_conditions(&e, p, kernel_tr, ft, n, &cols, node, err);
    if (rc == 0 && run->in[DESIGN_IN_CONFOUNDS])
        rc = add_confounds(run->in[DESIGN_IN_CONFOUNDS], p, n, &cols, node, err);
    if (rc == 0)
        rc = add_drifts(p, ft, n, &cols, err);
    /* nilearn refuses a design with two columns of one name */
    for (size_t i = 0; rc == 0 && i < cols.count; i++)
        for (size_t j = i + 1; j < cols.count; j++)
            if (strcmp(cols.names[i], cols.names[j]) == 0) {
                rc = FAIL_NODE(err, node, NF_EDATA, "the design would have two columns named '%s' (a "
                               "condition, confound or drift name twice): rename one", cols.names[i]);
                break;
            }
    struct nf_value *out = rc == 0 ? nf_value_new_table(n, (int64_t)cols.count, err) : NULL;
    for (size_t c = 0; out && c < cols.count; c++) {
        if (nf_table_column_numeric(out, (int64_t)c, cols.names[c], err) < 0) {
            nf_value_unref(out);
            out = NULL;
            break;
        }
        memcpy(out->u.tab.cols[c].num, cols.v[c], (size_t)n * sizeof(double));
    }
    if (rc == 0 && !out)
        rc = err->code ? err->code : NF_ENOMEM;
    if (out) {
        nf_value_set_stat(out, NF_STAT_DATA, 0, "first-level design matrix");
        run->out[DESIGN_OUT_X] = out;
    }
    free(ft);
    columns_free(&cols);
    events_free(&e);
    return rc;
}

/* The fine grid and a few columns: small next to the data it models. */
static uint64_t design_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct design_params *p = params;
    (void)out;
    int64_t n = in[DESIGN_IN_FRAMES].kind == NF_KIND_VOLUME ? in[DESIGN_IN_FRAMES].dim[3] : in[DESIGN_IN_FRAMES].dim[0];
    return (uint64_t)(n + 64) * (uint64_t)p->oversampling * 4 * sizeof(double);
}

const struct nf_node_type nf_node_design = {
    .name = "design",
    .summary = "first-level design matrix from BIDS events (HRF convolution, confounds, drifts), as nilearn's",
    .description =
        "Builds the design matrix of one run from its BIDS events table (onset, duration, optional "
        "trial_type and modulation), the run it models (`frames`: a 4D image, whose length and TR are "
        "read from its header without loading its voxels, or a frames x voxels matrix with `tr` given) "
        "and optional confounds. Columns and values equal nilearn 0.14's "
        "`make_first_level_design_matrix(frame_times, events, ...)` with frame_times = tr * (arange(n) + "
        "slice_time_ref): one column per condition (sorted by name) convolved with the HRF model, "
        "COND_derivative and COND_dispersion for the derivative models or COND_delay_D for fir, then "
        "the confound columns chosen by name or glob, then drift_1 ... and constant. Events without a "
        "trial_type column form one condition, 'dummy'; duplicated events add up. Malformed events (no "
        "onset or duration column, text or n/a in them, negative durations), a TR that disagrees with "
        "the image header, and confound names that match no column are errors. Mapped over runs, it "
        "makes one design per run.",
    .version = 1,
    .params = design_params_table,
    .params_size = sizeof(struct design_params),
    .inputs = design_inputs,
    .outputs = design_outputs,
    .check = design_check,
    .resolve = design_resolve,
    .estimate = design_estimate,
    .run_cpu = design_run,
    .param_matters = design_param_matters,
    .flags = NF_NODE_LAZY_INPUTS,
    .methods = design_methods,
};
