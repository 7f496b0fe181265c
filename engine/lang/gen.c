/* gen.c — everything generated from the node tables: the pipeline JSON schema
 * (schemas/pipeline.schema.json), the per-node reference pages
 * (docs/nodes/<type>.md) and the text of `nlflow nodes TYPE`. The checked-in
 * copies are compared with a fresh generation by `make check`, so the tables,
 * the schema and the docs cannot drift apart.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "params.h"
#include "core/util.h"

static void json_str(FILE *out, const char *s)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_add_json_str(&sb, s);
    fputs(sb.buf ? sb.buf : "\"\"", out);
    nf_strbuf_release(&sb);
}

static void kinds(unsigned types, char *buf, size_t size)
{
    buf[0] = '\0';
    static const struct { unsigned bit; const char *name; } k[] = {
        { NF_PT_VOLUME, "volume" }, { NF_PT_MATRIX, "matrix" },
        { NF_PT_TABLE, "table" }, { NF_PT_COLL, "collection" } };
    for (size_t i = 0; i < 4; i++)
        if (types & k[i].bit)
            snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? ", " : "", k[i].name);
}

/* One parameter's property: its description, then what its type allows
 * (params.c's per-type table). */
static void schema_param(FILE *out, const struct nf_param *p)
{
    char def[128];
    nf_param_default_text(p, def, sizeof def);
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "          ");
    nf_strbuf_add_json_str(&sb, p->name);
    nf_strbuf_addf(&sb, ": {\"description\": ");
    nf_strbuf_add_json_str(&sb, p->help);
    nf_ptype_ops(p->type)->schema(p, def, &sb);
    nf_strbuf_addf(&sb, "}");
    fputs(sb.buf ? sb.buf : "", out);
    nf_strbuf_release(&sb);
}

void nf_gen_schema(FILE *out)
{
    fprintf(out, "{\n  \"$comment\": \"GENERATED from the node parameter tables by `nlflow schema`; DO NOT EDIT\",\n");
    fprintf(out, "  \"$schema\": \"https://json-schema.org/draft/2020-12/schema\",\n");
    fprintf(out, "  \"$id\": \"https://nlflow.dev/schemas/pipeline.schema.json\",\n");
    fprintf(out, "  \"title\": \"nlflow pipeline (format version 1)\",\n");
    fprintf(out, "  \"type\": \"object\",\n  \"required\": [\"nlflow\", \"nodes\"],\n  \"additionalProperties\": false,\n");
    fprintf(out, "  \"properties\": {\n");
    fprintf(out, "    \"nlflow\": {\"const\": 1, \"description\": \"pipeline format version\"},\n");
    fprintf(out, "    \"name\": {\"type\": \"string\", \"description\": \"pipeline name; default: the file's stem\"},\n");
    fprintf(out, "    \"requires\": {\"type\": \"string\", \"description\": \"nlflow versions this file needs, "
                 "e.g. >=0.2 or >=0.2, <1\"},\n");
    fprintf(out, "    \"inputs\": {\"type\": [\"object\", \"array\"], \"description\": \"a used file's inputs: "
                 "name: description (or a list of names); its nodes refer to them like nodes\"},\n");
    fprintf(out, "    \"outputs\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, "
                 "\"description\": \"a used file's outputs: name: node.port\"},\n");
    fprintf(out, "    \"settings\": {\"type\": \"object\", \"additionalProperties\": false, \"properties\": {\n");
    fprintf(out, "      \"device\": {\"anyOf\": [{\"enum\": [\"auto\", \"cpu\", \"gpu\"]}, %s], \"default\": \"auto\"},\n", nf_schema_var_ref);
    fprintf(out, "      \"memory\": {\"type\": \"string\", \"description\": \"host memory budget, e.g. 8GiB; default 75%% of RAM\"},\n");
    fprintf(out, "      \"threads\": {\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 4096}, %s], \"default\": 0, "
                 "\"description\": \"0 = all cores\"},\n", nf_schema_var_ref);
    fprintf(out, "      \"seed\": {\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 4294967295}, %s], \"default\": 0},\n",
            nf_schema_var_ref);
    fprintf(out, "      \"cache\": {\"type\": [\"string\", \"boolean\"], \"default\": \".nlflow/cache.db\", "
                 "\"description\": \"the cache file, relative to the pipeline file; off or false: no cache\"},\n");
    fprintf(out, "      \"outputs\": {\"type\": \"string\", \"default\": \"results\"},\n");
    fprintf(out, "      \"executor\": {\"type\": \"object\", \"additionalProperties\": false, "
                 "\"description\": \"where nodes run: local (default) or SLURM job arrays (docs/hpc.md)\", "
                 "\"properties\": {\n");
    fprintf(out, "        \"type\": {\"enum\": [\"local\", \"slurm\"], \"default\": \"local\"},\n");
    fprintf(out, "        \"partition\": {\"type\": \"string\"}, \"account\": {\"type\": \"string\"}, "
                 "\"qos\": {\"type\": \"string\"},\n");
    fprintf(out, "        \"time\": {\"type\": \"string\", \"description\": \"sbatch --time for every array; "
                 "default: from the cost model\"},\n");
    fprintf(out, "        \"max_array_tasks\": {\"type\": \"integer\", \"minimum\": 1, \"default\": 1000},\n");
    fprintf(out, "        \"max_concurrent\": {\"type\": \"integer\", \"minimum\": 0, \"default\": 0},\n");
    fprintf(out, "        \"retries\": {\"type\": \"integer\", \"minimum\": 0, \"default\": 2},\n");
    fprintf(out, "        \"cpus_per_task\": {\"type\": \"integer\", \"minimum\": 0, \"default\": 0},\n");
    fprintf(out, "        \"min_task_seconds\": {\"type\": \"number\", \"minimum\": 0, \"default\": 180},\n");
    fprintf(out, "        \"check_every\": {\"type\": \"number\", \"minimum\": 1, \"default\": 30},\n");
    fprintf(out, "        \"extra\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}}}}},\n");
    fprintf(out, "    \"params\": {\"type\": \"object\", \"propertyNames\": {\"pattern\": \"^[A-Za-z_][A-Za-z0-9_]*$\"},\n");
    fprintf(out, "               \"additionalProperties\": {\"type\": [\"string\", \"number\", \"boolean\"]}},\n");
    fprintf(out, "    \"nodes\": {\"type\": \"object\", \"minProperties\": 1,\n");
    fprintf(out, "              \"propertyNames\": {\"pattern\": \"^[a-z][a-z0-9_]*$\"},\n");
    fprintf(out, "              \"additionalProperties\": {\"oneOf\": [{\"$ref\": \"#/$defs/use\"}");
    for (size_t i = 0; nf_node_types[i]; i++)
        fprintf(out, ", {\"$ref\": \"#/$defs/%s\"}", nf_node_types[i]->name);
    fprintf(out, "]}}\n  },\n  \"$defs\": {\n");
    fprintf(out, "    \"use\": {\n      \"description\": \"the nodes of another pipeline file (docs/guide.md: a lab's "
                 "standard analysis)\",\n      \"type\": \"object\", \"additionalProperties\": false,\n"
                 "      \"required\": [\"type\", \"path\"],\n      \"properties\": {\n"
                 "          \"type\": {\"const\": \"use\"},\n"
                 "          \"path\": {\"type\": \"string\", \"description\": \"the used file: relative to this one, "
                 "else on NLFLOW_PATH\"},\n"
                 "          \"with\": {\"type\": \"object\", \"description\": \"values of the used file's params\"},\n"
                 "          \"in\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, "
                 "\"description\": \"the used file's inputs: node or node.port\"}\n      }\n    },\n");
    for (size_t i = 0; nf_node_types[i]; i++) {
        const struct nf_node_type *t = nf_node_types[i];
        fprintf(out, "    \"%s\": {\n      \"description\": ", t->name);
        json_str(out, t->summary);
        fprintf(out, ",\n      \"type\": \"object\", \"additionalProperties\": false,\n      \"required\": [\"type\"");
        for (const struct nf_param *p = t->params; p && p->name; p++)
            if (p->flags & NF_PF_REQUIRED)
                fprintf(out, ", \"%s\"", p->name);
        fprintf(out, "],\n      \"properties\": {\n");
        fprintf(out, "          \"type\": {\"const\": \"%s\"},\n", t->name);
        fprintf(out, "          \"device\": {\"anyOf\": [{\"enum\": [\"auto\", \"cpu\", \"gpu\"]}, %s]},\n", nf_schema_var_ref);
        fprintf(out, "          \"after\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"array\", \"items\": {\"type\": \"string\"}}], "
                     "\"description\": \"run after these nodes (ordering only)\"},\n");
        fprintf(out, "          \"in\": {\"type\": \"object\", \"additionalProperties\": ");
        bool variadic = false;
        for (int k = 0; t->inputs && t->inputs[k].name; k++)
            variadic |= (t->inputs[k].flags & NF_PORT_VARIADIC) != 0;
        fprintf(out, "%s, \"properties\": {", variadic ? "{\"type\": \"string\"}" : "false");
        bool first = true;
        for (int k = 0; t->inputs && t->inputs[k].name; k++) {
            if (t->inputs[k].flags & NF_PORT_VARIADIC)
                continue;
            fprintf(out, "%s\"%s\": {\"type\": \"string\", \"description\": ", first ? "" : ", ", t->inputs[k].name);
            json_str(out, t->inputs[k].help);
            fprintf(out, "}");
            first = false;
        }
        fprintf(out, "}}");
        for (const struct nf_param *p = t->params; p && p->name; p++) {
            fprintf(out, ",\n");
            schema_param(out, p);
        }
        fprintf(out, "\n      }\n    }%s\n", nf_node_types[i + 1] ? "," : "");
    }
    fprintf(out, "  }\n}\n");
}

void nf_gen_node_markdown(const struct nf_node_type *t, FILE *out)
{
    char buf[512], def[128];
    fprintf(out, "<!-- GENERATED from nodes/%s/%s.c by `nlflow nodes --markdown`; DO NOT EDIT -->\n", t->name, t->name);
    fprintf(out, "# %s\n\n%s\n\n%s\n\nImplementation version: %d.%s\n\n", t->name, t->summary,
            t->description ? t->description : "", t->version,
            t->run_gpu || (t->flags & NF_NODE_GPU) ? " Runs on CPU and GPU." : " Runs on the CPU.");
    fprintf(out, "## Inputs\n\n");
    if (!t->inputs || !t->inputs[0].name) {
        fprintf(out, "None.\n\n");
    } else {
        fprintf(out, "| port | accepts | required | description |\n|---|---|---|---|\n");
        for (int k = 0; t->inputs[k].name; k++) {
            kinds(t->inputs[k].types, buf, sizeof buf);
            const struct nf_port *pt = &t->inputs[k];
            fprintf(out, "| `%s` | %s%s | %s | %s |\n",
                    pt->flags & NF_PORT_VARIADIC ? "any name" : pt->name, buf,
                    pt->flags & NF_PORT_STACK ? " (a collection of 1xV maps is stacked)" : "",
                    pt->flags & (NF_PORT_OPTIONAL | NF_PORT_VARIADIC) ? "no" : "yes", pt->help);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "## Outputs\n\n| port | gives | description |\n|---|---|---|\n");
    for (int k = 0; t->outputs && t->outputs[k].name; k++) {
        kinds(t->outputs[k].types, buf, sizeof buf);
        fprintf(out, "| `%s` | %s | %s |\n", t->outputs[k].name, buf, t->outputs[k].help);
    }
    fprintf(out, "\n## Parameters\n\n");
    if (!t->params || !t->params[0].name) {
        fprintf(out, "None.\n");
        return;
    }
    fprintf(out, "| name | type | default | allowed | description |\n|---|---|---|---|---|\n");
    for (const struct nf_param *p = t->params; p->name; p++) {
        nf_param_default_text(p, def, sizeof def);
        nf_ptype_ops(p->type)->allowed_text(p, " \\| ", buf, sizeof buf);
        fprintf(out, "| `%s` | %s | %s | %s | %s |\n", p->name, nf_ptype_name(p->type),
                p->flags & NF_PF_REQUIRED ? "**required**" : def[0] ? def : "—", buf, p->help);
    }
}

void nf_gen_node_help(const struct nf_node_type *t, FILE *out)
{
    char buf[512], def[128];
    fprintf(out, "%s — %s\n\n", t->name, t->summary);
    if (t->description)
        fprintf(out, "%s\n\n", t->description);
    fprintf(out, "inputs:\n");
    if (!t->inputs || !t->inputs[0].name)
        fprintf(out, "  (none)\n");
    for (int k = 0; t->inputs && t->inputs[k].name; k++) {
        kinds(t->inputs[k].types, buf, sizeof buf);
        fprintf(out, "  %-12s %s%s: %s\n", t->inputs[k].flags & NF_PORT_VARIADIC ? "<any name>" : t->inputs[k].name,
                buf, t->inputs[k].flags & (NF_PORT_OPTIONAL | NF_PORT_VARIADIC) ? ", optional" : "",
                t->inputs[k].help);
    }
    fprintf(out, "outputs:\n");
    for (int k = 0; t->outputs && t->outputs[k].name; k++) {
        kinds(t->outputs[k].types, buf, sizeof buf);
        fprintf(out, "  %-12s %s: %s\n", t->outputs[k].name, buf, t->outputs[k].help);
    }
    fprintf(out, "parameters:\n");
    for (const struct nf_param *p = t->params; p && p->name; p++) {
        nf_param_default_text(p, def, sizeof def);
        nf_ptype_ops(p->type)->allowed_text(p, " | ", buf, sizeof buf);
        fprintf(out, "  %-16s %s%s%s%s%s%s\n      %s\n", p->name, nf_ptype_name(p->type),
                p->flags & NF_PF_REQUIRED ? ", required" : "", def[0] ? ", default " : "", def,
                buf[0] ? ", " : "", buf, p->help);
    }
}

/* Write the generated text to `path` (created or replaced). */
static int write_generated(const char *path, const struct nf_node_type *t, struct nf_error *err)
{
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        return NF_FAIL(err, NF_EIO, "cannot write '%s'", path ? path : "?");
    if (t)
        nf_gen_node_markdown(t, f);
    else
        nf_gen_schema(f);
    fclose(f);
    return 0;
}

int nf_gen_all(const char *root, struct nf_error *err)
{
    char *schemas = nf_path_join(root, "schemas"), *docs = nf_path_join(root, "docs/nodes");
    char *path = NULL;
    int rc = 0;
    if (!schemas || !docs) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(schemas, err));
    NF_TRY(rc = nf_mkdirs(docs, err));
    path = nf_path_join(schemas, "pipeline.schema.json");
    NF_TRY(rc = write_generated(path, NULL, err));
    for (size_t i = 0; nf_node_types[i]; i++) {
        free(path);
        path = nf_asprintf("%s/%s.md", docs, nf_node_types[i]->name);
        NF_TRY(rc = write_generated(path, nf_node_types[i], err));
    }
fail:
    free(path);
    free(schemas);
    free(docs);
    return rc;
}
