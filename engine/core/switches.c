/* switches.c — reads the NLFLOW_* environment switches once (switches.h lists
 * and documents them).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "switches.h"

static struct nf_switches switches;
static pthread_once_t switches_once = PTHREAD_ONCE_INIT;

/* The value of a switch, NULL when unset or empty. */
static const char *env_value(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

void nf_switches_reload(void)
{
    struct nf_switches s = { 0 };
    const char *v;
    s.devices_file = env_value("NLFLOW_DEVICES_FILE");
    if ((v = env_value("NLFLOW_CACHE_MAX_PAGES"))) {
        s.cache_max_pages_set = true;
        s.cache_max_pages = atoll(v);
    }
    if ((v = env_value("NLFLOW_CACHE_FS_MAGIC"))) {
        s.cache_fs_magic_set = true;
        s.cache_fs_magic = strtoul(v, NULL, 0);
    }
    v = env_value("NLFLOW_CACHE_READONLY");
    s.cache_readonly = v && strcmp(v, "0") != 0;
    v = getenv("NLFLOW_GPU_RESIDENT");
    s.gpu_resident = !v || strcmp(v, "0") != 0;
    v = getenv("NLFLOW_GPU_PROFILE");
    s.gpu_profile = v && *v && strcmp(v, "0") != 0;
    s.perm_tile = getenv("NLFLOW_PERM_TILE");
    v = getenv("NLFLOW_PERM_TABLES");
    s.perm_tables = !v || strcmp(v, "0") != 0;
    v = getenv("NLFLOW_GLM_TILE");
    s.glm_tile = !v || strcmp(v, "0") != 0;
    v = getenv("NLFLOW_GLM_I8");
    s.glm_i8 = !v || strcmp(v, "0") != 0;
    v = getenv("NLFLOW_KILL_AT");
    s.kill_at = v ? atol(v) : 0;
    if (s.kill_at < 0)
        s.kill_at = 0;
    s.kill_verbose = getenv("NLFLOW_KILL_VERBOSE") != NULL;
    char *end = NULL;
    if ((v = env_value("SOURCE_DATE_EPOCH")) && (s.source_date = strtoll(v, &end, 10)) >= 0 && end && !*end)
        s.source_date_set = true;
    switches = s;
}

const struct nf_switches *nf_switches(void)
{
    pthread_once(&switches_once, nf_switches_reload);
    return &switches;
}
