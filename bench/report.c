/* report.c — docs/performance.md and docs/performance-speedup.svg, generated
 * from the benchmark result files.
 *
 * Every *.json file of the results folder (one per host, written by
 * `nlflow bench`) becomes a section: the machine record, the exact command,
 * and per domain a table of conditions (median time with min–max, GFLOP/s,
 * GB/s, % of the 2048³ and of the shape-matched SGEMM rate, peak RSS, the
 * peer's time and the speedup over it), then the domain's own notes (targets).
 * The plot shows speedup over the peer against problem size, log-log, one
 * line per condition family. Result files are read with the YAML parser:
 * JSON is YAML, and the engine already has one.
 */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "lang/ytree.h"

/* ---- reading results ---- */

const struct nf_ynode *nf_bench_next_ok(const struct nf_ynode *domain_result, size_t *i)
{
    const struct nf_ynode *conds = nf_ymap_get(domain_result, "conditions");
    while (conds && *i < conds->n) {
        const struct nf_ynode *c = conds->items[(*i)++];
        const char *status = nf_ypath_str(c, "status");
        if (status && strcmp(status, "ok") == 0)
            return c;
    }
    return NULL;
}

void nf_bench_add_peer_speedup(struct nf_strbuf *md, const struct nf_ynode *c)
{
    double speedup = nf_ypath_num(c, "speedup");
    const char *peer_status = nf_ypath_str(c, "peer.status"), *script = nf_ypath_str(c, "peer.script");
    const char *reason = nf_ypath_str(c, "peer.reason");
    if (isfinite(speedup))
        nf_strbuf_addf(md, "speedup over %s %.2f x: %s", script ? script : "the peer", speedup,
                       speedup > 1.0 ? "met" : "**not met**");
    else
        nf_strbuf_addf(md, "%s %s (%s)", script ? script : "peer", peer_status ? peer_status : "not run",
                       reason ? reason : "—");
}

/* The peer's median over one of the condition's times (key: "node" or
 * "process"): the result file's KEY_speedup, else (files from before it was
 * written) computed from the two medians; NAN when either is missing. */
static double speedup_of(const struct nf_ynode *c, const char *key)
{
    char name[64];
    snprintf(name, sizeof name, "%s_speedup", key);
    double x = nf_ypath_num(c, name);
    if (isfinite(x))
        return x;
    snprintf(name, sizeof name, "measure.%s_median_s", key);
    return nf_ypath_num(c, "peer.result.median_s") / nf_ypath_num(c, name);
}

/* "1.23 x" or "—". */
static void add_ratio_x(struct nf_strbuf *md, double x)
{
    if (isfinite(x))
        nf_strbuf_addf(md, "%.2f x", x);
    else
        nf_strbuf_addf(md, "—");
}

void nf_bench_add_node_and_process(struct nf_strbuf *md, const struct nf_ynode *c)
{
    nf_strbuf_addf(md, "node ");
    nf_bench_add_seconds(md, nf_ypath_num(c, "measure.node_median_s"));
    nf_strbuf_addf(md, " (speedup ");
    add_ratio_x(md, speedup_of(c, "node"));
    nf_strbuf_addf(md, "), whole process ");
    nf_bench_add_seconds(md, nf_ypath_num(c, "measure.process_median_s"));
    nf_strbuf_addf(md, ", ");
    nf_bench_add_seconds(md, nf_ypath_num(c, "measure.process_cpu_median_s"));
    nf_strbuf_addf(md, " CPU (speedup ");
    add_ratio_x(md, speedup_of(c, "process"));
    nf_strbuf_addf(md, ")");
}

void nf_bench_name_peer(struct nf_strbuf *md, const struct nf_ynode *domain_result, const char *script)
{
    const struct nf_ynode *conds = nf_ymap_get(domain_result, "conditions");
    const char *peer = NULL;
    for (size_t i = 0; conds && i < conds->n && !peer; i++) {
        const char *s = nf_ypath_str(conds->items[i], "peer.script");
        if (s && strcmp(s, script) == 0)
            peer = nf_ypath_str(conds->items[i], "peer.result.peer");
    }
    if (peer)
        nf_strbuf_addf(md, "\nPeer: `bench/peers/%s` (%s).\n", script, peer);
}

/* A string for the page: "?" when the result file lacks it. */
static const char *js(const struct nf_ynode *obj, const char *path)
{
    const char *s = nf_ypath_str(obj, path);
    return s ? s : "?";
}

void nf_bench_add_seconds(struct nf_strbuf *sb, double s)
{
    if (!isfinite(s))
        nf_strbuf_addf(sb, "—");
    else if (s < 1e-3)
        nf_strbuf_addf(sb, "%.3g µs", s * 1e6);
    else if (s < 1)
        nf_strbuf_addf(sb, "%.3g ms", s * 1e3);
    else
        nf_strbuf_addf(sb, "%.3g s", s);
}

void nf_bench_add_bytes(struct nf_strbuf *sb, double bytes)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    if (!isfinite(bytes)) {
        nf_strbuf_addf(sb, "—");
        return;
    }
    double x = fabs(bytes);
    while (x >= 1024 && u < 4) {
        x /= 1024;
        u++;
    }
    nf_strbuf_addf(sb, "%s%.3g %s", bytes < 0 ? "-" : "", x, units[u]);
}

/* Times of a result object: "1.23 s (1.20–1.31)". */
static void add_time_range(struct nf_strbuf *sb, const struct nf_ynode *m)
{
    nf_bench_add_seconds(sb, nf_ypath_num(m, "median_s"));
    nf_strbuf_addf(sb, " (");
    nf_bench_add_seconds(sb, nf_ypath_num(m, "min_s"));
    nf_strbuf_addf(sb, "–");
    nf_bench_add_seconds(sb, nf_ypath_num(m, "max_s"));
    nf_strbuf_addf(sb, ")");
}

static void add_fixed(struct nf_strbuf *sb, const char *fmt, double x)
{
    if (isfinite(x))
        nf_strbuf_addf(sb, fmt, x);
    else
        nf_strbuf_addf(sb, "—");
}

/* ---- the page ---- */

static void add_machine(struct nf_strbuf *md, const struct nf_ynode *r)
{
    const char *env[] = { "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                          "OMP_NUM_THREADS" };
    char key[64];
    nf_strbuf_addf(md, "\n## %s — %s\n\n`%s` · nlflow %s (commit %s) · %.0f timed "
                   "repetition%s · %.0f threads\n\n| machine | |\n|---|---|\n",
                   js(r, "host.name"), js(r, "date"),
                   js(r, "command"), js(r, "nlflow.version"),
                   js(r, "nlflow.commit"), nf_ypath_num(r, "options.reps"),
                   nf_ypath_num(r, "options.reps") == 1 ? "" : "s",
                   nf_ypath_num(r, "options.threads"));
    nf_strbuf_addf(md, "| CPU | %s, %.0f cores, ", js(r, "host.cpu"),
                   nf_ypath_num(r, "host.cores"));
    nf_bench_add_bytes(md, nf_ypath_num(r, "host.memory_bytes"));
    nf_strbuf_addf(md, " memory |\n| BLAS | %s, core type %s, %.0f threads |\n| environment | ",
                   js(r, "host.blas"), js(r, "host.blas_core"),
                   nf_ypath_num(r, "host.blas_threads"));
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        snprintf(key, sizeof key, "host.env.%s", env[i]);
        const char *v = nf_ypath_str(r, key);
        nf_strbuf_addf(md, "%s%s=%s", i ? ", " : "", env[i], v ? v : "(unset)");
    }
    nf_strbuf_addf(md, " |\n| compiler | %s |\n| GPU | %s |\n| SGEMM 2048³ | ",
                   js(r, "host.compiler"), js(r, "host.gpu"));
    add_fixed(md, "%.1f GFLOP/s", nf_ypath_num(r, "sgemm_2048_gflops"));
    nf_strbuf_addf(md, " |\n| load average (1 min), start / end | ");
    add_fixed(md, "%.2f", nf_ypath_num(r, "load_average_start"));
    nf_strbuf_addf(md, " / ");
    add_fixed(md, "%.2f", nf_ypath_num(r, "load_average_end"));
    nf_strbuf_addf(md, " (other work on a shared machine slows every figure) |\n");
}

/* The node and whole-process columns: "node, whole process (CPU) | speedup
 * node / whole", "—" where the result file lacks them. */
static void add_node_and_process_cells(struct nf_strbuf *md, const struct nf_ynode *c)
{
    nf_bench_add_seconds(md, nf_ypath_num(c, "measure.node_median_s"));
    nf_strbuf_addf(md, ", ");
    nf_bench_add_seconds(md, nf_ypath_num(c, "measure.process_median_s"));
    nf_strbuf_addf(md, " (");
    nf_bench_add_seconds(md, nf_ypath_num(c, "measure.process_cpu_median_s"));
    nf_strbuf_addf(md, " CPU) | ");
    add_fixed(md, "**%.2f×**", speedup_of(c, "node"));
    nf_strbuf_addf(md, " / ");
    add_fixed(md, "**%.2f×**", speedup_of(c, "process"));
    nf_strbuf_addf(md, " |");
}

static void add_condition_row(struct nf_strbuf *md, const struct nf_ynode *c, bool node_and_process)
{
    const char *status = nf_ypath_str(c, "status");
    nf_strbuf_addf(md, "| %s | ", js(c, "name"));
    if (!status || strcmp(status, "ok") != 0) {
        const char *why = nf_ypath_str(c, "error");
        nf_strbuf_addf(md, "%s: %s | | | | | | | |%s\n", status ? status : "?",
                       why ? why : js(c, "reason"), node_and_process ? " | |" : "");
        return;
    }
    const struct nf_ynode *m = nf_ypath(c, "measure");
    add_time_range(md, m);
    nf_strbuf_addf(md, " | ");
    add_fixed(md, "%.3g", nf_ypath_num(c, "gflops"));
    nf_strbuf_addf(md, " | ");
    add_fixed(md, "%.3g", nf_ypath_num(c, "gbytes_per_s"));
    nf_strbuf_addf(md, " | ");
    add_fixed(md, "%.3g%%", 100 * nf_ypath_num(c, "sgemm_2048_ratio"));
    nf_strbuf_addf(md, " | ");
    add_fixed(md, "%.3g%%", 100 * nf_ypath_num(c, "matched_sgemm_ratio"));
    if (nf_ypath(c, "matched_sgemm")) {
        nf_strbuf_addf(md, " of %.3g (%.0f×%.0f×%.0f)", nf_ypath_num(c, "matched_sgemm.gflops"),
                       nf_ypath_num(c, "matched_sgemm.m"), nf_ypath_num(c, "matched_sgemm.n"),
                       nf_ypath_num(c, "matched_sgemm.k"));
    }
    nf_strbuf_addf(md, " | ");
    nf_bench_add_bytes(md, nf_ypath_num(m, "rss_peak_sampled") - nf_ypath_num(m, "rss_baseline"));
    nf_strbuf_addf(md, " (");
    nf_bench_add_bytes(md, nf_ypath_num(m, "rss_peak_getrusage"));
    nf_strbuf_addf(md, ") | ");
    const char *peer = nf_ypath_str(c, "peer.status");
    if (!peer) {
        nf_strbuf_addf(md, "— | — |");
    } else if (strcmp(peer, "ok") != 0) {
        nf_strbuf_addf(md, "%s: %s | — |", peer, js(c, "peer.reason"));
    } else {
        const struct nf_ynode *p = nf_ypath(c, "peer.result");
        add_time_range(md, p);
        nf_strbuf_addf(md, ", ");
        nf_bench_add_bytes(md, nf_ypath_num(p, "rss_peak_sampled") - nf_ypath_num(p, "rss_baseline"));
        nf_strbuf_addf(md, " | ");
        add_fixed(md, "**%.2f×**", nf_ypath_num(c, "speedup"));
        nf_strbuf_addf(md, " |");
    }
    if (node_and_process) {
        nf_strbuf_addf(md, " ");
        add_node_and_process_cells(md, c);
    }
    nf_strbuf_addf(md, "\n");
}

static void add_domain(struct nf_strbuf *md, const struct nf_ynode *d)
{
    const struct nf_bench_domain *reg = nf_bench_domain_find(js(d, "name"));
    const struct nf_ynode *conds = nf_ypath(d, "conditions");
    const char *label = nf_ypath_str(d, "size_label");
    nf_strbuf_addf(md, "\n### %s\n\n%s%s%s.\n\n", js(d, "name"),
                   js(d, "summary"), label ? "; size: " : "", label ? label : "");
    const bool node_and_process = reg && reg->node_and_process;
    nf_strbuf_addf(md, "| condition | median (min–max) | GFLOP/s | GB/s | %% of SGEMM 2048³ | "
                       "%% of matched SGEMM (GFLOP/s, m×n×k) | peak RSS above baseline (raw) | "
                       "peer median (min–max), peak RSS | speedup |%s\n"
                       "|---|--:|--:|--:|--:|--:|--:|--:|--:|%s\n",
                   node_and_process ? " node, whole process (CPU) | speedup node / whole process |" : "",
                   node_and_process ? "--:|--:|" : "");
    for (size_t i = 0; conds && i < conds->n; i++)
        add_condition_row(md, conds->items[i], node_and_process);
    for (size_t i = 0; conds && i < conds->n; i++) {
        const char *peer = nf_ypath_str(conds->items[i], "peer.result.peer");
        if (peer) {
            nf_strbuf_addf(md, "\nPeer: `bench/peers/%s` (%s).\n",
                           js(conds->items[i], "peer.script"), peer);
            break;
        }
    }
    if (reg && reg->report_notes)
        reg->report_notes(d, md);
}

static void add_result(struct nf_strbuf *md, const struct nf_ynode *r)
{
    const struct nf_ynode *domains = nf_ypath(r, "domains");
    bool any_skipped = false;
    add_machine(md, r);
    for (size_t i = 0; domains && i < domains->n; i++) {
        const char *status = nf_ypath_str(domains->items[i], "status");
        if (status && strcmp(status, "measured") == 0)
            add_domain(md, domains->items[i]);
    }
    for (size_t i = 0; domains && i < domains->n; i++) {
        const struct nf_ynode *d = domains->items[i];
        const char *status = nf_ypath_str(d, "status");
        if (status && strcmp(status, "skipped") == 0) {
            nf_strbuf_addf(md, "%s%s: %s", any_skipped ? "; " : "\nNot measured: ",
                           js(d, "name"), js(d, "reason"));
            any_skipped = true;
        }
    }
    if (any_skipped)
        nf_strbuf_addf(md, ".\n");
}

static const char page_head[] =
    "<!-- DO NOT EDIT: generated by nlflow bench from the result files in %s/ -->\n"
    "# nlflow performance\n"
    "\n"
    "DO NOT EDIT: generated by `nlflow bench` from `%s/*.json`. Every number here is\n"
    "reproduced by the command shown with it.\n"
    "\n"
    "## Reproduce\n"
    "\n"
    "```sh\n"
    "./build.sh build\n"
    "build/nlflow bench                          # every domain, full sizes: bench/results/$(hostname).json\n"
    "build/nlflow bench --domains collection     # one domain\n"
    "build/nlflow bench --quick                  # tiny sizes in seconds: the wiring (make check runs it)\n"
    "build/nlflow bench --report-only            # regenerate this page from bench/results/*.json\n"
    "```\n"
    "\n"
    "## How the numbers are measured\n"
    "\n"
    "- Each condition runs in a fresh process of its own. Its input files are written\n"
    "  beforehand by another process; setup is not timed; one warm-up run, then N timed\n"
    "  runs: the **median** wall time, with min–max. The machines are shared: never trust\n"
    "  one timing.\n"
    "- GFLOP/s comes from an explicit FLOP count of the algorithm; GB/s is uncompressed\n"
    "  input bytes read per second.\n"
    "- %% of SGEMM 2048³: achieved GFLOP/s against a 2048×2048×2048 SGEMM measured in the\n"
    "  same run through the same BLAS. %% of matched SGEMM: against an SGEMM over data of\n"
    "  the same shape (for the collection, (1 × rows)·(rows × voxels): one pass over the\n"
    "  same data).\n"
    "- Peak RSS: the largest resident set sampled every 5 ms during the timed runs, minus\n"
    "  the process's resident set before setup; in parentheses the raw peak of the whole\n"
    "  process (getrusage).\n"
    "- Peers: a Python script per domain in `bench/peers/` computes the same result from\n"
    "  the same files with `/usr/bin/python3`, measured the same way; speedup = peer\n"
    "  median / nlflow median. Peers run as their libraries do by default (the NumPy\n"
    "  steps of the collection peer are serial); nlflow uses every core unless told\n"
    "  otherwise (`--threads`). A peer that is not installed is listed as skipped.\n"
    "- Node and whole process (the ridge and inference tables): the median column is the\n"
    "  pipeline run inside the measuring process (every phase, loading the inputs, writing\n"
    "  the outputs). *Node* is the executor's own clock for the one node that computes what\n"
    "  the peer computes (the ridge or permute node; peers time that computation with\n"
    "  their data already in memory). *Whole process* is a fresh `nlflow run --quiet\n"
    "  --no-cache` of the same pipeline, from exec to exit (start-up, parsing and planning,\n"
    "  reading the inputs, every node, writing the outputs), median wall time with its CPU\n"
    "  time (user + system). Each has its speedup, peer median / that time; — where a\n"
    "  result file predates them.\n"
    "\n"
    "![speedup over the peer against problem size](performance-speedup.svg)\n";

/* ---- the plot ---- */

struct point { double x, y; int host; char series[64]; char label[64]; };

/* "moments[lazy,N=20]" -> "moments[lazy]": a family of conditions over sizes,
 * dropping the size parameters (NAME=number). */
static void series_of(const char *name, char *out, size_t size)
{
    const char *open = strchr(name, '[');
    struct nf_strbuf sb;
    bool any = false;
    nf_strbuf_init(&sb);
    nf_strbuf_add(&sb, name, open ? (size_t)(open - name) : strlen(name));
    for (const char *p = open ? open + 1 : NULL; p && *p && *p != ']';) {
        size_t len = strcspn(p, ",]");
        const char *eq = memchr(p, '=', len);
        bool is_size = eq && strspn(eq + 1, "0123456789") == (size_t)(p + len - eq - 1);
        if (!is_size) {
            nf_strbuf_addf(&sb, "%s%.*s", any ? "," : "[", (int)len, p);
            any = true;
        }
        p += len + (p[len] == ',');
    }
    if (any)
        nf_strbuf_addf(&sb, "]");
    snprintf(out, size, "%s", sb.buf ? sb.buf : name);
    nf_strbuf_release(&sb);
}

static const char *const palette[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                       "#8c564b", "#e377c2", "#17becf" };

static void svg_marker(struct nf_strbuf *svg, int host, double x, double y, const char *color)
{
    switch (host % 3) {
    case 0: nf_strbuf_addf(svg, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'/>\n", x, y, color); break;
    case 1: nf_strbuf_addf(svg, "<rect x='%.1f' y='%.1f' width='8' height='8' fill='%s'/>\n", x - 4, y - 4, color); break;
    default: nf_strbuf_addf(svg, "<path d='M%.1f %.1fl5 8h-10z' fill='%s'/>\n", x, y - 5, color); break;
    }
}

static void add_plot(struct nf_strbuf *svg, const struct point *pts, size_t n,
                     char (*hosts)[64], size_t n_hosts)
{
    enum { W = 760, H = 440, L = 70, R = 190, T = 40, B = 50 };
    static const double ticks_y[] = { 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50,
                                      100, 200, 500, 1000 };
    double xmin = INFINITY, xmax = -INFINITY, ymin = 1, ymax = 1;
    char series[8][64];
    size_t n_series = 0;
    for (size_t i = 0; i < n; i++) {
        xmin = fmin(xmin, pts[i].x);
        xmax = fmax(xmax, pts[i].x);
        ymin = fmin(ymin, pts[i].y);
        ymax = fmax(ymax, pts[i].y);
    }
    double x0 = n ? floor(log10(xmin)) : 6, x1 = n ? ceil(log10(xmax)) : 9;
    if (x1 <= x0)
        x1 = x0 + 1;
    double y0 = log10(ymin / 1.5), y1 = log10(ymax * 1.5);
#define PX(v) (L + (log10(v) - x0) / (x1 - x0) * (W - L - R))
#define PY(v) (T + (y1 - log10(v)) / (y1 - y0) * (H - T - B))
    nf_strbuf_addf(svg,
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        "<!-- DO NOT EDIT: generated by nlflow bench from the benchmark result files -->\n"
        "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' "
        "font-family='sans-serif' font-size='12'>\n"
        "<rect width='100%%' height='100%%' fill='white'/>\n"
        "<text x='%d' y='22' font-size='14'>nlflow speedup over its peer vs problem size</text>\n"
        "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#888'/>\n",
        W, H, W, H, L, L, T, W - L - R, H - T - B);
    for (double e = x0; e <= x1; e++) {
        static const char *const unit[] = { "B", "kB", "MB", "GB", "TB" };
        int k = (int)e / 3 < 5 ? (int)e / 3 : 4;
        double x = PX(pow(10, e));
        nf_strbuf_addf(svg, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#ddd'/>\n"
                       "<text x='%.1f' y='%d' text-anchor='middle'>%g %s</text>\n",
                       x, T, x, H - B, x, H - B + 18, pow(10, e - 3 * k), unit[k]);
    }
    nf_strbuf_addf(svg, "<text x='%d' y='%d' text-anchor='middle'>uncompressed input bytes "
                   "(log scale)</text>\n", (L + W - R) / 2, H - 10);
    for (size_t i = 0; i < sizeof ticks_y / sizeof ticks_y[0]; i++) {
        double v = ticks_y[i];
        if (log10(v) < y0 || log10(v) > y1)
            continue;
        nf_strbuf_addf(svg, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='%s'%s/>\n"
                       "<text x='%d' y='%.1f' text-anchor='end'>%g×</text>\n",
                       L, PY(v), W - R, PY(v), v == 1 ? "#555" : "#ddd",
                       v == 1 ? " stroke-dasharray='4 3'" : "", L - 6, PY(v) + 4, v);
    }
    nf_strbuf_addf(svg, "<text transform='translate(18 %d) rotate(-90)' text-anchor='middle'>"
                   "speedup: peer time / nlflow time (log scale)</text>\n", (T + H - B) / 2);
    /* One polyline per series and host, through its points in size order. */
    for (size_t i = 0; i < n; i++) {
        size_t s = 0;
        while (s < n_series && strcmp(series[s], pts[i].series) != 0)
            s++;
        if (s == n_series && n_series < 8)
            snprintf(series[n_series++], sizeof series[0], "%s", pts[i].series);
    }
    for (size_t s = 0; s < n_series; s++) {
        const char *color = palette[s % 8];
        for (size_t h = 0; h < n_hosts; h++) {
            double last_x = -1;
            nf_strbuf_addf(svg, "<polyline fill='none' stroke='%s' points='", color);
            for (;;) {   /* points of (s, h) in increasing x */
                const struct point *next = NULL;
                for (size_t i = 0; i < n; i++)
                    if ((int)h == pts[i].host && strcmp(pts[i].series, series[s]) == 0 &&
                        pts[i].x > last_x && (!next || pts[i].x < next->x))
                        next = &pts[i];
                if (!next)
                    break;
                nf_strbuf_addf(svg, "%.1f,%.1f ", PX(next->x), PY(next->y));
                last_x = next->x;
            }
            nf_strbuf_addf(svg, "'/>\n");
        }
        nf_strbuf_addf(svg, "<rect x='%d' y='%zu' width='12' height='3' fill='%s'/>"
                       "<text x='%d' y='%zu'>%s</text>\n", W - R + 12, T + 8 + 18 * s, color,
                       W - R + 30, T + 13 + 18 * s, series[s]);
    }
    for (size_t i = 0; i < n; i++) {
        size_t s = 0;
        while (s < n_series && strcmp(series[s], pts[i].series) != 0)
            s++;
        /* Points are close together: the name and value show on hover, not as text. */
        nf_strbuf_addf(svg, "<g><title>%s on %s: %.2f×</title>", pts[i].label,
                       hosts[pts[i].host], pts[i].y);
        svg_marker(svg, pts[i].host, PX(pts[i].x), PY(pts[i].y), palette[s % 8]);
        nf_strbuf_addf(svg, "</g>\n");
    }
    for (size_t h = 0; h < n_hosts; h++) {
        double y = T + 8 + 18 * (double)(n_series + 1 + h);
        svg_marker(svg, (int)h, W - R + 18, y, "#555");
        nf_strbuf_addf(svg, "<text x='%d' y='%.1f'>%s</text>\n", W - R + 30, y + 4, hosts[h]);
    }
    if (!n)
        nf_strbuf_addf(svg, "<text x='%d' y='%d' text-anchor='middle' fill='#888'>no peer "
                       "measurements yet</text>\n", (L + W - R) / 2, (T + H - B) / 2);
    nf_strbuf_addf(svg, "</svg>\n");
#undef PX
#undef PY
}

/* Points of one result file: every condition with a speedup and a size. */
static int collect_points(const struct nf_ynode *r, int host, struct point **pts, size_t *n)
{
    const struct nf_ynode *domains = nf_ypath(r, "domains");
    for (size_t d = 0; domains && d < domains->n; d++) {
        const struct nf_ynode *conds = nf_ypath(domains->items[d], "conditions");
        for (size_t i = 0; conds && i < conds->n; i++) {
            const struct nf_ynode *c = conds->items[i];
            double x = nf_ypath_num(c, "measure.bytes"), y = nf_ypath_num(c, "speedup");
            const char *name = nf_ypath_str(c, "name");
            if (!(x > 0) || !(y > 0) || !name)
                continue;
            struct point *grown = realloc(*pts, (*n + 1) * sizeof *grown);
            if (!grown)
                return -1;
            *pts = grown;
            struct point *p = &grown[(*n)++];
            p->x = x;
            p->y = y;
            p->host = host;
            snprintf(p->label, sizeof p->label, "%s", name);
            series_of(name, p->series, sizeof p->series);
        }
    }
    return 0;
}

int nf_bench_report(const char *results_dir, const char *docs_dir, struct nf_error *err)
{
    struct nf_strbuf md, svg;
    glob_t files = { 0 };
    struct point *pts = NULL;
    size_t n_pts = 0, n_hosts = 0;
    char (*hosts)[64] = NULL;
    char *pattern = nf_path_join(results_dir, "*.json");
    char *md_path = nf_path_join(docs_dir, "performance.md");
    char *svg_path = nf_path_join(docs_dir, "performance-speedup.svg");
    int rc = 0;

    nf_strbuf_init(&md);
    nf_strbuf_init(&svg);
    if (!pattern || !md_path || !svg_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    int g = glob(pattern, 0, NULL, &files);
    if (g != 0 && g != GLOB_NOMATCH) {
        rc = NF_FAIL(err, NF_EIO, "cannot list '%s'", pattern);
        goto fail;
    }
    hosts = calloc(files.gl_pathc + 1, sizeof *hosts);
    if (!hosts) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    nf_strbuf_addf(&md, page_head, results_dir, results_dir);
    if (files.gl_pathc == 0)
        nf_strbuf_addf(&md, "\nNo result files yet: run `build/nlflow bench`.\n");
    for (size_t i = 0; i < files.gl_pathc; i++) {
        struct nf_error perr = { 0 };
        size_t len;
        char *text = nf_read_file(files.gl_pathv[i], &len, &perr);
        struct nf_ynode *root = text ? nf_yaml_parse(text, len, files.gl_pathv[i], &perr) : NULL;
        if (root && root->type == NF_Y_MAP && isfinite(nf_ypath_num(root, "nlflow_bench"))) {
            add_result(&md, root);
            snprintf(hosts[n_hosts], sizeof hosts[0], "%s", js(root, "host.name"));
            if (collect_points(root, (int)n_hosts++, &pts, &n_pts) < 0)
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        } else {
            fprintf(stderr, "nlflow bench: warning: skipping '%s': not a result file\n",
                    files.gl_pathv[i]);
        }
        nf_ynode_free(root);
        free(text);
        NF_TRY(rc);
    }
    add_plot(&svg, pts, n_pts, hosts, n_hosts);
    if (md.oom || svg.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(docs_dir, err));
    NF_TRY(rc = nf_write_file_atomic(md_path, md.buf, md.len, err));
    NF_TRY(rc = nf_write_file_atomic(svg_path, svg.buf, svg.len, err));
fail:
    globfree(&files);
    nf_strbuf_release(&md);
    nf_strbuf_release(&svg);
    free(pts);
    free(hosts);
    free(pattern);
    free(md_path);
    free(svg_path);
    return rc;
}
