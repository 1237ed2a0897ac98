/* What a proxied request carries of suanli's own credentials, read and
 * removed by one parser (ports.h): the suanli_session and suanli_port_token
 * cookies, the suanli_token query parameter, an Authorization header with a
 * suanli token. The same functions that find a credential for the
 * authorization strip it from what the instance receives, so the two can
 * never disagree about what counts as one. */
#include "ports.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Bytes that must not reach a header suanlid writes (nginx lets few of them
 * through; a value holding one is not passed on): controls but tab, DEL. */
static bool has_control(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return true;
    return false;
}

/* Trims the blanks around the cookie-pair in [*p, *end); its name is then
 * [*p, *p + *name_len) and its value [*value, *value + *value_len), what
 * follows the first '=' ("" when there is none). */
static void cookie_pair(const char **p, const char **end, size_t *name_len, const char **value,
                        size_t *value_len)
{
    while (*p < *end && is_blank(**p))
        (*p)++;
    while (*end > *p && is_blank((*end)[-1]))
        (*end)--;
    const char *eq = memchr(*p, '=', (size_t)(*end - *p));
    const char *name_end = eq ? eq : *end;
    while (name_end > *p && is_blank(name_end[-1]))
        name_end--;
    *name_len = (size_t)(name_end - *p);
    *value = eq ? eq + 1 : *end;
    while (*value < *end && is_blank(**value))
        (*value)++;
    *value_len = (size_t)(*end - *value);
}

static bool name_is(const char *name, size_t len, const char *want)
{
    return len == strlen(want) && strncasecmp(name, want, len) == 0;
}

static bool is_suanli_cookie(const char *name, size_t len)
{
    return name_is(name, len, PORTS_COOKIE) || name_is(name, len, PORTS_SESSION_COOKIE);
}

size_t ports_cookie_values(const char *header, const char *name, char (*out)[PORTS_VALUE_MAX],
                           size_t max)
{
    size_t n = 0;

    for (const char *p = header ? header : ""; *p && n < max;) {
        const char *end = p + strcspn(p, ";"), *next = *end ? end + 1 : end, *value;
        size_t name_len, value_len;
        cookie_pair(&p, &end, &name_len, &value, &value_len);
        if (name_is(p, name_len, name) && value_len > 0 && value_len < PORTS_VALUE_MAX) {
            memcpy(out[n], value, value_len);
            out[n++][value_len] = '\0';
        }
        p = next;
    }
    return n;
}

char *ports_cookie_filter(const char *header)
{
    cleanup_buf struct sl_buf b = SL_BUF_INIT;
    bool removed = false;

    if (!header || !*header || has_control(header))
        return NULL;
    for (const char *p = header; *p;) {
        const char *end = p + strcspn(p, ";"), *next = *end ? end + 1 : end, *value;
        size_t name_len, value_len;
        cookie_pair(&p, &end, &name_len, &value, &value_len);
        if (is_suanli_cookie(p, name_len)) {
            removed = true;
        } else if (end > p) {
            if (b.len)
                sl_buf_adds(&b, "; ");
            sl_buf_add(&b, p, (size_t)(end - p));
        }
        p = next;
    }
    if (!removed) {
        return xstrdup(header); /* untouched, byte for byte */
    }
    if (!b.len)
        return NULL;
    return sl_buf_detach(&b, NULL);
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Whether the parameter name [p, p + n), percent-decoded, is suanli_token
 * in any case: an application decodes names before it reads them. */
static bool is_token_name(const char *p, size_t n)
{
    const char *want = PORTS_QUERY;
    size_t i = 0, w = 0;

    while (i < n) {
        char c = p[i];
        if (c == '%' && i + 2 < n && hex_value(p[i + 1]) >= 0 && hex_value(p[i + 2]) >= 0) {
            c = (char)(hex_value(p[i + 1]) * 16 + hex_value(p[i + 2]));
            i += 3;
        } else {
            i++;
        }
        if (!want[w] || tolower((unsigned char)c) != want[w])
            return false;
        w++;
    }
    return want[w] == '\0';
}

/* One parameter of a query: '&' and ';' both separate (some frameworks
 * split on either). */
struct query_param {
    const char *start; /* the parameter, without its separator */
    size_t len;
    const char *value; /* after the first '=', or start + len */
    size_t value_len;
    bool is_token;
};

/* The parameter at *q, before end, moving *q past it; false at the end. */
static bool next_param(const char **q, const char *end, struct query_param *out)
{
    if (*q >= end)
        return false;
    const char *p = *q;
    size_t n = 0;
    while (p + n < end && p[n] != '&' && p[n] != ';')
        n++;
    const char *eq = memchr(p, '=', n);
    out->start = p;
    out->len = n;
    out->value = eq ? eq + 1 : p + n;
    out->value_len = (size_t)(p + n - out->value);
    out->is_token = is_token_name(p, eq ? (size_t)(eq - p) : n);
    *q = p + n < end ? p + n + 1 : end;
    return true;
}

bool ports_uri_token(const char *uri, char *out, size_t size)
{
    const char *q = uri ? strchr(uri, '?') : NULL;
    struct query_param param;

    if (!q)
        return false;
    q++;
    const char *end = q + strlen(q);
    while (next_param(&q, end, &param)) {
        if (!param.is_token)
            continue;
        if (param.value_len == 0 || param.value_len >= size)
            return false;
        memcpy(out, param.value, param.value_len);
        out[param.value_len] = '\0';
        return true;
    }
    return false;
}

/* s with every suanli_token parameter of its query removed ('?' too when
 * none is left); the part before '?' is kept as it is. A '#' is no end of
 * the query here: a request target has no fragment, so one there is the
 * parameter's own byte, and a token after it goes too. */
static char *strip_query_token(const char *s)
{
    const char *q = strchr(s, '?');
    cleanup_buf struct sl_buf b = SL_BUF_INIT;
    struct query_param param;
    bool removed = false, first = true;

    if (!q)
        return xstrdup(s);
    const char *end = q + strlen(q);
    sl_buf_add(&b, s, (size_t)(q - s));
    for (const char *p = q + 1; next_param(&p, end, &param);) {
        if (param.is_token) {
            removed = true;
            continue;
        }
        /* the separator that came before it, '?' for the first kept */
        sl_buf_add(&b, first ? "?" : param.start - 1, 1);
        sl_buf_add(&b, param.start, param.len);
        first = false;
    }
    if (!removed)
        return xstrdup(s);
    return sl_buf_detach(&b, NULL);
}

char *ports_uri_filter(const char *uri)
{
    if (!uri || (uri[0] != '/' && uri[0] != '?') || strpbrk(uri, " \t") || has_control(uri))
        return NULL;
    if (uri[0] == '/')
        return strip_query_token(uri);
    /* "GET http://host?a=1" gives nginx a $request_uri of "?a=1" */
    cleanup_free char *rooted = xasprintf("/%s", uri);
    return strip_query_token(rooted);
}

char *ports_referer_filter(const char *referer)
{
    if (!referer || !*referer || has_control(referer))
        return NULL;
    return strip_query_token(referer);
}

bool ports_authorization_is_suanli(const char *value)
{
    const char *p = value ? value : "";

    /* "Bearer sl_..." is how suanli's tokens travel; any scheme (or none)
     * with one is still one: Basic credentials are base64, without '_' */
    while (is_blank(*p))
        p++;
    if (strncmp(p, "sl_", 3) == 0)
        return true;
    p += strcspn(p, " \t");
    while (is_blank(*p))
        p++;
    return strncmp(p, "sl_", 3) == 0;
}

bool ports_cookies_count(const char *method, const char *fetch_site, const char *fetch_mode)
{
    if (!fetch_site || !*fetch_site || strcasecmp(fetch_site, "same-origin") == 0 ||
        strcasecmp(fetch_site, "none") == 0)
        return true;
    /* another origin (a sibling service is same-site, not same-origin): only
     * a navigation that changes nothing, as following a link does */
    return fetch_mode && strcasecmp(fetch_mode, "navigate") == 0 && method &&
           (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
}
