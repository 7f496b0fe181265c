#!/usr/bin/python3
"""rerun_diff.py — a cached rerun after an edit must equal a fresh run.

For each example pipeline (pipelines/*.yaml, and the lab templates they use),
in a scratch copy: run it once, then apply a sequence of generated edits. After
each edit the pipeline is run again in the same folder with its cache (the
cached rerun) and, in another folder holding a copy of the same inputs and no
cache, with --no-cache (the fresh run). Both must exit with the same status,
and when they succeed every file the fresh run wrote under settings.outputs
must be byte-identical in the cached folder (an HTML report may differ only in
its date line), and the cached rerun must have written nothing the fresh run
did not.

Edits are drawn by a seeded generator (--seed, printed first, so that a
failure can be replayed with the same --seed and --edits, alone with
--pipelines NAME: each pipeline draws from its own generator):
  param     a parameter of a node (of the pipeline or of a used template) set
            to another valid value from the node's parameter table, read from
            schemas/pipeline.schema.json (another choice, the other boolean,
            a nearby number in range, a new name)
  with      a `with:` value of a `use:` node changed (numbers, booleans)
  rename    a node renamed, and every reference to it
  consumer  a summarize added that reads an intermediate output
  settings  settings.seed, threads, memory or outputs changed
  touch     an input file's mtime moved (nothing changes)
  replace   an input file replaced: a NIfTI re-compressed (same voxels, other
            bytes), a number in a TSV changed, a JSON sidecar re-indented
  delete    a file in the outputs folder deleted
An edit whose runs both fail the same way is undone before the next one. With
--kill-rate R, a cached run is first started and killed (SIGKILL) at a random
moment before a fraction R of the edits: the rerun that follows resumes, and
must still equal the fresh run.

Exit 0 when every comparison holds, 1 at the first difference (with the seed,
pipeline, edit number and what differs), 77 when PyYAML is missing.
"""
import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (tests/rerun/rerun_diff.py reads and edits pipelines)")
    sys.exit(77)


# YAML 1.2 floats (1e-2 without a dot is a float for nlflow's libyaml reader,
# a string for PyYAML's YAML 1.1 resolver)
class Loader(yaml.SafeLoader):
    pass


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def load_yaml(path):
    with open(path) as f:
        return yaml.load(f, Loader=Loader)


def dump_yaml(doc, path):
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)
    with open(path, "w") as f:
        f.write(text)


class Failure(Exception):
    pass


IGNORED_PARAMS = {"type", "in", "after", "device", "path"}


class Harness:
    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        with open(os.path.join(args.src, "schemas", "pipeline.schema.json")) as f:
            self.schema = json.load(f)["$defs"]
        self.outputs_cache = {}
        self.n_edits = 0
        self.n_compared = 0
        self.n_failed_both = 0
        self.n_kills = 0
        self.kinds = {}

    # ---- running nlflow ----
    def start(self, folder, yaml_name, no_cache=False):
        cmd = [self.a.nlflow, "run", "--quiet"]
        if no_cache:
            cmd.append("--no-cache")
        cmd.append(yaml_name)
        p = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        return p, time.time()

    def finish(self, p, t0):
        out, err = p.communicate(timeout=self.a.timeout)
        return p.returncode, err.decode(errors="replace"), time.time() - t0

    def run(self, folder, yaml_name, no_cache=False, kill_after=None):
        p, t0 = self.start(folder, yaml_name, no_cache)
        if kill_after is not None:
            try:
                out, err = p.communicate(timeout=kill_after)
                return p.returncode, err.decode(errors="replace"), time.time() - t0
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                return None, "", time.time() - t0
        return self.finish(p, t0)

    def outputs_dir(self, folder, yaml_name):
        doc = load_yaml(os.path.join(folder, yaml_name))
        out = (doc.get("settings") or {}).get("outputs", "results")
        return os.path.join(folder, out)

    def node_outputs(self, node_type):
        if node_type not in self.outputs_cache:
            text = subprocess.run([self.a.nlflow, "nodes", node_type], capture_output=True, text=True).stdout
            ports, inside = [], False
            for line in text.splitlines():
                if line.startswith("outputs:"):
                    inside = True
                elif inside and line.startswith("  ") and line.strip():
                    name, kind = line.split()[:2]
                    ports.append((name, kind.rstrip(",:")))
                elif inside:
                    break
            self.outputs_cache[node_type] = ports
        return self.outputs_cache[node_type]

    # ---- comparing ----
    @staticmethod
    def files_under(root):
        found = {}
        if not os.path.isdir(root):
            return found
        for d, _, names in os.walk(root):
            for n in names:
                p = os.path.join(d, n)
                found[os.path.relpath(p, root)] = p
        return found

    @staticmethod
    def comparable(path):
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".html"):   # the report's date line: when, where, how far the run was
            data = re.sub(rb"<dt>made</dt><dd>[^<]*</dd>", b"", data)
        return data

    def stamps(self, root):
        """What each file under root is now: a rewritten file (atomic rename) gets another inode."""
        out = {}
        for rel, p in self.files_under(root).items():
            st = os.stat(p)
            out[rel] = (st.st_ino, st.st_mtime_ns, st.st_size)
        return out

    def compare(self, cached_out, fresh_out, before):
        fresh = self.files_under(fresh_out)
        cached = self.files_under(cached_out)
        if not fresh:
            raise Failure("the fresh run wrote nothing under %s" % fresh_out)
        for rel, fp in sorted(fresh.items()):
            cp = cached.get(rel)
            if cp is None:
                raise Failure("%s: written by the fresh run, missing after the cached rerun" % rel)
            if self.comparable(cp) != self.comparable(fp):
                raise Failure("%s: cached rerun and fresh run differ" % rel)
        for rel, cp in sorted(cached.items()):
            if rel not in fresh and before.get(rel) != self.stamps_one(cp):
                raise Failure("%s: written by the cached rerun, not by the fresh run" % rel)
        self.n_compared += 1

    @staticmethod
    def stamps_one(path):
        st = os.stat(path)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    # ---- the pipeline's nodes, its templates' nodes ----
    def templates_used(self, folder, doc):
        found = []
        for nid, node in (doc.get("nodes") or {}).items():
            if isinstance(node, dict) and node.get("type") == "use" and isinstance(node.get("path"), str):
                p = os.path.join(folder, node["path"])
                if os.path.isfile(p) and p not in found:
                    found.append(p)
        return found

    def edit_param(self, folder, yaml_name):
        files = [os.path.join(folder, yaml_name)]
        files += self.templates_used(folder, load_yaml(files[0]))
        target = self.rng.choice(files)
        doc = load_yaml(target)
        nodes = [(nid, n) for nid, n in (doc.get("nodes") or {}).items()
                 if isinstance(n, dict) and n.get("type") in self.schema and n.get("type") != "use"]
        if not nodes:
            return None
        nid, node = self.rng.choice(nodes)
        props = self.schema[node["type"]]["properties"]
        names = [k for k in props if k not in IGNORED_PARAMS]
        self.rng.shuffle(names)
        for name in names:
            new = self.other_value(name, props[name], node.get(name))
            if new is not None:
                node[name] = new
                dump_yaml(doc, target)
                return "param %s: %s.%s = %r" % (os.path.relpath(target, folder), nid, name, new)
        return None

    def other_value(self, name, spec, current):
        rng = self.rng
        if isinstance(current, str) and "${" in current:
            return None
        alts = spec.get("anyOf", [spec])
        base = next((s for s in alts if "pattern" not in s), alts[0])
        default = spec.get("default")
        now = current if current is not None else default
        if "enum" in base:
            choices = [c for c in base["enum"] if c != now]
            return rng.choice(choices) if choices else None
        t = base.get("type")
        if t == "boolean":
            return not bool(now)
        if t == "integer":
            lo, hi = base.get("minimum", -10**9), base.get("maximum", 10**9)
            d = now if isinstance(now, int) and not isinstance(now, bool) else max(lo, 1)
            cands = {d - 1, d + 1, d // 2, d * 2, d + rng.randint(2, 5)}
            cands = [c for c in cands if lo <= c <= hi and c != now and c <= max(2 * abs(d), d + 5, 8)]
            return rng.choice(sorted(cands)) if cands else None
        if t == "number":
            lo, hi = base.get("minimum", -1e9), base.get("maximum", 1e9)
            d = now if isinstance(now, (int, float)) and not isinstance(now, bool) else None
            if d is None or d == 0:
                v = round(rng.uniform(max(lo, 0.0), min(hi, 10.0)), 3)
            else:
                v = d * rng.choice([0.5, 0.8, 1.25, 2.0])
            v = min(max(v, lo), hi)
            return None if v == now else v
        if t == "string" and name == "name":
            return (now or "run") + "_" + rng.choice(["b", "c", "x2"])
        return None

    def edit_with(self, folder, yaml_name):
        path = os.path.join(folder, yaml_name)
        doc = load_yaml(path)
        uses = [(nid, n) for nid, n in (doc.get("nodes") or {}).items()
                if isinstance(n, dict) and n.get("type") == "use"]
        if not uses:
            return None
        nid, node = self.rng.choice(uses)
        tpl = load_yaml(os.path.join(folder, node["path"]))
        params = dict(tpl.get("params") or {})
        params.update(node.get("with") or {})
        names = [k for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, str)]
        if not names:
            return None
        k = self.rng.choice(names)
        v = params[k]
        if isinstance(v, bool):
            new = not v
        elif isinstance(v, int):
            new = max(1, v + self.rng.choice([-1, 1]) * max(1, v // 4))
        else:
            new = v * self.rng.choice([0.5, 2.0]) if v else 1.0
        node.setdefault("with", {})[k] = new
        dump_yaml(doc, path)
        return "with: %s.%s = %r" % (nid, k, new)

    def edit_rename(self, folder, yaml_name):
        path = os.path.join(folder, yaml_name)
        doc = load_yaml(path)
        nodes = doc.get("nodes") or {}
        old = self.rng.choice(list(nodes))
        new = old + "_r"
        renamed = {}
        for nid, n in nodes.items():
            if isinstance(n, dict):
                for k, v in list((n.get("in") or {}).items()):
                    if isinstance(v, str) and (v == old or v.startswith(old + ".")):
                        n["in"][k] = new + v[len(old):]
                aft = n.get("after")
                if isinstance(aft, str) and aft == old:
                    n["after"] = new
                elif isinstance(aft, list):
                    n["after"] = [new if a == old else a for a in aft]
            renamed[new if nid == old else nid] = n
        doc["nodes"] = renamed
        dump_yaml(doc, path)
        return "rename %s -> %s" % (old, new)

    def edit_consumer(self, folder, yaml_name):
        path = os.path.join(folder, yaml_name)
        doc = load_yaml(path)
        nodes = doc.get("nodes") or {}
        cands = []
        for nid, n in nodes.items():
            t = n.get("type") if isinstance(n, dict) else None
            if t in (None, "use", "summarize", "report", "bids", "load"):
                continue
            for port, kind in self.node_outputs(t):
                if kind.startswith("matrix") or kind.startswith("table"):
                    cands.append("%s.%s" % (nid, port))
        if not cands:
            return None
        src = self.rng.choice(cands)
        cid = "extra%d" % self.n_edits
        nodes[cid] = {"type": "summarize", "name": cid, "in": {src.replace(".", "_"): src}}
        dump_yaml(doc, path)
        return "consumer %s reads %s" % (cid, src)

    def edit_settings(self, folder, yaml_name):
        path = os.path.join(folder, yaml_name)
        doc = load_yaml(path)
        s = doc.setdefault("settings", {})
        what = self.rng.choice(["seed", "threads", "memory", "outputs"])
        if what == "seed":
            s["seed"] = int(s.get("seed", 0)) + 1
        elif what == "threads":
            s["threads"] = 1 if s.get("threads") != 1 else 2
        elif what == "memory":
            s["memory"] = self.rng.choice(["1GiB", "4GiB", "600MiB"])
        else:
            s["outputs"] = str(s.get("outputs", "results")).rstrip("/") + "_o"
        dump_yaml(doc, path)
        return "settings.%s = %r" % (what, s[what])

    def input_files(self, folder, yaml_name):
        out = os.path.realpath(self.outputs_dir(folder, yaml_name))
        found = []
        for d, dirs, names in os.walk(folder):
            dirs[:] = [x for x in dirs if x != ".nlflow" and not os.path.realpath(os.path.join(d, x)).startswith(out)
                       and not x.startswith("results")]
            for n in names:
                p = os.path.join(d, n)
                if n.endswith((".yaml",)) and d == folder:
                    continue
                found.append(p)
        return sorted(found)

    def edit_touch(self, folder, yaml_name):
        files = self.input_files(folder, yaml_name)
        if not files:
            return None
        f = self.rng.choice(files)
        st = os.stat(f)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
        return "touch %s" % os.path.relpath(f, folder)

    def edit_replace(self, folder, yaml_name):
        files = [f for f in self.input_files(folder, yaml_name) if f.endswith((".nii.gz", ".tsv", ".json"))]
        if not files:
            return None
        f = self.rng.choice(files)
        rel = os.path.relpath(f, folder)
        if f.endswith(".nii.gz"):
            with gzip.open(f, "rb") as g:
                raw = g.read()
            with open(f + ".new", "wb") as h:
                h.write(gzip.compress(raw, compresslevel=self.rng.choice([1, 9]), mtime=0))
            os.replace(f + ".new", f)
            return "replace %s (re-compressed)" % rel
        if f.endswith(".json"):
            try:
                with open(f) as h:
                    doc = json.load(h)
            except ValueError:
                return None
            with open(f, "w") as h:
                json.dump(doc, h, indent=self.rng.choice([1, 3]))
            return "replace %s (re-indented)" % rel
        with open(f) as h:
            lines = h.read().split("\n")
        cells = [(i, j) for i, line in enumerate(lines[1:], 1) for j, c in enumerate(line.split("\t"))
                 if re.fullmatch(r"-?\d+(\.\d+)?", c)]
        if not cells:
            return None
        i, j = self.rng.choice(cells)
        row = lines[i].split("\t")
        row[j] = str(float(row[j]) + self.rng.choice([0.5, 1, 3]))
        lines[i] = "\t".join(row)
        with open(f, "w") as h:
            h.write("\n".join(lines))
        return "replace %s (row %d column %d -> %s)" % (rel, i, j + 1, row[j])

    def edit_delete(self, folder, yaml_name):
        files = sorted(self.files_under(self.outputs_dir(folder, yaml_name)).values())
        if not files:
            return None
        f = self.rng.choice(files)
        os.remove(f)
        return "delete %s" % os.path.relpath(f, folder)

    EDITS = [("param", 10), ("with", 2), ("rename", 2), ("consumer", 2), ("settings", 2), ("touch", 1),
             ("replace", 2), ("delete", 2)]

    # ---- one pipeline ----
    def snapshot(self, folder, yaml_name):
        """The files an edit may change and a failed edit must get back."""
        keep = {}
        for f in [os.path.join(folder, yaml_name)] + self.input_files(folder, yaml_name):
            if os.path.getsize(f) < 64 << 20:
                with open(f, "rb") as h:
                    keep[f] = (h.read(), os.stat(f).st_mtime_ns)
        return keep

    @staticmethod
    def restore(keep):
        for f, (data, mtime) in keep.items():
            same = False
            if os.path.exists(f):   # a refused run may have removed it (simulate rewriting its folder)
                with open(f, "rb") as h:
                    same = h.read() == data
            else:
                os.makedirs(os.path.dirname(f), exist_ok=True)
            if not same:
                with open(f, "wb") as h:
                    h.write(data)
                os.utime(f, ns=(mtime, mtime))

    def fresh_copy(self, cached, fresh, yaml_name):
        if os.path.exists(fresh):
            shutil.rmtree(fresh)
        out = os.path.realpath(self.outputs_dir(cached, yaml_name))

        def ignore(d, names):
            return [n for n in names if n == ".nlflow" or n.startswith("results")
                    or os.path.realpath(os.path.join(d, n)) == out]
        shutil.copytree(cached, fresh, ignore=ignore, symlinks=True)

    def pipeline(self, yaml_name, n_edits):
        # a generator per pipeline: one pipeline's edits replay alone (--pipelines NAME)
        self.rng = random.Random("%d:%s" % (self.a.seed, yaml_name))
        name = os.path.splitext(yaml_name)[0]
        root = os.path.join(self.a.work, name)
        cached, fresh = os.path.join(root, "cached"), os.path.join(root, "fresh")
        if os.path.exists(root):
            shutil.rmtree(root)
        os.makedirs(root)
        shutil.copytree(os.path.join(self.a.src, "pipelines"), cached,
                        ignore=shutil.ignore_patterns("results", "data", ".nlflow"))
        rc, err, dt = self.run(cached, yaml_name)
        if rc != 0:
            raise Failure("%s: the unedited pipeline fails (exit %s): %s" % (yaml_name, rc, err.strip()[-400:]))
        last = dt
        print("  %s: base run %.1f s" % (yaml_name, dt), flush=True)
        i = 0
        attempts = 0
        while i < n_edits and attempts < 4 * n_edits:
            attempts += 1
            keep = self.snapshot(cached, yaml_name)
            kind = self.rng.choices([k for k, _ in self.EDITS], [w for _, w in self.EDITS])[0]
            what = getattr(self, "edit_" + kind)(cached, yaml_name)
            if what is None:
                continue
            i += 1
            self.n_edits += 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            tag = "%s edit %d/%d" % (yaml_name, i, n_edits)
            before = self.stamps(self.outputs_dir(cached, yaml_name))
            if self.rng.random() < self.a.kill_rate:
                delay = self.rng.uniform(0.05, max(0.2, last * 1.2))
                krc, _, _ = self.run(cached, yaml_name, kill_after=delay)
                if krc is None:
                    self.n_kills += 1
                    what += " [killed after %.2f s]" % delay
            # the fresh run gets the edited inputs as they are now, and runs
            # beside the cached rerun (separate folders: nothing is shared)
            self.fresh_copy(cached, fresh, yaml_name)
            fresh_run = self.start(fresh, yaml_name, no_cache=True)
            rc_c, err_c, last = self.run(cached, yaml_name)
            rc_f, err_f, _ = self.finish(*fresh_run)
            print("    %s: %s -> cached %d, fresh %d" % (tag, what, rc_c, rc_f), flush=True)
            ctx = "seed %d, %s: %s" % (self.a.seed, tag, what)
            if rc_c != rc_f:
                raise Failure("%s: the cached rerun exits %d, the fresh run %d\n  cached: %s\n  fresh: %s"
                              % (ctx, rc_c, rc_f, err_c.strip()[-600:], err_f.strip()[-600:]))
            if rc_c != 0:
                self.n_failed_both += 1
                self.restore(keep)   # undo the edit: both runs refused it alike
                continue
            try:
                self.compare(self.outputs_dir(cached, yaml_name), self.outputs_dir(fresh, yaml_name), before)
            except Failure as e:
                raise Failure("%s: %s" % (ctx, e))
        shutil.rmtree(fresh, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nlflow", required=True)
    ap.add_argument("--src", required=True, help="the source tree (pipelines/, schemas/)")
    ap.add_argument("--work", required=True, help="scratch folder")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--edits", type=int, default=3, help="edits per pipeline")
    ap.add_argument("--pipelines", default="", help="comma-separated file names (default: all)")
    ap.add_argument("--kill-rate", type=float, default=0.0)
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    a.nlflow = os.path.abspath(a.nlflow)
    names = [n for n in a.pipelines.split(",") if n] or sorted(
        n for n in os.listdir(os.path.join(a.src, "pipelines")) if n.endswith(".yaml"))
    print("rerun_diff: seed %d, %d edits per pipeline, kill rate %.2f, pipelines: %s"
          % (a.seed, a.edits, a.kill_rate, " ".join(names)), flush=True)
    h = Harness(a)
    t0 = time.time()
    try:
        for n in names:
            h.current = n
            h.pipeline(n, a.edits)
    except Failure as e:
        print("FAIL: %s" % e)
        print("replay: %s --nlflow %s --src %s --work DIR --seed %d --edits %d --kill-rate %g --pipelines %s"
              % (sys.argv[0], a.nlflow, a.src, a.seed, a.edits, a.kill_rate, h.current))
        return 1
    print("rerun_diff: seed %d: %d edits (%s), %d compared byte for byte, %d refused alike by both runs, "
          "%d runs killed first, %.0f s" % (a.seed, h.n_edits, ", ".join("%s %d" % kv for kv in sorted(h.kinds.items())),
                                           h.n_compared, h.n_failed_both, h.n_kills, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
