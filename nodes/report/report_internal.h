/* report_internal.h — what the report node's files share: its parameters,
 * the page being built, and the sections.
 *
 * report.c reads the inputs and picks each one's section: what only the node
 * that made it knows how to show (report_nodes.c: a permutation test's FWE
 * threshold, ridge's chosen alphas, a classifier's confusion matrix, ROI
 * scores by region name), else by what it is (report_sections.c: a map, a
 * column of numbers, a table, a collection). Calls go one way: report.c ->
 * report_nodes.c -> report_sections.c.
 */
#ifndef NF_REPORT_INTERNAL_H
#define NF_REPORT_INTERNAL_H

#include <stdbool.h>

#include "node.h"
#include "io/io.h"
#include "report_page.h"
#include "render.h"

struct report_params {
    char *title;        /* NULL: "<pipeline> report" */
    char *name;         /* file prefix; NULL: the pipeline's name */
    double threshold;   /* statistic maps (t, z, r) show |v| >= threshold */
    double p_below;     /* p maps show p < p_below, as -log10 p */
    char *p_key;        /* NULL, or the input whose p map selects statistic maps' voxels */
    int64_t min_cluster_size;   /* thresholded maps hide smaller clusters */
    char *underlay;     /* a NIfTI file; NULL: the default template; "none": no underlay */
    int64_t mosaic;     /* axial slices in the mosaic */
    struct nf_str_list sources;   /* "key=type.port": where inputs were made (rebuilt pages) */
    char *rebuilt_from;           /* NULL, or what a rebuilt page was made from (the header says) */
};

struct report_ctx {
    const struct report_params *p;
    struct nf_run *run;
    struct report_page pg;
    const struct nf_value *underlay;
    struct nf_label_names names;   /* the atlas input's region names (n == 0: none) */
    int n_colorbars;
    /* the first map's scene and its slice figure: a cluster table's peaks
     * link to views of it (kept until the page is done) */
    struct nf_scene link_scene;
    bool have_link;
    int link_figure;
    /* nodes whose parameters are already on the page (by id, borrowed) */
    const char *shown_params[32];
    size_t n_shown_params;
};

/* Sections by what an input is (report_sections.c); 0 or a negative NF_E*.
 * A map: a 1xV matrix with voxel geometry or a 3-D volume. A table whose
 * rows have peak_x/y/z links them to the first map's slices. */
int report_map_section(struct report_ctx *c, const char *key, const struct nf_value *v);
int report_values_section(struct report_ctx *c, const char *key, const struct nf_matrix *m);
int report_table_section(struct report_ctx *c, const struct nf_table *t);
int report_collection_section(struct report_ctx *c, const char *key, const struct nf_value *v);

/* What the node that made input `key` knows to show (report_nodes.c): adds
 * its sections and sets *handled, or leaves *handled false for report.c's
 * section by kind. src: where the input came from (node_type NULL: unknown). */
int report_node_section(struct report_ctx *c, const char *key, const struct nf_value *v,
                        const struct nf_input_source *src, bool *handled);

/* The permutation threshold of family-wise error rate `alpha`: with the null
 * maxima null[0..n) a voxel is significant (p_fwe < alpha) exactly when its
 * statistic is above the returned value. exact: p_fwe = count / n (every
 * permutation, the identity included), else (count + 1) / (n + 1); count =
 * #{null >= statistic}. +inf when no statistic can be significant (too few
 * permutations), NAN without finite maxima. */
double report_fwe_threshold(const float *null, size_t n, bool exact, double alpha);

#endif
