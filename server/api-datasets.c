/* Public data as renters list it and admins publish it (datasets.h): an
 * uploaded tar or a directory each host of the region has, read-only at
 * /root/public/NAME in every instance there. */
#include "archive-check.h"
#include "datasets.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the nodes report of each dataset: how many hold it, the largest size
 * one reports (they unpack the same tar), and the message of a failure. */
#define DATASET_SELECT                                                                             \
    "SELECT d.seq, d.name, d.region_id, d.description, d.source, d.upload_bytes,"                  \
    " (SELECT COUNT(*) FROM node_datasets x WHERE x.name = d.name AND x.state = 'ready'),"         \
    " (SELECT COUNT(*) FROM node_datasets x WHERE x.name = d.name AND x.state = 'building'),"      \
    " (SELECT x.message FROM node_datasets x WHERE x.name = d.name AND x.state = 'failed'"         \
    "  ORDER BY x.node_id LIMIT 1),"                                                               \
    " COALESCE((SELECT MAX(x.size_bytes) FROM node_datasets x WHERE x.name = d.name"               \
    "  AND x.state = 'ready'), 0), d.created_at"                                                   \
    " FROM datasets d"

static json_t *dataset_json(struct db_rows *rows, void *ctx)
{
    bool admin = ctx != NULL;
    const char *source = db_text(rows, 4);
    int64_t ready = db_int(rows, 6), building = db_int(rows, 7);
    const char *failure = db_null(rows, 8) ? NULL : db_text(rows, 8);
    /* a failure shows while no node holds it and none is trying */
    const char *state = ready ? "ready" : building ? "building" : failure ? "failed" : "pending";
    bool upload = strncmp(source, "sha256:", 7) == 0;
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:o}", "name", db_text(rows, 1), "region",
                  db_text(rows, 2), "description", db_text(rows, 3), "source",
                  upload ? "upload" : "path", "size_bytes", (json_int_t)db_int(rows, 9), "nodes",
                  (json_int_t)ready, "state", state, "created_at", api_time(db_int(rows, 10)));
    if (admin) {
        json_object_set_new(j, "message", json_string(strcmp(state, "failed") == 0 ? failure : ""));
        json_object_set_new(j, upload ? "sha256" : "path", json_string(source + (upload ? 7 : 5)));
        json_object_set_new(j, "upload_bytes", json_integer((json_int_t)db_int(rows, 5)));
    }
    return j;
}

/* GET /v1/datasets: the datasets renters can read, those a node of their
 * region holds (?region=R: of one region). */
int api_datasets_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *region = api_query(req, "region");
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        DATASET_SELECT " WHERE d.seq > ?1 AND (?3 = '' OR d.region_id = '' OR d.region_id = ?3)"
                       " AND EXISTS (SELECT 1 FROM node_datasets x WHERE x.name = d.name"
                       " AND x.state = 'ready') ORDER BY d.seq LIMIT ?2",
        DB_ARGS(DB_INT(after), DB_INT(limit), DB_TEXT(region ? region : "")), err);
    return rows ? api_reply_rows(res, rows, dataset_json, NULL, limit, err) : -1;
}

/* GET /v1/admin/datasets: every dataset, whatever the hosts made of it. */
int api_admin_datasets_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store, DATASET_SELECT " WHERE d.seq > ?1 ORDER BY d.seq LIMIT ?2",
                    DB_ARGS(DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, dataset_json, req, limit, err) : -1;
}

static int check_name(const char *name, struct sl_error *err)
{
    if (!dataset_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "a dataset name is 1 to 64 lowercase letters, digits, '-', '.' and '_', "
                       "not starting with '.', such as mnist or coco-2017");
    return 0;
}

static int check_region(struct api_request *req, const char *region, struct sl_error *err)
{
    int64_t n;

    if (!region || !*region)
        return 0;
    if (store_get_int(req->srv->store, "SELECT COUNT(*) FROM regions WHERE id = ?1",
                      DB_ARGS(DB_TEXT(region)), &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                       "no region '%s': list them with suanli regions", region);
    return 0;
}

/* Records the dataset, tells the nodes of its region and answers 201 with
 * it. */
static int publish(struct api_request *req, struct api_response *res, const char *name,
                   const char *region, const char *description, const char *source,
                   int64_t upload_bytes, struct sl_error *err)
{
    struct store *st = req->srv->store;

    if (store_exec(st,
                   "INSERT INTO datasets (name, region_id, description, source, upload_bytes,"
                   " created_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(region ? region : ""),
                           DB_TEXT(description ? description : ""), DB_TEXT(source),
                           DB_INT(upload_bytes), DB_TEXT(req->caller.user_id),
                           DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "dataset_exists",
                           "dataset '%s' exists already: remove it first (suanli admin dataset "
                           "rm %s) or pick another name",
                           name, name);
        return -1;
    }
    if (store_exec(st,
                   "UPDATE nodes SET desired_revision = desired_revision + 1"
                   " WHERE ?1 = '' OR region_id = ?1",
                   DB_ARGS(DB_TEXT(region ? region : "")), err) < 0)
        return -1;
    store_note_change(st); /* waiting agents hear of it (desired-wait.h) */
    cleanup_rows struct db_rows *rows =
        store_query(st, DATASET_SELECT " WHERE d.name = ?1", DB_ARGS(DB_TEXT(name)), err);
    if (!rows || db_next(rows, err) < 0)
        return -1;
    api_reply(res, 201, dataset_json(rows, req));
    return 0;
}

/* POST /v1/admin/datasets {name, path, description, region}: a directory
 * every host of the region has at `path`, bound read-only. */
int api_admin_datasets_create(struct api_request *req, struct api_response *res,
                              struct sl_error *err)
{
    const char *name = NULL, *path = NULL, *region = NULL, *description = NULL;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &name },
        { "path", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 1024, .out = &path },
        { "region", SL_JSON_STRING, .max_len = 32, .out = &region },
        { "description", SL_JSON_STRING, .max_len = 200, .out = &description },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 || check_name(name, err) < 0 ||
        check_region(req, region, err) < 0)
        return -1;
    bool dotdot = strcmp(path, "..") == 0 || strncmp(path, "../", 3) == 0 ||
                  strstr(path, "/../") != NULL ||
                  (strlen(path) >= 3 && strcmp(path + strlen(path) - 3, "/..") == 0);
    if (path[0] != '/' || dotdot || strcmp(path, "/") == 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "path must be an absolute directory on the hosts other than '/', without "
                       "'..', such as /srv/datasets/mnist; to upload a tar, give a file "
                       "(suanli admin dataset add NAME FILE.tar)");
    cleanup_free char *source = xasprintf("path:%s", path);
    return publish(req, res, name, region, description, source, 0, err);
}

/* Before the upload's transaction: a damaged or truncated tar is refused
 * now, with the reason (archive-check.h). */
int api_admin_datasets_upload_prepare(struct api_request *req, struct sl_error *err)
{
    enum archive_kind kind;

    if (!req->upload_path || req->upload_size == 0)
        return 0; /* the handler says what is missing */
    if (archive_check(req->upload_path, (uint64_t)req->srv->cfg.max_unpacked_bytes, &kind, err) <
        0) {
        if (err->kind == SL_E_INVALID || err->kind == SL_E_TOO_LARGE)
            log_info("upload: dataset '%s' refused: %s", req->params[0], err->message);
        return -1;
    }
    return 0;
}

/* PUT /v1/admin/datasets/{name}/archive?description=D&region=R: the body is
 * a tar (any compression the hosts read); kept as DATA/uploads/<sha256>
 * .archive, fetched by every host of the region, checked and unpacked. */
int api_admin_datasets_upload(struct api_request *req, struct api_response *res,
                              struct sl_error *err)
{
    const char *name = req->params[0];
    const char *region = api_query(req, "region");
    const char *description = api_query(req, "description");

    if (!req->upload_path)
        return sl_fail(err, SL_E_INVALID, "missing_body",
                       "send the dataset's tar as the request body (suanli admin dataset add "
                       "NAME FILE.tar)");
    if (req->upload_size == 0)
        return sl_fail(err, SL_E_INVALID, "missing_body", "the archive is empty");
    if (check_name(name, err) < 0 || check_region(req, region, err) < 0)
        return -1;
    if (description && strlen(description) > 200)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter", "description is over 200 bytes");
    cleanup_free char *source = xasprintf("sha256:%s", req->upload_sha256);
    if (publish(req, res, name, region, description, source, (int64_t)req->upload_size, err) < 0)
        return -1;
    cleanup_free char *dir = xasprintf("%s/uploads", req->srv->cfg.data_dir);
    cleanup_free char *kept = xasprintf("%s/%s.archive", dir, req->upload_sha256);
    struct sl_error e = SL_ERROR_INIT;
    int kept_rc = rename(req->upload_path, kept) < 0
                      ? sl_fail_errno(&e, "unable to rename '%s' to '%s'", req->upload_path, kept)
                      : sl_file_sync_dir(dir, &e);
    if (kept_rc < 0) {
        log_error("upload: unable to keep the archive: %s", e.message);
        return sl_fail(err, SL_E_STORAGE, "upload_failed",
                       "the server could not store the archive: its disk may be full; the "
                       "operator has the details in the log");
    }
    return 0;
}

/* DELETE /v1/admin/datasets/{name}: gone from every host at its next
 * convergence (running instances see the directory go); the uploaded tar is
 * deleted unless an image or another dataset is the same file. */
int api_admin_datasets_delete(struct api_request *req, struct api_response *res,
                              struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *name = req->params[0];
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT source, region_id FROM datasets WHERE name = ?1", DB_ARGS(DB_TEXT(name)), err);
    if (!rows)
        return -1;
    int rc = db_next(rows, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_dataset",
                       "no dataset '%s': list them with suanli admin dataset ls", name);
    cleanup_free char *source = xstrdup(db_text(rows, 0));
    cleanup_free char *region = xstrdup(db_text(rows, 1));
    int64_t others = 0;
    if (store_exec(st, "DELETE FROM datasets WHERE name = ?1", DB_ARGS(DB_TEXT(name)), err) < 0 ||
        store_exec(st, "DELETE FROM node_datasets WHERE name = ?1", DB_ARGS(DB_TEXT(name)), err) <
            0 ||
        store_exec(st,
                   "UPDATE nodes SET desired_revision = desired_revision + 1"
                   " WHERE ?1 = '' OR region_id = ?1",
                   DB_ARGS(DB_TEXT(region)), err) < 0)
        return -1;
    store_note_change(st);
    if (strncmp(source, "sha256:", 7) == 0) {
        cleanup_free char *recipe = xasprintf("upload:%s", source + 7);
        if (store_get_int(st,
                          "SELECT (SELECT COUNT(*) FROM datasets WHERE source = ?1)"
                          " + (SELECT COUNT(*) FROM images WHERE recipe = ?2)",
                          DB_ARGS(DB_TEXT(source), DB_TEXT(recipe)), &others, err) < 0)
            return -1;
        cleanup_free char *kept =
            xasprintf("%s/uploads/%s.archive", req->srv->cfg.data_dir, source + 7);
        /* a host still fetching it gets 404 and reports a failure, which
         * goes with the dataset */
        if (others == 0 && unlink(kept) < 0 && errno != ENOENT)
            log_warn("datasets: unable to delete '%s': %s", kept, strerror(errno));
    }
    api_reply(res, 204, NULL);
    return 0;
}
