/* permute_glm.c — `permute` with `test: glm`: t contrasts of a group design
 * (subjects x regressors, a table with named columns) tested voxel by voxel
 * by permutation, with nuisance regressors handled by Freedman–Lane as FSL
 * randomise does, exchangeability blocks (randomise -e, --permuteBlocks), and
 * the node's max-statistic FWE, Benjamini–Hochberg FDR, TFCE and cluster
 * inference, one map set per contrast.
 *
 * Freedman–Lane, per contrast c: the design's column space splits into the
 * nuisance space Z = X null(cᵀ) (what the contrast does not test) and the one
 * direction u orthogonal to it, with cᵀβ̂ = |X (XᵀX)⁻¹ c| uᵀy. The data's
 * residuals under the nuisance model, E = R_Z Y, are permuted (and/or sign
 * flipped), Z's fit added back, and the full model refitted; Z's fit drops out
 * of everything, so a null t is
 *     t* = uᵀ(P E) / sqrt(RSS* / (n - p)),  RSS* = |E|² - (uᵀP E)² - |Q_Zᵀ P E|²
 * (P orthogonal keeps |P E|² = |E|²). Per permutation that is 1 + k GEMM rows
 * over the voxels: u and the k nuisance directions, each moved by the draw,
 * times E. Nuisance directions that every allowed draw leaves in place (the
 * intercept under permutations, block means within blocks) give exactly 0
 * and are dropped, so the common intercept + regressor design costs one row.
 * An F contrast of s rows has an s-dimensional U in place of u:
 * F* = (|Uᵀ P E|² / s) / (RSS* / (n - p)), always in its upper tail. No
 * smaller set of products gives the statistic (it depends on |Q_Zᵀ P E|², a
 * quadratic form of rank k), so 1 + k rows per permutation, against 1 for
 * test one_sample, is the exact floor of the GEMM work. With TFCE or
 * clusters, each permutation's whole map is computed again (a GEMM of its
 * rows over every voxel) and enhanced or clustered (tfce.h); an F contrast's
 * clusters are those of its F map beyond its own threshold (F's scale, upper
 * tail, as randomise -F and -S).
 *
 * The GEMMs run over voxel tiles on a thread team, the rows of 128
 * permutations in one GEMM, and one vector pass per permutation computes the
 * compared value q = t|t| / dof (F s / dof: monotone in the statistic, with
 * no square root per value), the exceedance counts and the maximum while the
 * tile is in cache. A null value within float round-off of the observed one
 * is decided again in double (the observed value is computed by the same
 * double sums), so exact ties (a mirror-image sign flip, a draw that moves
 * nothing) count as in a double-precision implementation; a permutation's
 * maximum within round-off of some voxel's observed value is taken again in
 * double over the voxels that can hold it (near_maxima). Draws: nltools'
 * per-permutation RandomState seeds (nf_perm_glm_draw), the same on every
 * thread, chunk and resume; chunks are checkpointed as in the other tests.
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/distributions.h"
#include "core/rng.h"
#include "core/util.h"
#include "glm/glm.h"
#include "kernels/kernels.h"
#include "node.h"

#include "permute.h"
#include "permute_glm.h"
#include "permute_internal.h"

/* voxels per tile; permutations per GEMM: 128 x r rows of 256 voxels keep G
 * (384 KiB at r = 3) in L2 for the epilogue while the E tile is packed once
 * per 128 permutations (measured best of 512/64, 1024/64, 512/128, 256/256
 * and 128/256 on 100 x 230k) */
enum { GLM_TILE = 256, GLM_SUB = 128 };
/* the rows of a tile's copies (byte path) 272 apart, not 256: 1 KiB apart, a column of 32 voxels would
 * fall in 8 of L1's 64 sets and miss on every row */
enum { GLM_TILE_LD = GLM_TILE + 16 };
/* permutations per epilogue call: its values (q) stay in L1 */
enum { GLM_EPI = 16 };

/* One contrast: its Freedman–Lane residuals, rows and results. */
struct glm_con {
    char *name;
    bool is_f;            /* an F contrast (always the upper tail), else t */
    int64_t s;            /* its rows (1 for t) */
    double *w;            /* s x p weights over the design's columns */
    int64_t r;            /* rows per permutation: u (s), then the nuisance directions a draw can move */
    float *basis;         /* r x n */
    /* Smith (nuisance_method): r = s, each draw's rows orthonormalised against the nuisance directions it
     * moves (qm: moved x n, in double); row_norm: the longest row of any draw (>= 1), widening the windows */
    double *qm;
    int64_t moved;
    double row_norm;
    float *E;             /* n x V residuals under the nuisance model */
    /* the fused tile's byte path (nf_glm_tile_i8_fast): E's columns in signed bytes ((n+3)/4 quads x V,
     * a step sv per voxel, off: -128 x its bytes' sum), the moved rows' steps (rows 1 .. r-1 at
     * row_step[0 .. r-2]; a draw moves and flips their values, so its rows have these steps and norms
     * too) and each voxel's bound of a byte row sum's distance from the float one */
    bool i8;
    uint32_t *Eq;
    int32_t *off;
    float *sv, *dg, *dr;
    float row_step[NF_GLM_TILE_MAX_ROWS];
    double *ss_d;         /* V: |E_v|², from the float residuals */
    float *ss, *floor_;   /* V: the same in float, and the RSS floor */
    float *cap;           /* V: +FLT_MAX, or -FLT_MAX for a zero-variance voxel (never counted) */
    float *lo, *hi;       /* V: the observed value's round-off window, as compared (+FLT_MAX: not tested) */
    float w_max;          /* the widest window of a tested voxel (near_maxima's candidates) */
    float *win_lo, *win_hi_max;   /* the tested voxels' windows by lower edge, with the running largest upper edge */
    int64_t n_win;
    double *q_obs_d;      /* V: the observed transformed statistic in double */
    bool *flat;
    int64_t n_flat;
    uint32_t *count;      /* V exceedances */
    float *null_max;      /* M maxima over voxels, as compared (q) */
    double *null_max_d;   /* M the same maxima in double, in t or F by the tail, where inside a window (else NAN) */
};

struct glm_ctx {
    const struct permute_params *prm;
    const struct nf_kernels *K;
    int64_t n, V, p, C, M;
    int tail;
    double dof;
    const float *Y;
    double *X;            /* n x p */
    char **cols;          /* p regressor names */
    struct perm_glm_blocks blocks;
    int64_t *block_label_at;   /* n_blocks: a row of each block (for the info table) */
    uint32_t *seeds;
    struct glm_con *con;
    /* TFCE and clusters (tfce.h), when asked for: each permutation's map */
    bool tfce, clusters;
    struct nf_voxel_graph graph;
    struct nf_tfce_plan *plan;   /* C: the t contrasts' tail, upper for F */
    float *tfce_obs;             /* C x V: the observed maps' TFCE */
    float *null_tfce;            /* C x M: each permutation's max |TFCE| */
    double *cluster_T;           /* C: each contrast's cluster-forming threshold, on t or on F */
    struct nf_cluster_plan *cplan;   /* C */
    int32_t *cluster_ids;        /* C x V: the observed clusters of each contrast's map */
    struct nf_cluster *cluster_obs;  /* C x V (n_clusters[c] used) */
    int64_t *n_clusters;         /* C */
    double *null_csize, *null_cmass;  /* C x M: each permutation's largest cluster size and mass */
};

/* ---- the draws ---- */

void nf_perm_glm_draw(const struct perm_glm_blocks *b, uint32_t seed, int64_t *src, int8_t *sign, int64_t *scratch)
{
    const int64_t n = b->n;
    struct nf_mt19937 mt;
    nf_mt_seed(&mt, seed);
    bool flips = b->exchange != PERM_EXCHANGE_PERMUTE, moves = b->exchange != PERM_EXCHANGE_SIGN_FLIP;
    int8_t *bsign = (int8_t *)(scratch + n);   /* n_blocks signs (whole blocks) */
    for (int64_t i = 0; i < n; i++) {
        src[i] = i;
        sign[i] = 1;
    }
    if (b->n_blocks <= 1 && !b->whole) {
        if (flips)
            nf_mt_signs(&mt, sign, n);
        if (moves)
            nf_mt_permutation(&mt, src, n);
        return;
    }
    if (b->whole) {
        /* block at position k takes block perm[k]'s subjects, member by member */
        int64_t B = b->n_blocks;
        if (flips)
            nf_mt_signs(&mt, bsign, B);
        for (int64_t k = 0; k < B; k++)
            scratch[k] = k;
        if (moves)
            nf_mt_permutation(&mt, scratch, B);
        for (int64_t k = 0; k < B; k++) {
            int64_t from = scratch[k], len = b->start[k + 1] - b->start[k];
            for (int64_t j = 0; j < len; j++) {
                int64_t i = b->members[b->start[k] + j];
                src[i] = b->members[b->start[from] + j];
                sign[i] = flips ? bsign[k] : 1;
            }
        }
        return;
    }
    if (flips)
        nf_mt_signs(&mt, sign, n);
    for (int64_t k = 0; moves && k < b->n_blocks; k++) {
        int64_t len = b->start[k + 1] - b->start[k];
        nf_mt_permutation(&mt, scratch, len);
        for (int64_t j = 0; j < len; j++)
            src[b->members[b->start[k] + j]] = b->members[b->start[k] + scratch[j]];
    }
}

/* ---- the contrast's geometry ---- */

/* Orthonormalises vector v (len p) against the m rows of W (Gram–Schmidt
 * twice over) and appends it as row m when what is left is longer than tol
 * times its length. Returns whether it was appended. */
static bool append_orthonormal(double *W, int64_t m, int64_t p, double *v, double tol)
{
    double norm0 = 0, norm = 0;
    for (int64_t j = 0; j < p; j++)
        norm0 += v[j] * v[j];
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = 0; k < m; k++) {
            double d = 0;
            for (int64_t j = 0; j < p; j++)
                d += W[k * p + j] * v[j];
            for (int64_t j = 0; j < p; j++)
                v[j] -= d * W[k * p + j];
        }
    for (int64_t j = 0; j < p; j++)
        norm += v[j] * v[j];
    if (!(norm > tol * tol * norm0) || norm == 0)
        return false;
    norm = sqrt(norm);
    for (int64_t j = 0; j < p; j++)
        W[m * p + j] = v[j] / norm;
    return true;
}

int nf_perm_glm_contrast_basis(const double *X, int64_t n, int64_t p, const double *C, int64_t s, double *u,
                               double *qz, int64_t *bad_col)
{
    double *Q = nf_malloc((size_t)(n * p) * sizeof *Q), *R = nf_calloc((size_t)(p * p), sizeof *R);
    double *W = nf_malloc((size_t)(p * p) * sizeof *W), *v = nf_malloc((size_t)p * sizeof *v);
    int rc = 0;
    *bad_col = -1;
    if (!Q || !R || !W || !v) {
        rc = NF_ENOMEM;
        goto fail;
    }
    /* X = Q R, modified Gram–Schmidt twice over (Q column j at Q + j n) */
    for (int64_t j = 0; j < p; j++) {
        double *q = Q + j * n, norm0 = 0, norm = 0;
        for (int64_t i = 0; i < n; i++) {
            q[i] = X[i * p + j];
            norm0 += q[i] * q[i];
        }
        for (int pass = 0; pass < 2; pass++)
            for (int64_t k = 0; k < j; k++) {
                double d = 0;
                for (int64_t i = 0; i < n; i++)
                    d += Q[k * n + i] * q[i];
                R[k * p + j] += d;
                for (int64_t i = 0; i < n; i++)
                    q[i] -= d * Q[k * n + i];
            }
        for (int64_t i = 0; i < n; i++)
            norm += q[i] * q[i];
        norm = sqrt(norm);
        if (!(norm > 1e-10 * sqrt(norm0))) {
            *bad_col = j;
            rc = NF_EINVAL;
            goto fail;
        }
        R[j * p + j] = norm;
        for (int64_t i = 0; i < n; i++)
            q[i] /= norm;
    }
    /* the contrast's space in Q's coordinates: X (XᵀX)⁻¹ cₘ = Q zₘ with Rᵀ zₘ = cₘ,
     * orthonormalised (one row keeps its sign: uᵀy has the sign of cᵀβ̂) */
    for (int64_t m = 0; m < s; m++) {
        for (int64_t j = 0; j < p; j++) {
            double t = C[m * p + j];
            for (int64_t k = 0; k < j; k++)
                t -= R[k * p + j] * v[k];
            v[j] = t / R[j * p + j];
        }
        if (!append_orthonormal(W, m, p, v, 1e-8)) {
            rc = NF_EINVAL;   /* a zero row, or rows that are combinations of the others */
            goto fail;
        }
    }
    /* the nuisance space: the rest of Q's coordinates, from the unit vectors */
    for (int64_t j = 0, m = s; j < p && m < p; j++) {
        for (int64_t k = 0; k < p; k++)
            v[k] = k == j;
        m += append_orthonormal(W, m, p, v, 1e-6);
    }
    for (int64_t m = 0; m < p; m++) {
        double *out = m < s ? u + m * n : qz + (m - s) * n;
        for (int64_t i = 0; i < n; i++) {
            double t = 0;
            for (int64_t j = 0; j < p; j++)
                t += Q[j * n + i] * W[m * p + j];
            out[i] = t;
        }
    }
fail:
    free(Q);
    free(R);
    free(W);
    free(v);
    return rc;
}

/* The nuisance directions a draw can move: with permutations only, those of
 * Z's directions that lie in the space every draw leaves in place (the
 * constant vector; with blocks permuted within, each block's indicator) give
 * exactly 0 and are dropped. qz (k columns) is rotated in place so that the
 * kept ones come first; returns how many are kept. */
static int64_t movable_nuisance(const struct perm_glm_blocks *b, double *qz, int64_t n, int64_t k)
{
    if (k == 0 || b->exchange != PERM_EXCHANGE_PERMUTE)
        return k;
    bool within = b->n_blocks > 1 && !b->whole;
    double *avg = nf_malloc((size_t)(n * k) * sizeof *avg), *M = nf_malloc((size_t)(k * k) * sizeof *M);
    double *lam = nf_malloc((size_t)k * sizeof *lam), *ev = nf_malloc((size_t)(k * k) * sizeof *ev);
    double *rot = nf_malloc((size_t)(n * k) * sizeof *rot);
    int64_t kept = k;
    if (!avg || !M || !lam || !ev || !rot)
        goto done;   /* keeping every direction is exact, only slower */
    /* avg = the projection of each column on the invariant space (means, per block when within) */
    for (int64_t m = 0; m < k; m++) {
        const double *q = qz + m * n;
        int64_t nb = within ? b->n_blocks : 1;
        for (int64_t blk = 0; blk < nb; blk++) {
            int64_t s0 = within ? b->start[blk] : 0, s1 = within ? b->start[blk + 1] : n;
            double s = 0;
            for (int64_t t = s0; t < s1; t++)
                s += q[within ? b->members[t] : t];
            s /= (double)(s1 - s0);
            for (int64_t t = s0; t < s1; t++)
                avg[m * n + (within ? b->members[t] : t)] = s;
        }
    }
    for (int64_t a = 0; a < k; a++)
        for (int64_t c = 0; c < k; c++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++)
                s += qz[a * n + i] * avg[c * n + i];
            M[a * k + c] = s;
        }
    glm_sym_eigen(M, k, lam, ev);
    /* movable directions (eigenvalue < 1) first, then the fixed ones */
    kept = 0;
    int64_t slot = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t m = 0; m < k; m++) {
            bool fixed = lam[m] > 1.0 - 1e-9;
            if (fixed != (pass == 1))
                continue;
            for (int64_t i = 0; i < n; i++) {
                double s = 0;
                for (int64_t j = 0; j < k; j++)
                    s += qz[j * n + i] * ev[j * k + m];
                rot[slot * n + i] = s;
            }
            slot++;
            kept += !fixed;
        }
    memcpy(qz, rot, (size_t)(n * k) * sizeof *qz);
done:
    free(avg);
    free(M);
    free(lam);
    free(ev);
    free(rot);
    return kept;
}

/* ---- the statistic ---- */

static inline double tail_of(int tail, double t)
{
    return tail == PERM_TAIL_TWO ? fabs(t) : tail == PERM_TAIL_UPPER ? t : -t;
}

/* ---- the compared value ----
 * The chunks compare, count and take maxima of q = t|t| / dof (the tail's
 * sign: |t| t for two tails, t|t| upper, -t|t| lower) = s g0 |g0| / RSS*,
 * and of q = F s / dof = |U'PE|² / RSS* for F: monotone in the statistic and
 * free of a square root per value. The windows are in the same terms (the
 * double decisions of near ties and near maxima stay in t and F). */

/* The compared value of a statistic value y in the tail's terms (tail_of(t)
 * for t, F for F). */
static inline double q_of(const struct glm_ctx *g, const struct glm_con *k, double y, double t_abs)
{
    return k->is_f ? y * (double)k->s / g->dof : y * t_abs / g->dof;
}

/* Back from q to the tail's terms (the null maxima reported). */
static inline float stat_of_q(const struct glm_ctx *g, const struct glm_con *k, float q)
{
    if (q == -FLT_MAX)
        return 0.0f;
    if (k->is_f)
        return (float)((double)q * g->dof / (double)k->s);
    double a = sqrt(fabs((double)q) * g->dof);
    return (float)(q < 0 ? -a : a);
}

/* s[m] = Σ_j w[m n + j] E[j V + v] in double, j in order, for NM (a
 * constant where inlined) rows side by side: each residual is loaded once for
 * them and their chains of adds overlap. */
static inline __attribute__((always_inline)) void row_sums_double(const float *w, const float *E, int64_t n,
                                                                  int64_t V, int64_t v, double *s, const int NM)
{
    double acc[4] = { 0, 0, 0, 0 };
    for (int64_t j = 0; j < n; j++) {
        const double e = E[j * V + v];
        for (int m = 0; m < NM; m++)
            acc[m] += (double)w[m * n + j] * e;
    }
    for (int m = 0; m < NM; m++)
        s[m] = acc[m];
}

/* t (or F) of one permutation's rows (r x n) and voxel v in double, the
 * products summed in row order: the observed value and every near tie use
 * these sums. The residuals from E (rows ld apart: k->E and V, or a tile's
 * copy) at column col. */
static double stat_double_in(const struct glm_ctx *g, const struct glm_con *k, const float *rows, const float *E,
                             int64_t ld, int64_t col, int64_t v)
{
    const int64_t n = g->n;
    double rss = k->ss_d[v], g0 = 0, num = 0;
    for (int64_t m0 = 0; m0 < k->r; m0 += 4) {
        const int64_t nm = k->r - m0 < 4 ? k->r - m0 : 4;
        double s[4];
        switch (nm) {
        case 4: row_sums_double(rows + m0 * n, E, n, ld, col, s, 4); break;
        case 3: row_sums_double(rows + m0 * n, E, n, ld, col, s, 3); break;
        case 2: row_sums_double(rows + m0 * n, E, n, ld, col, s, 2); break;
        default: row_sums_double(rows + m0 * n, E, n, ld, col, s, 1); break;
        }
        for (int64_t m = m0; m < m0 + nm; m++) {
            rss -= s[m - m0] * s[m - m0];
            if (m == 0)
                g0 = s[0];
            if (m < k->s)
                num += s[m - m0] * s[m - m0];
        }
    }
    double fl = 1e-12 * k->ss_d[v];
    rss = rss > fl ? rss : fl;
    return k->is_f ? num / (double)k->s / (rss / g->dof) : g0 / sqrt(rss / g->dof);
}

/* stat_double for every voxel at once (out: V): the same sums, each over the
 * subjects in order, accumulated row by row over a tile of contiguous voxels
 * (acc: r x V scratch), so that the residuals stream from memory once per row
 * rather than once per voxel and the tile's sums stay in cache. sums: NULL,
 * or V contrast sums of squares. */
static void stat_double_all(const struct glm_ctx *g, const struct glm_con *k, const float *rows, double *acc,
                            double *out, double *sums)
{
    const int64_t n = g->n, V = g->V;
    memset(acc, 0, (size_t)(k->r * V) * sizeof *acc);
    for (int64_t v0 = 0; v0 < V; v0 += GLM_TILE) {
        int64_t nv = V - v0 < GLM_TILE ? V - v0 : GLM_TILE;
        for (int64_t m = 0; m < k->r; m++)
            for (int64_t j = 0; j < n; j++)
                g->K->row_axpy(acc + m * V + v0, rows[m * n + j], k->E + j * V + v0, nv);
    }
    for (int64_t v = 0; v < V; v++) {
        double rss = k->ss_d[v], num = 0;
        for (int64_t m = 0; m < k->r; m++) {
            double x = acc[m * V + v];
            rss -= x * x;
            if (m < k->s)
                num += x * x;
        }
        double fl = 1e-12 * k->ss_d[v];
        rss = rss > fl ? rss : fl;
        out[v] = k->is_f ? num / (double)k->s / (rss / g->dof) : acc[v] / sqrt(rss / g->dof);
        if (sums)
            sums[v] = num;
    }
}

/* The compared value: t by the tail, F as it is. */
static inline double q_double_in(const struct glm_ctx *g, const struct glm_con *k, const float *rows, const float *E,
                                 int64_t ld, int64_t col, int64_t v)
{
    if (k->flat[v])
        return -INFINITY;
    double st = stat_double_in(g, k, rows, E, ld, col, v);
    return k->is_f ? st : tail_of(g->tail, st);
}

static inline double q_double(const struct glm_ctx *g, const struct glm_con *k, const float *rows, int64_t v)
{
    return q_double_in(g, k, rows, k->E, g->V, v, v);
}

/* The rows of one draw: row m at src[i] holds sign[i] basis_m[i], so that
 * row · E = Σ_i basis_m[i] sign[i] E[src[i]]. */
static void draw_rows(const struct glm_ctx *g, const struct glm_con *k, const int64_t *src, const int8_t *sign,
                      float *rows)
{
    for (int64_t m = 0; m < k->r; m++)
        for (int64_t i = 0; i < g->n; i++)
            rows[m * g->n + src[i]] = (float)sign[i] * k->basis[m * g->n + i];
}

/* Smith's rows of one draw, in place: the draw's rows A (s x n, the
 * contrast's directions moved) become L⁻¹ A with L Lᵀ = A R_Z Aᵀ (Cholesky,
 * in double), so that their products with the residuals E (orthogonal to Z)
 * are those of an orthonormal basis of R_Z Aᵀ: the regressors permuted,
 * orthogonalised to the nuisance and refitted. Only the nuisance directions
 * the draw can move matter (the others are orthogonal to A already). A draw
 * whose regressors fall into the nuisance space gets zero rows (statistic
 * 0). work: s (n + s + moved) doubles. Returns the longest row's norm. */
static double smith_rows(const struct glm_con *k, int64_t n, float *rows, double *work)
{
    const int64_t s = k->s, m = k->moved;
    double *A = work, *L = A + s * n, *P = L + s * s;
    for (int64_t i = 0; i < s * n; i++)
        A[i] = rows[i];
    for (int64_t j = 0; j < m; j++)
        for (int64_t a = 0; a < s; a++) {
            double x = 0;
            for (int64_t i = 0; i < n; i++)
                x += k->qm[j * n + i] * A[a * n + i];
            P[j * s + a] = x;
        }
    double longest = 0;
    for (int64_t a = 0; a < s; a++)
        for (int64_t b = 0; b <= a; b++) {
            double x = 0;
            for (int64_t i = 0; i < n; i++)
                x += A[a * n + i] * A[b * n + i];
            for (int64_t j = 0; j < m; j++)
                x -= P[j * s + a] * P[j * s + b];
            for (int64_t c = 0; c < b; c++)
                x -= L[a * s + c] * L[b * s + c];
            if (a == b) {
                if (!(x > 1e-10)) {   /* in the nuisance space, to round-off: no direction left */
                    memset(rows, 0, (size_t)(s * n) * sizeof *rows);
                    return 0;
                }
                L[a * s + a] = sqrt(x);
            } else {
                L[a * s + b] = x / L[b * s + b];
            }
        }
    for (int64_t a = 0; a < s; a++) {
        double norm = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = A[a * n + i];
            for (int64_t b = 0; b < a; b++)
                x -= L[a * s + b] * A[b * n + i];   /* A's earlier rows are already the new ones */
            x /= L[a * s + a];
            A[a * n + i] = x;
            rows[a * n + i] = (float)x;
            norm += x * x;
        }
        longest = sqrt(norm) > longest ? sqrt(norm) : longest;
    }
    return longest;
}

/* The rows of one draw as the nuisance method makes them. */
static double method_rows(const struct glm_ctx *g, const struct glm_con *k, const int64_t *src, const int8_t *sign,
                          float *rows, double *work)
{
    draw_rows(g, k, src, sign, rows);
    return g->prm->nuisance_method == PERM_NUISANCE_SMITH ? smith_rows(k, g->n, rows, work) : 1.0;
}

/* ---- inputs ---- */

/* A located error of the node (its place in the pipeline file). */
#define RUN_FAIL(run, code, ...) \
    NF_FAIL_AT((run)->err, code, nf_node_loc((run)->node), nf_node_id((run)->node), __VA_ARGS__)

struct label { double v; const char *s; int64_t i; };

static int cmp_label(const void *a, const void *b)
{
    const struct label *x = a, *y = b;
    int c = x->s || y->s ? strcmp(x->s ? x->s : "", y->s ? y->s : "") : (x->v > y->v) - (x->v < y->v);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* The blocks from a column (numbers or text): members grouped by label in
 * sorted order, each block's members in row order. */
static int make_blocks(struct glm_ctx *g, const struct nf_column *col, const struct nf_run *run)
{
    const int64_t n = g->n;
    struct perm_glm_blocks *b = &g->blocks;
    struct label *lab = nf_malloc((size_t)n * sizeof *lab);
    b->members = nf_malloc((size_t)n * sizeof *b->members);
    b->start = nf_malloc((size_t)(n + 1) * sizeof *b->start);
    g->block_label_at = nf_malloc((size_t)n * sizeof *g->block_label_at);
    if (!lab || !b->members || !b->start || !g->block_label_at) {
        free(lab);
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        if (col->numeric && !isfinite(col->num[i])) {
            free(lab);
            return RUN_FAIL(run, NF_EDATA, "the blocks column '%s' has a missing value (subject %lld)", col->name,
                           (long long)i + 1);
        }
        lab[i] = (struct label){ .v = col->numeric ? col->num[i] : 0, .s = col->numeric ? NULL : col->str[i], .i = i };
        if (!col->numeric && !lab[i].s)
            lab[i].s = "";
    }
    qsort(lab, (size_t)n, sizeof *lab, cmp_label);
    b->n_blocks = 0;
    for (int64_t t = 0; t < n; t++) {
        bool same = t > 0 && (col->numeric ? lab[t].v == lab[t - 1].v : strcmp(lab[t].s, lab[t - 1].s) == 0);
        if (!same) {
            g->block_label_at[b->n_blocks] = lab[t].i;
            b->start[b->n_blocks++] = t;
        }
        b->members[t] = lab[t].i;
    }
    b->start[b->n_blocks] = n;
    free(lab);
    if (b->whole) {
        int64_t len0 = b->start[1] - b->start[0];
        for (int64_t k = 1; k < b->n_blocks; k++)
            if (b->start[k + 1] - b->start[k] != len0) {
                return RUN_FAIL(run, NF_EDATA,
                                "whole_blocks needs blocks of equal size (blocks of %lld and %lld subjects "
                                "found); permute within blocks instead (whole_blocks: false)",
                                (long long)len0, (long long)(b->start[k + 1] - b->start[k]));
            }
    }
    return 0;
}

/* A contrast's text over the design's columns: "name = expression" (t), or
 * "name = row; row; ..." (F, each row an expression); *name and *w (rows x p)
 * owned. cols NULL: the syntax only (w and rows still set). 0, NF_EINVAL with
 * the reason in why, or NF_ENOMEM. */
static int parse_contrast(const char *text, bool f, const char *const *cols, size_t p, char **name, double **w,
                          int64_t *rows, char *why, size_t why_size)
{
    char *expr = NULL;
    *w = NULL;
    *rows = 0;
    int rc = glm_contrast_split(text, name, &expr, why, why_size);
    if (rc)
        return rc;
    int64_t s = 1;
    for (const char *c = expr; f && *c; c++)
        s += *c == ';';
    if (!(*w = nf_calloc((size_t)s * (p ? p : 1), sizeof **w))) {
        free(expr);
        return NF_ENOMEM;
    }
    char *at = expr;
    for (int64_t m = 0; m < s && rc == 0; m++) {
        char *semi = f ? strchr(at, ';') : NULL;
        if (semi)
            *semi = '\0';
        rc = glm_contrast_weights(at, cols, p, cols ? *w + m * (int64_t)p : NULL, why, why_size);
        bool any = !cols;
        for (size_t j = 0; rc == 0 && cols && j < p; j++)
            any |= (*w)[m * (int64_t)p + (int64_t)j] != 0;
        if (rc == 0 && !any) {
            rc = NF_EINVAL;
            snprintf(why, why_size, f ? "contrast '%s' has a row with no weight on any column"
                                      : "contrast '%s' has no weight on any column", *name);
        }
        at = semi ? semi + 1 : at;
    }
    free(expr);
    *rows = s;
    return rc;
}

/* Design, blocks and contrasts from the run's inputs. */
static int gather(struct glm_ctx *g, const struct nf_run *run)
{
    const struct permute_params *prm = g->prm;
    const struct nf_value *x = run->in[PERMUTE_IN_DATA], *d = run->in[PERMUTE_IN_DESIGN];
    const struct nf_value *bv = run->in[PERMUTE_IN_BLOCKS];
    const char *bcol = prm->blocks_column && prm->blocks_column[0] ? prm->blocks_column : NULL;
    g->n = x->u.mat.rows;
    g->V = x->u.mat.cols;
    g->Y = x->u.mat.data;
    int64_t e = nf_first_nonfinite(g->Y, g->n * g->V);
    if (e >= 0)
        return RUN_FAIL(run, NF_EDATA, "data has a non-finite value (NaN or inf) at subject %lld",
                       (long long)(e / g->V) + 1);
    if (!d || d->kind != NF_KIND_TABLE)
        return RUN_FAIL(run, NF_EUSAGE, "test glm needs a 'design' table (subjects x regressors)");
    if (d->u.tab.n_rows != g->n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, nf_node_loc(run->node), nf_node_id(run->node),
                          "the design has %lld rows but data has %lld subjects", (long long)d->u.tab.n_rows,
                          (long long)g->n);
    /* regressors: every column but the blocks column when the blocks come from the design */
    bool blocks_in_design = bcol && !bv;
    g->X = nf_malloc((size_t)(g->n * (d->u.tab.n_cols ? d->u.tab.n_cols : 1)) * sizeof *g->X);
    g->cols = nf_calloc((size_t)(d->u.tab.n_cols + 1), sizeof *g->cols);
    if (!g->X || !g->cols)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    const struct nf_column *block_col = NULL;
    int64_t p = 0;
    for (int64_t j = 0; j < d->u.tab.n_cols; j++) {
        const struct nf_column *cl = &d->u.tab.cols[j];
        if (blocks_in_design && strcmp(cl->name, bcol) == 0) {
            block_col = cl;
            continue;
        }
        if (!cl->numeric)
            return RUN_FAIL(run, NF_EDATA, "design column '%s' is text; a regressor must be numbers (code "
                           "categories as indicator columns)", cl->name);
        g->cols[p] = cl->name;
        for (int64_t i = 0; i < g->n; i++) {
            if (!isfinite(cl->num[i]))
                return RUN_FAIL(run, NF_EDATA, "design column '%s' has a missing value (subject %lld)", cl->name,
                               (long long)i + 1);
            g->X[i * d->u.tab.n_cols + p] = cl->num[i];
        }
        p++;
    }
    /* compact the rows to p columns */
    for (int64_t i = 0; i < g->n; i++)
        memmove(g->X + i * p, g->X + i * d->u.tab.n_cols, (size_t)p * sizeof *g->X);
    g->p = p;
    if (blocks_in_design && !block_col)
        return RUN_FAIL(run, NF_EUSAGE, "the design has no column '%s' (blocks_column)", bcol);
    if (p < 1)
        return RUN_FAIL(run, NF_EDATA, "the design has no regressors");
    if (g->n - p < 1)
        return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                          "%lld subjects and %lld regressors leave no degrees of freedom", (long long)g->n,
                          (long long)p);
    g->dof = (double)(g->n - p);
    /* blocks */
    struct nf_column one = { 0 };
    double *bnum = NULL;
    if (bv && bv->kind == NF_KIND_TABLE) {
        int64_t c = bcol ? nf_table_find(&bv->u.tab, bcol) : 0;
        if (c < 0 || bv->u.tab.n_cols < 1)
            return RUN_FAIL(run, NF_EUSAGE, "blocks has no column '%s'", bcol ? bcol : "");
        if (bv->u.tab.n_rows != g->n)
            return NF_FAIL_AT(run->err, NF_ESHAPE, nf_node_loc(run->node), nf_node_id(run->node),
                              "blocks has %lld values but data has %lld subjects", (long long)bv->u.tab.n_rows,
                              (long long)g->n);
        block_col = &bv->u.tab.cols[c];
    } else if (bv) {
        const struct nf_matrix *m = &bv->u.mat;
        if ((m->rows != 1 && m->cols != 1) || m->rows * m->cols != g->n)
            return NF_FAIL_AT(run->err, NF_ESHAPE, nf_node_loc(run->node), nf_node_id(run->node),
                              "blocks must be one value per subject (got a %lldx%lld matrix for %lld subjects)",
                              (long long)m->rows, (long long)m->cols, (long long)g->n);
        if (!(bnum = nf_malloc((size_t)g->n * sizeof *bnum)))
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        for (int64_t i = 0; i < g->n; i++)
            bnum[i] = m->data[i];
        one = (struct nf_column){ .name = "blocks", .numeric = true, .num = bnum };
        block_col = &one;
    }
    g->blocks.n = g->n;
    g->blocks.exchange = prm->exchange;
    g->blocks.whole = prm->whole_blocks && block_col;
    if (prm->whole_blocks && !block_col) {
        free(bnum);
        return RUN_FAIL(run, NF_EUSAGE, "whole_blocks needs blocks (a 'blocks' input or blocks_column)");
    }
    int rc = 0;
    if (block_col) {
        rc = make_blocks(g, block_col, run);
    } else {
        g->blocks.n_blocks = 1;
        g->blocks.start = nf_malloc(2 * sizeof *g->blocks.start);
        g->blocks.members = nf_malloc((size_t)g->n * sizeof *g->blocks.members);
        if (!g->blocks.start || !g->blocks.members)
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        else {
            g->blocks.start[0] = 0;
            g->blocks.start[1] = g->n;
            for (int64_t i = 0; i < g->n; i++)
                g->blocks.members[i] = i;
        }
    }
    free(bnum);
    if (rc < 0)
        return rc;
    /* contrasts: t, then F */
    g->C = (int64_t)(prm->contrasts.n + prm->f_contrasts.n);
    if (g->C < 1)
        return RUN_FAIL(run, NF_EUSAGE, "test glm needs at least one contrast (contrasts: [\"name = expression\"])");
    if (!(g->con = nf_calloc((size_t)g->C, sizeof *g->con)))
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t c = 0; c < g->C; c++) {
        char why[512];
        struct glm_con *k = &g->con[c];
        bool f = c >= (int64_t)prm->contrasts.n;
        int64_t at = f ? c - (int64_t)prm->contrasts.n : c;
        k->is_f = f;
        rc = parse_contrast(f ? prm->f_contrasts.v[at] : prm->contrasts.v[at], f, (const char *const *)g->cols,
                            (size_t)p, &k->name, &k->w, &k->s, why, sizeof why);
        if (rc == NF_ENOMEM)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        if (rc)
            return RUN_FAIL(run, NF_EUSAGE, "%s[%lld]: %s", f ? "f_contrasts" : "contrasts", (long long)at + 1, why);
        if (k->s > p || k->s >= g->n)
            return RUN_FAIL(run, NF_EUSAGE, "f_contrasts[%lld]: %lld rows for a design of %lld columns",
                            (long long)at + 1, (long long)k->s, (long long)p);
    }
    return 0;
}

/* ---- per contrast: residuals, rows, the observed statistic ---- */

/* The tested voxels' windows sorted by lower edge, with the running maximum
 * of their upper edges: whether a value is inside some window in a search. */
static int window_index(const struct glm_ctx *g, struct glm_con *k, const struct nf_run *run)
{
    int64_t *by_lo = nf_malloc((size_t)g->V * sizeof *by_lo), *tested = nf_malloc((size_t)g->V * sizeof *tested);
    k->win_lo = nf_malloc((size_t)g->V * sizeof *k->win_lo);
    k->win_hi_max = nf_malloc((size_t)g->V * sizeof *k->win_hi_max);
    int rc = 0;
    if (!by_lo || !tested || !k->win_lo || !k->win_hi_max) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    k->n_win = 0;
    for (int64_t v = 0; v < g->V; v++)
        if (!k->flat[v]) {
            tested[k->n_win] = v;
            k->win_lo[k->n_win++] = k->lo[v];
        }
    if (nf_argsort_f32(k->win_lo, k->n_win, by_lo) < 0) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t q = 0; q < k->n_win; q++) {
        float h = k->hi[tested[by_lo[q]]];
        k->win_hi_max[q] = q > 0 && k->win_hi_max[q - 1] > h ? k->win_hi_max[q - 1] : h;
        k->win_lo[q] = k->lo[tested[by_lo[q]]];
    }
fail:
    free(by_lo);
    free(tested);
    return rc;
}

/* Whether x is inside some tested voxel's window, lo <= x < hi. */
static bool in_some_window(const struct glm_con *k, float x)
{
    int64_t a = 0, b = k->n_win;   /* windows with lo <= x: the first a */
    while (a < b) {
        int64_t mid = (a + b) / 2;
        if (k->win_lo[mid] <= x)
            a = mid + 1;
        else
            b = mid;
    }
    return a > 0 && k->win_hi_max[a - 1] > x;
}

/* Smith: the observed rows (row0: the identity draw's) and k->row_norm, the
 * longest row over every draw (a pass over the draws, ~the cost of drawing
 * them once more). */
static int smith_row_norm(const struct glm_ctx *g, struct glm_con *k, float *row0, const struct nf_run *run)
{
    const int64_t n = g->n;
    int64_t *src = nf_malloc((size_t)n * sizeof *src), *scratch = nf_malloc((size_t)(2 * n + 8) * sizeof *scratch);
    int8_t *sign = nf_malloc((size_t)n);
    double *work = nf_malloc((size_t)(k->s * (n + k->s + k->moved)) * sizeof *work);
    float *rows = nf_malloc((size_t)(k->r * n) * sizeof *rows);
    int rc = 0;
    if (!src || !scratch || !sign || !work || !rows) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        src[i] = i;
        sign[i] = 1;
    }
    k->row_norm = fmax(1.0, method_rows(g, k, src, sign, row0, work));
    for (int64_t d = 0; d < g->M; d++) {
        nf_perm_glm_draw(&g->blocks, g->seeds[d], src, sign, scratch);
        k->row_norm = fmax(k->row_norm, method_rows(g, k, src, sign, rows, work));
    }
done:
    free(src);
    free(scratch);
    free(sign);
    free(work);
    free(rows);
    return rc;
}

/* The contrast's residuals under the nuisance model, rows, and observed t
 * (stat: V), its transformed value in double and its round-off window. */
static int prepare_contrast(struct glm_ctx *g, struct glm_con *k, float *stat, const struct nf_run *run)
{
    const int64_t n = g->n, V = g->V, p = g->p, nz = p - k->s;
    double *u = nf_malloc((size_t)(n * k->s) * sizeof *u), *qz = nf_malloc((size_t)(n * (nz ? nz : 1)) * sizeof *qz);
    double *B = nf_calloc((size_t)(V * (nz ? nz : 1)), sizeof *B), *yy = nf_calloc((size_t)V, sizeof *yy);
    float *row0 = NULL;
    double *acc = NULL, *obs = NULL, *sums = NULL;
    int64_t bad = -1;
    int rc = 0;
    k->E = nf_malloc((size_t)(n * V) * sizeof *k->E);
    k->ss_d = nf_calloc((size_t)V, sizeof *k->ss_d);
    k->ss = nf_malloc((size_t)V * sizeof *k->ss);
    k->floor_ = nf_malloc((size_t)V * sizeof *k->floor_);
    k->cap = nf_malloc((size_t)V * sizeof *k->cap);
    k->lo = nf_malloc((size_t)V * sizeof *k->lo);
    k->hi = nf_malloc((size_t)V * sizeof *k->hi);
    k->q_obs_d = nf_malloc((size_t)V * sizeof *k->q_obs_d);
    k->flat = nf_calloc((size_t)V, sizeof *k->flat);
    k->count = nf_calloc((size_t)V, sizeof *k->count);
    k->null_max = nf_malloc((size_t)(g->M ? g->M : 1) * sizeof *k->null_max);
    k->null_max_d = nf_malloc((size_t)(g->M ? g->M : 1) * sizeof *k->null_max_d);
    if (!u || !qz || !B || !yy || !k->E || !k->ss_d || !k->ss || !k->floor_ || !k->cap || !k->lo || !k->hi || !k->q_obs_d ||
        !k->flat || !k->count || !k->null_max || !k->null_max_d) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for the residuals of contrast '%s' (%lld x %lld)", k->name,
                     (long long)n, (long long)V);
        goto fail;
    }
    rc = nf_perm_glm_contrast_basis(g->X, n, p, k->w, k->s, u, qz, &bad);
    if (rc == NF_ENOMEM) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (rc && bad < 0) {
        rc = RUN_FAIL(run, NF_EUSAGE, "the rows of F contrast '%s' are linearly dependent (one is a combination "
                      "of the others)", k->name);
        goto fail;
    }
    if (rc) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                        "the design is rank deficient: column '%s' is %s; drop it or recode the design",
                        g->cols[bad > 0 ? bad : 0],
                        bad == 0 ? "all zeros" : "a linear combination of the columns before it");
        goto fail;
    }
    /* E = Y - Q_Z Q_Zᵀ Y in double (every nuisance direction) */
    /* a tile of voxels at a time, its sums staying in cache over the subjects */
    for (int64_t v0 = 0; v0 < V; v0 += GLM_TILE) {
        int64_t nv = V - v0 < GLM_TILE ? V - v0 : GLM_TILE;
        for (int64_t i = 0; i < n; i++) {
            const float *y = g->Y + i * V + v0;
            for (int64_t m = 0; m < nz; m++)
                g->K->row_axpy(B + m * V + v0, qz[m * n + i], y, nv);
            g->K->row_accumulate(yy + v0, y, nv, true);
        }
        for (int64_t i = 0; i < n; i++)
            g->K->row_residual(g->Y + i * V + v0, B + v0, qz + i, n, nz, V, nv, k->E + i * V + v0, k->ss_d + v0);
    }
    /* rows: u, then (Freedman-Lane) the nuisance directions a draw can move */
    int64_t moved = movable_nuisance(&g->blocks, qz, n, nz);
    bool smith = g->prm->nuisance_method == PERM_NUISANCE_SMITH;
    k->r = smith ? k->s : k->s + moved;
    k->moved = moved;
    k->row_norm = 1;
    if (!(k->basis = nf_malloc((size_t)(k->r * n) * sizeof *k->basis)) ||
        !(row0 = nf_malloc((size_t)(k->r * n) * sizeof *row0)) ||
        (smith && !(k->qm = nf_malloc((size_t)(moved * n + 1) * sizeof *k->qm)))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < k->s * n; i++)
        k->basis[i] = (float)u[i];
    for (int64_t m = 0; m < moved && !smith; m++)
        for (int64_t i = 0; i < n; i++)
            k->basis[(k->s + m) * n + i] = (float)qz[m * n + i];
    if (smith) {
        /* the observed rows as every draw's are made (the identity's bits equal), and
         * the longest row of any draw: the float values' round-off grows with it */
        memcpy(k->qm, qz, (size_t)(moved * n) * sizeof *k->qm);
        NF_TRY(rc = smith_row_norm(g, k, row0, run));
    } else {
        memcpy(row0, k->basis, (size_t)(k->r * n) * sizeof *row0);
    }
    if (!(acc = nf_malloc((size_t)(k->r * V) * sizeof *acc)) || !(obs = nf_malloc((size_t)V * sizeof *obs)) ||
        !(sums = nf_malloc((size_t)V * sizeof *sums))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    stat_double_all(g, k, row0, acc, obs, sums);
    /* the observed statistic by the double sums of the identity's rows, and
     * the window of float round-off around it (rows are unit vectors: each
     * GEMM value is off by about 4 sqrt(n) u |E_v|) */
    const double u32 = 0x1p-24;
    for (int64_t v = 0; v < V; v++) {
        double ss = k->ss_d[v];
        k->ss[v] = (float)ss;
        k->floor_[v] = (float)(1e-12 * ss);
        k->flat[v] = !(ss > 1e-10 * yy[v]) || ss == 0;
        k->cap[v] = k->flat[v] ? -FLT_MAX : FLT_MAX;
        if (k->flat[v]) {
            k->n_flat++;
            stat[v] = 0;
            k->q_obs_d[v] = -INFINITY;
            k->lo[v] = k->hi[v] = FLT_MAX;
            continue;
        }
        double t = obs[v], num = sums[v];   /* num: the contrast's sum of squares */
        stat[v] = (float)t;
        k->q_obs_d[v] = k->is_f ? t : tail_of(g->tail, t);
        double rss = fmax(ss - num, 1e-12 * ss);
        double e_g = 4.0 * sqrt((double)n) * u32 * sqrt(ss) * (double)k->r * k->row_norm;
        double e_rss = 2.0 * sqrt(ss) * e_g * (double)k->r + 4.0 * u32 * ss;
        double e_num = 2.0 * sqrt(num) * e_g * sqrt((double)k->s) + 4.0 * u32 * num;
        double e_t = k->is_f ? g->dof / ((double)k->s * rss) * e_num + fabs(t) * e_rss / rss
                             : e_g * (1.0 + num / rss) / sqrt(rss / g->dof) + fabs(t) * e_rss / (2.0 * rss);
        double w = 4.0 * e_t + 8.0 * u32 * fabs(t);
        /* in the compared terms (q_of is monotone), rounded outwards */
        double ylo = k->q_obs_d[v] - w, yhi = k->q_obs_d[v] + w;
        k->lo[v] = nextafterf((float)q_of(g, k, ylo, fabs(ylo)), -INFINITY);
        k->hi[v] = nextafterf((float)q_of(g, k, yhi, fabs(yhi)), INFINITY);
        k->w_max = k->hi[v] - k->lo[v] > k->w_max ? k->hi[v] - k->lo[v] : k->w_max;
    }
    if (k->n_flat == V) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                        "contrast '%s': every voxel has zero variance after the nuisance regressors", k->name);
        goto fail;
    }
    NF_TRY(rc = window_index(g, k, run));
    if (!smith && nf_glm_tile_i8_fast(k->r, k->is_f, n)) {
        const int64_t n4 = (n + 3) / 4;
        double *norms = NULL;
        if (!(k->Eq = nf_malloc((size_t)(n4 * V) * sizeof *k->Eq)) || !(k->off = nf_malloc((size_t)V * sizeof *k->off)) ||
            !(k->sv = nf_malloc((size_t)V * sizeof *k->sv)) || !(k->dg = nf_malloc((size_t)V * sizeof *k->dg)) ||
            !(k->dr = nf_malloc((size_t)V * sizeof *k->dr)) || !(norms = nf_malloc((size_t)(3 * V) * sizeof *norms))) {
            free(norms);
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for the residuals of contrast '%s' in bytes", k->name);
            goto fail;
        }
        nf_i8_column_steps(k->E, n, V, V, k->sv);
        nf_i8_quads(k->E, n, V, V, k->sv, k->Eq, V, k->off, norms);
        /* the moved rows' norms, their rounding's and their bytes' (the largest of each): a draw only
         * moves a row's values (and flips signs), so every draw's rows have these */
        double row[3] = { 0, 0, 0 };
        for (int64_t m = 1; m < k->r; m++) {
            double rm[3];
            k->row_step[m - 1] = nf_i8_step(k->basis + m * n, n);
            nf_i8_norms(k->basis + m * n, n, k->row_step[m - 1], rm);
            for (int j = 0; j < 3; j++)
                row[j] = rm[j] > row[j] ? rm[j] : row[j];
        }
        for (int64_t v = 0; v < V; v++) {
            k->dg[v] = nf_glm_i8_bound(n, row, norms + 3 * v);
            k->dr[v] = nf_glm_i8_roundoff(n, k->r, k->row_norm * (1.0 + 1e-5), k->ss_d[v], k->dg[v], k->ss[v]);
        }
        free(norms);
        k->i8 = true;
    }
fail:
    free(u);
    free(qz);
    free(B);
    free(yy);
    free(row0);
    free(acc);
    free(obs);
    free(sums);
    return rc;
}

/* ---- one chunk of permutations ---- */

struct glm_chunk {
    const struct glm_ctx *g;
    const struct glm_con *k;
    const float *R;          /* len x r x n */
    const uint32_t *Rq;      /* byte path: len x (r-1) x (n+3)/4, the rows after the first in byte quads */
    float *run_max;          /* byte path: per thread len running maxima (slots taken in turn) */
    atomic_int slot;
    int64_t len, n_tiles;
    uint32_t *count;         /* V (this chunk) */
    float *tile_max;         /* n_tiles x len */
    const struct nf_run *run;
    atomic_long next;
    atomic_int failed, interrupted;
};

/* The epilogue's view of contrast k's voxels v0 .. v0 + nv: np permutations' values from G. */
static struct nf_glm_epi epi_of(const struct glm_ctx *g, const struct glm_con *k, const float *G, int64_t ld, int64_t v0,
                                int64_t nv, int64_t np)
{
    return (struct nf_glm_epi){ .G = G, .ss = k->ss + v0, .fl = k->floor_ + v0, .cap = k->cap + v0, .lo = k->lo + v0,
                                .hi = k->hi + v0, .np = np, .pld = k->r * ld, .r = k->r, .s = k->s, .ld = ld,
                                .nv = nv, .sg = g->tail == PERM_TAIL_LOWER ? -1.0f : 1.0f,
                                .two = g->tail == PERM_TAIL_TWO, .is_f = k->is_f };
}

static void *glm_team(void *arg)
{
    struct glm_chunk *w = arg;
    const struct glm_ctx *g = w->g;
    const struct glm_con *k = w->k;
    const int64_t n = g->n, V = g->V, r = k->r;
    const bool fused = nf_glm_tile_fused(r, k->is_f), i8 = k->i8;
    const int64_t n4 = (n + 3) / 4;
    float *run_max = i8 ? w->run_max + atomic_fetch_add(&w->slot, 1) * w->len : NULL;
    /* byte path: the tile's residuals copied together (rows GLM_TILE_LD apart, not V): a few pages, not
     * one per row */
    float *Et = i8 ? nf_malloc((size_t)(n * GLM_TILE_LD) * sizeof *Et) : NULL;
    uint32_t *Eqt = i8 ? nf_malloc((size_t)(n4 * GLM_TILE_LD) * sizeof *Eqt) : NULL;
    float *G = fused ? NULL : nf_malloc((size_t)(GLM_SUB * r * GLM_TILE) * sizeof *G);
    float *q = fused ? NULL : nf_malloc(GLM_EPI * GLM_TILE * sizeof *q);
    int32_t *near = nf_malloc((fused ? GLM_SUB : GLM_EPI) * GLM_TILE * sizeof *near);
    if ((!fused && (!G || !q)) || !near || (i8 && (!Et || !Eqt))) {
        atomic_store(&w->failed, 1);
        goto done;
    }
    for (int64_t t; !atomic_load(&w->failed) && (t = atomic_fetch_add(&w->next, 1)) < w->n_tiles;) {
        if (nf_run_interrupted(w->run)) {
            atomic_store(&w->interrupted, 1);
            atomic_store(&w->failed, 1);
            break;
        }
        int64_t v0 = t * GLM_TILE, nv = V - v0 < GLM_TILE ? V - v0 : GLM_TILE;
        uint32_t *count = w->count + v0;
        if (i8) {
            for (int64_t i = 0; i < n; i++)
                memcpy(Et + i * GLM_TILE_LD, k->E + i * V + v0, (size_t)nv * sizeof *Et);
            for (int64_t i = 0; i < n4; i++)
                memcpy(Eqt + i * GLM_TILE_LD, k->Eq + i * V + v0, (size_t)nv * sizeof *Eqt);
        }
        for (int64_t i0 = 0; i0 < w->len; i0 += GLM_SUB) {
            int64_t np = w->len - i0 < GLM_SUB ? w->len - i0 : GLM_SUB;
            if (i8) {   /* the same, the nuisance rows in bytes: tile maxima are bounds, run_max the maxima */
                int n_near = 0;
                struct nf_glm_epi e = epi_of(g, k, NULL, nv, v0, nv, np);
                struct nf_glm_i8 b = { .Eq = Eqt, .Rq = w->Rq + i0 * (r - 1) * n4, .ldq = GLM_TILE_LD, .off = k->off + v0,
                                       .sv = k->sv + v0, .sq = k->row_step, .dg = k->dg + v0,
                                       .dr = k->dr + v0 };
                g->K->glm_tile_i8(&e, &b, w->R + i0 * r * n, Et, n, GLM_TILE_LD, w->tile_max + t * w->len + i0,
                                  run_max + i0, count, near, &n_near);
                for (int j = 0; j < n_near; j++) {   /* from the tile's copy: the same sums, in cache */
                    int64_t p = i0 + near[j] / nv, v = v0 + near[j] % nv;
                    count[v - v0] += q_double_in(g, k, w->R + p * r * n, Et, GLM_TILE_LD, v - v0, v) >= k->q_obs_d[v];
                }
                continue;
            }
            if (fused) {   /* GEMM and epilogue in one: the values never leave the registers */
                int n_near = 0;
                struct nf_glm_epi e = epi_of(g, k, NULL, nv, v0, nv, np);
                g->K->glm_tile(&e, w->R + i0 * r * n, k->E + v0, n, V, NULL, w->tile_max + t * w->len + i0, count,
                               near, &n_near);
                for (int j = 0; j < n_near; j++) {
                    int64_t p = i0 + near[j] / nv, v = v0 + near[j] % nv;
                    count[v - v0] += q_double(g, k, w->R + p * r * n, v) >= k->q_obs_d[v];
                }
                continue;
            }
            g->K->sgemm(false, false, np * r, nv, n, 1.0f, w->R + i0 * r * n, n, k->E + v0, V, 0.0f, G, nv);
            for (int64_t i = 0; i < np; i += GLM_EPI) {
                int n_near = 0;
                struct nf_glm_epi e = epi_of(g, k, G + i * r * nv, nv, v0, nv, np - i < GLM_EPI ? np - i : GLM_EPI);
                g->K->glm_epilogue(&e, q, w->tile_max + t * w->len + i0 + i, count, near, &n_near);
                /* within round-off of the observed value: decided in double */
                for (int j = 0; j < n_near; j++) {
                    int64_t p = i0 + i + near[j] / nv, v = v0 + near[j] % nv;
                    count[v - v0] += q_double(g, k, w->R + p * r * n, v) >= k->q_obs_d[v];
                }
            }
        }
    }
done:
    free(G);
    free(q);
    free(near);
    free(Et);
    free(Eqt);
    return NULL;
}

/* The rows of permutations p0 .. p0 + len of contrast k into R (len x r x n). */
static int chunk_rows(const struct glm_ctx *g, const struct glm_con *k, int64_t p0, int64_t len, float *R)
{
    int64_t *src = nf_malloc((size_t)g->n * sizeof *src), *scratch = nf_malloc((size_t)(2 * g->n + 8) * sizeof *scratch);
    int8_t *sign = nf_malloc((size_t)g->n);
    double *work = nf_malloc((size_t)(k->s * (g->n + k->s + k->moved)) * sizeof *work);
    int rc = src && scratch && sign && work ? 0 : NF_ENOMEM;
    for (int64_t i = 0; rc == 0 && i < len; i++) {
        nf_perm_glm_draw(&g->blocks, g->seeds[p0 + i], src, sign, scratch);
        method_rows(g, k, src, sign, R + i * k->r * g->n, work);
    }
    free(src);
    free(scratch);
    free(sign);
    free(work);
    return rc;
}

/* The maxima of a chunk (cmax: len, R: its rows) inside some voxel's window
 * again in double into cmax_d (NAN for the others, which are never compared
 * in double): the largest over the voxels that can hold the maximum, those
 * within twice the widest window of the float maximum (a value's round-off
 * grows with its size, and a window is 4 x a first-order bound of it at the
 * observed value), found in the tiles whose maximum is that close, their
 * GEMM values computed again. */
static int near_maxima(const struct glm_ctx *g, const struct glm_con *k, const float *R, int64_t len, int64_t n_tiles,
                       const float *tile_max, const float *cmax, double *cmax_d, const struct nf_run *run)
{
    const int64_t n = g->n, V = g->V, r = k->r;
    float *G = NULL, *q = NULL;
    for (int64_t i = 0; i < len; i++) {
        cmax_d[i] = NAN;
        if (!in_some_window(k, cmax[i]))
            continue;
        if (!G && (!(G = nf_malloc((size_t)(r * GLM_TILE) * sizeof *G)) || !(q = nf_malloc(GLM_TILE * sizeof *q)))) {
            free(G);
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        }
        const float below = cmax[i] - 2.0f * k->w_max;
        double m_d = -INFINITY;
        for (int64_t t = 0; t < n_tiles; t++) {
            if (!(tile_max[t * len + i] >= below))
                continue;
            int64_t v0 = t * GLM_TILE, nv = V - v0 < GLM_TILE ? V - v0 : GLM_TILE;
            /* the values the team compared (the same kernel), again */
            struct nf_glm_epi e = epi_of(g, k, G, nv, v0, nv, 1);
            float top;
            if (nf_glm_tile_fused(r, k->is_f)) {
                g->K->glm_tile(&e, R + i * r * n, k->E + v0, n, V, q, &top, NULL, NULL, NULL);
            } else {
                g->K->sgemm(false, false, r, nv, n, 1.0f, R + i * r * n, n, k->E + v0, V, 0.0f, G, nv);
                g->K->glm_epilogue(&e, q, &top, NULL, NULL, NULL);
            }
            for (int64_t v = 0; v < nv; v++)
                if (q[v] >= below) {
                    double y = q_double(g, k, R + i * r * n, v0 + v);
                    m_d = y > m_d ? y : m_d;
                }
        }
        cmax_d[i] = m_d;
    }
    free(G);
    free(q);
    return 0;
}

static int run_chunk(const struct glm_ctx *g, const struct glm_con *k, const struct nf_run *run, int64_t p0,
                     int64_t len, int threads, float *R, uint32_t *ccount, float *tile_max, float *cmax,
                     double *cmax_d)
{
    if (chunk_rows(g, k, p0, len, R) < 0)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    struct glm_chunk w = { .g = g, .k = k, .R = R, .len = len, .count = ccount, .tile_max = tile_max,
                           .run = run };
    uint32_t *Rq = NULL;
    if (k->i8) {   /* the rows after each permutation's first in byte quads; a running maximum per thread */
        const int64_t n = g->n, n4 = (n + 3) / 4, r1 = k->r - 1;
        if (!(Rq = nf_malloc((size_t)(len * r1 * n4) * sizeof *Rq)) ||
            !(w.run_max = nf_malloc((size_t)(threads * len) * sizeof *w.run_max))) {
            free(Rq);
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        }
        for (int64_t i = 0; i < len; i++)
            for (int64_t m = 1; m <= r1; m++)
                nf_u8_quads(R + (i * k->r + m) * n, n, k->row_step[m - 1], Rq + (i * r1 + m - 1) * n4);
        for (int64_t i = 0; i < threads * len; i++)
            w.run_max[i] = -FLT_MAX;
        w.Rq = Rq;
    }
    w.n_tiles = (g->V + GLM_TILE - 1) / GLM_TILE;
    memset(ccount, 0, (size_t)g->V * sizeof *ccount);
    nf_perm_run_threads(glm_team, &w, threads);
    free(Rq);
    /* the maxima: of the threads' running maxima (bytes: the tile maxima are only bounds), else of the tiles' */
    for (int64_t i = 0; i < len; i++) {
        float m = -FLT_MAX;
        if (k->i8)
            for (int64_t s = 0; s < threads; s++)
                m = w.run_max[s * len + i] > m ? w.run_max[s * len + i] : m;
        else
            for (int64_t t = 0; t < w.n_tiles; t++)
                m = tile_max[t * len + i] > m ? tile_max[t * len + i] : m;
        cmax[i] = m;
    }
    free(w.run_max);
    if (atomic_load(&w.interrupted))
        return NF_FAIL(run->err, NF_EINTR, "interrupted");
    if (atomic_load(&w.failed))
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory for a chunk of permutations");
    return near_maxima(g, k, R, len, w.n_tiles, tile_max, cmax, cmax_d, run);
}

/* ---- p-values ---- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Family-wise p by the maximum over voxels: a maximum at or above a voxel's
 * window counts, one below it does not, one inside it is compared in double
 * (null_max_d, from the chunks). */
static int fwe_pvalues(const struct glm_ctx *g, const struct glm_con *k, float *pf, const struct nf_run *run)
{
    const int64_t M = g->M, V = g->V;
    float *sorted = nf_malloc((size_t)M * sizeof *sorted);
    if (!sorted)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    memcpy(sorted, k->null_max, (size_t)M * sizeof *sorted);
    qsort(sorted, (size_t)M, sizeof *sorted, cmp_float);
    for (int64_t v = 0; v < V; v++) {
        pf[v] = 1.0f;
        if (k->flat[v])
            continue;
        /* maxima >= hi count; those in [lo, hi) are decided in double */
        int64_t a = 0, b = M;
        while (a < b) {
            int64_t mid = (a + b) / 2;
            if (sorted[mid] < k->hi[v])
                a = mid + 1;
            else
                b = mid;
        }
        int64_t count = M - a;
        if (a > 0 && sorted[a - 1] >= k->lo[v])
            for (int64_t i = 0; i < M; i++)
                count += k->null_max[i] >= k->lo[v] && k->null_max[i] < k->hi[v] && k->null_max_d[i] >= k->q_obs_d[v];
        pf[v] = (float)(((double)count + 1.0) / ((double)M + 1.0));
    }
    free(sorted);
    return 0;
}

/* ---- TFCE ---- */

/* Whether the cluster-forming thresholds given cover the contrasts: the t
 * contrasts' on t (cluster_threshold), the F contrasts' on F
 * (f_cluster_threshold), or cluster_p for both; else why not. Resolve and
 * run both ask. */
static bool cluster_thresholds_incomplete(const struct permute_params *p, char *why, size_t len)
{
    bool t_T = !isnan(p->cluster_threshold), f_T = !isnan(p->f_cluster_threshold), by_p = !isnan(p->cluster_p);
    if (t_T && by_p)
        snprintf(why, len, "give cluster_threshold or cluster_p, not both (both set the cluster-forming threshold)");
    else if (f_T && by_p)
        snprintf(why, len, "give f_cluster_threshold or cluster_p, not both (cluster_p sets the F contrasts' "
                 "cluster-forming threshold too, through the F distribution)");
    else if (p->f_contrasts.n && t_T && !f_T)
        snprintf(why, len, "cluster_threshold is on t's scale, for the t contrasts; the F contrasts need "
                 "f_cluster_threshold (on F's scale, as randomise -F) or cluster_p instead (through t and F)");
    else if (p->contrasts.n && f_T && !t_T)
        snprintf(why, len, "f_cluster_threshold is on F's scale, for the F contrasts; the t contrasts need "
                 "cluster_threshold too, or cluster_p instead for both");
    else
        return false;
    return true;
}

/* A contrast's cluster-forming threshold: cluster_p through Student's t with
 * the design's n - p degrees of freedom, or through F with (the contrast's
 * rows, n - p) — its rows are independent (nf_perm_glm_contrast_basis), so
 * their count is its rank; else the threshold given for its kind. */
static double cluster_threshold_of(const struct glm_ctx *g, const struct glm_con *k)
{
    const struct permute_params *prm = g->prm;
    if (!isnan(prm->cluster_p))
        return k->is_f ? nf_f_isf(prm->cluster_p, (double)k->s, g->dof) : nf_perm_t_isf(prm->cluster_p, g->dof);
    return k->is_f ? prm->f_cluster_threshold : prm->cluster_threshold;
}

/* The voxel graph, one TFCE and/or cluster plan per contrast, the observed
 * maps' TFCE and clusters (stat: C x V). */
static int spatial_begin(struct glm_ctx *g, const struct nf_run *run, const float *stat, bool tfce, bool clusters)
{
    const struct permute_params *prm = g->prm;
    const struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    const int64_t C = g->C, V = g->V, M = g->M ? g->M : 1;
    struct nf_tfce_work w = { 0 };
    int rc = 0;
    if (!geom || geom->n_voxels != V)
        return RUN_FAIL(run, NF_EUSAGE, "%s needs data whose columns are voxels of a grid (the output of a mask node)",
                        tfce ? "tfce" : "cluster inference");
    NF_TRY(rc = nf_voxel_graph_build(geom, (int)prm->connectivity, &g->graph, run->err));
    if (tfce) {
        g->plan = nf_calloc((size_t)C, sizeof *g->plan);
        g->tfce_obs = nf_malloc((size_t)(C * V) * sizeof *g->tfce_obs);
        g->null_tfce = nf_malloc((size_t)(C * M) * sizeof *g->null_tfce);
        if (!g->plan || !g->tfce_obs || !g->null_tfce)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        for (int64_t c = 0; c < C; c++)
            NF_TRY(rc = nf_tfce_plan_init(&g->plan[c], &g->graph, g->con[c].is_f ? NF_TAIL_UPPER : g->tail,
                                          prm->tfce_e, prm->tfce_h, (int)prm->tfce_steps, run->err));
    }
    if (clusters) {
        char why[400];
        if (cluster_thresholds_incomplete(prm, why, sizeof why))
            return RUN_FAIL(run, NF_EUSAGE, "%s", why);
        g->cluster_T = nf_malloc((size_t)C * sizeof *g->cluster_T);
        g->cplan = nf_calloc((size_t)C, sizeof *g->cplan);
        g->cluster_ids = nf_malloc((size_t)(C * V) * sizeof *g->cluster_ids);
        g->cluster_obs = nf_malloc((size_t)(C * V) * sizeof *g->cluster_obs);
        g->n_clusters = nf_calloc((size_t)C, sizeof *g->n_clusters);
        g->null_csize = nf_malloc((size_t)(C * M) * sizeof *g->null_csize);
        g->null_cmass = nf_malloc((size_t)(C * M) * sizeof *g->null_cmass);
        if (!g->cluster_T || !g->cplan || !g->cluster_ids || !g->cluster_obs || !g->n_clusters || !g->null_csize ||
            !g->null_cmass)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory for clusters");
        for (int64_t c = 0; c < C; c++) {
            g->cluster_T[c] = cluster_threshold_of(g, &g->con[c]);
            NF_TRY(rc = nf_cluster_plan_init(&g->cplan[c], &g->graph, g->con[c].is_f ? NF_TAIL_UPPER : g->tail,
                                             g->cluster_T[c], run->err));
        }
    }
    NF_TRY(rc = nf_tfce_work_init(&w, &g->graph, tfce ? (int)prm->tfce_steps : 0, run->err));
    for (int64_t c = 0; c < C; c++) {
        if (tfce)
            nf_tfce_map(&g->plan[c], &w, stat + c * V, g->tfce_obs + c * V);
        if (clusters)
            g->n_clusters[c] = nf_clusters_label(&g->cplan[c], &w, stat + c * V, g->cluster_ids + c * V,
                                                 g->cluster_obs + c * V);
    }
    g->tfce = tfce;
    g->clusters = clusters;
fail:
    nf_tfce_work_release(&w);
    return rc;
}

/* Each permutation's whole map of one chunk and contrast (R: its rows), its
 * max |TFCE| and its largest cluster size and mass (as asked for), a
 * permutation per thread at a time. */
struct glm_tfce_chunk {
    const struct glm_ctx *g;
    const struct glm_con *k;
    int64_t c, p0, len;
    const float *R;
    const struct nf_run *run;
    atomic_long next;
    atomic_int failed, interrupted;
};

static void *glm_tfce_team(void *arg)
{
    struct glm_tfce_chunk *w = arg;
    const struct glm_ctx *g = w->g;
    const struct glm_con *k = w->k;
    const int64_t n = g->n, V = g->V, r = k->r;
    struct nf_error err = { 0 };
    struct nf_tfce_work work = { 0 };
    float *G = nf_malloc((size_t)(r * V) * sizeof *G), *map = nf_malloc((size_t)V * sizeof *map);
    if (!G || !map || nf_tfce_work_init(&work, &g->graph, g->tfce ? (int)g->prm->tfce_steps : 0, &err) < 0) {
        atomic_store(&w->failed, 1);
        goto done;
    }
    for (int64_t i; !atomic_load(&w->failed) && (i = atomic_fetch_add(&w->next, 1)) < w->len;) {
        if (nf_run_interrupted(w->run)) {
            atomic_store(&w->interrupted, 1);
            atomic_store(&w->failed, 1);
            break;
        }
        g->K->sgemm(false, false, r, V, n, 1.0f, w->R + i * r * n, n, k->E, V, 0.0f, G, V);
        for (int64_t v = 0; v < V; v++) {
            if (k->flat[v]) {
                map[v] = 0;
                continue;
            }
            float num = 0, rss = k->ss[v];
            for (int64_t m = 0; m < r; m++) {
                float b = G[m * V + v];
                rss -= b * b;
                num += m < k->s ? b * b : 0;
            }
            rss = rss > k->floor_[v] ? rss : k->floor_[v];
            map[v] = k->is_f ? num / (float)k->s / (rss / (float)g->dof) : G[v] / sqrtf(rss / (float)g->dof);
        }
        if (g->tfce)
            g->null_tfce[w->c * g->M + w->p0 + i] = nf_tfce_max(&g->plan[w->c], &work, map);
        if (g->clusters) {
            int64_t size = 0;
            double mass = 0;
            nf_clusters_max(&g->cplan[w->c], &work, map, &size, &mass);
            g->null_csize[w->c * g->M + w->p0 + i] = (double)size;
            g->null_cmass[w->c * g->M + w->p0 + i] = mass;
        }
    }
done:
    nf_tfce_work_release(&work);
    free(G);
    free(map);
    return NULL;
}

static int tfce_chunk(const struct glm_ctx *g, int64_t c, const struct nf_run *run, const float *R, int64_t p0,
                      int64_t len, int threads)
{
    struct glm_tfce_chunk w = { .g = g, .k = &g->con[c], .c = c, .p0 = p0, .len = len, .R = R, .run = run };
    nf_perm_run_threads(glm_tfce_team, &w, threads);
    if (atomic_load(&w.interrupted))
        return NF_FAIL(run->err, NF_EINTR, "interrupted");
    if (atomic_load(&w.failed))
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory for the TFCE maps of a chunk of permutations");
    return 0;
}

/* The TFCE maps, their FWE p by the maximum |TFCE| and the null maxima. */
static int tfce_outputs(const struct glm_ctx *g, const struct nf_run *run, const char *const *names,
                        struct nf_value **out)
{
    const int64_t C = g->C, V = g->V, M = g->M;
    struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    float *sorted = nf_malloc((size_t)M * sizeof *sorted);
    int rc = 0;
    if (!sorted)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    if (!(out[PERMUTE_OUT_TFCE] = nf_value_new_matrix(C, V, geom, run->err)) ||
        !(out[PERMUTE_OUT_P_TFCE_FWE] = nf_value_new_matrix(C, V, geom, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_TFCE] = nf_value_new_matrix(M, C, NULL, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    struct nf_matrix *nm = &out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat;
    NF_TRY(rc = nf_matrix_set_col_names(out[PERMUTE_OUT_NULL_MAX_TFCE], names, run->err));
    for (int64_t c = 0; c < C; c++) {
        const struct glm_con *k = &g->con[c];
        for (int64_t i = 0; i < M; i++)
            nm->data[i * C + c] = sorted[i] = g->null_tfce[c * M + i];
        qsort(sorted, (size_t)M, sizeof *sorted, cmp_float);
        float *t = out[PERMUTE_OUT_TFCE]->u.mat.data + c * V, *pf = out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data + c * V;
        for (int64_t v = 0; v < V; v++) {
            float x = fabsf(g->tfce_obs[c * V + v]);
            int64_t a = 0, b = M;   /* the first null maximum >= x */
            while (a < b) {
                int64_t mid = (a + b) / 2;
                if (sorted[mid] < x)
                    a = mid + 1;
                else
                    b = mid;
            }
            t[v] = g->tfce_obs[c * V + v];
            pf[v] = k->flat[v] ? 1.0f : (float)(((double)(M - a) + 1.0) / ((double)M + 1.0));
        }
    }
    for (int o = PERMUTE_OUT_TFCE; o <= PERMUTE_OUT_P_TFCE_FWE; o++)
        NF_TRY(rc = nf_matrix_set_row_names(out[o], names, run->err));
    nf_value_set_stat(out[PERMUTE_OUT_TFCE], NF_STAT_NONE, 0,
                      "threshold-free cluster enhancement of each contrast's statistic (rows: contrasts)");
    nf_value_set_stat(out[PERMUTE_OUT_P_TFCE_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value by the maximum TFCE over voxels, per contrast");
    nf_value_set_stat(out[PERMUTE_OUT_NULL_MAX_TFCE], NF_STAT_NONE, 0,
                      "maximum |TFCE| over voxels of each random permutation, one column per contrast");
fail:
    free(sorted);
    return rc;
}

/* Cluster-level FWE per contrast (rows of the maps, columns of the null
 * maxima) and one clusters table with the contrast's name first. */
static int cluster_outputs(const struct glm_ctx *g, const struct nf_run *run, const char *const *names,
                           struct nf_value **out)
{
    const int64_t C = g->C, V = g->V, M = g->M;
    struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    int64_t total = 0;
    for (int64_t c = 0; c < C; c++)
        total += g->n_clusters[c];
    double *p_size = nf_malloc((size_t)(V + 1) * sizeof *p_size), *p_mass = nf_malloc((size_t)(V + 1) * sizeof *p_mass);
    int rc = 0;
    if (!p_size || !p_mass) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (!(out[PERMUTE_OUT_CLUSTER_P_FWE] = nf_value_new_matrix(C, V, geom, run->err)) ||
        !(out[PERMUTE_OUT_CLUSTER_MASS_P_FWE] = nf_value_new_matrix(C, V, geom, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE] = nf_value_new_matrix(M, C, NULL, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS] = nf_value_new_matrix(M, C, NULL, run->err)) ||
        !(out[PERMUTE_OUT_CLUSTERS] = nf_value_new_table(total, 1 + NF_PERM_CLUSTER_COLUMNS, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    struct nf_value *tab = out[PERMUTE_OUT_CLUSTERS];
    NF_TRY(rc = nf_table_column_string(tab, 0, "contrast", run->err));
    NF_TRY(rc = nf_perm_cluster_columns(tab, 1, run->err));
    for (int64_t c = 0, row = 0; c < C; c++) {
        const int64_t n = g->n_clusters[c];
        for (int64_t i = 0; i < M; i++) {
            out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.data[i * C + c] = (float)g->null_csize[c * M + i];
            out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data[i * C + c] = (float)g->null_cmass[c * M + i];
        }
        NF_TRY(rc = nf_perm_cluster_pvalues(g->null_csize + c * M, g->null_cmass + c * M, M, (double)M + 1.0, 1.0,
                                            g->cluster_obs + c * V, n, g->cluster_ids + c * V, V, p_size, p_mass,
                                            out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data + c * V,
                                            out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data + c * V, run->err));
        for (int64_t k = 0; k < n; k++, row++) {
            if (!(tab->u.tab.cols[0].str[row] = nf_strdup(names[c]))) {
                rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            nf_perm_cluster_row(tab, 1, row, geom, &g->cluster_obs[c * V + k], k + 1, p_size[k], p_mass[k]);
        }
    }
    for (int o = PERMUTE_OUT_CLUSTER_P_FWE; o <= PERMUTE_OUT_CLUSTER_MASS_P_FWE; o++)
        NF_TRY(rc = nf_matrix_set_row_names(out[o], names, run->err));
    for (int o = PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE; o <= PERMUTE_OUT_NULL_MAX_CLUSTER_MASS; o++)
        NF_TRY(rc = nf_matrix_set_col_names(out[o], names, run->err));
    /* the thresholds: "t T" (the t contrasts share one), then "F T (name)" per F contrast */
    char at[600], what[800];
    int used = 0;
    for (int64_t c = 0; c < C && used < (int)sizeof at; c++)
        if (g->con[c].is_f)
            used += snprintf(at + used, sizeof at - (size_t)used, "%sF %.6g (%s)", used ? ", " : "", g->cluster_T[c],
                             g->con[c].name);
        else if (c == 0)
            used += snprintf(at + used, sizeof at - (size_t)used, "t %.6g", g->cluster_T[c]);
    snprintf(what, sizeof what, "largest cluster size (voxels) beyond %s of each random permutation, one column "
             "per contrast: p = (count + 1) / (N + 1)", at);
    nf_value_set_stat(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE], NF_STAT_NONE, 0, what);
    snprintf(what, sizeof what, "largest cluster mass beyond %s of each random permutation, one column per "
             "contrast: p = (count + 1) / (N + 1)", at);
    nf_value_set_stat(out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS], NF_STAT_NONE, 0, what);
    nf_value_set_stat(out[PERMUTE_OUT_CLUSTER_P_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value of each voxel's cluster by the maximum cluster size, per contrast");
    nf_value_set_stat(out[PERMUTE_OUT_CLUSTER_MASS_P_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value of each voxel's cluster by the maximum cluster mass, per contrast");
fail:
    free(p_size);
    free(p_mass);
    return rc;
}

/* ---- outputs ---- */

static int info_table(const struct glm_ctx *g, uint32_t seed, struct nf_value **out, struct nf_error *err)
{
    static const char *const tails[] = { "two", "upper", "lower" };
    static const char *const exchanges[] = { "permute", "sign_flip", "both" };
    enum { ROWS = 12 };
    char vals[ROWS][160];
    const char *keys[ROWS] = { "test", "statistic", "tail", "permutations", "seed", "subjects", "voxels",
                               "regressors", "dof", "exchange", "blocks", "nuisance" };
    snprintf(vals[0], sizeof vals[0], "glm (%s)",
             g->prm->nuisance_method == PERM_NUISANCE_SMITH ? "Smith" : "Freedman-Lane");
    bool any_f = g->C > (int64_t)g->prm->contrasts.n;
    snprintf(vals[1], sizeof vals[1], "%s", any_f ? "t, F (upper tail)" : "t");
    snprintf(vals[2], sizeof vals[2], "%s", tails[g->tail]);
    snprintf(vals[3], sizeof vals[3], "%lld", (long long)g->M);
    snprintf(vals[4], sizeof vals[4], "%u", seed);
    snprintf(vals[5], sizeof vals[5], "%lld", (long long)g->n);
    snprintf(vals[6], sizeof vals[6], "%lld", (long long)g->V);
    int at = 0;
    for (int64_t j = 0; j < g->p && at < (int)sizeof vals[7] - 1; j++)
        at += snprintf(vals[7] + at, sizeof vals[7] - (size_t)at, "%s%s", j ? ", " : "", g->cols[j]);
    snprintf(vals[8], sizeof vals[8], "%g", g->dof);
    snprintf(vals[9], sizeof vals[9], "%s", exchanges[g->prm->exchange]);
    if (g->blocks.n_blocks > 1 || g->blocks.whole)
        snprintf(vals[10], sizeof vals[10], "%lld%s", (long long)g->blocks.n_blocks,
                 g->blocks.whole ? " (permuted as wholes)" : " (permuted within)");
    else
        snprintf(vals[10], sizeof vals[10], "none");
    at = 0;
    vals[11][0] = 0;
    for (int64_t c = 0; c < g->C && at < (int)sizeof vals[11] - 1; c++)
        at += snprintf(vals[11] + at, sizeof vals[11] - (size_t)at, "%s%s: %lld of %lld directions moved",
                       c ? "; " : "", g->con[c].name, (long long)g->con[c].moved,
                       (long long)(g->p - g->con[c].s));
    const char *vp[ROWS];
    for (int i = 0; i < ROWS; i++)
        vp[i] = vals[i];
    return nf_perm_key_value_table(keys, vp, ROWS, out, err);
}

static void label_outputs(const struct glm_ctx *g, struct nf_value **out)
{
    static const char *const tails[] = { "two-tailed", "upper tail", "lower tail" };
    char what[200];
    if (g->C > (int64_t)g->prm->contrasts.n)
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_NONE, 0,
                          "GLM statistics (rows: the t contrasts, then the F contrasts)");
    else
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_T, g->dof, "GLM t contrast (rows: contrasts)");
    snprintf(what, sizeof what, "permutation p-value, uncorrected (Freedman-Lane, %s, %lld permutations)",
             tails[g->tail], (long long)g->M);
    nf_value_set_stat(out[PERMUTE_OUT_P], NF_STAT_P, 0, what);
    snprintf(what, sizeof what, "family-wise corrected p-value by the maximum statistic over voxels, per contrast "
             "(%s, %lld permutations)", tails[g->tail], (long long)g->M);
    nf_value_set_stat(out[PERMUTE_OUT_P_FWE], NF_STAT_P_FWE, 0, what);
    nf_value_set_stat(out[PERMUTE_OUT_Q_FDR], NF_STAT_Q_FDR, 0, "Benjamini-Hochberg FDR q-value of p, per contrast");
    nf_value_set_stat(out[PERMUTE_OUT_NULL_MAX], NF_STAT_NONE, 0,
                      "maximum statistic over voxels of each random permutation, one column per contrast: "
                      NF_NULL_MAX_RANDOM);
}

static int finish(struct glm_ctx *g, const struct nf_run *run, uint32_t seed, struct nf_value **out)
{
    const int64_t V = g->V, M = g->M, C = g->C;
    const char **names = nf_malloc((size_t)C * sizeof *names);
    int rc = 0;
    if (!names)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t c = 0; c < C; c++) {
        struct glm_con *k = &g->con[c];
        names[c] = k->name;
        float *p = out[PERMUTE_OUT_P]->u.mat.data + c * V, *pf = out[PERMUTE_OUT_P_FWE]->u.mat.data + c * V;
        for (int64_t v = 0; v < V; v++)
            p[v] = k->flat[v] ? 1.0f : (float)(((double)k->count[v] + 1.0) / ((double)M + 1.0));
        NF_TRY(rc = fwe_pvalues(g, k, pf, run));
        NF_TRY(rc = nf_perm_bh_qvalues(p, k->flat, V, out[PERMUTE_OUT_Q_FDR]->u.mat.data + c * V, run->err));
    }
    if (!(out[PERMUTE_OUT_NULL_MAX] = nf_value_new_matrix(M, C, NULL, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    struct nf_matrix *nm = &out[PERMUTE_OUT_NULL_MAX]->u.mat;
    NF_TRY(rc = nf_matrix_set_col_names(out[PERMUTE_OUT_NULL_MAX], names, run->err));
    for (int64_t c = 0; c < C; c++) {
        for (int64_t i = 0; i < M; i++)
            nm->data[i * C + c] = stat_of_q(g, &g->con[c], g->con[c].null_max[i]);
    }
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_Q_FDR; o++)
        NF_TRY(rc = nf_matrix_set_row_names(out[o], names, run->err));
    NF_TRY(rc = info_table(g, seed, &out[PERMUTE_OUT_INFO], run->err));
    label_outputs(g, out);
    if (g->tfce)
        NF_TRY(rc = tfce_outputs(g, run, names, out));
    if (g->clusters)
        NF_TRY(rc = cluster_outputs(g, run, names, out));
    for (int o = 0; o < PERMUTE_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    free(names);
    return rc;
}

static void release(struct glm_ctx *g)
{
    for (int64_t c = 0; g->con && c < g->C; c++) {
        struct glm_con *k = &g->con[c];
        free(k->name);
        free(k->w);
        free(k->basis);
        free(k->qm);
        free(k->E);
        free(k->Eq);
        free(k->off);
        free(k->sv);
        free(k->dg);
        free(k->dr);
        free(k->ss_d);
        free(k->ss);
        free(k->floor_);
        free(k->cap);
        free(k->lo);
        free(k->hi);
        free(k->q_obs_d);
        free(k->flat);
        free(k->count);
        free(k->null_max);
        free(k->null_max_d);
        free(k->win_lo);
        free(k->win_hi_max);
    }
    free(g->con);
    free(g->X);
    free(g->cols);
    free(g->blocks.start);
    free(g->blocks.members);
    free(g->block_label_at);
    free(g->seeds);
    for (int64_t c = 0; g->plan && c < g->C; c++)
        nf_tfce_plan_release(&g->plan[c]);
    free(g->cplan);
    free(g->cluster_T);
    free(g->cluster_ids);
    free(g->cluster_obs);
    free(g->n_clusters);
    free(g->null_csize);
    free(g->null_cmass);
    free(g->plan);
    free(g->tfce_obs);
    free(g->null_tfce);
    nf_voxel_graph_release(&g->graph);
}

/* Checkpoint of chunk ci: per contrast, V counts, len maxima in float, the
 * same in double (then, with TFCE, len maxima of |TFCE|). */
static int64_t ckpt_bytes(const struct glm_ctx *g, int64_t len)
{
    return g->C * (g->V * (int64_t)sizeof(uint32_t) + len * (int64_t)(sizeof(float) + sizeof(double)) +
                   len * (int64_t)sizeof(float) * g->tfce + 2 * len * (int64_t)sizeof(double) * g->clusters);
}

int nf_perm_glm_run(struct nf_run *run)
{
    const struct permute_params *prm = run->params;
    struct glm_ctx g = { .prm = prm, .K = nf_kernels_cpu(), .tail = prm->tail };
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    float *R = NULL, *tile_max = NULL, *cmax = NULL;
    double *cmax_d = NULL;
    uint32_t *ccount = NULL;
    char *ck = NULL;
    int64_t *done_idx = NULL;
    bool *have = NULL, blas_set = false;
    int rc = 0, blas = nf_blas_threads();
    const char *id = nf_node_id(run->node);

    NF_TRY(rc = gather(&g, run));
    g.M = prm->n_permutations;
    uint32_t seed = (uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env ? run->env->seed : 0);
    if (!(g.seeds = nf_malloc((size_t)g.M * sizeof *g.seeds))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    nf_mt_seeds(seed, g.seeds, g.M);
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_Q_FDR; o++)
        if (!(out[o] = nf_value_new_matrix(g.C, g.V, run->in[PERMUTE_IN_DATA]->u.mat.geom, run->err))) {
            rc = run->err->code;
            goto fail;
        }
    int64_t r_max = 1, n_flat = 0;
    for (int64_t c = 0; c < g.C; c++) {
        NF_TRY(rc = prepare_contrast(&g, &g.con[c], out[PERMUTE_OUT_STAT]->u.mat.data + c * g.V, run));
        r_max = g.con[c].r > r_max ? g.con[c].r : r_max;
        n_flat = g.con[c].n_flat > n_flat ? g.con[c].n_flat : n_flat;
    }
    bool tfce, clusters;
    nf_perm_spatial_wanted(prm, run, &tfce, &clusters);
    if (tfce || clusters)
        NF_TRY(rc = spatial_begin(&g, run, out[PERMUTE_OUT_STAT]->u.mat.data, tfce, clusters));
    if (n_flat)
        nf_warn(id, "%lld voxel%s with zero variance after the nuisance regressors: t 0, p = 1, left out of the "
                "maximum and FDR", (long long)n_flat, n_flat == 1 ? "" : "s");
    /* chunks of permutations (every contrast), resumed from checkpoints */
    int64_t chunk = prm->chunk, n_chunks = (g.M + chunk - 1) / chunk, n_tiles = (g.V + GLM_TILE - 1) / GLM_TILE;
    R = nf_malloc((size_t)(chunk * r_max * g.n) * sizeof *R);
    tile_max = nf_malloc((size_t)(n_tiles * chunk) * sizeof *tile_max);
    cmax = nf_malloc((size_t)chunk * sizeof *cmax);
    cmax_d = nf_malloc((size_t)chunk * sizeof *cmax_d);
    ccount = nf_malloc((size_t)g.V * sizeof *ccount);
    ck = nf_malloc((size_t)ckpt_bytes(&g, chunk));
    have = nf_calloc((size_t)n_chunks, sizeof *have);
    if (!R || !tile_max || !cmax || !cmax_d || !ccount || !ck || !have) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for a chunk of %lld permutations", (long long)chunk);
        goto fail;
    }
    size_t n_done = 0;
    int64_t resumed = 0;
    nf_ckpt_total(run->ckpt, n_chunks);
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &done_idx, &n_done, run->err));
    for (size_t i = 0; i < n_done; i++) {
        int64_t ci = done_idx[i] - nf_perm_ckpt_index(chunk, 0);
        void *data = NULL;
        size_t bytes = 0;
        if (ci < 0 || ci >= n_chunks || have[ci] || nf_ckpt_get(run->ckpt, done_idx[i], &data, &bytes, run->err) != 1)
            continue;
        int64_t len = g.M - ci * chunk < chunk ? g.M - ci * chunk : chunk;
        if (bytes == (size_t)ckpt_bytes(&g, len)) {
            const char *at = data;
            for (int64_t c = 0; c < g.C; c++) {
                const uint32_t *cnt = (const uint32_t *)at;
                for (int64_t v = 0; v < g.V; v++)
                    g.con[c].count[v] += cnt[v];
                at += g.V * (int64_t)sizeof(uint32_t);
                memcpy(g.con[c].null_max + ci * chunk, at, (size_t)len * sizeof(float));
                at += len * (int64_t)sizeof(float);
                memcpy(g.con[c].null_max_d + ci * chunk, at, (size_t)len * sizeof(double));
                at += len * (int64_t)sizeof(double);
                if (g.tfce) {
                    memcpy(g.null_tfce + c * g.M + ci * chunk, at, (size_t)len * sizeof(float));
                    at += len * (int64_t)sizeof(float);
                }
                if (g.clusters) {
                    memcpy(g.null_csize + c * g.M + ci * chunk, at, (size_t)len * sizeof(double));
                    memcpy(g.null_cmass + c * g.M + ci * chunk, at + len * (int64_t)sizeof(double),
                           (size_t)len * sizeof(double));
                    at += 2 * len * (int64_t)sizeof(double);
                }
            }
            have[ci] = true;
            resumed++;
        }
        free(data);
    }
    if (resumed)
        nf_log("nlflow: node '%s': resumed %lld of %lld chunks from checkpoints", id, (long long)resumed,
               (long long)n_chunks);
    int threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    nf_blas_set_threads(1);   /* tiles over threads, single-threaded GEMMs */
    blas_set = true;
    int64_t done = resumed * chunk;
    for (int64_t ci = 0; ci < n_chunks; ci++) {
        if (have[ci] || nf_ckpt_skip(run->ckpt, ci))
            continue;
        int64_t p0 = ci * chunk, len = g.M - p0 < chunk ? g.M - p0 : chunk;
        char *at = ck;
        for (int64_t c = 0; c < g.C; c++) {
            struct glm_con *k = &g.con[c];
            NF_TRY(rc = run_chunk(&g, k, run, p0, len, threads, R, ccount, tile_max, cmax, cmax_d));
            if (g.tfce || g.clusters)
                NF_TRY(rc = tfce_chunk(&g, c, run, R, p0, len, threads));
            for (int64_t v = 0; v < g.V; v++)
                k->count[v] += ccount[v];
            memcpy(k->null_max + p0, cmax, (size_t)len * sizeof *cmax);
            memcpy(k->null_max_d + p0, cmax_d, (size_t)len * sizeof *cmax_d);
            memcpy(at, ccount, (size_t)g.V * sizeof *ccount);
            at += g.V * (int64_t)sizeof(uint32_t);
            memcpy(at, cmax, (size_t)len * sizeof *cmax);
            at += len * (int64_t)sizeof(float);
            memcpy(at, cmax_d, (size_t)len * sizeof *cmax_d);
            at += len * (int64_t)sizeof(double);
            if (g.tfce) {
                memcpy(at, g.null_tfce + c * g.M + p0, (size_t)len * sizeof(float));
                at += len * (int64_t)sizeof(float);
            }
            if (g.clusters) {
                memcpy(at, g.null_csize + c * g.M + p0, (size_t)len * sizeof(double));
                memcpy(at + len * (int64_t)sizeof(double), g.null_cmass + c * g.M + p0, (size_t)len * sizeof(double));
                at += 2 * len * (int64_t)sizeof(double);
            }
        }
        if (ci < n_chunks - 1 || nf_ckpt_partial(run->ckpt))
            nf_ckpt_put(run->ckpt, nf_perm_ckpt_index(chunk, ci), ck, (size_t)ckpt_bytes(&g, len), run->err);
        done = done + len > g.M ? g.M : done + len;
        nf_progress(run, done, g.M, "permutations");
    }
    rc = finish(&g, run, seed, out);
fail:
    if (blas_set)
        nf_blas_set_threads(blas);
    for (int o = 0; o < PERMUTE_N_OUT; o++)
        nf_value_unref(out[o]);
    free(R);
    free(tile_max);
    free(cmax);
    free(cmax_d);
    free(ccount);
    free(ck);
    free(done_idx);
    free(have);
    release(&g);
    return rc;
}

/* ---- shapes, memory, the one-sample case ---- */

/* The design's column names (from its file's header), the blocks column left
 * out when the blocks come from the design; NULL when unknown. */
static char **design_columns(const struct nf_shape *d, const char *skip, size_t *k, char **buf)
{
    *k = 0;
    *buf = NULL;
    if (d->kind != NF_KIND_TABLE || !d->col_names)
        return NULL;
    if (!(*buf = nf_strdup(d->col_names)))
        return NULL;
    size_t lines = 0;
    for (const char *s = *buf; *s; s++)
        lines += *s == '\n';
    char **cols = nf_calloc(lines + 1, sizeof *cols);
    if (!cols)
        return NULL;
    for (char *s = *buf, *nl; *s && (nl = strchr(s, '\n')); s = nl + 1) {
        *nl = '\0';
        if (!skip || strcmp(s, skip) != 0)
            cols[(*k)++] = s;
    }
    return cols;
}

int nf_perm_glm_resolve(struct nf_resolve *r)
{
    const struct permute_params *p = r->params;
    const struct nf_shape *x = &r->in[PERMUTE_IN_DATA], *d = &r->in[PERMUTE_IN_DESIGN], *b = &r->in[PERMUTE_IN_BLOCKS];
    const struct nf_loc *loc = nf_node_loc(r->node);
    const char *id = nf_node_id(r->node);
    const char *bcol = p->blocks_column && p->blocks_column[0] ? p->blocks_column : NULL;
    for (int port = PERMUTE_IN_DATA2; port <= PERMUTE_IN_GROUPS; port++)
        if (r->in[port].kind != NF_KIND_NONE)
            return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "test glm takes 'data', 'design' and 'blocks' (got %s)",
                              port == PERMUTE_IN_DATA2 ? "data2" : port == PERMUTE_IN_COVARIATE ? "covariate" : "groups");
    if (d->kind == NF_KIND_NONE)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "test glm needs a 'design' table (subjects x regressors, named columns), e.g. "
                          "in: {data: maps, design: participants}");
    bool clusters = nf_perm_clusters_asked(p);
    char why[400];
    if (clusters && cluster_thresholds_incomplete(p, why, sizeof why))
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "%s", why);
    if ((p->tfce || clusters) && p->connectivity != 6 && p->connectivity != 18 && p->connectivity != 26)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "connectivity must be 6, 18 or 26 (got %lld)",
                          (long long)p->connectivity);
    if ((p->tfce || clusters) && x->kind != NF_KIND_NONE && !x->has_geom)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "%s needs data whose columns are voxels of a grid (the output of a mask node)",
                          p->tfce ? "tfce" : "cluster inference");
    if (p->contrasts.n + p->f_contrasts.n == 0)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "test glm needs contrasts, e.g. contrasts: [\"age = age\", \"patients_gt_controls = "
                          "patients - controls\"]");
    if (p->whole_blocks && b->kind == NF_KIND_NONE && !bcol)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "whole_blocks needs exchangeability blocks: a 'blocks' input or blocks_column");
    if (d->kind == NF_KIND_TABLE && x->kind == NF_KIND_MATRIX && d->dim[0] > 0 && x->dim[0] > 0 && d->dim[0] != x->dim[0])
        return NF_FAIL_AT(r->err, NF_ESHAPE, loc, id, "the design has %lld rows but data has %lld subjects",
                          (long long)d->dim[0], (long long)x->dim[0]);
    if (bcol && b->kind == NF_KIND_NONE && !nf_shape_has_column(d, bcol)) {
        char cols[512];
        nf_shape_columns_text(d, cols, sizeof cols);
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "the design has no column '%s' for blocks_column (columns: %s)",
                          bcol, cols);
    }
    if (bcol && b->kind == NF_KIND_TABLE && !nf_shape_has_column(b, bcol)) {
        char cols[512];
        nf_shape_columns_text(b, cols, sizeof cols);
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "blocks has no column '%s' (columns: %s)", bcol, cols);
    }
    /* the contrasts against the design's columns, when its header is known */
    size_t k = 0;
    char *buf = NULL;
    char **cols = design_columns(d, b->kind == NF_KIND_NONE ? bcol : NULL, &k, &buf);
    int rc = 0;
    for (size_t i = 0; cols && i < p->contrasts.n + p->f_contrasts.n && rc == 0; i++) {
        char why[512], *name = NULL;
        double *w = NULL;
        int64_t rows = 0;
        bool f = i >= p->contrasts.n;
        size_t at = f ? i - p->contrasts.n : i;
        int e = parse_contrast(f ? p->f_contrasts.v[at] : p->contrasts.v[at], f, (const char *const *)cols, k, &name,
                               &w, &rows, why, sizeof why);
        if (e == NF_ENOMEM)
            rc = NF_FAIL(r->err, NF_ENOMEM, "out of memory");
        else if (e)
            rc = NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "%s[%zu]: %s", f ? "f_contrasts" : "contrasts", at + 1, why);
        free(name);
        free(w);
    }
    free(cols);
    free(buf);
    if (rc < 0)
        return rc;
    if (x->kind == NF_KIND_NONE)
        return 0;
    int64_t C = (int64_t)(p->contrasts.n + p->f_contrasts.n);
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_Q_FDR; o++)
        r->out[o] = (struct nf_shape){ .kind = NF_KIND_MATRIX, .dim = { C, x->dim[1] },
                                       .cols_upper_bound = x->cols_upper_bound, .has_geom = x->has_geom };
    r->out[PERMUTE_OUT_NULL_MAX] = (struct nf_shape){ .kind = NF_KIND_MATRIX, .dim = { p->n_permutations, C } };
    if (p->tfce) {
        r->out[PERMUTE_OUT_TFCE] = r->out[PERMUTE_OUT_P_TFCE_FWE] = r->out[PERMUTE_OUT_STAT];
        r->out[PERMUTE_OUT_NULL_MAX_TFCE] = r->out[PERMUTE_OUT_NULL_MAX];
    }
    if (clusters) {
        r->out[PERMUTE_OUT_CLUSTER_P_FWE] = r->out[PERMUTE_OUT_CLUSTER_MASS_P_FWE] = r->out[PERMUTE_OUT_STAT];
        r->out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE] = r->out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS] =
            r->out[PERMUTE_OUT_NULL_MAX];
        r->out[PERMUTE_OUT_CLUSTERS].kind = NF_KIND_TABLE;
    }
    r->out[PERMUTE_OUT_INFO].kind = NF_KIND_TABLE;
    return 0;
}

/* Per contrast: the residuals (n x V floats, and in bytes), 7 per-voxel arrays and the
 * maxima (TFCE and clusters: see below); one chunk's rows (up to the design's width per permutation) and tile
 * maxima; per thread (16 at most) a GEMM block. */
uint64_t nf_perm_glm_estimate(const struct permute_params *p, const struct nf_shape *in)
{
    uint64_t n = (uint64_t)in[PERMUTE_IN_DATA].dim[0], V = (uint64_t)in[PERMUTE_IN_DATA].dim[1];
    uint64_t C = p->contrasts.n + p->f_contrasts.n ? p->contrasts.n + p->f_contrasts.n : 1, N = (uint64_t)p->n_permutations, chunk = (uint64_t)p->chunk;
    uint64_t width = in[PERMUTE_IN_DESIGN].kind == NF_KIND_TABLE && in[PERMUTE_IN_DESIGN].dim[1] > 0
                         ? (uint64_t)in[PERMUTE_IN_DESIGN].dim[1] : 8;
    uint64_t tiles = V / GLM_TILE + 1;
    /* TFCE: the voxel graph, the observed maps and null maxima, and per thread
     * (16 at most) a workspace (tfce.h), a permutation's GEMM rows and map */
    bool clusters = nf_perm_clusters_asked(p);
    uint64_t tfce = p->tfce || clusters ? V * (uint64_t)(4 * p->connectivity + 40) + C * (V * 4 + N * 4) +
                                              16 * V * (uint64_t)(64 + 4 * p->connectivity + 4 * width + 4)
                                        : 0;
    /* clusters: per contrast the observed ids and clusters and the null sizes and masses */
    tfce += clusters ? C * (V * (4 + sizeof(struct nf_cluster)) + N * 16) : 0;
    /* the byte path (where the CPU has it): E again in bytes, 4 per-voxel arrays and 3 doubles while they
     * are made, the rows in bytes with their steps and per thread a running maximum per permutation */
    uint64_t i8 = C * ((n + 3) / 4 * V * 4 + V * 16) + V * 24 + chunk * width * (n + 3) / 4 * 4 + 16 * chunk * 4;
    return tfce + i8 + C * (n * V * 4 + V * 40 + N * 12) + V * 8 * width + chunk * width * n * 4 +
           tiles * chunk * 12 + N * 4 + (uint64_t)16 * GLM_SUB * width * GLM_TILE * 4 + chunk * 4 * (V + 2);
}

char *nf_perm_glm_one_sample_name(const struct nf_run *run)
{
    const struct permute_params *p = run->params;
    const struct nf_value *d = run->in[PERMUTE_IN_DESIGN], *x = run->in[PERMUTE_IN_DATA];
    if (p->exchange != PERM_EXCHANGE_SIGN_FLIP || p->whole_blocks || run->in[PERMUTE_IN_BLOCKS] ||
        (p->blocks_column && p->blocks_column[0]) || p->contrasts.n != 1 || p->f_contrasts.n || !d || d->kind != NF_KIND_TABLE ||
        d->u.tab.n_cols != 1 || !d->u.tab.cols[0].numeric || !x || d->u.tab.n_rows != x->u.mat.rows ||
        d->u.tab.n_rows < 1)
        return NULL;
    const double *col = d->u.tab.cols[0].num;
    for (int64_t i = 0; i < d->u.tab.n_rows; i++)
        if (!isfinite(col[i]) || col[i] != col[0] || col[0] == 0)
            return NULL;
    char why[256], *name = NULL, *expr = NULL;
    const char *cols[1] = { d->u.tab.cols[0].name };
    double w = 0;
    bool yes = glm_contrast_split(p->contrasts.v[0], &name, &expr, why, sizeof why) == 0 &&
               glm_contrast_weights(expr, cols, 1, &w, why, sizeof why) == 0 && w * col[0] > 0;
    free(expr);
    if (!yes) {
        free(name);
        return NULL;
    }
    return name;
}
