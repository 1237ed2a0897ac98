/* Enrollment: the host's identity (DATA/node.json) and, the first time,
 * enrolling with a join token read from a file or stdin, never taken from
 * the command line. */
#include "agent-internal.h"
#include "inventory.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* node.json: who this host is to the control plane. */
int agent_identity_load(struct agent *a, struct sl_error *err)
{
    cleanup_free char *path = xasprintf("%s/node.json", a->cfg->data_dir);
    cleanup_json json_t *j = NULL;
    json_error_t jerr;

    if (access(path, F_OK) != 0)
        return 0;
    j = json_load_file(path, 0, &jerr);
    const char *id = json_string_value(json_object_get(j, "node_id"));
    const char *token = json_string_value(json_object_get(j, "node_token"));
    if (!id || !token || strlen(id) >= sizeof(a->node_id) || strlen(token) >= sizeof(a->token))
        return sl_fail(err, SL_E_INVALID, "bad_identity",
                       "'%s' is damaged: remove it and enroll again with --join", path);
    snprintf(a->node_id, sizeof(a->node_id), "%s", id);
    snprintf(a->token, sizeof(a->token), "%s", token);
    return 1;
}

#define JOIN_TOKEN_MAX 128

static bool looks_like_token(const char *s)
{
    return strncmp(s, "sl_", 3) == 0 && !strchr(s, '/');
}

int agent_join_source_check(const char *value, struct sl_error *err)
{
    if (strcmp(value, "-") == 0 || access(value, F_OK) == 0 || !looks_like_token(value))
        return 0;
    return sl_fail(err, SL_E_INVALID, "join_token_on_command_line",
                   "--join takes a FILE holding the join token, or - to read it from stdin, not "
                   "the token itself (on the command line it shows in the process list): "
                   "(umask 077; cat > /root/suanli-join-token), paste the token, then "
                   "--join /root/suanli-join-token");
}

/* The join token from source: "-" (stdin) or a file, one line. */
static int read_join_token(const char *source, char *token, struct sl_error *err)
{
    bool stdin_ = strcmp(source, "-") == 0;
    const char *name = stdin_ ? "stdin" : source;
    char buf[JOIN_TOKEN_MAX + 64];
    size_t n = 0;
    ssize_t got;
    cleanup_close int fd = stdin_ ? -1 : open(source, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    int in = stdin_ ? STDIN_FILENO : fd;
    struct stat st;

    if (in < 0 || fstat(in, &st) < 0)
        return sl_fail_errno(err,
                             "--join: unable to read '%s' (it takes a file holding the "
                             "join token, or - to read it from stdin)",
                             name);
    if (!stdin_ && !S_ISREG(st.st_mode))
        return sl_fail(err, SL_E_INVALID, "bad_join_token",
                       "--join: '%s' is not a file: give a file holding the join token, or - to "
                       "read it from stdin",
                       name);
    if (!stdin_ && (st.st_mode & 077))
        log_warn("agent: '%s' is readable by others (mode %03o): a join token is a secret, "
                 "chmod 600 it or remove it once the host has joined",
                 name, (unsigned)(st.st_mode & 0777));
    while (n < sizeof(buf) - 1 && (got = read(in, buf + n, sizeof(buf) - 1 - n)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return sl_fail_errno(err, "--join: unable to read '%s'", name);
        }
        n += (size_t)got;
        buf[n] = '\0';
        /* one line is enough: a pasted token and Enter, no Ctrl-D needed */
        char *nl = strchr(buf, '\n');
        if (nl && strspn(buf, " \t\r\n") < (size_t)(nl - buf))
            break;
    }
    buf[n] = '\0';
    char *s = buf + strspn(buf, " \t\r\n");
    size_t len = strcspn(s, "\r\n");
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    s[len] = '\0';
    if (!len || len > JOIN_TOKEN_MAX ||
        strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != len)
        return sl_fail(err, SL_E_INVALID, "bad_join_token",
                       "--join: '%s' does not hold a join token (one line, as suanli admin "
                       "join-token create printed it)",
                       name);
    memcpy(token, s, len + 1);
    sodium_memzero(buf, sizeof(buf));
    return 0;
}

int agent_enroll(struct agent *a, struct sl_error *err)
{
    cleanup_json json_t *inv = inventory_json(&a->gpus, a->cfg->data_dir, AGENT_VERSION, err);
    cleanup_json json_t *out = NULL;
    char host[256], join[JOIN_TOKEN_MAX + 1];

    if (!inv)
        return -1;
    if (!a->cfg->join)
        return sl_fail(err, SL_E_INVALID, "not_enrolled",
                       "this host is not enrolled yet: start it once with --join FILE, a file "
                       "holding a join token (make one with suanli admin join-token create "
                       "--region R), or --join - to read it from stdin");
    if (read_join_token(a->cfg->join, join, err) < 0)
        return -1;
    if (!a->cfg->hostname)
        gethostname(host, sizeof(host));
    cleanup_json json_t *body = json_pack("{s:s, s:s, s:s, s:O}", "join_token", join, "hostname",
                                          a->cfg->hostname ? a->cfg->hostname : host, "address",
                                          a->cfg->address, "inventory", inv);
    if (sl_client_request(&a->client, "POST", "/v1/nodes/enroll", body, NULL, &out, err) < 0) {
        sl_error_prefix(err, "enroll at %s", a->cfg->server);
        return -1;
    }
    const char *id = json_string_value(json_object_get(out, "node_id"));
    const char *token = json_string_value(json_object_get(out, "node_token"));
    if (!id || !token)
        return sl_fail(err, SL_E_INTERNAL, NULL, "enroll: the server's answer lacks an id");
    snprintf(a->node_id, sizeof(a->node_id), "%s", id);
    snprintf(a->token, sizeof(a->token), "%s", token);
    cleanup_json json_t *identity =
        json_pack("{s:s, s:s, s:s}", "server", a->cfg->server, "node_id", id, "node_token", token);
    cleanup_free char *text = json_dumps(identity, JSON_INDENT(2));
    cleanup_free char *path = xasprintf("%s/node.json", a->cfg->data_dir);
    if (sl_file_write(path, text, strlen(text), 0600, 0, err) < 0)
        return -1;
    log_info("agent: enrolled as %s", id);
    return 0;
}
