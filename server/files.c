/* Files of the renter's storage through the console and the API
 * (files.h): tickets (POST /v1/storage/{region}/files) and their judgement
 * when the node's nginx asks about a files host. */
#include "files.h"

#include "ports.h"
#include "routes.h"
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

bool files_path_valid(const char *path, bool allowed_empty)
{
    size_t n = strlen(path);

    if (n == 0)
        return allowed_empty;
    if (n >= FILES_PATH_MAX || path[0] == '/' || path[n - 1] == '/')
        return false;
    for (const char *p = path; *p;) {
        size_t k = strcspn(p, "/");
        if (k == 0 || k > FILES_NAME_MAX || (k == 1 && p[0] == '.') ||
            (k == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        for (size_t i = 0; i < k; i++)
            if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
                return false;
        p += k;
        if (*p == '/')
            p++;
    }
    return true;
}

/* A running instance of the caller's in region whose host serves files
 * (the terminal's socket: nodes.terminals), the oldest first; or the one
 * named. */
static int pick_instance(struct api_request *req, const char *region, const char *named, char *id,
                         struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT i.id FROM instances i JOIN nodes n ON n.id = i.node_id"
        " WHERE i.user_id = ?1 AND n.region_id = ?2 AND i.state = 'running' AND n.terminals != 0"
        " AND (?3 = '' OR i.id = ?3) ORDER BY i.created_at, i.id LIMIT 1",
        DB_ARGS(DB_TEXT(req->caller.user_id), DB_TEXT(region), DB_TEXT(named ? named : "")), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return named ? sl_fail(err, SL_E_CONFLICT, "no_running_instance",
                               "instance '%s' is not a running instance of yours in %s whose host "
                               "serves files: start it, or leave 'instance' out",
                               named, region)
                     : sl_fail(err, SL_E_CONFLICT, "no_running_instance",
                               "start an instance in %s to upload or download files (its host "
                               "serves them from your storage there)",
                               region);
    snprintf(id, SL_ID_MAX, "%s", db_text(rows, 0));
    return 0;
}

/* POST /v1/storage/{region}/files {op, path, instance}: a ticket for one
 * operation on the caller's storage of the region, served by the host of
 * one of their running instances there. */
int api_storage_files(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *region = req->params[0], *op = NULL, *path = "", *named = NULL;
    const struct sl_json_field fields[] = {
        { "op", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 8, .out = &op },
        { "path", SL_JSON_STRING, .max_len = FILES_PATH_MAX - 1, .out = &path },
        { "instance", SL_JSON_STRING, .min_len = 1, .max_len = SL_ID_MAX - 1, .out = &named },
    };
    char id[SL_ID_MAX], ticket[TERMINAL_TICKET_HEX], hash[SL_HASH_HEX_MAX];
    int64_t now = sl_time_now(), n;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (strcmp(op, "list") != 0 && strcmp(op, "get") != 0 && strcmp(op, "put") != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "field 'op' must be list, get or put");
    if (!files_path_valid(path, strcmp(op, "list") == 0))
        return sl_fail(err, SL_E_INVALID, "invalid_path",
                       "field 'path' must be a path inside your storage: relative (no leading "
                       "'/'), names of at most %d bytes without '.', '..' or control "
                       "characters%s",
                       FILES_NAME_MAX, strcmp(op, "list") == 0 ? "" : ", not empty");
    if (store_get_int(st, "SELECT COUNT(*) FROM storage_dirs WHERE user_id = ?1 AND region_id = ?2",
                      DB_ARGS(DB_TEXT(req->caller.user_id), DB_TEXT(region)), &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_storage",
                       "you have no file storage in '%s': it is made with your first instance "
                       "there",
                       region);
    if (pick_instance(req, region, named, id, err) < 0)
        return -1;
    cleanup_free char *origin = terminal_console_origin(req, err);
    if (!origin)
        return -1;
    if (store_exec(st, "DELETE FROM terminal_tickets WHERE expires_at <= ?1", DB_ARGS(DB_INT(now)),
                   err) < 0 ||
        store_get_int(st,
                      "SELECT COUNT(*) FROM terminal_tickets WHERE instance_id = ?1 AND"
                      " expires_at > ?2",
                      DB_ARGS(DB_TEXT(id), DB_INT(now)), &n, err) < 0)
        return -1;
    if (n >= TERMINAL_TICKETS_MAX)
        return sl_fail(err, SL_E_RATE_LIMITED, "too_many_tickets",
                       "%d tickets not used yet for instance '%s': use one, or wait a minute for "
                       "them to expire",
                       TERMINAL_TICKETS_MAX, id);
    sl_random_hex(ticket, (TERMINAL_TICKET_HEX - 1) / 2);
    sl_sha256_hex(ticket, strlen(ticket), hash);
    cleanup_free char *kind = xasprintf("files-%s", op);
    if (store_exec(st,
                   "INSERT INTO terminal_tickets (hash, instance_id, user_id, origin, expires_at,"
                   " kind, path) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   DB_ARGS(DB_TEXT(hash), DB_TEXT(id), DB_TEXT(req->caller.user_id),
                           DB_TEXT(origin), DB_INT(now + TERMINAL_TICKET_TTL), DB_TEXT(kind),
                           DB_TEXT(path)),
                   err) < 0)
        return -1;
    cleanup_free char *base = ports_files_url(&req->srv->cfg, id);
    cleanup_free char *url = xasprintf("%s?" TERMINAL_QUERY "=%s", base, ticket);
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "ticket", ticket, "url", url,
                        "method", strcmp(op, "put") == 0 ? "PUT" : "GET", "op", op, "path", path,
                        "instance", id, "origin", origin, "expires_at",
                        api_time(now + TERMINAL_TICKET_TTL)));
    return 0;
}

int files_authorize(struct server *srv, const struct terminal_request *rq,
                    enum terminal_verdict *out, const char **why, char *op, char *path,
                    char *origin, struct sl_error *err)
{
    char id[SL_ID_MAX];
    struct terminal_ticket t;
    enum terminal_ticket_found found;

    *out = TERMINAL_FORBIDDEN;
    *why = "no such files host";
    if (!ports_parse_files_host(rq->host, srv->cfg.services_domain, id))
        return 0;
    if (terminal_ticket_take(srv, rq->uri, &t, &found, err) < 0)
        return -1;
    *out = TERMINAL_UNAUTHENTICATED;
    if (found == TICKET_NONE) {
        *why = "files open with a ticket: from the console's File storage page, or POST "
               "/v1/storage/REGION/files";
        return 0;
    }
    if (found == TICKET_SPENT) {
        *why = "the files ticket is not valid, was used, or expired: ask for another";
        return 0;
    }
    *out = TERMINAL_FORBIDDEN;
    const char *kind = t.kind;
    if (strncmp(kind, "files-", 6) != 0) {
        *why = "this ticket is not for files";
        return 0;
    }
    if (strcmp(t.instance_id, id) != 0) {
        *why = "the files ticket is for another instance";
        return 0;
    }
    if (strcmp(t.user_id, t.owner) != 0 || !t.node_id[0] || !rq->node_id ||
        strcmp(t.node_id, rq->node_id) != 0) {
        *why = "no such files host";
        return 0;
    }
    if (strcmp(t.state, "running") != 0) {
        *why = "the instance is not running: ask for another ticket";
        return 0;
    }
    bool put = strcmp(kind, "files-put") == 0;
    if (!rq->method || strcmp(rq->method, put ? "PUT" : "GET") != 0) {
        *why = put ? "an upload is a PUT of the file's bytes" : "this ticket is for a GET";
        return 0;
    }
    /* a download is a navigation, which sends no Origin; a script's
     * request from another page always sends its own */
    bool none_ok = strcmp(kind, "files-get") == 0 && (!rq->origin || !*rq->origin);
    if (!none_ok && (!rq->origin || strcasecmp(rq->origin, t.origin) != 0)) {
        *why = "files open only from the console's own page";
        return 0;
    }
    snprintf(op, 8, "%.7s", kind + 6);
    snprintf(path, FILES_PATH_MAX, "%s", t.path);
    snprintf(origin, TERMINAL_ORIGIN_MAX, "%s", t.origin);
    *out = TERMINAL_PASS;
    return 0;
}
