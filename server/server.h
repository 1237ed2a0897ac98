/* suanlid's process-wide state: configuration, store, secrets. */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/config.h"
#include "store.h"

struct server_config {
    char *listen;
    char *data_dir;
    char *store;
    char *log_level;
    char *currency;
    char *catalog_seed;
    int64_t http_threads;
    int64_t max_body_bytes;
    int64_t http_max_connections;
    int64_t http_max_connections_per_address;
    int64_t http_header_timeout;
    char *http_trusted_proxies; /* addresses whose X-Forwarded-For is believed */
    char *http_allowed_origins; /* origins besides the API's own the cookie works from */
    int64_t session_ttl;
    int64_t login_max_failures;
    int64_t login_max_failures_per_ip;
    int64_t login_failure_window;
    int64_t register_max_per_address;
    int64_t register_window;
    int64_t idempotency_ttl;
    int64_t max_api_tokens;
    int64_t max_ssh_keys;
    bool require_verification;
    char *id_number_format;
    char *payment_webhook_secret;
    int64_t payment_webhook_tolerance;
    int64_t page_size_max;
    int64_t node_offline_after;
    int64_t node_lost_after; /* silent this long: its instances show host_lost */
    int64_t node_heartbeat_interval;
    int64_t metrics_fine_keep, metrics_coarse_keep; /* instance-metrics.h */
    int64_t ssh_port_min;
    int64_t ssh_port_max;
    int64_t join_token_ttl;
    int64_t system_disk_gib;
    int64_t max_data_disk_gib;
    int64_t max_gpus_per_instance;
    int64_t max_instances_per_user;
    int64_t disk_reserve_gib;
    int64_t disk_overcommit_percent;
    int64_t cpu_reserve_millicores; /* kept for the host; the rest divided among its GPUs */
    int64_t memory_reserve_mib;
    int64_t nogpu_millicores;
    int64_t nogpu_memory_mib;
    bool autodl_paths; /* instances.autodl_paths: the AutoDL compatibility links */
    int64_t max_upload_bytes;
    int64_t max_unpacked_bytes; /* an upload past it unpacked is refused (archive-check.h) */
    int64_t settle_interval;
    int64_t release_after;
    int64_t plan_percent[3]; /* day, week, month: % of the hourly price paid */
    int64_t stop_check_interval;
    int64_t idle_stop_min, idle_stop_max;
    int64_t stop_schedule_max;
    char *services_ports; /* "6006,6008": published on every instance */
    int64_t services_max_ports;
    char *services_domain;
    int64_t services_proxy_port;
    int64_t services_node_proxy_port; /* the hosts' proxies, behind a front door; 0: the same */
    int64_t services_jupyter_port;
    int64_t services_desktop_port;
    char *console_dir;                   /* the web console's built files (console.h) */
    int64_t events_max_streams_per_user; /* GET /v1/events/stream (event-stream.h) */
    /* notifications (notify.h) */
    int64_t notify_interval;
    bool leader_always; /* leader.always: every replica runs background work (tests) */
    int64_t notify_digest_window;
    bool notify_webhook_allow_private;
    int64_t notify_timeout;
    int64_t notify_attempts;
    int64_t notify_retry_base;
    char *notify_smtp_url; /* NULL: email channels are refused */
    char *notify_smtp_from;
    char *notify_smtp_username;
    char *notify_smtp_password;
    int64_t notify_max_channels;
    int64_t notify_manual_per_hour;
    int64_t notify_keep;
};

extern const struct sl_option server_options[];
extern const size_t server_options_count;

struct server {
    struct server_config cfg;
    struct store *store;
    /* key for hashing ID numbers (sl_keyed_hash_hex); kept in the data dir */
    unsigned char id_hash_key[32];
    /* derived from it: seals instance secrets at rest (secrets.h) */
    unsigned char seal_key[32];
    /* the front door's token (front.h: FRONT_TOKEN_MAX) */
    char front_token[80];
    int64_t started_at;
    struct leader *leader; /* leader.h: whether this replica runs background work */
};

#endif
