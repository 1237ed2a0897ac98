/* Every suanlid option, in one table: name, type, default, bounds, help.
 * The config file, --set and --help-config all read it. */
#include "server.h"
#include "../lib/timeconst.h"

#include <stddef.h>
#include <stdint.h>

#define OPT(n, t, d, lo, hi, field, h)                                                             \
    {                                                                                              \
        .name = n, .type = t, .def = d, .min = lo, .max = hi,                                      \
        .offset = offsetof(struct server_config, field), .help = h                                 \
    }

#define DAY ((long long)SL_SEC_PER_DAY)

const struct sl_option server_options[] = {
    OPT("listen", SL_OPT_STRING, "127.0.0.1:7070", 0, 0, listen, "HOST:PORT to serve the API on"),
    OPT("data_dir", SL_OPT_STRING, "/var/lib/suanli", 0, 0, data_dir,
        "directory for the database and secrets"),
    OPT("store", SL_OPT_STRING, NULL, 0, 0, store, "store URI; default sqlite:DATA_DIR/suanli.db"),
    OPT("log_level", SL_OPT_STRING, "info", 0, 0, log_level, "debug, info, warn or error"),
    OPT("currency", SL_OPT_STRING, "CNY", 0, 0, currency, "ISO 4217 code of the money unit"),
    OPT("catalog_seed", SL_OPT_STRING, NULL, 0, 0, catalog_seed,
        "JSON catalog loaded once into an empty store (the sample is etc/catalog.sample.json)"),
    OPT("http.threads", SL_OPT_INT, "4", 1, 256, http_threads, "HTTP worker threads"),
    OPT("http.max_body_bytes", SL_OPT_INT, "1048576", 1024, 67108864, max_body_bytes,
        "largest request body accepted (413 above)"),
    OPT("http.page_size_max", SL_OPT_INT, "500", 1, 10000, page_size_max,
        "largest page a list route returns"),
    OPT("http.max_connections", SL_OPT_INT, "4096", 16, 1000000, http_max_connections,
        "connections open at once, all clients together"),
    OPT("http.max_connections_per_address", SL_OPT_INT, "128", 1, 1000000,
        http_max_connections_per_address,
        "connections one client address (an IPv6 /64) may hold open; trusted proxies are not "
        "counted"),
    OPT("http.header_timeout", SL_OPT_DURATION, "10s", 1, SL_SEC_PER_HOUR, http_header_timeout,
        "a request's headers must arrive within this of connecting (or of the previous "
        "response); the connection is closed otherwise"),
    OPT("http.trusted_proxies", SL_OPT_STRING, "", 0, 0, http_trusted_proxies,
        "addresses or networks (comma-separated) of proxies in front of suanlid whose "
        "X-Forwarded-For, X-Forwarded-Proto and X-Forwarded-Host are believed; empty: none"),
    OPT("http.allowed_origins", SL_OPT_STRING, "", 0, 0, http_allowed_origins,
        "origins (https://console.example.com, comma-separated) besides the API's own from "
        "which the session cookie is accepted"),
    OPT("auth.session_ttl", SL_OPT_DURATION, "7d", SL_SEC_PER_MIN, 365 * DAY, session_ttl,
        "how long a login session lasts"),
    OPT("auth.login_max_failures", SL_OPT_INT, "5", 1, 1000, login_max_failures,
        "failed logins for one email from one client address within the window before that "
        "address gets 429 for that email (other addresses are not affected)"),
    OPT("auth.login_max_failures_per_ip", SL_OPT_INT, "30", 1, 100000, login_max_failures_per_ip,
        "failed logins from one client address (an IPv6 /64) within the window before 429"),
    OPT("auth.login_failure_window", SL_OPT_DURATION, "15m", 1, DAY, login_failure_window,
        "window over which failed logins are counted"),
    OPT("auth.register_max_per_address", SL_OPT_INT, "10", 1, 1000000, register_max_per_address,
        "registrations one client address (an IPv6 /64) may attempt within the window before "
        "429"),
    OPT("auth.register_window", SL_OPT_DURATION, "1h", 1, 30 * DAY, register_window,
        "window over which registrations are counted"),
    OPT("auth.max_api_tokens", SL_OPT_INT, "50", 1, 10000, max_api_tokens,
        "API tokens a user may hold"),
    OPT("auth.max_ssh_keys", SL_OPT_INT, "50", 1, 10000, max_ssh_keys,
        "SSH public keys a user may register"),
    OPT("auth.require_verification", SL_OPT_BOOL, "true", 0, 0, require_verification,
        "renters must pass real-name verification before starting instances"),
    OPT("auth.id_number_format", SL_OPT_STRING, "cn", 0, 0, id_number_format,
        "'cn': an 18-character resident ID with its check digit; 'any': 6 to 32 letters/digits"),
    OPT("api.idempotency_ttl", SL_OPT_DURATION, "24h", SL_SEC_PER_MIN, 30 * DAY, idempotency_ttl,
        "how long a stored Idempotency-Key response is replayed"),
    OPT("payments.webhook_secret", SL_OPT_STRING, NULL, 0, 0, payment_webhook_secret,
        "HMAC-SHA256 secret shared with the payment gateway; unset disables the webhook"),
    OPT("payments.webhook_tolerance", SL_OPT_DURATION, "5m", 1, DAY, payment_webhook_tolerance,
        "largest clock difference accepted on a signed webhook"),
    OPT("nodes.heartbeat_interval", SL_OPT_DURATION, "3s", 1, SL_SEC_PER_MIN,
        node_heartbeat_interval, "how often node agents report"),
    OPT("metrics.fine_keep", SL_OPT_DURATION, "1d", SL_SEC_PER_HOUR, 7 * DAY, metrics_fine_keep,
        "how long each sample of an instance's metrics is kept (docs/design/metrics.md)"),
    OPT("metrics.coarse_keep", SL_OPT_DURATION, "31d", DAY, 400 * DAY, metrics_coarse_keep,
        "how long each instance's metrics are kept as 5-minute averages and peaks"),
    OPT("nodes.offline_after", SL_OPT_DURATION, "30s", 2, SL_SEC_PER_HOUR, node_offline_after,
        "a node silent this long shows offline (and its instances stop being billed)"),
    OPT("nodes.lost_after", SL_OPT_DURATION, "10m", 2, 30 * DAY, node_lost_after,
        "a node silent this long is lost: its instances show host_lost to their renters (never "
        "sooner than nodes.offline_after)"),
    OPT("nodes.ssh_port_min", SL_OPT_INT, "30000", 1024, 65535, ssh_port_min,
        "lowest host port given to an instance's SSH"),
    OPT("nodes.ssh_port_max", SL_OPT_INT, "39999", 1024, 65535, ssh_port_max,
        "highest host port given to an instance's SSH"),
    OPT("nodes.join_token_ttl", SL_OPT_DURATION, "24h", SL_SEC_PER_MIN, 365 * DAY, join_token_ttl,
        "default lifetime of a join token"),
    OPT("instances.system_disk_gib", SL_OPT_INT, "30", 1, 4096, system_disk_gib,
        "size of every instance's system disk"),
    OPT("instances.max_data_disk_gib", SL_OPT_INT, "4096", 1, 1 << 20, max_data_disk_gib,
        "largest data disk a renter may ask for"),
    OPT("instances.max_gpus", SL_OPT_INT, "8", 1, 64, max_gpus_per_instance,
        "most GPUs one instance may have"),
    OPT("instances.max_per_user", SL_OPT_INT, "20", 1, 100000, max_instances_per_user,
        "instances a renter may hold (every state but released)"),
    OPT("nodes.disk_reserve_gib", SL_OPT_INT, "10", 0, 1 << 20, disk_reserve_gib,
        "disk space of a host's data directory never promised to instance disks (images, logs)"),
    OPT("nodes.disk_overcommit_percent", SL_OPT_INT, "0", 0, 100000, disk_overcommit_percent,
        "instance disks (sparse files) a host may promise beyond what it can hold, in percent; "
        "0: every promised byte fits"),
    OPT("nodes.cpu_reserve_millicores", SL_OPT_INT, "0", 0, 1 << 22, cpu_reserve_millicores,
        "CPU of every host kept for the host itself, in thousandths of a core; the rest is "
        "divided among its GPUs"),
    OPT("nodes.memory_reserve_mib", SL_OPT_INT, "2048", 0, 1 << 30, memory_reserve_mib,
        "memory of every host kept for the host itself (agent, nginx, page cache); the rest is "
        "divided among its GPUs"),
    OPT("instances.nogpu_millicores", SL_OPT_INT, "500", 100, 64000, nogpu_millicores,
        "CPU of an instance in no-GPU mode, in thousandths of a core"),
    OPT("instances.nogpu_memory_mib", SL_OPT_INT, "2048", 256, 1 << 20, nogpu_memory_mib,
        "memory of an instance in no-GPU mode"),
    OPT("instances.autodl_paths", SL_OPT_BOOL, "true", 0, 0, autodl_paths,
        "links /root/autodl-tmp -> /root/data and /root/autodl-pub -> /root/public (and "
        "/root/autodl-fs -> /root/storage where that exists) in every instance at its start, "
        "for scripts written for AutoDL; never over a renter's own file of that name"),
    OPT("images.max_upload_bytes", SL_OPT_INT, "68719476736", 1024, 1LL << 42, max_upload_bytes,
        "largest image archive an admin may upload (suanli admin image import)"),
    OPT("images.max_unpacked_bytes", SL_OPT_INT, "137438953472", 1 << 20, 1LL << 46,
        max_unpacked_bytes,
        "most an uploaded image archive may unpack to; a bigger one (a compression bomb) is "
        "refused at upload, as hosts refuse one past their images.max_bytes"),
    OPT("billing.settle_interval", SL_OPT_DURATION, "60s", 1, DAY, settle_interval,
        "how often running meters are settled into the ledger (and the balance, plan and "
        "auto-release rules applied)"),
    OPT("billing.release_after", SL_OPT_DURATION, "15d", 1, 3650 * DAY, release_after,
        "a pay-as-you-go instance stopped this long is released (warnings 3 days and 1 day "
        "before)"),
    OPT("billing.plan_day_percent", SL_OPT_INT, "95", 1, 100, plan_percent[0],
        "a day plan costs this % of 24 hours at the hourly price"),
    OPT("billing.plan_week_percent", SL_OPT_INT, "85", 1, 100, plan_percent[1],
        "a week plan costs this % of 168 hours at the hourly price"),
    OPT("billing.plan_month_percent", SL_OPT_INT, "75", 1, 100, plan_percent[2],
        "a month plan (30 days) costs this % of 720 hours at the hourly price"),
    OPT("instances.stop_check_interval", SL_OPT_DURATION, "5s", 1, SL_SEC_PER_HOUR,
        stop_check_interval, "how often scheduled and idle stops that are due are carried out"),
    OPT("instances.idle_stop_min", SL_OPT_DURATION, "10s", 1, DAY, idle_stop_min,
        "shortest idle period a renter may set (suanli idle-stop)"),
    OPT("instances.idle_stop_max", SL_OPT_DURATION, "30d", SL_SEC_PER_MIN, 365 * DAY, idle_stop_max,
        "longest idle period a renter may set"),
    OPT("instances.stop_schedule_max", SL_OPT_DURATION, "366d", SL_SEC_PER_MIN, 3650 * DAY,
        stop_schedule_max, "how far ahead a stop may be scheduled (suanli stop --at/--in)"),
    OPT("services.ports", SL_OPT_STRING, "6006,6008", 0, 0, services_ports,
        "service ports every instance publishes (comma-separated; may be empty)"),
    OPT("services.max_ports", SL_OPT_INT, "8", 0, 64, services_max_ports,
        "most service ports one instance may publish, the default ones included"),
    OPT("services.domain", SL_OPT_STRING, "localhost", 0, 0, services_domain,
        "service ports are published as http://INSTANCE-PORT.DOMAIN:PROXY_PORT/"),
    OPT("services.proxy_port", SL_OPT_INT, "8080", 1, 65535, services_proxy_port,
        "the port renters reach the nodes' proxies on (80: left out of links)"),
    OPT("services.node_proxy_port", SL_OPT_INT, "0", 0, 65535, services_node_proxy_port,
        "behind a front door (suanlid front-config): the port of the hosts' own proxies "
        "(0: services.proxy_port)"),
    OPT("services.jupyter_port", SL_OPT_INT, "8888", 1, 65535, services_jupyter_port,
        "the port Jupyter listens on inside instances of an image that has it"),
    OPT("services.desktop_port", SL_OPT_INT, "6080", 1, 65535, services_desktop_port,
        "the port the desktop's web page (noVNC) listens on inside instances of a desktop "
        "image"),
    OPT("console.dir", SL_OPT_STRING, NULL, 0, 0, console_dir,
        "directory of the built web console, served at / (make console builds it); default: "
        "console/ beside the suanlid binary"),
    OPT("events.max_streams_per_user", SL_OPT_INT, "8", 1, 1000, events_max_streams_per_user,
        "event streams (GET /v1/events/stream: the console's live updates) one user may hold "
        "open at once; the next gets 429"),
    OPT("notify.interval", SL_OPT_DURATION, "2s", 1, SL_SEC_PER_HOUR, notify_interval,
        "how often new events are turned into notifications and due deliveries are sent"),
    OPT("leader.always", SL_OPT_BOOL, "false", 0, 0, leader_always,
        "tests and diagnosis only: run background work (billing, stops, notifications) here "
        "even while another replica leads; safe, as settlement is idempotent, but wasteful"),
    OPT("notify.digest_window", SL_OPT_DURATION, "1h", 1, DAY, notify_digest_window,
        "at most one message per event kind and instance in this long; the ones held back are "
        "counted into the next"),
    OPT("notify.webhook_allow_private", SL_OPT_BOOL, "false", 0, 0, notify_webhook_allow_private,
        "let webhooks reach loopback, private (RFC 1918, ULA), link-local and other non-public "
        "addresses: for a lab only, never where renters are strangers"),
    OPT("notify.timeout", SL_OPT_DURATION, "10s", 1, 120, notify_timeout,
        "longest one webhook POST or one email may take"),
    OPT("notify.attempts", SL_OPT_INT, "6", 1, 20, notify_attempts,
        "tries of one delivery before it is marked failed"),
    OPT("notify.retry_base", SL_OPT_DURATION, "30s", 1, SL_SEC_PER_HOUR, notify_retry_base,
        "wait before the second try of a delivery; doubled for each further one (at most an "
        "hour)"),
    OPT("notify.smtp_url", SL_OPT_STRING, NULL, 0, 0, notify_smtp_url,
        "the mail relay, smtp://HOST:PORT or smtps://HOST:PORT; unset: renters cannot add "
        "email channels"),
    OPT("notify.smtp_from", SL_OPT_STRING, "suanli@localhost", 0, 0, notify_smtp_from,
        "the sender address of notification emails"),
    OPT("notify.smtp_username", SL_OPT_STRING, NULL, 0, 0, notify_smtp_username,
        "user name at the mail relay, if it asks for one"),
    OPT("notify.smtp_password", SL_OPT_STRING, NULL, 0, 0, notify_smtp_password,
        "password at the mail relay"),
    OPT("notify.max_channels", SL_OPT_INT, "10", 1, 1000, notify_max_channels,
        "notification channels one renter may have"),
    OPT("notify.manual_per_hour", SL_OPT_INT, "10", 1, 10000, notify_manual_per_hour,
        "confirmation codes and test messages one renter may have sent in an hour"),
    OPT("notify.keep", SL_OPT_DURATION, "30d", SL_SEC_PER_HOUR, 3650 * DAY, notify_keep,
        "how long the delivery log is kept"),
};

const size_t server_options_count = sizeof(server_options) / sizeof(server_options[0]);
