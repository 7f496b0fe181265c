/* report.h — the `report` node's ports (report.c). */
#ifndef NF_REPORT_H
#define NF_REPORT_H

#include "node.h"

enum { REPORT_IN_UNDERLAY, REPORT_IN_ATLAS, REPORT_IN_EXTRA, REPORT_N_IN };
enum { REPORT_OUT_FILES, REPORT_N_OUT };

extern const struct nf_node_type nf_node_report;

#endif
