/* Images as renters pick them, and the admin's request to build one: the
 * control plane records the wish, every node of the region builds it (the
 * recipe) and reports what it holds (DESIGN.md section 6). */
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const recipes[] = { "base", "jupyter", "pytorch", "venv", NULL };

static json_t *image_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    int64_t ready = db_int(rows, 9), building = db_int(rows, 10);
    const char *failure = db_null(rows, 12) ? NULL : db_text(rows, 12);
    /* a failure shows only while no node has it and none is trying */
    const char *state = ready ? "ready" : building ? "building" : failure ? "failed" : "pending";
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:o}", "name", db_text(rows, 1),
        "kind", db_text(rows, 2), "description", db_text(rows, 3), "os", db_text(rows, 4), "python",
        db_text(rows, 5), "cuda", db_text(rows, 6), "framework", db_text(rows, 7), "size_bytes",
        (json_int_t)db_int(rows, 8), "nodes", (json_int_t)ready, "state", state, "message",
        strcmp(state, "failed") == 0 ? failure : "", "created_at", api_time(db_int(rows, 11)));
}

/* What the nodes report of each image: the first ready node's metadata, and
 * the message of a node that failed to build or import it. */
#define IMAGE_SELECT                                                                               \
    "SELECT i.seq, i.name, i.kind, i.description,"                                                 \
    " COALESCE(r.os, ''), COALESCE(r.python, ''), COALESCE(r.cuda, ''),"                           \
    " COALESCE(r.framework, ''), COALESCE(r.size_bytes, 0),"                                       \
    " (SELECT COUNT(*) FROM node_images x WHERE x.name = i.name AND x.state = 'ready'),"           \
    " (SELECT COUNT(*) FROM node_images x WHERE x.name = i.name AND x.state = 'building'),"        \
    " i.created_at,"                                                                               \
    " (SELECT x.message FROM node_images x WHERE x.name = i.name AND x.state = 'failed' LIMIT 1)"  \
    " FROM images i LEFT JOIN node_images r ON r.name = i.name AND r.node_id ="                    \
    " (SELECT y.node_id FROM node_images y WHERE y.name = i.name AND y.state = 'ready'"            \
    "  ORDER BY y.node_id LIMIT 1)"

int api_images_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store, IMAGE_SELECT " WHERE i.seq > ?1 ORDER BY i.seq LIMIT ?2",
                    DB_ARGS(DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, image_json, NULL, limit, err) : -1;
}

int api_admin_images_create(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *name = NULL, *recipe = NULL, *region = NULL, *description = NULL;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &name },
        { "recipe", SL_JSON_STRING, .max_len = 32, .out = &recipe },
        { "region", SL_JSON_STRING, .max_len = 32, .out = &region },
        { "description", SL_JSON_STRING, .max_len = 200, .out = &description },
    };
    bool known = false;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
              *p == '_'))
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "an image name holds lowercase letters, digits, '-', '.' and '_', "
                           "such as debian-12");
    if (region && *region) {
        int64_t n;
        if (store_get_int(req->srv->store, "SELECT COUNT(*) FROM regions WHERE id = ?1",
                          DB_ARGS(DB_TEXT(region)), &n, err) < 0)
            return -1;
        if (n == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                           "no region '%s': list them with suanli regions", region);
    }
    if (!recipe)
        recipe = "base";
    for (const char *const *r = recipes; *r; r++)
        known |= strcmp(*r, recipe) == 0;
    if (!known)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "recipe '%s' is unknown: 'base' is Debian 12 with SSH, Python and the "
                       "usual tools; 'jupyter' is base plus Jupyter Notebook; 'pytorch' is base "
                       "plus Debian's PyTorch and torchvision; 'venv' is base plus a project "
                       "environment (/root/venv) and what compiling extensions needs",
                       recipe);
    if (store_exec(req->srv->store,
                   "INSERT INTO images (name, kind, recipe, region_id, description, created_by,"
                   " created_at) VALUES (?1, 'base', ?2, ?3, ?4, ?5, ?6)",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(recipe), DB_TEXT(region ? region : ""),
                           DB_TEXT(description ? description : ""), DB_TEXT(req->caller.user_id),
                           DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "image_exists", "image '%s' exists already", name);
        return -1;
    }
    /* every node of the region learns of it at its next fetch */
    if (store_exec(req->srv->store,
                   "UPDATE nodes SET desired_revision = desired_revision + 1"
                   " WHERE ?1 = '' OR region_id = ?1",
                   DB_ARGS(DB_TEXT(region ? region : "")), err) < 0)
        return -1;
    store_note_change(req->srv->store); /* waiting agents hear of it (desired-wait.h) */
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store, IMAGE_SELECT " WHERE i.name = ?1", DB_ARGS(DB_TEXT(name)), err);
    if (!rows || db_next(rows, err) < 0)
        return -1;
    api_reply(res, 201, image_json(rows, NULL));
    return 0;
}

static bool is_hex64(const char *s)
{
    size_t n = 0;

    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == 64;
}

/* Makes a rename in dir last: some file systems cannot sync a directory, and
 * there is nothing more to do on those. */
/* PUT /v1/admin/images/{name}/archive: the body is a rootfs tarball, a
 * `docker save` tarball or an OCI layout in a tar (any compression the node
 * reads); it is kept as DATA/uploads/<sha256>.archive and every node of the
 * region fetches it, checks its digest and imports it. */
int api_admin_images_upload(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *name = req->params[0];
    const char *region = api_query(req, "region");
    const char *kind = api_query(req, "kind");
    const char *description = api_query(req, "description");

    if (!req->upload_path)
        return sl_fail(err, SL_E_INVALID, "missing_body",
                       "send the image archive as the request body (suanli admin image import "
                       "FILE --name NAME)");
    if (req->upload_size == 0)
        return sl_fail(err, SL_E_INVALID, "missing_body", "the archive is empty");
    if (strlen(name) > 64 || !*name)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "an image name is 1 to 64 characters");
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
              *p == '_'))
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "an image name holds lowercase letters, digits, '-', '.' and '_', "
                           "such as pytorch-2.3-cuda12");
    if (!kind)
        kind = "base";
    if (strcmp(kind, "base") != 0 && strcmp(kind, "framework") != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter", "kind must be base or framework");
    if (description && strlen(description) > 200)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter", "description is over 200 bytes");
    if (region && *region) {
        int64_t n;
        if (store_get_int(srv->store, "SELECT COUNT(*) FROM regions WHERE id = ?1",
                          DB_ARGS(DB_TEXT(region)), &n, err) < 0)
            return -1;
        if (n == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                           "no region '%s': list them with suanli regions", region);
    }
    cleanup_free char *recipe = xasprintf("upload:%s", req->upload_sha256);
    if (store_exec(srv->store,
                   "INSERT INTO images (name, kind, recipe, region_id, description, created_by,"
                   " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(kind), DB_TEXT(recipe),
                           DB_TEXT(region ? region : ""), DB_TEXT(description ? description : ""),
                           DB_TEXT(req->caller.user_id), DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "image_exists",
                           "image '%s' exists already: import under another name", name);
        return -1;
    }
    cleanup_free char *dir = xasprintf("%s/uploads", srv->cfg.data_dir);
    cleanup_free char *kept = xasprintf("%s/%s.archive", dir, req->upload_sha256);
    /* On failure the image's row is rolled back; an archive renamed into
     * place stays, as another image of the same content may use it. */
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
    if (store_exec(srv->store,
                   "UPDATE nodes SET desired_revision = desired_revision + 1"
                   " WHERE ?1 = '' OR region_id = ?1",
                   DB_ARGS(DB_TEXT(region ? region : "")), err) < 0)
        return -1;
    store_note_change(srv->store); /* waiting agents hear of it (desired-wait.h) */
    cleanup_rows struct db_rows *rows =
        store_query(srv->store, IMAGE_SELECT " WHERE i.name = ?1", DB_ARGS(DB_TEXT(name)), err);
    if (!rows || db_next(rows, err) < 0)
        return -1;
    json_t *j = image_json(rows, NULL);
    json_object_set_new(j, "sha256", json_string(req->upload_sha256));
    json_object_set_new(j, "upload_bytes", json_integer((json_int_t)req->upload_size));
    api_reply(res, 201, j);
    return 0;
}

/* GET /v1/nodes/{id}/uploads/{sha256}: an uploaded archive, for the nodes. */
int api_nodes_upload_get(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *sha = req->params[1];
    struct stat st;

    if (!is_hex64(sha))
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_upload", "no upload '%s'", sha);
    cleanup_free char *path = xasprintf("%s/uploads/%s.archive", req->srv->cfg.data_dir, sha);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_upload", "no upload '%s'", sha);
    if (fstat(fd, &st) < 0) {
        close(fd);
        return sl_fail_errno(err, "unable to read '%s'", path);
    }
    res->status = 200;
    res->file_fd = fd;
    res->file_size = (uint64_t)st.st_size;
    return 0;
}

static json_t *image_host_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:o}", "node_id", db_text(rows, 0), "hostname",
                     db_text(rows, 1), "region", db_text(rows, 2), "state", db_text(rows, 3),
                     "message", db_text(rows, 4), "size_bytes", (json_int_t)db_int(rows, 5),
                     "updated_at", db_null(rows, 6) ? json_null() : api_time(db_int(rows, 6)));
}

/* GET /v1/admin/images/{name}/hosts: the image on each host of its region
 * (every region's for an image of all), as the hosts last reported it:
 * ready, building, failed (with the host's message), or missing (the host
 * has said nothing of it yet). */
int api_admin_image_hosts(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t n;

    if (store_get_int(req->srv->store, "SELECT COUNT(*) FROM images WHERE name = ?1",
                      DB_ARGS(DB_TEXT(req->params[0])), &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                       "no image '%s': list them with suanli images", req->params[0]);
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT n.id, n.hostname, n.region_id, COALESCE(x.state, 'missing'),"
                    " COALESCE(x.message, ''), COALESCE(x.size_bytes, 0), x.updated_at"
                    " FROM images i JOIN nodes n ON (i.region_id = '' OR n.region_id = i.region_id)"
                    " LEFT JOIN node_images x ON x.node_id = n.id AND x.name = i.name"
                    " WHERE i.name = ?1 AND n.removed_at IS NULL ORDER BY n.region_id, n.id",
                    DB_ARGS(DB_TEXT(req->params[0])), err);
    if (!rows)
        return -1;
    cleanup_json json_t *items = json_array();
    int rc;
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(items, image_host_json(rows, NULL));
    if (rc < 0)
        return -1;
    api_reply(res, 200, json_pack("{s:s, s:O}", "image", req->params[0], "items", items));
    return 0;
}
