/* suanli-node: the agent on each GPU host. */
#include "agent.h"
#include "fsutil.h"
#include "image-import.h"
#include "image.h"

#include "../lib/cleanup.h"
#include "../lib/config.h"
#include "../lib/crypto.h"
#include "../lib/log.h"
#include "../lib/private.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <fnmatch.h>
#include <string.h>

static const char usage[] =
    "usage: suanli-node [--data-dir DIR] [--server URL] [--join FILE|-] [--config FILE]\n"
    "                   [--simulate-gpus \"8:RTX 4090\"] [--address HOST] [--set NAME=VALUE]...\n"
    "                   [--help-config]\n"
    "       suanli-node image import FILE NAME [--data-dir DIR] [--config FILE]\n"
    "                   [--set NAME=VALUE]...\n"
    "\n"
    "The agent of a GPU host: enrolls with a join token once, then keeps the host's\n"
    "instances as suanlid wants them. Stopping or killing it never stops an instance.\n"
    "--join reads the token from FILE, or from stdin with -: never give the token\n"
    "itself (the process list shows every command line).\n"
    "\n"
    "`image import` adds an image to this host's store and exits: FILE is a rootfs\n"
    "tarball (plain, gzip, zstd, xz), a `docker save` tarball or an OCI image layout\n"
    "(a directory or a tar of one), unpacked within the images.* limits of the\n"
    "configuration (--help-config). The running agent reports it to suanlid.\n";

static const char image_usage[] = "usage: suanli-node image import FILE NAME [--data-dir DIR] "
                                  "[--config FILE] [--set NAME=VALUE]...\n";

/* One line per path whose mode was narrowed, the first few by name. */
static void report_private(void *ctx, const char *path, mode_t was, mode_t now)
{
    unsigned *n = ctx;

    if (++*n <= 20)
        log_warn("suanli-node: '%s' was open to other users (mode %04o): now %04o", path,
                 (unsigned)was, (unsigned)now);
}

/* Below the data directory, what is not the agent's own keeps its modes: an
 * image's files, an instance's disks and overlay (the renter's file
 * systems), its boot directory, which the instance sees at /.suanli, and
 * the public datasets (/root/public; a host directory bound there is the
 * operator's, and on the same file system the sweep would enter it)
 * (docs/design/control-plane.md, "Private files"). */
static bool not_the_agents(const char *relative)
{
    static const char *const patterns[] = {
        "layers/sha256/*/rootfs", "layers/tmp",         "instances/*/boot", "instances/*/sys",
        "instances/*/data",       "instances/*/rootfs", "public",           "public-tmp",
    };

    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++)
        if (fnmatch(patterns[i], relative, FNM_PATHNAME) == 0)
            return true;
    return false;
}

/* `suanli-node image import FILE NAME`: a local command for the operator,
 * run instead of the agent. */
static int image_command(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "data-dir", required_argument, NULL, 'd' },
        { "config", required_argument, NULL, 'c' },
        { "set", required_argument, NULL, 'S' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct agent_config cfg = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    unsigned narrowed = 0;
    const char *data_dir = NULL, *config = NULL;
    char *sets[64];
    size_t n_sets = 0;
    int opt;

    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            data_dir = optarg;
            break;
        case 'c':
            config = optarg;
            break;
        case 'S':
            if (n_sets == 64 || !strchr(optarg, '=')) {
                fprintf(stderr, "suanli-node: --set takes NAME=VALUE (at most 64)\n");
                return 2;
            }
            sets[n_sets++] = optarg;
            break;
        case 'h':
            fputs(image_usage, stdout);
            return 0;
        default:
            fputs(image_usage, stderr);
            return 2;
        }
    }
    /* argv is "image" then, options moved first: import FILE NAME */
    if (argc - optind != 3 || strcmp(argv[optind], "import") != 0) {
        fputs(image_usage, stderr);
        return 2;
    }
    const char *file = argv[optind + 1], *name = argv[optind + 2];
    /* the agent's configuration: the same images.* limits as its imports */
    if (sl_config_defaults(agent_options, agent_options_count, &cfg, &err) < 0 ||
        (config && sl_config_load(agent_options, agent_options_count, &cfg, config, &err) < 0) ||
        (data_dir &&
         sl_config_set(agent_options, agent_options_count, &cfg, "data_dir", data_dir, &err) < 0)) {
        fprintf(stderr, "suanli-node: %s\n", err.message);
        sl_config_release(agent_options, agent_options_count, &cfg);
        return 1;
    }
    for (size_t i = 0; i < n_sets; i++) {
        char *eq = strchr(sets[i], '=');
        *eq = '\0';
        if (sl_config_set(agent_options, agent_options_count, &cfg, sets[i], eq + 1, &err) < 0) {
            fprintf(stderr, "suanli-node: --set: %s\n", err.message);
            sl_config_release(agent_options, agent_options_count, &cfg);
            return 1;
        }
    }
    struct image_limits limits;
    agent_image_limits(&cfg, &limits);
    int rc = 1;
    char *absolute = NULL;
    if (sl_private_dir(cfg.data_dir, report_private, &narrowed, &err) < 0 ||
        !(absolute = realpath(cfg.data_dir, NULL)))
        fprintf(stderr, "suanli-node: data directory '%s': %s\n", cfg.data_dir,
                err.message[0] ? err.message : strerror(errno));
    else if (sl_crypto_init(&err) < 0 || image_import(absolute, file, name, &limits, &err) < 0)
        fprintf(stderr, "suanli-node: %s\n", err.message);
    else {
        struct image img;
        if (image_load(absolute, name, &img, &err) == 0) {
            printf("imported image '%s': %zu layer%s, %.1f MiB\n", name, img.n_layers,
                   img.n_layers == 1 ? "" : "s", (double)img.size_bytes / (1024.0 * 1024.0));
            printf("  os: %s\n  python: %s\n  cuda: %s\n  framework: %s\n",
                   img.os[0] ? img.os : "-", img.python[0] ? img.python : "-",
                   img.cuda[0] ? img.cuda : "-", img.framework[0] ? img.framework : "-");
            image_release(&img);
        }
        rc = 0;
    }
    free(absolute);
    sl_config_release(agent_options, agent_options_count, &cfg);
    return rc;
}

static volatile bool stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = true;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "data-dir", required_argument, NULL, 'd' },
        { "server", required_argument, NULL, 's' },
        { "join", required_argument, NULL, 'j' },
        { "config", required_argument, NULL, 'c' },
        { "simulate-gpus", required_argument, NULL, 'g' },
        { "address", required_argument, NULL, 'a' },
        { "set", required_argument, NULL, 'S' },
        { "help-config", no_argument, NULL, 'H' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    static const char *const names[] = { ['d'] = "data_dir",
                                         ['s'] = "server",
                                         ['j'] = "join",
                                         ['g'] = "simulate_gpus",
                                         ['a'] = "address" };
    struct agent_config cfg = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    unsigned narrowed = 0;
    const char *config = NULL, *sets[64][2];
    size_t n_sets = 0;
    int opt;

    sl_private_umask(); /* before any file is made: node.json, disks, leases */
    if (argc > 1 && strcmp(argv[1], "image") == 0)
        return image_command(argc - 1, argv + 1);
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
        case 's':
        case 'j':
        case 'g':
        case 'a':
        case 'S':
            if (n_sets == 64) {
                fprintf(stderr, "suanli-node: too many options\n");
                return 2;
            }
            if (opt == 'S') {
                char *eq = strchr(optarg, '=');
                if (!eq) {
                    fprintf(stderr, "suanli-node: --set takes NAME=VALUE\n");
                    return 2;
                }
                *eq = '\0';
                sets[n_sets][0] = optarg;
                sets[n_sets++][1] = eq + 1;
            } else {
                sets[n_sets][0] = names[opt];
                sets[n_sets++][1] = optarg;
            }
            break;
        case 'c':
            config = optarg;
            break;
        case 'H': {
            cleanup_free char *help = sl_config_help(agent_options, agent_options_count);
            fputs(help, stdout);
            return 0;
        }
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (sl_config_defaults(agent_options, agent_options_count, &cfg, &err) < 0 ||
        (config && sl_config_load(agent_options, agent_options_count, &cfg, config, &err) < 0)) {
        fprintf(stderr, "suanli-node: configuration: %s\n", err.message);
        return 1;
    }
    for (size_t i = 0; i < n_sets; i++)
        if (sl_config_set(agent_options, agent_options_count, &cfg, sets[i][0], sets[i][1], &err) <
            0) {
            fprintf(stderr, "suanli-node: command line: %s\n", err.message);
            return 1;
        }
    if (cfg.join && agent_join_source_check(cfg.join, &err) < 0) {
        fprintf(stderr, "suanli-node: %s\n", err.message);
        return 2;
    }
    /* layers, disks and bundles are named by absolute paths: runc, mount and
     * overlay run from other directories than ours */
    char *absolute;
    if (sl_private_dir(cfg.data_dir, report_private, &narrowed, &err) < 0 ||
        !(absolute = realpath(cfg.data_dir, NULL))) {
        fprintf(stderr, "suanli-node: data directory '%s': %s\n", cfg.data_dir,
                err.message[0] ? err.message : strerror(errno));
        return 1;
    }
    free(cfg.data_dir);
    cfg.data_dir = absolute;
    if (sl_private_sweep(cfg.data_dir, not_the_agents, report_private, &narrowed, &err) < 0) {
        fprintf(stderr, "suanli-node: data directory '%s': %s\n", cfg.data_dir, err.message);
        return 1;
    }
    if (narrowed > 20)
        log_warn("suanli-node: %u paths in '%s' were open to other users: now owner-only", narrowed,
                 cfg.data_dir);
    if (sl_crypto_init(&err) < 0) {
        fprintf(stderr, "suanli-node: %s\n", err.message);
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (agent_run(&cfg, &stopping, &err) < 0) {
        fprintf(stderr, "suanli-node: %s\n", err.message);
        return 1;
    }
    log_info("suanli-node: stopped; instances keep running");
    sl_config_release(agent_options, agent_options_count, &cfg);
    return 0;
}
