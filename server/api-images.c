/* Images as renters pick them, and the admin's request to build one: the
 * control plane records the wish, every node of the region builds it (the
 * recipe) and reports what it holds (DESIGN.md section 6). */
#include "archive-check.h"
#include "billing.h"
#include "image-save.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The recipes hosts build (node/image.c), each with the description an
 * image built from it gets when the admin gives none: what `image ls` and
 * the console's create page show renters. */
static const struct {
    const char *name, *description;
} recipes[] = {
    { "base", "Debian 12 with SSH, Python and the usual tools" },
    { "jupyter", "Debian 12 with Jupyter Notebook on a service port" },
    { "pytorch", "Debian 12 with Debian's PyTorch and torchvision (CPU)" },
    { "venv", "Debian 12 with a project environment (/root/venv) and compilers" },
    { "desktop", "Debian 12 with an Xfce desktop in the browser (noVNC on a service port)" },
};

static json_t *image_json(struct db_rows *rows, void *ctx)
{
    const char *caller = ctx;
    int64_t ready = db_int(rows, 9), building = db_int(rows, 10);
    const char *failure = db_null(rows, 12) ? NULL : db_text(rows, 12);
    const char *save_state = db_text(rows, 14);
    /* a failure shows only while no node has it and none is trying; a saved
     * image's capture comes first (image-save.h) */
    const char *state = strcmp(save_state, "saving") == 0   ? "saving"
                        : strcmp(save_state, "failed") == 0 ? "failed"
                        : ready                             ? "ready"
                        : building                          ? "building"
                        : failure                           ? "failed"
                                                            : "pending";
    if (strcmp(save_state, "failed") == 0)
        failure = db_text(rows, 15);
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:o}", "name", db_text(rows, 1),
        "kind", db_text(rows, 2), "description", db_text(rows, 3), "os", db_text(rows, 4), "python",
        db_text(rows, 5), "cuda", db_text(rows, 6), "framework", db_text(rows, 7), "size_bytes",
        (json_int_t)db_int(rows, 8), "nodes", (json_int_t)ready, "state", state, "message",
        strcmp(state, "failed") == 0 ? failure : "", "created_at", api_time(db_int(rows, 11)));
    /* a saved image: what it was saved over, its own layer's bytes, and
     * whether the caller owns it (only the owner deletes or shares it) */
    json_object_set_new(j, "parent", json_string(db_text(rows, 13)));
    json_object_set_new(j, "layer_bytes", json_integer((json_int_t)db_int(rows, 17)));
    json_object_set_new(j, "owned",
                        json_boolean(caller && *db_text(rows, 16) &&
                                     strcmp(caller, db_text(rows, 16)) == 0 && *db_text(rows, 13)));
    return j;
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
    " (SELECT x.message FROM node_images x WHERE x.name = i.name AND x.state = 'failed' LIMIT 1)," \
    " i.parent, i.save_state, i.save_message, COALESCE(i.created_by, ''), i.layer_bytes"           \
    " FROM images i LEFT JOIN node_images r ON r.name = i.name AND r.node_id ="                    \
    " (SELECT y.node_id FROM node_images y WHERE y.name = i.name AND y.state = 'ready'"            \
    "  ORDER BY y.node_id LIMIT 1)"

/* A renter sees the images an instance can start from now: ready on a host,
 * and not someone else's private one. One that is pending, building or
 * failed is the admin's business (its name and its hosts' messages among
 * it), and shows to admins only. */
int api_images_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    IMAGE_SELECT " WHERE i.seq > ?1 AND (?3 = 1 OR (i.parent != '' AND"
                                 " i.created_by = ?4) OR (EXISTS (SELECT 1 FROM node_images x"
                                 " WHERE x.name = i.name AND x.state = 'ready')"
                                 " AND " IMAGE_VISIBLE("?4") "))"
                                                             " ORDER BY i.seq LIMIT ?2",
                    DB_ARGS(DB_INT(after), DB_INT(limit), DB_INT(req->caller.admin),
                            DB_TEXT(req->caller.user_id)),
                    err);
    return rows ? api_reply_rows(res, rows, image_json, (void *)req->caller.user_id, limit, err)
                : -1;
}

int api_image_reply(struct api_request *req, struct api_response *res, int status, const char *name,
                    struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store, IMAGE_SELECT " WHERE i.name = ?1", DB_ARGS(DB_TEXT(name)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                       "no image '%s': list them with suanli image ls", name);
    api_reply(res, status, image_json(rows, (void *)req->caller.user_id));
    return 0;
}

/* Refuses a new image under a name that hosts still hold or are importing
 * from before (an image of that name was deleted): they would keep the old
 * files and report them ready under the new one. Hosts' failures of the old
 * one are forgotten, so that the new one's hosts read "missing" until they
 * report it (nodes.c ignores their reports of the old one). */
static int claim_name(struct server *srv, const char *name, struct sl_error *err)
{
    int64_t n;

    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM node_images x WHERE x.name = ?1"
                      " AND x.state IN ('ready', 'building')"
                      " AND NOT EXISTS (SELECT 1 FROM images i WHERE i.name = ?1)",
                      DB_ARGS(DB_TEXT(name)), &n, err) < 0)
        return -1;
    if (n)
        return sl_fail(err, SL_E_CONFLICT, "image_name_held",
                       "%" PRId64 " host(s) still hold or are importing an earlier image named "
                       "'%s', which was deleted: give this one another name",
                       n, name);
    return store_exec(srv->store,
                      "DELETE FROM node_images WHERE name = ?1"
                      " AND NOT EXISTS (SELECT 1 FROM images i WHERE i.name = ?1)",
                      DB_ARGS(DB_TEXT(name)), err);
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
    const char *recipe_description = "";
    for (size_t i = 0; i < ARRAY_SIZE(recipes); i++)
        if (strcmp(recipes[i].name, recipe) == 0) {
            known = true;
            recipe_description = recipes[i].description;
        }
    if (!known)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "recipe '%s' is unknown: 'base' is Debian 12 with SSH, Python and the "
                       "usual tools; 'jupyter' is base plus Jupyter Notebook; 'pytorch' is base "
                       "plus Debian's PyTorch and torchvision; 'venv' is base plus a project "
                       "environment (/root/venv) and what compiling extensions needs; 'desktop' is "
                       "base plus an Xfce desktop in the browser (noVNC)",
                       recipe);
    if (claim_name(req->srv, name, err) < 0)
        return -1;
    if (store_exec(req->srv->store,
                   "INSERT INTO images (name, kind, recipe, region_id, description, created_by,"
                   " created_at) VALUES (?1, 'base', ?2, ?3, ?4, ?5, ?6)",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(recipe), DB_TEXT(region ? region : ""),
                           DB_TEXT(description && *description ? description : recipe_description),
                           DB_TEXT(req->caller.user_id), DB_INT(sl_time_now())),
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

/* Before the upload's transaction: what the archive itself tells
 * (archive-check.h), so that a damaged or hostile one is refused now, with
 * the reason, and the hosts' wait is only for what they find. */
int api_admin_images_upload_prepare(struct api_request *req, struct sl_error *err)
{
    enum archive_kind kind;

    if (!req->upload_path || req->upload_size == 0)
        return 0; /* the handler says what is missing */
    if (archive_check(req->upload_path, (uint64_t)req->srv->cfg.max_unpacked_bytes, &kind, err) <
        0) {
        if (err->kind == SL_E_INVALID || err->kind == SL_E_TOO_LARGE)
            log_info("upload: image '%s' refused: %s", req->params[0], err->message);
        return -1;
    }
    enum archive_kind *kept = xmalloc(sizeof(*kept));
    *kept = kind;
    req->prepared = kept;
    req->prepared_free = free;
    return 0;
}

static const char *format_name(const enum archive_kind *kind)
{
    if (!kind)
        return "unknown";
    return *kind == ARCHIVE_DOCKER ? "docker" : *kind == ARCHIVE_OCI ? "oci" : "rootfs";
}

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
    if (claim_name(srv, name, err) < 0)
        return -1;
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
    json_object_set_new(j, "format", json_string(format_name(req->prepared)));
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
    /* "Range: bytes=N-": the rest of a download cut short (the agent
     * resumes its .part file); any other range gets the whole file */
    const char *range = api_header(req, "Range");
    char *end;
    if (range && strncmp(range, "bytes=", 6) == 0 && range[6] >= '0' && range[6] <= '9') {
        unsigned long long from = strtoull(range + 6, &end, 10);
        if (strcmp(end, "-") == 0 && from <= (unsigned long long)st.st_size) {
            char value[96];
            res->status = 206;
            res->file_offset = from;
            res->file_size = (uint64_t)st.st_size - from;
            if (res->file_size)
                snprintf(value, sizeof(value), "bytes %llu-%llu/%llu", from,
                         (unsigned long long)st.st_size - 1, (unsigned long long)st.st_size);
            else
                snprintf(value, sizeof(value), "bytes */%llu", (unsigned long long)st.st_size);
            api_add_header(res, "Content-Range", value);
        }
    }
    return 0;
}

static json_t *image_host_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:b}", "node_id", db_text(rows, 0), "hostname",
        db_text(rows, 1), "region", db_text(rows, 2), "state", db_text(rows, 3), "message",
        db_text(rows, 4), "size_bytes", (json_int_t)db_int(rows, 5), "updated_at",
        db_null(rows, 6) ? json_null() : api_time(db_int(rows, 6)), "online", (int)db_int(rows, 7));
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
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT n.id, n.hostname, n.region_id, COALESCE(x.state, 'missing'),"
        " COALESCE(x.message, ''), COALESCE(x.size_bytes, 0), x.updated_at,"
        " COALESCE(n.last_heartbeat, 0) > ?2"
        " FROM images i JOIN nodes n ON (i.region_id = '' OR n.region_id = i.region_id)"
        " LEFT JOIN node_images x ON x.node_id = n.id AND x.name = i.name"
        " WHERE i.name = ?1 AND n.removed_at IS NULL ORDER BY n.region_id, n.id",
        DB_ARGS(DB_TEXT(req->params[0]), DB_INT(sl_time_now() - req->srv->cfg.node_offline_after)),
        err);
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

/* DELETE /v1/admin/images/{name}: renters can no longer pick it. Refused
 * while an instance (any state but released) was made from it: its disks
 * need the image's layers on its host. The hosts' report of it is kept, so
 * that a new image cannot take the name while a host still holds the old
 * files (claim_name); a host forgets a failed import of an image no
 * longer wanted. The uploaded archive goes when no other image uses it. */
int api_admin_images_delete(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *name = req->params[0];
    int64_t in_use;

    cleanup_rows struct db_rows *img = store_query(
        srv->store, "SELECT recipe, COALESCE(created_by, '') FROM images WHERE name = ?1",
        DB_ARGS(DB_TEXT(name)), err);
    if (!img)
        return -1;
    int rc = db_next(img, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                       "no image '%s': list them with suanli image ls", name);
    cleanup_free char *recipe = xstrdup(db_text(img, 0));
    cleanup_free char *owner = xstrdup(db_text(img, 1));
    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM instances WHERE image = ?1 AND state != 'released'",
                      DB_ARGS(DB_TEXT(name)), &in_use, err) < 0)
        return -1;
    if (in_use) {
        cleanup_rows struct db_rows *one =
            store_query(srv->store,
                        "SELECT id FROM instances WHERE image = ?1 AND state != 'released'"
                        " ORDER BY id LIMIT 1",
                        DB_ARGS(DB_TEXT(name)), err);
        if (!one || db_next(one, err) < 0)
            return -1;
        return sl_fail(err, SL_E_CONFLICT, "image_in_use",
                       "image '%s' is in use by %" PRId64 " instance(s) that are not released "
                       "(such as %s): their disks are built on it; delete it once they are "
                       "released",
                       name, in_use, db_text(one, 0));
    }
    /* hosts that lack an image saved over it stack that one on this one */
    int64_t children;
    if (store_get_int(srv->store, "SELECT COUNT(*) FROM images WHERE parent = ?1",
                      DB_ARGS(DB_TEXT(name)), &children, err) < 0)
        return -1;
    if (children)
        return sl_fail(err, SL_E_CONFLICT, "image_in_use",
                       "%" PRId64 " saved image(s) were saved over image '%s': their hosts "
                       "need it; delete it once they are deleted",
                       children, name);
    if (store_exec(srv->store, "DELETE FROM images WHERE name = ?1", DB_ARGS(DB_TEXT(name)), err) <
            0 ||
        store_exec(srv->store, "DELETE FROM image_shares WHERE image = ?1", DB_ARGS(DB_TEXT(name)),
                   err) < 0 ||
        store_exec(srv->store,
                   "UPDATE nodes SET desired_revision = desired_revision + 1"
                   " WHERE removed_at IS NULL",
                   DB_NO_ARGS, err) < 0 ||
        (*owner && billing_image_storage_update(srv->store, owner, err) < 0))
        return -1;
    int64_t shared = 0;
    /* an admin's upload, or a saved image's layer (image-save.h) */
    const char *sha = strncmp(recipe, "upload:", 7) == 0  ? recipe + 7
                      : strncmp(recipe, "layer:", 6) == 0 ? recipe + 6
                                                          : NULL;
    cleanup_free char *as_upload = sha ? xasprintf("upload:%s", sha) : NULL;
    cleanup_free char *as_layer = sha ? xasprintf("layer:%s", sha) : NULL;
    if (sha && store_get_int(srv->store, "SELECT COUNT(*) FROM images WHERE recipe IN (?1, ?2)",
                             DB_ARGS(DB_TEXT(as_upload), DB_TEXT(as_layer)), &shared, err) < 0)
        return -1;
    if (sha && !shared && is_hex64(sha)) {
        /* after the commit would be exact; a failed commit leaves an image
         * whose hosts that lack it fail to fetch it, which says so */
        cleanup_free char *kept = xasprintf("%s/uploads/%s.archive", srv->cfg.data_dir, sha);
        if (unlink(kept) < 0 && errno != ENOENT)
            log_warn("delete image '%s': unable to remove '%s': %s", name, kept, strerror(errno));
    }
    store_note_change(srv->store);
    api_reply(res, 204, NULL);
    return 0;
}
