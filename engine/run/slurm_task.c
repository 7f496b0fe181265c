/* slurm_task.c — one SLURM array task (`nlflow task`, run by the batch
 * scripts the coordinator in slurm.c writes): check that the pipeline file is
 * the one submitted, open a private cache on node-local disk ($TMPDIR), take
 * the coordinator's hashes of input files that did not change (files.tsv),
 * import the shards of the nodes before this one (only as far back as
 * something is missing), run the executor restricted to this task's units
 * (nf_exec_opts.only*), and write one shard per unit into the shared shard
 * folder (cache/shards.h). The private cache is removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slurm.h"
#include "events.h"
#include "cache/keys.h"
#include "cache/run_record.h"
#include "cache/shards.h"
#include "core/util.h"

/* The task's side: adopt the coordinator's hashes of files that did not change. */
static void adopt_file_hashes(struct nf_cache *cache, const char *root)
{
    char *path = nf_asprintf("%s/files.tsv", root), *text;
    size_t len;
    struct nf_error e = { 0 };
    if (!path || !(text = nf_read_file(path, &len, &e))) {
        free(path);
        return;
    }
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char hex[40], file[4096];
        long long size, mtime, at;
        struct nf_file_memo m;
        if (sscanf(line, "%39[^\t]\t%lld\t%lld\t%lld\t%4095[^\n]", hex, &size, &mtime, &at, file) != 5 ||
            nf_key_parse(hex, &m.hash) != 0)
            continue;
        m.size = size;
        m.mtime_ns = mtime;
        m.hashed_at = at;
        nf_cache_file_memo_adopt(cache, file, &m, &e);
    }
    free(text);
    free(path);
}

/* ---- the task side ---- */

/* Import the shards of every node before node `ni` (what its runs read). */
static int import_upstream(struct nf_pipeline *p, struct nf_cache *cache, const struct nf_node_keys *keys,
                           const char *root, size_t ni, bool *seen, struct nf_error *err)
{
    const struct nf_node_inst *node = &p->nodes[ni];
    for (size_t e = 0; e < node->n_edges; e++) {
        size_t src = (size_t)node->edges[e].src;
        if (seen[src])
            continue;
        seen[src] = true;
        int rc = 0;
        const struct nf_node_keys *k = &keys[src];
        if (!k->known || k->reads_files) {
            NF_TRY(rc = import_upstream(p, cache, keys, root, src, seen, err));
            continue;
        }
        char *dir = nf_asprintf("%s/%s", root, p->nodes[src].id);
        DIR *d = dir ? opendir(dir) : NULL;
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.' || !nf_path_has_suffix(de->d_name, NF_SHARD_SUFFIX))
                continue;
            char unit[64];
            snprintf(unit, sizeof unit, "%.*s", (int)(strlen(de->d_name) - strlen(NF_SHARD_SUFFIX)), de->d_name);
            size_t r = 0;
            long long part = -1, parts = 0;
            if (strncmp(unit, "item-", 5) == 0)
                r = (size_t)strtoull(unit + 5, NULL, 10);
            else if (sscanf(unit, "part-%lld-of-%lld", &part, &parts) != 2 && strcmp(unit, "run") != 0)
                continue;
            if (r >= k->n_runs)
                continue;
            struct nf_shard_head want = { p->hash, p->nodes[src].id, unit, k->runs[r], part < 0 ? 0 : part,
                                          part < 0 ? 0 : parts };
            struct nf_cache_meta meta = { p->nodes[src].type->name, p->nodes[src].id, NULL, p->hash, NULL, NULL };
            char *path = nf_asprintf("%s/%s", dir, de->d_name), why[256];
            size_t n_ports;
            const char *const *names = nf_slurm_port_names(&p->nodes[src], &n_ports);
            rc = path ? nf_shard_import(cache, path, &want, &meta, names, n_ports, false, why, sizeof why, err)
                      : NF_FAIL(err, NF_ENOMEM, "out of memory");
            if (rc == 0)
                nf_warn(p->nodes[src].id, "not using the shard '%s' (%s); computing what it held here", path, why);
            free(path);
            if (rc < 0)
                break;
        }
        if (d)
            closedir(d);
        free(dir);
        if (rc < 0)
            return rc;
        /* what it was computed from is needed only when it is not all here */
        bool all = true;
        for (size_t r = 0; all && r < k->n_runs; r++) {
            struct nf_error e = { 0 };
            all = nf_run_valid(cache, k->runs[r], p->outputs_dir, NULL, &e) == 1;
        }
        if (!all)
            NF_TRY(rc = import_upstream(p, cache, keys, root, src, seen, err));
    }
    return 0;
fail:
    return err->code ? err->code : NF_EBUG;
}

/* Private caches of tasks on this machine that were killed (SIGKILL, a
 * node's out-of-memory killer) and could not remove theirs: their folder
 * names carry the pid, which is gone. */
static void remove_stale_task_dirs(const char *tmpdir)
{
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        long pid = 0;
        char rest[16];
        if (sscanf(de->d_name, "nlflow-task-%ld-%15s", &pid, rest) != 2 || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;   /* alive (or not ours to judge) */
        char *path = nf_asprintf("%s/%s", tmpdir, de->d_name);
        if (path)
            nf_remove_tree(path);
        free(path);
    }
    if (d)
        closedir(d);
}

int nf_slurm_task(struct nf_pipeline *p, const struct nf_slurm_task_opts *o, struct nf_error *err)
{
    int ni = nf_node_index(p, o->node_id);
    char *root = nf_slurm_shard_root(p), *units_text = NULL, *tmp = NULL, *cache_path = NULL;
    struct nf_cache *cache = NULL;
    struct nf_node_keys *keys = nf_calloc(p->n_nodes + 1, sizeof *keys);
    bool *seen = nf_calloc(p->n_nodes + 1, sizeof *seen), *only_runs = NULL;
    char **units = NULL;
    size_t n_units = 0;
    int64_t part = -1, parts = 0;
    int rc = 0;
    if (!root || !keys || !seen) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (strcmp(o->hash, p->hash) != 0) {
        rc = NF_FAIL(err, NF_EUSAGE, "the pipeline '%s' changed since these jobs were submitted (hash %s, "
                     "submitted %s): run `nlflow run` again to submit for the current file", p->file, p->hash,
                     o->hash);
        goto fail;
    }
    if (ni < 0) {
        rc = NF_FAIL(err, NF_EUSAGE, "the pipeline has no node '%s'", o->node_id);
        goto fail;
    }
    /* this task's line of the units file */
    size_t len;
    if (!(units_text = nf_read_file(o->units_file, &len, err))) {
        rc = err->code;
        goto fail;
    }
    char *line = units_text;
    for (long i = 0; i < o->index && line; i++) {
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    if (!line || !*line) {
        rc = NF_FAIL(err, NF_EUSAGE, "the units file '%s' has no line %ld", o->units_file, o->index);
        goto fail;
    }
    char *eol = strchr(line, '\n');
    if (eol)
        *eol = 0;
    units = nf_calloc(strlen(line) / 2 + 2, sizeof *units);
    if (!units) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (char *save = NULL, *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save))
        units[n_units++] = w;
    /* a private cache on node-local disk: no database on the shared file system */
    const char *tmpdir = getenv("TMPDIR");
    tmpdir = tmpdir && tmpdir[0] ? tmpdir : "/tmp";
    remove_stale_task_dirs(tmpdir);
    tmp = nf_asprintf("%s/nlflow-task-%ld-XXXXXX", tmpdir, (long)getpid());
    if (!tmp || !mkdtemp(tmp)) {
        rc = NF_FAIL(err, NF_EIO, "cannot make a temporary folder under %s: %s", tmpdir, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto fail;
    }
    cache_path = nf_asprintf("%s/cache.db", tmp);
    struct nf_cache_opts co = { .strict = true, .interrupt = &nf_interrupted };
    NF_TRY(rc = nf_cache_open(cache_path, &co, &cache, err));
    adopt_file_hashes(cache, root);
    uint64_t hashed_before = nf_cache_hashed_bytes(cache);
    NF_TRY(rc = nf_keys_plan(p, cache, keys, err));
    nf_log("nlflow: task: keys computed, %" PRIu64 " bytes of input files hashed here",
           nf_cache_hashed_bytes(cache) - hashed_before);
    const struct nf_node_keys *k = &keys[ni];
    if (!k->known) {
        rc = NF_FAIL(err, NF_EBUG, "node '%s' has no keys before running; it cannot run as a SLURM task", o->node_id);
        goto fail;
    }
    only_runs = nf_calloc(k->n_runs + 1, sizeof *only_runs);
    if (!only_runs) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t u = 0; u < n_units; u++) {
        long long a, b;
        if (sscanf(units[u], "part-%lld-of-%lld", &a, &b) == 2 && b > 0 && a >= 0 && a < b && n_units == 1) {
            part = a;
            parts = b;
            only_runs[0] = true;
        } else if (strncmp(units[u], "item-", 5) == 0 && strtoull(units[u] + 5, NULL, 10) < k->n_runs) {
            only_runs[strtoull(units[u] + 5, NULL, 10)] = true;
        } else if (strcmp(units[u], "run") == 0 && k->n_runs == 1) {
            only_runs[0] = true;
        } else {
            rc = NF_FAIL(err, NF_EUSAGE, "unit '%s' is not a unit of node '%s'", units[u], o->node_id);
            goto fail;
        }
    }
    NF_TRY(rc = import_upstream(p, cache, keys, root, (size_t)ni, seen, err));
    struct nf_exec_opts eo = { .threads = o->threads > 0 ? o->threads : 1, .cache = cache, .cache_strict = true,
                               .only = true, .only_node = (size_t)ni, .only_runs = parts ? NULL : only_runs,
                               .part = part < 0 ? 0 : part, .parts = parts };
    nf_log("nlflow: task: node '%s', %zu unit%s", o->node_id, n_units, n_units == 1 ? "" : "s");
    NF_TRY(rc = nf_execute(p, &eo, err));
    char *dir = nf_asprintf("%s/%s", root, o->node_id);
    if (!dir || (rc = nf_mkdirs(dir, err)) < 0) {
        if (!dir)
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        free(dir);
        goto fail;
    }
    for (size_t u = 0; u < n_units && rc == 0; u++) {
        size_t r = parts ? 0 : strcmp(units[u], "run") == 0 ? 0 : (size_t)strtoull(units[u] + 5, NULL, 10);
        struct nf_shard_head h = { p->hash, o->node_id, units[u], k->runs[r], part < 0 ? 0 : part, parts };
        char *path = nf_asprintf("%s/%s%s", dir, units[u], NF_SHARD_SUFFIX);
        rc = path ? nf_shard_write(cache, path, &h, err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
        free(path);
    }
    free(dir);
    if (rc == 0)
        nf_log("nlflow: task: %zu shard%s written", n_units, n_units == 1 ? "" : "s");
fail:
    nf_cache_close(cache);
    if (tmp)
        nf_remove_tree(tmp);
    for (size_t i = 0; keys && i < p->n_nodes; i++)
        nf_node_keys_release(&keys[i]);
    free(keys);
    free(seen);
    free(only_runs);
    free(units);
    free(units_text);
    free(tmp);
    free(cache_path);
    free(root);
    return rc;
}
