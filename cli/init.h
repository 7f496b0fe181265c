/* init.h — `nlflow init`: a starting pipeline file for a BIDS dataset (init.c). */
#ifndef NF_CLI_INIT_H
#define NF_CLI_INIT_H

#include "core/error.h"

struct nf_init_opts {
    const char *bids;            /* --bids DIR, or NULL: the commented template */
    const char *derivatives;     /* --derivatives DIR, or NULL: BIDS/derivatives/fmriprep when there */
    const char *template_name;   /* --template NAME (templates/NAME.yaml), or NULL: first-level */
};

/* The pipeline text (not yet canonical: the caller formats it): 0 and an
 * owned *text, or <0 with err set (a folder that is not a BIDS dataset, no runs). */
int nf_init_pipeline(const struct nf_init_opts *o, char **text, struct nf_error *err);

#endif
