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
#include "core/util.h"

static void json_str(FILE *out, const char *s)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_add_json_str(&sb, s);
    fputs(sb.buf ? sb.buf : "\"\"", out);
    nf_strbuf_release(&sb);
}

static bool has_range(const struct nf_param *p)
{
    return !(p->min == 0 && p->max == 0);
}

static void range_doc(const struct nf_param *p, const char *sep, char *buf, size_t size)
{
    buf[0] = '\0';
    if (p->type == NF_P_ENUM) {
        size_t used = 0;
        for (int i = 0; p->choices[i]; i++) {
            int n = snprintf(buf + used, size - used, "%s%s", i ? sep : "", p->choices[i]);
            if (n < 0 || (size_t)n >= size - used)
                break;
            used += (size_t)n;
        }
        return;
    }
    if (!has_range(p))
        return;
    bool lo = p->min > -1e300, hi = p->max < 1e300;
    if (lo && hi)
        snprintf(buf, size, "%g to %g", p->min, p->max);
    else if (lo)
        snprintf(buf, size, ">= %g", p->min);
    else if (hi)
        snprintf(buf, size, "<= %g", p->max);
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

/* A string made only of ${var} references is accepted wherever nlflow takes
 * one: numbers, booleans and choices included (validate.c types such a value
 * by the text it resolves to, quoted or not). */
static const char *const var_ref =
    "{\"type\": \"string\", \"pattern\": \"^(\\\\$\\\\{[A-Za-z_][A-Za-z0-9_]*\\\\})+$\"}";

static void schema_param(FILE *out, const struct nf_param *p)
{
    char def[128];
    nf_param_default_text(p, def, sizeof def);
    fprintf(out, "          ");
    json_str(out, p->name);
    fprintf(out, ": {\"description\": ");
    json_str(out, p->help);
    switch (p->type) {
    case NF_P_INT:
    case NF_P_NUM:
        fprintf(out, ", \"anyOf\": [{\"type\": \"%s\"", p->type == NF_P_INT ? "integer" : "number");
        if (has_range(p) && p->min > -1e300)
            fprintf(out, ", \"minimum\": %.17g", p->min);
        if (has_range(p) && p->max < 1e300)
            fprintf(out, ", \"maximum\": %.17g", p->max);
        fprintf(out, "}, %s", var_ref);
        if (p->type == NF_P_INT && p->choices) {   /* {KEY: n} */
            fprintf(out, ", {\"type\": \"object\", \"additionalProperties\": false, \"required\": [");
            json_str(out, p->choices[0]);
            fprintf(out, "], \"properties\": {");
            json_str(out, p->choices[0]);
            fprintf(out, ": {\"anyOf\": [{\"type\": \"integer\"}, %s]}}}", var_ref);
        }
        fprintf(out, "]");
        if (def[0])
            fprintf(out, ", \"default\": %s", def);
        break;
    case NF_P_BOOL:
        fprintf(out, ", \"anyOf\": [{\"type\": \"boolean\"}, %s], \"default\": %s", var_ref, def);
        break;
    case NF_P_ENUM:
        fprintf(out, ", \"anyOf\": [{\"enum\": [");
        for (int i = 0; p->choices[i]; i++) {
            fprintf(out, "%s", i ? ", " : "");
            json_str(out, p->choices[i]);
            /* an unquoted true/false choice (load's lazy) is a boolean to a
             * YAML reader; nlflow compares the text, so both are accepted */
            if (strcmp(p->choices[i], "true") == 0 || strcmp(p->choices[i], "false") == 0)
                fprintf(out, ", %s", p->choices[i]);
        }
        fprintf(out, "]}, %s], \"default\": ", var_ref);
        json_str(out, def);
        break;
    case NF_P_STR:
    case NF_P_PATH:
        fprintf(out, ", \"type\": \"string\"");
        if (def[0]) {
            fprintf(out, ", \"default\": ");
            json_str(out, def);
        }
        break;
    case NF_P_NUM_LIST:
    case NF_P_STR_LIST: {
        char number[256];
        snprintf(number, sizeof number, "{\"anyOf\": [{\"type\": \"number\"}, %s]}", var_ref);
        const char *item = p->type == NF_P_NUM_LIST ? number : "{\"type\": \"string\"}";
        fprintf(out, ", \"anyOf\": [%s, {\"type\": \"array\", \"items\": %s", item, item);
        if (p->len_min)
            fprintf(out, ", \"minItems\": %d", p->len_min);
        if (p->len_max)
            fprintf(out, ", \"maxItems\": %d", p->len_max);
        fprintf(out, "}");
        if (p->type == NF_P_NUM_LIST)   /* {logspace: [lo, hi, n]} or {linspace: ...} */
            fprintf(out, ", {\"type\": \"object\", \"minProperties\": 1, \"maxProperties\": 1, "
                         "\"additionalProperties\": false, \"properties\": {"
                         "\"logspace\": {\"type\": \"array\", \"items\": %s, \"minItems\": 3, \"maxItems\": 3}, "
                         "\"linspace\": {\"type\": \"array\", \"items\": %s, \"minItems\": 3, \"maxItems\": 3}}}",
                    number, number);
        fprintf(out, "]");
        if (p->type == NF_P_NUM_LIST && p->def.s && p->def.s[0]) {
            if (strncmp(p->def.s, "logspace:", 9) == 0 || strncmp(p->def.s, "linspace:", 9) == 0)
                fprintf(out, ", \"default\": {\"%.8s\": [%s]}", p->def.s, p->def.s + 9);
            else
                fprintf(out, ", \"default\": [%s]", p->def.s);
        }
        break;
    }
    }
    fprintf(out, "}");
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
    fprintf(out, "    \"settings\": {\"type\": \"object\", \"additionalProperties\": false, \"properties\": {\n");
    fprintf(out, "      \"device\": {\"anyOf\": [{\"enum\": [\"auto\", \"cpu\", \"gpu\"]}, %s], \"default\": \"auto\"},\n", var_ref);
    fprintf(out, "      \"memory\": {\"type\": \"string\", \"description\": \"host memory budget, e.g. 8GiB; default 75%% of RAM\"},\n");
    fprintf(out, "      \"threads\": {\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 4096}, %s], \"default\": 0, "
                 "\"description\": \"0 = all cores\"},\n", var_ref);
    fprintf(out, "      \"seed\": {\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 4294967295}, %s], \"default\": 0},\n",
            var_ref);
    fprintf(out, "      \"cache\": {\"type\": [\"string\", \"boolean\"], \"default\": \".nlflow/cache.db\", "
                 "\"description\": \"the cache file, relative to the pipeline file; off or false: no cache\"},\n");
    fprintf(out, "      \"outputs\": {\"type\": \"string\", \"default\": \"results\"}}},\n");
    fprintf(out, "    \"params\": {\"type\": \"object\", \"propertyNames\": {\"pattern\": \"^[A-Za-z_][A-Za-z0-9_]*$\"},\n");
    fprintf(out, "               \"additionalProperties\": {\"type\": [\"string\", \"number\", \"boolean\"]}},\n");
    fprintf(out, "    \"nodes\": {\"type\": \"object\", \"minProperties\": 1,\n");
    fprintf(out, "              \"propertyNames\": {\"pattern\": \"^[a-z][a-z0-9_]*$\"},\n");
    fprintf(out, "              \"additionalProperties\": {\"oneOf\": [");
    for (size_t i = 0; nf_node_types[i]; i++)
        fprintf(out, "%s{\"$ref\": \"#/$defs/%s\"}", i ? ", " : "", nf_node_types[i]->name);
    fprintf(out, "]}}\n  },\n  \"$defs\": {\n");
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
        fprintf(out, "          \"device\": {\"anyOf\": [{\"enum\": [\"auto\", \"cpu\", \"gpu\"]}, %s]},\n", var_ref);
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
        range_doc(p, " \\| ", buf, sizeof buf);
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
        range_doc(p, " | ", buf, sizeof buf);
        fprintf(out, "  %-16s %s%s%s%s%s%s\n      %s\n", p->name, nf_ptype_name(p->type),
                p->flags & NF_PF_REQUIRED ? ", required" : "", def[0] ? ", default " : "", def,
                buf[0] ? ", " : "", buf, p->help);
    }
}

int nf_gen_all(const char *root)
{
    struct nf_error err = { 0 };
    char *schemas = nf_path_join(root, "schemas"), *docs = nf_path_join(root, "docs/nodes");
    int rc = -1;
    if (!schemas || !docs || nf_mkdirs(schemas, &err) < 0 || nf_mkdirs(docs, &err) < 0)
        goto fail;
    char *path = nf_path_join(schemas, "pipeline.schema.json");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) {
        fprintf(stderr, "nlflow: error: cannot write '%s'\n", path ? path : "?");
        free(path);
        goto fail;
    }
    nf_gen_schema(f);
    fclose(f);
    free(path);
    for (size_t i = 0; nf_node_types[i]; i++) {
        char *name = nf_asprintf("%s/%s.md", docs, nf_node_types[i]->name);
        f = name ? fopen(name, "w") : NULL;
        if (!f) {
            fprintf(stderr, "nlflow: error: cannot write '%s'\n", name ? name : "?");
            free(name);
            goto fail;
        }
        nf_gen_node_markdown(nf_node_types[i], f);
        fclose(f);
        free(name);
    }
    rc = 0;
fail:
    if (err.code)
        nf_error_print(&err);
    free(schemas);
    free(docs);
    return rc;
}
