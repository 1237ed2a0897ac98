/* suanli-node: the agent on each GPU host. */
#include "agent.h"
#include "fsutil.h"

#include "../lib/config.h"
#include "../lib/crypto.h"
#include "../lib/log.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: suanli-node [--data-dir DIR] [--server URL] [--join TOKEN] [--config FILE]\n"
    "                   [--simulate-gpus \"8:RTX 4090\"] [--address HOST] [--set NAME=VALUE]...\n"
    "                   [--help-config]\n"
    "\n"
    "The agent of a GPU host: enrolls with a join token once, then keeps the host's\n"
    "instances as suanlid wants them. Stopping or killing it never stops an instance.\n";

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
    const char *config = NULL, *sets[64][2];
    size_t n_sets = 0;
    int opt;

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
        case 'H':
            sl_config_print_help(agent_options, agent_options_count, stdout);
            return 0;
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
    /* layers, disks and bundles are named by absolute paths: runc, mount and
     * overlay run from other directories than ours */
    char *absolute;
    if (fs_mkdir_p(cfg.data_dir, 0700, &err) < 0 || !(absolute = realpath(cfg.data_dir, NULL))) {
        fprintf(stderr, "suanli-node: data directory '%s': %s\n", cfg.data_dir,
                err.message[0] ? err.message : strerror(errno));
        return 1;
    }
    free(cfg.data_dir);
    cfg.data_dir = absolute;
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
