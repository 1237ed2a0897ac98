/* suanlid migrate (migrate-cmd.h): argument checks, the two stores, the
 * summary. */
#include "migrate-cmd.h"

#include "store-copy.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: suanlid migrate --from URI --to URI\n"
    "  copies a stopped installation's database into an empty PostgreSQL database\n"
    "  --from  the current store: sqlite:PATH (or a path) or postgres://...\n"
    "  --to    the new store: postgres://user@host/db, an empty database\n";

/* An SQLite source must exist: opening one would create it. */
static const char *sqlite_path(const char *uri)
{
    if (strncmp(uri, "sqlite:", 7) == 0)
        return uri + 7;
    return strstr(uri, "://") || strncmp(uri, "postgres:", 9) == 0 ? NULL : uri;
}

static void print_table(const char *table, int64_t rows, void *ctx)
{
    int64_t *total = ctx;
    printf("  %-28s %12lld rows\n", table, (long long)rows);
    *total += rows;
}

static int run(const char *from, const char *to)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *path = sqlite_path(from);
    struct store *src, *dst;
    int64_t total = 0;
    int rc;

    if (path && access(path, R_OK) != 0) {
        fprintf(stderr, "suanlid migrate: --from %s: no such database file (%m)\n", from);
        return 1;
    }
    if (!(src = store_open(from, &err))) {
        fprintf(stderr, "suanlid migrate: --from %s: %s\n", from, err.message);
        return 1;
    }
    if (!(dst = store_open(to, &err))) {
        fprintf(stderr, "suanlid migrate: --to: %s\n", err.message);
        store_close(src);
        return 1;
    }
    printf("copying %s (%s) into %s\n", from, store_backend(src), store_backend(dst));
    rc = store_copy(src, dst, print_table, &total, &err);
    if (rc == 0)
        printf("done: %lld rows; every table's row count and the ledger check agree\n",
               (long long)total);
    else
        fprintf(stderr, "suanlid migrate: %s; nothing was written to the target\n", err.message);
    store_close(dst);
    store_close(src);
    return rc == 0 ? 0 : 1;
}

int migrate_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "from", required_argument, NULL, 'f' },
        { "to", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *from = NULL, *to = NULL;
    int opt;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'f':
            from = optarg;
            break;
        case 't':
            to = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc || !from || !to) {
        fprintf(stderr, "suanlid migrate: %s%s\n%s",
                optind < argc ? "unexpected argument " : "--from and --to are required",
                optind < argc ? argv[optind] : "", usage);
        return 2;
    }
    return run(from, to);
}
