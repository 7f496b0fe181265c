/* example_pipeline.h — the unit tests' runs of the example pipelines (the
 * YAML files in pipelines/; test_ridge.c, test_predict.c): each a copy in a
 * scratch folder of its own, so that results land there, not in the source.
 *
 * Header-only, static inline. Include it after <cmocka.h>; `srcdir` in the
 * environment names the source tree (make check sets it), else ".".
 */
#ifndef NF_TESTS_EXAMPLE_PIPELINE_H
#define NF_TESTS_EXAMPLE_PIPELINE_H

#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "core/util.h"

/* Copy pipelines/NAME into a new folder under /tmp and load and plan the copy
 * (every phase must pass; diagnostics into d, which the caller releases).
 * *dir: the folder, for remove_example. */
static inline struct nf_pipeline *load_example(const char *name, char **dir, struct nf_diags *d)
{
    const char *src = getenv("srcdir");
    char tmpl[] = "/tmp/nlflow-test-example-XXXXXX";
    struct nf_error err = { 0 };
    assert_non_null(mkdtemp(tmpl));
    *dir = strdup(tmpl);
    char *from = nf_asprintf("%s/pipelines/%s", src ? src : ".", name), *to = nf_asprintf("%s/%s", *dir, name);
    size_t len = 0;
    char *text = nf_read_file(from, &len, &err);
    assert_non_null(text);
    assert_int_equal(nf_write_file_atomic(to, text, len, &err), 0);
    nf_diags_init(d);
    struct nf_pipeline *p = nf_pipeline_load(to, NULL, d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, d), 0);
    assert_int_equal(nf_place(p, false, d), 0);
    assert_int_equal(nf_plan_memory(p, d), 0);
    free(text);
    free(from);
    free(to);
    return p;
}

/* Remove load_example's folder and free its name. */
static inline void remove_example(char *dir)
{
    char *cmd = nf_asprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(dir);
}

#endif
