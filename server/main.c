/* suanlid: the control plane. */
#include "api.h"
#include "billing.h"
#include "notify.h"
#include "bootstrap.h"
#include "catalog.h"
#include "front.h"
#include "http.h"
#include "idempotency.h"
#include "instances.h"
#include "leader.h"
#include "migrate-cmd.h"
#include "nodes.h"
#include "ports.h"
#include "server.h"
#include "stops.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/log.h"
#include "../lib/private.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SUANLI_VERSION "0.1.0"

static const char usage[] =
    "usage: suanlid [--data-dir DIR] [--listen HOST:PORT] [--config FILE]\n"
    "               [--set NAME=VALUE]... [--print-routes] [--help-config] [--version]\n"
    "\n"
    "The suanli control plane. Serves the REST API under /v1 (default 127.0.0.1:7070)\n"
    "and keeps its SQLite store in DATA_DIR (default /var/lib/suanli). On its first\n"
    "start it creates admin@localhost and prints the password once.\n";

static void die(const char *what, const struct sl_error *err)
{
    fprintf(stderr, "suanlid: %s: %s\n", what, err->message);
    exit(1);
}

static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cond = PTHREAD_COND_INITIALIZER;
static bool stopping;

/* Housekeeping: expired idempotency keys, sessions and login failures. */
static void maintenance(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t now = sl_time_now();

    if (idempotency_expire(srv, &err) < 0 ||
        store_exec(srv->store,
                   "DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at < ?1",
                   DB_ARGS(DB_INT(now)), &err) < 0 ||
        store_exec(srv->store, "DELETE FROM login_failures WHERE at < ?1",
                   DB_ARGS(DB_INT(now - srv->cfg.login_failure_window)), &err) < 0 ||
        store_exec(srv->store, "DELETE FROM rate_events WHERE at < ?1",
                   DB_ARGS(DB_INT(now - srv->cfg.register_window)), &err) < 0)
        log_warn("maintenance: %s", err.message);
}

/* The billing loop (billing.h): settles and applies the money rules. A
 * failed pass is logged and retried at the next tick; each settlement is its
 * own atomic step, so nothing is half done. */
static void billing(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    struct billing_stats stats;

    if (billing_run(srv, &stats, &err) < 0)
        log_warn("billing: %s", err.message);
    else if (stats.stopped || stats.released || stats.renewed || stats.expired || stats.warnings)
        log_info("billing: %" PRId64 " meters, %" PRId64 " usage transactions, %" PRId64
                 " stopped, %" PRId64 " released, %" PRId64 " plans renewed, %" PRId64
                 " ended, %" PRId64 " warnings in %" PRId64 " ms",
                 stats.meters, stats.settlements, stats.stopped, stats.released, stats.renewed,
                 stats.expired, stats.warnings, stats.elapsed_us / SL_USEC_PER_MSEC);
}

/* Scheduled and idle stops (stops.h): independent of the billing loop, so a
 * stop comes within seconds of its time whatever the settlement interval. */
static void stops(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    struct stops_stats stats;

    if (stops_run(srv, &stats, &err) < 0)
        log_warn("stops: %s", err.message);
    else if (stats.scheduled || stats.idle || stats.warnings)
        log_info("stops: %" PRId64 " scheduled, %" PRId64 " idle stopped, %" PRId64
                 " idle warnings",
                 stats.scheduled, stats.idle, stats.warnings);
}

/* Hosts silent past nodes.lost_after (nodes.h): their renters are told. */
static void fleet(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t lost;

    if (nodes_watch(srv, &lost, &err) < 0)
        log_warn("nodes: %s", err.message);
}

/* Notifications (notify.h): events become deliveries, which are sent. */
static void notify(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    struct notify_stats stats;

    if (notify_run(srv, &stats, &err) < 0)
        log_warn("notify: %s", err.message);
    else if (stats.sent || stats.failed || stats.retried)
        log_info("notify: %" PRId64 " events, %" PRId64 " queued, %" PRId64 " sent, %" PRId64
                 " failed, %" PRId64 " to retry",
                 stats.events, stats.queued, stats.sent, stats.failed, stats.retried);
}

/* A background job: run every *interval seconds (on a steady beat: a slow
 * run shortens the next wait) until suanlid stops. */
struct periodic {
    void (*run)(struct server *srv);
    const int64_t *interval;
    struct server *srv;
    pthread_t thread;
};

static void *periodic_loop(void *arg)
{
    struct periodic *p = arg;
    int64_t next = sl_time_mono_ms();

    pthread_mutex_lock(&stop_lock);
    while (!stopping) {
        next += *p->interval * SL_MSEC_PER_SEC;
        int64_t wait_ms = next - sl_time_mono_ms();
        if (wait_ms < 0) {
            wait_ms = 0;
            next = sl_time_mono_ms();
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / SL_MSEC_PER_SEC;
        until.tv_nsec += (wait_ms % SL_MSEC_PER_SEC) * SL_NSEC_PER_MSEC;
        if (until.tv_nsec >= SL_NSEC_PER_SEC) {
            until.tv_sec++;
            until.tv_nsec -= SL_NSEC_PER_SEC;
        }
        while (!stopping && pthread_cond_timedwait(&stop_cond, &stop_lock, &until) == 0)
            ;
        if (stopping)
            break;
        pthread_mutex_unlock(&stop_lock);
        if (leader_may_run(p->srv->leader)) /* background work: the leader's (leader.h) */
            p->run(p->srv);
        pthread_mutex_lock(&stop_lock);
    }
    pthread_mutex_unlock(&stop_lock);
    return NULL;
}

/* One line per file whose mode was narrowed, the first few by name. */
static void report_private(void *ctx, const char *path, mode_t was, mode_t now)
{
    unsigned *n = ctx;

    if (++*n <= 20)
        log_warn("suanlid: '%s' was open to other users (mode %04o): now %04o", path, (unsigned)was,
                 (unsigned)now);
}

static void print_routes(void)
{
    for (size_t i = 0; i < api_routes_count; i++)
        printf("%s %s\n", api_routes[i].method, api_routes[i].pattern);
}

static int too_many(void)
{
    fprintf(stderr, "suanlid: too many --set, --listen or --data-dir options\n");
    return 2;
}

struct override {
    const char *name;
    const char *value;
};

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "front-config") == 0)
        return front_config_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "migrate") == 0)
        return migrate_main(argc - 1, argv + 1);
    static const struct option longopts[] = {
        { "data-dir", required_argument, NULL, 'd' },
        { "listen", required_argument, NULL, 'l' },
        { "config", required_argument, NULL, 'c' },
        { "set", required_argument, NULL, 's' },
        { "print-routes", no_argument, NULL, 'r' },
        { "help-config", no_argument, NULL, 'H' },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct server srv = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    struct override overrides[64];
    size_t n_overrides = 0;
    const char *config = NULL;
    int opt;

    sl_private_umask(); /* before any file is made: the store, keys, uploads */
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
        case 'l':
            if (n_overrides == ARRAY_SIZE(overrides))
                return too_many();
            overrides[n_overrides++] =
                (struct override){ opt == 'd' ? "data_dir" : "listen", optarg };
            break;
        case 's': {
            char *eq = strchr(optarg, '=');
            if (!eq) {
                fprintf(stderr, "suanlid: --set takes NAME=VALUE, got '%s'\n", optarg);
                return 2;
            }
            if (n_overrides == ARRAY_SIZE(overrides))
                return too_many();
            *eq = '\0';
            overrides[n_overrides++] = (struct override){ optarg, eq + 1 };
            break;
        }
        case 'c':
            config = optarg;
            break;
        case 'r':
            print_routes();
            return 0;
        case 'H': {
            cleanup_free char *help = sl_config_help(server_options, server_options_count);
            printf("suanlid options (config file lines 'name = value', or --set name=value):\n");
            fputs(help, stdout);
            return 0;
        }
        case 'V':
            printf("suanlid %s\n", SUANLI_VERSION);
            return 0;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "suanlid: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }

    if (sl_config_defaults(server_options, server_options_count, &srv.cfg, &err) < 0)
        die("configuration", &err);
    if (config && sl_config_load(server_options, server_options_count, &srv.cfg, config, &err) < 0)
        die("configuration", &err);
    for (size_t i = 0; i < n_overrides; i++)
        if (sl_config_set(server_options, server_options_count, &srv.cfg, overrides[i].name,
                          overrides[i].value, &err) < 0)
            die("command line", &err);
    int level = sl_log_level_parse(srv.cfg.log_level);
    if (level < 0) {
        fprintf(stderr, "suanlid: option 'log_level': '%s' is not debug, info, warn or error\n",
                srv.cfg.log_level);
        return 1;
    }
    sl_log_threshold = (enum sl_log_level)level;
    if (strcmp(srv.cfg.id_number_format, "cn") && strcmp(srv.cfg.id_number_format, "any")) {
        fprintf(stderr, "suanlid: option 'auth.id_number_format' must be cn or any\n");
        return 1;
    }
    if (ports_check_config(&srv.cfg, &err) < 0)
        die("configuration", &err);
    if (strlen(srv.cfg.currency) != 3) {
        fprintf(stderr, "suanlid: option 'currency' must be a 3-letter ISO 4217 code\n");
        return 1;
    }

    if (sl_crypto_init(&err) < 0)
        die("start-up", &err);
    /* the data directory is suanlid's alone, even when it existed before */
    unsigned narrowed = 0;
    if (sl_private_dir(srv.cfg.data_dir, report_private, &narrowed, &err) < 0)
        die("data directory", &err);
    char *absolute = realpath(srv.cfg.data_dir, NULL);
    if (absolute) {
        free(srv.cfg.data_dir);
        srv.cfg.data_dir = absolute;
    }
    if (sl_private_sweep(srv.cfg.data_dir, NULL, report_private, &narrowed, &err) < 0)
        die("data directory", &err);
    if (narrowed > 20)
        log_warn("suanlid: %u paths in '%s' were open to other users: now owner-only", narrowed,
                 srv.cfg.data_dir);
    cleanup_free char *uri =
        srv.cfg.store ? xstrdup(srv.cfg.store) : xasprintf("sqlite:%s/suanli.db", srv.cfg.data_dir);
    srv.store = store_open(uri, &err);
    if (!srv.store)
        die("store", &err);
    if (store_migrate(srv.store, &err) < 0)
        die("store", &err);
    char admin_password[BOOTSTRAP_PASSWORD_MAX];
    int made_admin = 0;
    if (bootstrap_secrets(&srv, &err) < 0 ||
        front_token_load(srv.cfg.data_dir, srv.front_token, &err) < 0 ||
        (made_admin = bootstrap_admin(&srv, admin_password, &err)) < 0)
        die("first start", &err);
    if (made_admin) {
        printf("suanlid: created the admin account admin@localhost\n"
               "suanlid: its password, shown once (also in %s/admin-password): %s\n",
               srv.cfg.data_dir, admin_password);
        fflush(stdout);
    }
    if (instances_seal_secrets(&srv, &err) < 0)
        die("secrets", &err);
    if (ports_seal_stored(&srv, &err) < 0)
        die("secrets", &err);
    if (srv.cfg.catalog_seed && catalog_seed_file(&srv, srv.cfg.catalog_seed, &err) < 0)
        die("catalog", &err);
    srv.started_at = sl_time_now();

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* before any thread: the notifier's webhooks and email (notify.h) */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    srv.leader = leader_start(&srv, &err);
    if (!srv.leader)
        die("leader", &err);
    struct http_server *http = http_start(&srv, srv.cfg.listen, &err);
    if (!http)
        die("http", &err);
    static const int64_t minute = SL_SEC_PER_MIN;
    struct periodic jobs[] = {
        { maintenance, &minute, &srv, 0 },
        { billing, &srv.cfg.settle_interval, &srv, 0 },
        { stops, &srv.cfg.stop_check_interval, &srv, 0 },
        { fleet, &srv.cfg.stop_check_interval, &srv, 0 },
        { notify, &srv.cfg.notify_interval, &srv, 0 },
    };
    for (size_t i = 0; i < ARRAY_SIZE(jobs); i++)
        pthread_create(&jobs[i].thread, NULL, periodic_loop, &jobs[i]);
    log_info("suanlid %s listening on http://%s (store %s)", SUANLI_VERSION, srv.cfg.listen,
             store_backend(srv.store));

    int sig;
    sigwait(&sigs, &sig);
    log_info("suanlid: %s received, stopping", strsignal(sig));
    leader_stop(srv.leader); /* the lead goes to another replica; no pass starts here */
    http_stop(http);
    notify_stop(); /* a slow webhook holds up the stop by one request at most */
    pthread_mutex_lock(&stop_lock);
    stopping = true;
    pthread_cond_broadcast(&stop_cond);
    pthread_mutex_unlock(&stop_lock);
    for (size_t i = 0; i < ARRAY_SIZE(jobs); i++)
        pthread_join(jobs[i].thread, NULL);
    leader_free(srv.leader);
    store_close(srv.store);
    sl_config_release(server_options, server_options_count, &srv.cfg);
    return 0;
}
