/* shards.h — what one unit of a SLURM task made, as one immutable,
 * self-checking file (engine-internal; docs/hpc.md).
 *
 * A task never opens a database on a shared file system: it computes into a
 * private cache on node-local disk, then writes each unit's entries (a run's
 * outputs and record, or a part's checkpoint chunks) into a shard file next
 * to the pipeline, atomically (a hidden temporary name, fsync, rename). The
 * coordinator checks a shard whole (length, trailer, XXH3 checksum), then its
 * header against the unit it expects (pipeline hash, node, unit name and
 * key), then every entry's header and chunk sizes as the cache reads them
 * (and, with `verify`, decompresses and checksums every chunk), and only then
 * puts the entries into its own cache as they are encoded, without
 * compressing anything again, run record last. A run's values must be
 * exactly the outputs its record lists, under the keys the run's key gives
 * them, with the record's ports and labels (check_unit_outputs), and a shard
 * is read only as a regular file, not a link, of at most half the machine's
 * memory (a FIFO or a link to a device in a shared folder is refused at
 * once). A shard that fails any check
 * is reported and discarded; the unit is computed again. (Tasks import
 * shards of earlier nodes without `verify`: every fetch checks the chunks
 * again anyway.)
 */
#ifndef NF_SHARDS_H
#define NF_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"

/* Suffix of a finished shard file; anything else in a shard folder (the
 * hidden temporary files of a killed task) is not a result. */
#define NF_SHARD_SUFFIX ".shard"

/* Which unit a shard holds. parts == 0: the run under `key` (its record and
 * outputs); parts > 0: part `part` of that run, i.e. its checkpoint chunks. */
struct nf_shard_head {
    const char *pipeline_hash;   /* hex, of the pipeline text and --set values */
    const char *node_id;
    const char *unit;            /* the unit's name, e.g. "item-0003" or "part-01-of-04" */
    struct nf_key key;           /* the run key */
    int64_t part, parts;
};

/* Write the unit's entries from c into `path` (atomically). A run must be in
 * c with every output; a part writes whatever chunks of the run c holds. */
int nf_shard_write(struct nf_cache *c, const char *path, const struct nf_shard_head *h,
                   struct nf_error *err);

/* Check the shard at `path` against `expect` and put its entries into c
 * (meta: node type and id, pipeline hash and path; labels come from the
 * shard, port names from port_names by the port's index). 1 imported, 0 not a valid shard of that unit (why says
 * why; nothing was put), <0 an error of the cache. */
int nf_shard_import(struct nf_cache *c, const char *path, const struct nf_shard_head *expect,
                    const struct nf_cache_meta *meta, const char *const *port_names, size_t n_ports,
                    bool verify, char *why, size_t why_size, struct nf_error *err);

#endif
