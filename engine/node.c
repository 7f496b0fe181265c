/* node.c — the engine's side of the node API (node.h): the registry lookups
 * and what a node may ask about its own instance — where it is (for errors),
 * which of its input ports are wired, the shapes the plan gave its outputs,
 * where a variadic input came from — and the environment (struct nf_env) the
 * phases hand to nodes.
 *
 * Nodes never see struct nf_pipeline or struct nf_node_inst (pipeline.h):
 * everything they need of them goes through these functions, so that the
 * pipeline's representation can change without touching a node. Every
 * function accepts a NULL instance (unit tests run nodes without one) and
 * then answers as if nothing were known.
 */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "lang/suggest.h"
#include "node.h"
#include "pipeline.h"

/* ---- registry ---- */

const struct nf_node_type *nf_node_type_find(const char *name)
{
    for (size_t i = 0; nf_node_types[i]; i++)
        if (strcmp(nf_node_types[i]->name, name) == 0)
            return nf_node_types[i];
    return NULL;
}

void nf_node_type_suggest(const char *name, char *hint, size_t size)
{
    struct nf_suggest sg;
    nf_suggest_init(&sg, name);
    for (size_t i = 0; nf_node_types[i]; i++)
        nf_suggest_add(&sg, nf_node_types[i]->name);
    nf_suggest_hint(&sg, hint, size);
}

int nf_port_index(const struct nf_port *ports, const char *name)
{
    for (int i = 0; ports && ports[i].name; i++)
        if (strcmp(ports[i].name, name) == 0)
            return i;
    return -1;
}

size_t nf_port_count(const struct nf_port *ports)
{
    size_t n = 0;
    while (ports && ports[n].name)
        n++;
    return n;
}

/* ---- the node's own instance ---- */

const struct nf_loc *nf_node_loc(const struct nf_node_inst *node)
{
    return node ? &node->loc : NULL;
}

const char *nf_node_id(const struct nf_node_inst *node)
{
    return node ? node->id : NULL;
}

int nf_error_on_node(const struct nf_node_inst *node, struct nf_error *err, int rc)
{
    if (node && err && !err->loc.file && err->node[0] == '\0') {
        err->loc = node->loc;
        snprintf(err->node, sizeof err->node, "%s", node->id);
    }
    return rc;
}

bool nf_node_input_wired(const struct nf_node_inst *node, int port)
{
    for (size_t e = 0; node && e < node->n_edges; e++)
        if (node->edges[e].port == port)
            return true;
    return false;
}

const struct nf_shape *nf_node_planned_output(const struct nf_node_inst *node, int port)
{
    if (!node || !node->out_shape || port < 0 ||
        (node->type && (size_t)port >= nf_port_count(node->type->outputs)))
        return NULL;
    return &node->out_shape[port];
}

bool nf_node_input_source(const struct nf_node_inst *node, const struct nf_env *env, const char *key,
                          struct nf_input_source *src)
{
    const struct nf_pipeline *pl = env ? env->pipeline : NULL;
    for (size_t e = 0; node && pl && e < node->n_edges; e++) {
        const struct nf_edge *edge = &node->edges[e];
        if (edge->port != NF_EDGE_VARIADIC || !edge->name || strcmp(edge->name, key) != 0 ||
            edge->src < 0 || (size_t)edge->src >= pl->n_nodes)
            continue;
        const struct nf_node_inst *from = &pl->nodes[edge->src];
        src->node_id = from->id;
        src->node_type = from->type->name;
        src->port = from->type->outputs[edge->src_port].name;
        src->type = from->type;
        src->params = from->params;
        return true;
    }
    return false;
}

size_t nf_pipeline_size(const struct nf_env *env)
{
    return env && env->pipeline ? env->pipeline->n_nodes : 0;
}

size_t nf_pipeline_used_files(const struct nf_env *env)
{
    return env && env->pipeline ? env->pipeline->n_used_files : 0;
}

bool nf_pipeline_used_file(const struct nf_env *env, size_t i, struct nf_used_file_info *info)
{
    const struct nf_pipeline *pl = env ? env->pipeline : NULL;
    if (!pl || i >= pl->n_used_files)
        return false;
    const struct nf_used_file *u = &pl->used_files[i];
    *info = (struct nf_used_file_info){ u->path, u->hash, u->commit, u->used_by };
    return true;
}

bool nf_pipeline_node(const struct nf_env *env, size_t i, struct nf_node_info *info)
{
    const struct nf_pipeline *pl = env ? env->pipeline : NULL;
    if (!pl || i >= pl->n_nodes)
        return false;
    const struct nf_node_inst *n = &pl->nodes[pl->order ? pl->order[i] : (int)i];
    *info = (struct nf_node_info){ n->id, n->type, n->params };
    return true;
}

/* ---- the environment handed to nodes ---- */

/* Used by every phase that calls into nodes (shapes, keys, the executor). */
void nf_pipeline_env(const struct nf_pipeline *p, struct nf_env *env)
{
    memset(env, 0, sizeof *env);
    env->pipeline_file = p->file;
    env->pipeline_dir = p->dir;
    env->pipeline_name = p->name;
    env->pipeline_hash = p->hash;
    env->outputs_dir = p->outputs_dir;
    env->threads = p->settings.threads > 0 ? p->settings.threads : nf_cpu_count();
    env->memory_budget = p->settings.memory;
    env->seed = p->settings.seed;
    env->pipeline = p;
}
