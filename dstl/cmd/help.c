/*
 * dstl/cmd/help.c — the `dstl` command's help: one text per subcommand (usage, what it does,
 * examples), printed by `dstl help COMMAND`, `dstl COMMAND --help` and `dstl --help`.
 */
#include <stdio.h>
#include <string.h>

#include "dstl/cmd/cmd.h"

typedef struct {
    const char *name, *summary, *text;
} help_entry;

static const help_entry helps[] = {
    {"demo", "run the embedded-default workload, then check recovery",
     "usage: dstl demo [--writers N] [--duration S] [--rate R] [--materialize-every S]\n"
     "\n"
     "N writer threads append a keyed-state workload (R records/s each), checkpoint every second\n"
     "and truncate every --materialize-every seconds; then a fresh storage recovers every writer\n"
     "from its last handle and checks it record for record. The plan (writers, intervals,\n"
     "durability, local dir, S3 URI and endpoint) is printed first; the demo stops early, with\n"
     "one message, when every persist of the last few seconds failed.\n"
     "  --writers N            writer threads (default 16, 1..4096)\n"
     "  --duration S           seconds of appending (default 15)\n"
     "  --rate R               records per second per writer (default 4000)\n"
     "  --materialize-every S  seconds between truncations (default 10)\n"
     "\n"
     "examples:\n"
     "  dstl demo --writers 4 --duration 5\n"
     "  dstl --config configs/s3.conf demo --writers 16 --duration 30\n"},
    {"cat", "print records as JSON lines: a handle's, or every segment's of a set",
     "usage: dstl cat HANDLE_FILE [--dir LOCAL_DIR] [--key-groups A-B]\n"
     "       dstl cat (DIR | FILE.seg | s3://bucket/prefix | s3://bucket/key.seg) [--key-groups A-B]\n"
     "\n"
     "With a handle file: its records, in seq order, read through a storage (the local copy in\n"
     "--dir or dstl.local.dir, else the object the handle names). With segments: every record of\n"
     "every segment, each line naming its segment and writer. --key-groups keeps the data records\n"
     "of key groups A..B (meta records always).\n"
     "\n"
     "examples:\n"
     "  dstl cat dstl-data/handles/RUN/operator-00.handle --key-groups 0-15\n"
     "  dstl --config configs/s3.conf cat s3://bucket/prefix\n"},
    {"ls", "list segments: runs, writers, seq ranges, sizes, ages",
     "usage: dstl ls [--bytes] (DIR | FILE.seg | s3://bucket/prefix)\n"
     "\n"
     "Every *.seg under DIR (sub-folders included: a mirror made by rclone or `aws s3 sync` has\n"
     "the hh/ folders) or under the prefix (with the configured endpoint and credentials),\n"
     "grouped by run and sorted by segment number, with each segment's writer sections. Sizes\n"
     "are human-readable (--bytes: exact); ages are relative (for S3, on the server's clock).\n"
     "\n"
     "examples:\n"
     "  dstl ls ./dstl-data\n"
     "  dstl --config configs/s3.conf ls --bytes s3://bucket/prefix\n"},
    {"verify", "check every checksum of every segment",
     "usage: dstl verify [--bytes] (DIR | FILE.seg | s3://bucket/prefix)\n"
     "\n"
     "Reads each segment of the set whole and checks its footer and every record's CRC32C;\n"
     "names each corrupt or unreadable one. Exit status 1 when any is.\n"
     "\n"
     "examples:\n"
     "  dstl verify ./dstl-data\n"
     "  dstl --config configs/s3.conf verify s3://bucket/prefix\n"},
    {"gc", "delete segments (local, remote) that no live handle references",
     "usage: dstl gc DIR (--live HANDLE_FILE... | --no-live-handles) [--min-age D] [--dry-run]\n"
     "\n"
     "  --live             the live set: every handle of every storage that shares DIR or its remote prefix\n"
     "  --no-live-handles  there is none: every segment of a dead run older than --min-age is deleted\n"
     "  --min-age D        keep segments younger than D (default 1h)\n"
     "  --dry-run          count only: nothing is created, changed or deleted, locally or remotely\n"
     "With dstl.remote.uri set, the remote prefix is swept too. Runs that are alive are never touched.\n"
     "\n"
     "examples:\n"
     "  dstl gc ./dstl-data --live cp-42/*.handle --dry-run\n"
     "  dstl --config configs/s3.conf gc ./dstl-data --live cp-42/*.handle\n"},
    {"stats", "show a running storage's metrics (dstl.metrics.file)",
     "usage: dstl stats [--prometheus] [METRICS_FILE]\n"
     "\n"
     "Prints the samples of the Prometheus text file a storage rewrites every second (default:\n"
     "dstl.metrics.file), exactly as written; --prometheus prints the file itself. Warns when\n"
     "the file was not rewritten for a few seconds (its storage stopped) or is not Prometheus\n"
     "text. node_exporter's textfile collector reads the same file (README).\n"
     "\n"
     "examples:\n"
     "  dstl stats /var/lib/node_exporter/dstl.prom\n"
     "  dstl --set dstl.metrics.file=/tmp/dstl.prom stats --prometheus\n"},
    {"config", "print every key with its value and where it came from (secrets hidden)",
     "usage: dstl config\n"
     "\n"
     "Every key with its value (secrets as <set, hidden>) and its source (default, file,\n"
     "environment, --set); where the S3 credentials come from (config keys, AWS_* environment,\n"
     "~/.aws/credentials profile), never their values; DSTL_* environment variables that look\n"
     "like a key but are none (a typo is otherwise silent).\n"
     "\n"
     "examples:\n"
     "  dstl --config configs/s3.conf config\n"
     "  DSTL_BATCH_PERSIST_DELAY=0 dstl config\n"},
    {"version", "print the version", "usage: dstl version   (or dstl --version)\n\nexample:\n  dstl --version\n"},
    {"help", "show help for a command", "usage: dstl help [COMMAND]   (or dstl COMMAND --help)\n\nexample:\n  dstl help ls\n"},
};
#define NHELPS (sizeof helps / sizeof helps[0])

void cmd_usage(FILE *f)
{
    fprintf(f, "usage: dstl [--config FILE] [--set key=value]... COMMAND [ARGS]\n"
               "       dstl --help | --version | help COMMAND | COMMAND --help\n\ncommands:\n");
    for (size_t i = 0; i < NHELPS; i++) fprintf(f, "  %-8s %s\n", helps[i].name, helps[i].summary);
    fprintf(f, "\nConfiguration: defaults < --config file < DSTL_* environment < --set (dstl config shows the\n"
               "result). Every key: configs/local.conf, configs/s3.conf, README.\n"
               "\nexamples:\n"
               "  dstl demo --writers 4 --duration 5\n"
               "  dstl ls ./dstl-data\n"
               "  dstl --config configs/s3.conf verify s3://bucket/prefix\n"
               "  dstl help gc\n");
}

int cmd_help(const char *name, FILE *f)
{
    for (size_t i = 0; i < NHELPS; i++) {
        if (strcmp(helps[i].name, name) != 0) continue;
        fprintf(f, "dstl %s — %s\n\n%s", helps[i].name, helps[i].summary, helps[i].text);
        return 0;
    }
    return -1;
}
