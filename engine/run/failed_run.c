/* failed_run.c — a failed run marks the summaries it leaves behind
 * (failed_run.h). A run that fails keeps the previous run's results in the
 * outputs folder (nothing partial is ever written over them), so that nothing
 * is lost; but a reader must not take them for this run's, so each summary's
 * "Status" (summarize writes "complete" as its first member) is replaced by
 * the failure. The summarize node recorded the file it wrote, so the next
 * successful run sees it changed and writes it again.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "failed_run.h"
#include "core/util.h"

#define STATUS_KEY "  \"Status\": "

/* The summary's text with its Status member replaced (or added first). */
static char *with_failed_status(const char *text, const struct nf_error *why)
{
    if (text[0] != '{' || text[1] != '\n')
        return NULL;   /* not a summary summarize wrote */
    const char *rest = text + 2;
    if (strncmp(rest, STATUS_KEY, strlen(STATUS_KEY)) == 0) {
        const char *eol = strchr(rest, '\n');
        if (!eol)
            return NULL;
        rest = eol + 1;
    }
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "{\n" STATUS_KEY "{\"state\": \"failed\", \"note\": \"the last run into this folder failed: "
                   "these results may be an earlier run's\", \"node\": ");
    if (why->node[0])
        nf_strbuf_add_json_str(&sb, why->node);
    else
        nf_strbuf_addf(&sb, "null");
    nf_strbuf_addf(&sb, ", \"at\": ");
    if (why->loc.file) {
        char *at = nf_asprintf("%s:%d:%d", why->loc.file, why->loc.line, why->loc.col);
        nf_strbuf_add_json_str(&sb, at ? at : why->loc.file);
        free(at);
    } else {
        nf_strbuf_addf(&sb, "null");
    }
    nf_strbuf_addf(&sb, ", \"message\": ");
    nf_strbuf_add_json_str(&sb, why->msg);
    nf_strbuf_addf(&sb, "},\n%s", rest);
    if (sb.oom) {
        nf_strbuf_release(&sb);
        return NULL;
    }
    return sb.buf;
}

int nf_outputs_mark_failed(const char *outputs_dir, const struct nf_error *why)
{
    DIR *d = outputs_dir ? opendir(outputs_dir) : NULL;
    if (!d)
        return 0;   /* no outputs yet: nothing to mistake */
    int marked = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, "summary.json") != 0 && !nf_path_has_suffix(e->d_name, "_summary.json"))
            continue;
        char *path = nf_path_join(outputs_dir, e->d_name);
        struct nf_error rerr = { 0 };
        size_t len = 0;
        char *text = path ? nf_read_file(path, &len, &rerr) : NULL;
        char *marked_text = text ? with_failed_status(text, why) : NULL;
        if (marked_text && nf_write_file_atomic(path, marked_text, strlen(marked_text), &rerr) == 0)
            marked++;
        else if (path && text && marked_text)
            nf_warn(NULL, "cannot mark '%s' as an earlier run's results: %s", path, rerr.msg);
        free(marked_text);
        free(text);
        free(path);
    }
    closedir(d);
    return marked;
}
