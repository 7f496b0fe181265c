/* fmt.h — a pipeline file in canonical form, comments kept (`nlflow fmt`, fmt.c). */
#ifndef NF_FMT_H
#define NF_FMT_H

#include <stddef.h>

#include "core/error.h"

/* The canonical text of a pipeline file's text (path for error locations):
 * 0 and an owned *out, or <0 with err set (syntax errors located). */
int nf_pipeline_format(const char *text, size_t len, const char *path, char **out, struct nf_error *err);

#endif
