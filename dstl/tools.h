/*
 * dstl/tools.h — the library's interface for its own tools: the `dstl` command (dstl/cmd/),
 * the crash and power-cut harnesses and the benchmarks. Beyond include/dstl.h, a tool may use
 * exactly these, and nothing else inside dstl/:
 *
 *   dstl/config.h         the key table (config_nkeys, config_key, config_key_prefix) and the
 *                         value parsers for command-line options; config_resolve for the
 *                         resolved values a tool reports (the demo's plan)
 *   dstl/local/segstore.h the local store's file operations that need no open store:
 *                         segstore_list, segstore_read_at, segstore_size (dstl/local/segfiles.c)
 *   dstl/remote/remote.h  where segments live in a bucket (remote_parse_uri, remote_key,
 *                         remote_list_prefix) and S3 clients from a config (remote_client_new)
 *   dstl/seams.h          the storage's run id (storage_run_id) and test seams
 *   s3/s3.h               (through remote.h) the demo's own listing of what it left in the bucket
 *   wire/wire.h           segment and record decoding for ls, verify and cat
 *
 * Tools never see struct dstl_storage, writers, the pipeline or the registry.
 */
#ifndef DSTL_TOOLS_H
#define DSTL_TOOLS_H

#include "dstl.h"
#include "dstl/config.h"
#include "dstl/keys.h"
#include "dstl/local/segstore.h"
#include "dstl/remote/remote.h"
#include "dstl/seams.h"
#include "wire/wire.h"

#endif
