/* Sending notifications (notify.h): webhooks over libcurl, pinned to an
 * address checked after resolution, and email through the operator's SMTP
 * relay. The SSRF rules are docs/design/notifications.md's. */
#include "notify.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/netaddr.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef SUANLI_VERSION
#define SUANLI_VERSION "dev"
#endif

/* What is kept of a receiver's answer, for the log. */
#define EXCERPT_MAX 200
#define URL_MAX     2048

static bool v4_blocked(const unsigned char a[4])
{
    uint32_t x = (uint32_t)a[0] << 24 | (uint32_t)a[1] << 16 | (uint32_t)a[2] << 8 | a[3];
    static const struct {
        uint32_t net;
        unsigned bits;
    } nets[] = {
        { 0x00000000, 8 },  /* 0.0.0.0/8: "this network", unspecified */
        { 0x0a000000, 8 },  /* 10/8 */
        { 0x64400000, 10 }, /* 100.64/10: carrier-grade NAT */
        { 0x7f000000, 8 },  /* loopback */
        { 0xa9fe0000, 16 }, /* 169.254/16: link-local, cloud metadata */
        { 0xac100000, 12 }, /* 172.16/12 */
        { 0xc0000000, 24 }, /* 192.0.0/24: IETF protocol assignments */
        { 0xc0000200, 24 }, /* 192.0.2/24: documentation */
        { 0xc0586300, 24 }, /* 192.88.99/24: 6to4 relays */
        { 0xc0a80000, 16 }, /* 192.168/16 */
        { 0xc6120000, 15 }, /* 198.18/15: benchmarking */
        { 0xc6336400, 24 }, /* 198.51.100/24: documentation */
        { 0xcb007100, 24 }, /* 203.0.113/24: documentation */
        { 0xe0000000, 4 },  /* multicast */
        { 0xf0000000, 4 },  /* reserved, broadcast */
    };

    for (size_t i = 0; i < sizeof(nets) / sizeof(nets[0]); i++)
        if ((x >> (32 - nets[i].bits)) == (nets[i].net >> (32 - nets[i].bits)))
            return true;
    return false;
}

static bool v6_blocked(const unsigned char a[16])
{
    static const unsigned char zero[12] = { 0 };
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };

    /* ::/96 (unspecified, loopback, IPv4-compatible) */
    if (memcmp(a, zero, 12) == 0)
        return true;
    /* the IPv4 inside a mapped, NAT64 or 6to4 address is what is reached */
    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return v4_blocked(a + 12);
    if (a[0] == 0x20 && a[1] == 0x02)
        return v4_blocked(a + 2);
    if (a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b)
        return true; /* 64:ff9b:1::/48, local NAT64 */
    if ((a[0] & 0xfe) == 0xfc)
        return true; /* fc00::/7: unique local */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return true; /* fe80::/10: link-local */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
        return true; /* fec0::/10: site-local, deprecated */
    if (a[0] == 0xff)
        return true; /* multicast */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
        return true; /* 2001:db8::/32: documentation */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x00 && a[3] == 0x00)
        return true; /* 2001::/32: Teredo, an IPv4 hidden inside */
    if (a[0] == 0x01 && a[1] == 0x00 && memcmp(a + 2, zero, 6) == 0)
        return true; /* 100::/64: discard */
    return false;
}

bool notify_addr_blocked(const struct sockaddr *sa)
{
    if (!sa)
        return true;
    if (sa->sa_family == AF_INET)
        return v4_blocked((const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr);
    if (sa->sa_family == AF_INET6)
        return v6_blocked(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
    return true;
}

/* The parts of a webhook URL that are checked and connected to. */
struct webhook_target {
    char host[256]; /* without brackets */
    char port[8];
};

static int parse_url(const char *url, struct webhook_target *t, struct sl_error *err)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *user = NULL, *password = NULL;
    int rc = -1;

    if (strlen(url) > URL_MAX) {
        sl_fail(err, SL_E_INVALID, "invalid_webhook", "the webhook URL is longer than %d bytes",
                URL_MAX);
        goto out;
    }
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        sl_fail(err, SL_E_INVALID, "invalid_webhook",
                "'%s' is not a URL: give one such as https://example.com/hook", url);
        goto out;
    }
    if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
        sl_fail(err, SL_E_INVALID, "invalid_webhook",
                "a webhook is an http:// or https:// URL, not %s://", scheme);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
        curl_url_get(u, CURLUPART_PASSWORD, &password, 0) == CURLUE_OK) {
        sl_fail(err, SL_E_INVALID, "invalid_webhook",
                "put no user name or password in the webhook URL: the receiver verifies the "
                "signature instead (docs/design/notifications.md)");
        goto out;
    }
    size_t len = strlen(host);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']')
        snprintf(t->host, sizeof(t->host), "%.*s", (int)(len - 2), host + 1);
    else
        snprintf(t->host, sizeof(t->host), "%s", host);
    snprintf(t->port, sizeof(t->port), "%s", port);
    rc = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(user);
    curl_free(password);
    curl_url_cleanup(u);
    return rc;
}

/* Resolves t and checks every address: one refused address refuses the
 * host (a name that answers both a public and a private address must not
 * pick the private one at connect time). The first address, as text, is
 * what the connection is pinned to. */
static int resolve_checked(const struct server *srv, const struct webhook_target *t,
                           char pinned[SL_ADDR_TEXT_MAX], struct sl_error *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(t->host, t->port, &hints, &res);

    if (gai != 0)
        return sl_fail(err, SL_E_INVALID, "webhook_unresolvable",
                       "the webhook's host '%s' does not resolve (%s): check the URL", t->host,
                       gai_strerror(gai));
    pinned[0] = '\0';
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        char text[SL_ADDR_TEXT_MAX];
        sl_addr_format(ai->ai_addr, text);
        if (!srv->cfg.notify_webhook_allow_private && notify_addr_blocked(ai->ai_addr)) {
            freeaddrinfo(res);
            return sl_fail(err, SL_E_INVALID, "webhook_refused",
                           "the webhook's host '%s' is %s, not a public address: webhooks are "
                           "sent only to the public internet",
                           t->host, text);
        }
        if (!pinned[0])
            snprintf(pinned, SL_ADDR_TEXT_MAX, "%s", text);
    }
    freeaddrinfo(res);
    if (!pinned[0])
        return sl_fail(err, SL_E_INVALID, "webhook_unresolvable",
                       "the webhook's host '%s' has no address: check the URL", t->host);
    return 0;
}

int notify_webhook_check(const struct server *srv, const char *url, struct sl_error *err)
{
    struct webhook_target t;
    char pinned[SL_ADDR_TEXT_MAX];

    return parse_url(url, &t, err) < 0 || resolve_checked(srv, &t, pinned, err) < 0 ? -1 : 0;
}

int notify_email_check(const char *addr, struct sl_error *err)
{
    const char *at = strrchr(addr, '@');
    size_t len = strlen(addr);

    if (len == 0 || len > 254 || !at || at == addr || !at[1] || strchr(addr, '@') != at ||
        !strchr(at + 1, '.'))
        return sl_fail(err, SL_E_INVALID, "invalid_email",
                       "'%s' is not an email address: give one such as you@example.com", addr);
    for (const unsigned char *p = (const unsigned char *)addr; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f || strchr("<>()[],;:\\\"", *p))
            return sl_fail(err, SL_E_INVALID, "invalid_email",
                           "an email address here is plain ASCII without spaces, quotes, "
                           "brackets, commas or colons: give one such as you@example.com");
    return 0;
}

/* The receiver's answer: its first bytes, kept for the log. */
struct excerpt {
    char text[EXCERPT_MAX + 1];
    size_t len;
};

static size_t keep_excerpt(char *data, size_t size, size_t n, void *ctx)
{
    struct excerpt *e = ctx;
    size_t total = size * n;

    for (size_t i = 0; i < total && e->len < EXCERPT_MAX; i++) {
        unsigned char c = (unsigned char)data[i];
        e->text[e->len++] = c >= 0x20 && c < 0x7f ? (char)c : ' ';
    }
    e->text[e->len] = '\0';
    return total;
}

/* The last guard: whatever libcurl connects to is checked again, so no
 * resolution, redirect or rebinding can reach a refused address. */
struct socket_guard {
    bool allow_private;
    bool refused;
};

static curl_socket_t open_guarded(void *ctx, curlsocktype purpose, struct curl_sockaddr *address)
{
    struct socket_guard *g = ctx;

    (void)purpose;
    if (!g->allow_private && notify_addr_blocked(&address->addr)) {
        g->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(address->family, address->socktype, address->protocol);
}

int notify_send_webhook(const struct server *srv, const char *url, const char *secret,
                        const char *delivery_id, const char *kind, const char *body,
                        struct sl_error *err)
{
    struct webhook_target t;
    char pinned[SL_ADDR_TEXT_MAX], signature[NOTIFY_SIGNATURE_MAX], line[400];
    struct excerpt answer = { .len = 0 };
    struct socket_guard guard = { .allow_private = srv->cfg.notify_webhook_allow_private };
    int64_t ts = sl_time_now();

    if (parse_url(url, &t, err) < 0 || resolve_checked(srv, &t, pinned, err) < 0)
        return -1;
    CURL *curl = curl_easy_init();
    if (!curl)
        return sl_fail(err, SL_E_INTERNAL, "internal", "unable to start an HTTP client");
    struct curl_slist *resolve = NULL, *headers = NULL;
    bool v6 = strchr(pinned, ':') != NULL;
    snprintf(line, sizeof(line), "%s:%s:%s%s%s", t.host, t.port, v6 ? "[" : "", pinned,
             v6 ? "]" : "");
    resolve = curl_slist_append(resolve, line);
    notify_sign(secret, ts, body, strlen(body), signature);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    snprintf(line, sizeof(line), "X-Suanli-Delivery: %s", delivery_id);
    headers = curl_slist_append(headers, line);
    snprintf(line, sizeof(line), "X-Suanli-Event: %s", kind);
    headers = curl_slist_append(headers, line);
    snprintf(line, sizeof(line), "X-Suanli-Timestamp: %" PRId64, ts);
    headers = curl_slist_append(headers, line);
    snprintf(line, sizeof(line), "X-Suanli-Signature: %s", signature);
    headers = curl_slist_append(headers, line);
    headers = curl_slist_append(headers, "Expect:");

    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_RESOLVE, resolve);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_guarded);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, &guard);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_PROXY, "");
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT,
                     (long)(srv->cfg.notify_timeout < 5 ? srv->cfg.notify_timeout : 5));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)srv->cfg.notify_timeout);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "suanli-notify/" SUANLI_VERSION);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep_excerpt);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    curl_slist_free_all(resolve);
    curl_slist_free_all(headers);
    if (guard.refused)
        return sl_fail(err, SL_E_INVALID, "webhook_refused",
                       "the connection went to an address that is not public: refused");
    if (rc != CURLE_OK)
        return sl_fail(err, SL_E_UNAVAILABLE, "webhook_failed", "%s", curl_easy_strerror(rc));
    if (status < 200 || status > 299)
        return sl_fail(err, SL_E_UNAVAILABLE, "webhook_failed",
                       "the receiver answered HTTP %ld%s%s", status, answer.len ? ": " : "",
                       answer.text);
    return 0;
}

/* Header text from anything: printable ASCII only, so nothing from an
 * event can end a header line and start another. */
static void header_text(struct sl_buf *b, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        sl_buf_addf(b, "%c", c >= 0x20 && c < 0x7f ? (char)c : ' ');
    }
}

struct upload {
    const char *data;
    size_t len, off;
};

static size_t read_upload(char *out, size_t size, size_t n, void *ctx)
{
    struct upload *u = ctx;
    size_t room = size * n, left = u->len - u->off;
    size_t take = left < room ? left : room;

    memcpy(out, u->data + u->off, take);
    u->off += take;
    return take;
}

int notify_send_email(const struct server *srv, const char *to, const char *delivery_id,
                      const char *subject, const char *text, struct sl_error *err)
{
    static const char *const days[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    const char *from = srv->cfg.notify_smtp_from;
    cleanup_buf struct sl_buf msg = SL_BUF_INIT;
    time_t now = (time_t)sl_time_now();
    struct tm tm;
    char line[320];

    if (!srv->cfg.notify_smtp_url || !*srv->cfg.notify_smtp_url)
        return sl_fail(err, SL_E_UNAVAILABLE, "email_disabled",
                       "email is not configured on this server (notify.smtp_url)");
    if (notify_email_check(to, err) < 0)
        return -1;
    /* the operator's own address may be user@localhost, but still goes
     * into a header as it is */
    for (const unsigned char *p = (const unsigned char *)from; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f || strchr("<>\"", *p))
            return sl_fail(err, SL_E_UNAVAILABLE, "email_disabled",
                           "notify.smtp_from is not a plain address: fix the configuration");
    if (!strchr(from, '@'))
        return sl_fail(err, SL_E_UNAVAILABLE, "email_disabled",
                       "notify.smtp_from '%s' is not an address: fix the configuration", from);
    gmtime_r(&now, &tm);
    const char *domain = strrchr(from, '@') + 1;
    sl_buf_addf(&msg, "Date: %s, %02d %s %04d %02d:%02d:%02d +0000\r\n", days[tm.tm_wday],
                tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    sl_buf_addf(&msg, "From: suanli <%s>\r\nTo: <%s>\r\nSubject: ", from, to);
    header_text(&msg, subject, 200);
    sl_buf_adds(&msg, "\r\nMessage-ID: <");
    header_text(&msg, delivery_id, 64);
    sl_buf_addf(&msg, ".%lld@%s>\r\n", (long long)now, domain);
    sl_buf_adds(&msg, "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
                      "Content-Transfer-Encoding: 8bit\r\nAuto-Submitted: auto-generated\r\n\r\n");
    /* the body's lines end in CRLF; libcurl doubles a leading dot */
    for (const char *p = text; *p; p++) {
        if (*p == '\r')
            continue;
        if (*p == '\n')
            sl_buf_adds(&msg, "\r\n");
        else
            sl_buf_add(&msg, p, 1);
    }
    sl_buf_adds(&msg, "\r\n");

    CURL *curl = curl_easy_init();
    if (!curl)
        return sl_fail(err, SL_E_INTERNAL, "internal", "unable to start an SMTP client");
    struct curl_slist *rcpt = NULL;
    struct upload up = { .data = msg.data, .len = msg.len };
    snprintf(line, sizeof(line), "<%s>", to);
    rcpt = curl_slist_append(rcpt, line);
    snprintf(line, sizeof(line), "<%s>", from);
    curl_easy_setopt(curl, CURLOPT_URL, srv->cfg.notify_smtp_url);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
    curl_easy_setopt(curl, CURLOPT_USE_SSL, (long)CURLUSESSL_TRY);
    curl_easy_setopt(curl, CURLOPT_MAIL_FROM, line);
    curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, rcpt);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, read_upload);
    curl_easy_setopt(curl, CURLOPT_READDATA, &up);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)srv->cfg.notify_timeout);
    if (srv->cfg.notify_smtp_username && *srv->cfg.notify_smtp_username) {
        curl_easy_setopt(curl, CURLOPT_USERNAME, srv->cfg.notify_smtp_username);
        curl_easy_setopt(curl, CURLOPT_PASSWORD,
                         srv->cfg.notify_smtp_password ? srv->cfg.notify_smtp_password : "");
    }
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_cleanup(curl);
    curl_slist_free_all(rcpt);
    if (rc != CURLE_OK)
        return sl_fail(err, SL_E_UNAVAILABLE, "email_failed", "the mail relay: %s",
                       curl_easy_strerror(rc));
    return 0;
}
