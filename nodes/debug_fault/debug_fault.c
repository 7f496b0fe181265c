/* debug_fault.c — the `debug_fault` node: a testing aid that does a known,
 * checkpointed amount of work and can fail or be killed on request.
 *
 * It computes `chunks` numbers (chunk i: the mean of `chunk_size` uniform
 * draws from a stream seeded by (seed, i)), committing each chunk to the
 * cache's checkpoint store as it finishes, and reports how many chunks it
 * resumed. `fail_after` makes it fail (exit 1, nothing cached) and
 * `kill_after` kills the process (as kill -9) after that many chunks of a run:
 * the tests use them to check error propagation through a pipeline and that a
 * killed long node resumes with bit-identical results. Neither is part of the
 * cache key, so the rerun without them finds the checkpoints.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"
#include "core/rng.h"

struct debug_fault_params {
    int64_t chunks, chunk_size, seed;
    int64_t fail_after, kill_after;
};

#define FIELD(f) offsetof(struct debug_fault_params, f)
static const struct nf_param debug_fault_params_table[] = {
    NF_PARAM_INT("chunks", FIELD(chunks), 10, 1, 1000000,
                 "number of chunks of work (each checkpointed)"),
    NF_PARAM_INT("chunk_size", FIELD(chunk_size), 1000, 1, 100000000,
                 "random draws averaged per chunk"),
    NF_PARAM_INT("seed", FIELD(seed), 0, 0, 4294967295.0, "seed of the draws"),
    NF_PARAM_INT_F("fail_after", FIELD(fail_after), -1, -1, 1000000, NF_PF_NOT_KEYED,
                   "fail with an error after this many chunks of a run (-1: never); not part of the cache key"),
    NF_PARAM_INT_F("kill_after", FIELD(kill_after), -1, -1, 1000000, NF_PF_NOT_KEYED,
                   "kill the process (SIGKILL) after this many chunks of a run (-1: never); not part of the cache key"),
    NF_PARAM_END,
};
#undef FIELD

enum { DEBUG_FAULT_IN_ANY, DEBUG_FAULT_N_IN };
enum { DEBUG_FAULT_OUT_MEANS, DEBUG_FAULT_N_OUT };

static const struct nf_port debug_fault_inputs[] = {
    { "in", "anything (only makes this node depend on it)", NF_PT_ANY, NF_PORT_OPTIONAL },
    NF_PORT_END
};
static const struct nf_port debug_fault_outputs[] = {
    { "out", "1 x chunks: the chunk means", NF_PT_MATRIX, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(debug_fault_inputs, DEBUG_FAULT_N_IN);
NF_PORTS_MATCH(debug_fault_outputs, DEBUG_FAULT_N_OUT);

static float chunk_value(const struct debug_fault_params *p, int64_t i)
{
    uint64_t state = (uint64_t)p->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i;
    double sum = 0;
    for (int64_t k = 0; k < p->chunk_size; k++)
        sum += nf_rand_uniform(&state);
    return (float)(sum / (double)p->chunk_size);
}

static int debug_fault_run(struct nf_run *run)
{
    const struct debug_fault_params *p = run->params;
    struct nf_value *out = nf_value_new_matrix(1, p->chunks, NULL, run->err);
    bool *have = nf_calloc((size_t)p->chunks, sizeof *have);
    int64_t *done = NULL;
    size_t n_done = 0;
    int rc = 0;
    if (!out || !have) {
        rc = out ? NF_FAIL(run->err, NF_ENOMEM, "out of memory") : run->err->code;
        goto fail;
    }
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &done, &n_done, run->err));
    size_t resumed = 0;
    for (size_t i = 0; i < n_done; i++) {
        void *data = NULL;
        size_t bytes = 0;
        if (done[i] < 0 || done[i] >= p->chunks)
            continue;
        if (nf_ckpt_get(run->ckpt, done[i], &data, &bytes, run->err) == 1 && bytes == sizeof(float)) {
            memcpy(&out->u.mat.data[done[i]], data, sizeof(float));
            have[done[i]] = true;
            resumed++;
        }
        free(data);
    }
    if (resumed)
        nf_log("nlflow: node '%s': resumed %zu of %lld chunks from checkpoints", nf_node_id(run->node),
               resumed, (long long)p->chunks);
    int64_t computed = 0;
    for (int64_t i = 0; i < p->chunks; i++) {
        if (have[i])
            continue;
        if (p->fail_after >= 0 && computed == p->fail_after) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                            "failing on request after %lld chunks (fail_after)", (long long)computed);
            goto fail;
        }
        out->u.mat.data[i] = chunk_value(p, i);
        nf_ckpt_put(run->ckpt, i, &out->u.mat.data[i], sizeof(float), run->err);
        computed++;
        if (p->kill_after >= 0 && computed == p->kill_after)
            raise(SIGKILL);
    }
    run->out[DEBUG_FAULT_OUT_MEANS] = out;
    out = NULL;
fail:
    nf_value_unref(out);
    free(have);
    free(done);
    return rc;
}

static int debug_fault_resolve(struct nf_resolve *r)
{
    const struct debug_fault_params *p = r->params;
    r->out[DEBUG_FAULT_OUT_MEANS].kind = NF_KIND_MATRIX;
    r->out[DEBUG_FAULT_OUT_MEANS].dim[0] = 1;
    r->out[DEBUG_FAULT_OUT_MEANS].dim[1] = p->chunks;
    return 0;
}

const struct nf_node_type nf_node_debug_fault = {
    .name = "debug_fault",
    .summary = "testing aid: checkpointed work that fails or is killed on request",
    .description =
        "Computes `chunks` numbers (the mean of `chunk_size` seeded uniform draws each), "
        "committing every chunk to the cache's checkpoints, so that a killed run resumes "
        "where it stopped with identical results. `fail_after` fails the node and "
        "`kill_after` kills the process after that many chunks of a run; they are not "
        "part of the cache key. Used by the tests of error propagation and resumption.",
    .version = 1,
    .params = debug_fault_params_table,
    .params_size = sizeof(struct debug_fault_params),
    .inputs = debug_fault_inputs,
    .outputs = debug_fault_outputs,
    .resolve = debug_fault_resolve,
    .run_cpu = debug_fault_run,
};
