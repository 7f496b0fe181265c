/* rebuild.h — `nlflow report RESULTS_DIR`: the pipeline that rebuilds a run's
 * HTML report from its outputs folder (rebuild.c); cli.c runs it. */
#ifndef NF_CLI_REBUILD_H
#define NF_CLI_REBUILD_H

#include "core/error.h"

struct nf_rebuild_opts {
    const char *results;     /* the outputs folder of a run */
    const char *summary;     /* --summary FILE, or NULL: the folder's summary.json */
    const char *output;      /* --output FILE, or NULL: RESULTS_DIR/<Name>_report.html */
    const char *title;       /* report parameters passed through, NULL: the node's defaults */
    const char *threshold;
    const char *template_path;
};

struct nf_rebuild {
    char *tmpdir;            /* scratch folder: the pipeline, converted files, the page */
    char *pipeline;          /* the generated pipeline file in tmpdir */
    char *page;              /* where its report node writes the page */
    char *target;            /* where the page goes */
    char *results;           /* the results folder, absolute */
};

/* Read the summary, check every file it lists, and write a pipeline of load
 * nodes and one report node into a fresh scratch folder. 0, or <0 with err
 * set (nothing left behind but what nf_rebuild_release removes). */
int nf_rebuild_prepare(const struct nf_rebuild_opts *o, struct nf_rebuild *rb, struct nf_error *err);
/* After the pipeline ran: put the page at its target (atomically; an
 * existing page there is replaced, and the log says so). */
int nf_rebuild_finish(const struct nf_rebuild *rb, struct nf_error *err);
/* Remove the scratch folder and free rb. */
void nf_rebuild_release(struct nf_rebuild *rb);

#endif
