/* Public data on this host (public-data.h), and the agent's part: the
 * datasets the desired state names, fetched or bound in a thread each, the
 * others removed, and what is here reported back. */
#include "public-data.h"
#include "agent-internal.h"
#include "disk.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

bool public_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > PUBLIC_NAME_MAX || name[0] == '.')
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

char *public_dir(const char *data_dir)
{
    return xasprintf("%s/public", data_dir);
}

static char *state_path(const char *data_dir, const char *name)
{
    return xasprintf("%s/public-state/%s", data_dir, name);
}

int public_init(const char *data_dir, struct sl_error *err)
{
    cleanup_free char *dir = public_dir(data_dir);
    cleanup_free char *state = xasprintf("%s/public-state", data_dir);
    cleanup_free char *tmp = xasprintf("%s/public-tmp", data_dir);
    if (fs_mkdir_p(dir, 0755, err) < 0 || fs_mkdir_p(state, 0700, err) < 0 ||
        fs_remove_tree(tmp, err) < 0 || fs_mkdir_p(tmp, 0700, err) < 0)
        return -1;
    /* the top is what renters see as /root/public: readable by all */
    if (chmod(dir, 0755) < 0)
        return sl_fail_errno(err, "unable to chmod '%s'", dir);
    return 0;
}

static uint64_t tree_bytes;

static int add_size(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)path, (void)f;
    if (type == FTW_F && S_ISREG(st->st_mode))
        tree_bytes += (uint64_t)st->st_size;
    return 0;
}

/* The bytes of the regular files below dir (never following a link or
 * crossing into another mount). nftw's callback has no context: one walk at
 * a time. */
static uint64_t tree_size(const char *dir)
{
    static pthread_mutex_t walk = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&walk);
    tree_bytes = 0;
    nftw(dir, add_size, 32, FTW_PHYS | FTW_MOUNT);
    uint64_t n = tree_bytes;
    pthread_mutex_unlock(&walk);
    return n;
}

static int write_state(const char *data_dir, const char *name, const char *source, uint64_t size,
                       struct sl_error *err)
{
    cleanup_free char *path = state_path(data_dir, name);
    cleanup_json json_t *j =
        json_pack("{s:s, s:I}", "source", source, "size_bytes", (json_int_t)size);
    cleanup_free char *text = json_dumps(j, JSON_COMPACT);
    return sl_file_write(path, text, strlen(text), 0600, 0, err);
}

int public_present(const char *data_dir, const char *name, char *source, size_t source_size,
                   uint64_t *size_bytes)
{
    cleanup_free char *path = state_path(data_dir, name);
    cleanup_free char *dir = public_dir(data_dir);
    cleanup_free char *mp = xasprintf("%s/%s", dir, name);
    size_t len = 0;
    cleanup_free char *text = fs_read_file(path, 65536, &len, NULL);
    struct stat st;

    if (!text || lstat(mp, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    cleanup_json json_t *j = json_loadb(text, len, 0, NULL);
    const char *src = json_string_value(json_object_get(j, "source"));
    if (!src)
        return 0;
    if (strncmp(src, "path:", 5) == 0 && disk_mounted(mp, NULL, 0, NULL, 0, NULL) != 1)
        return 0; /* its mount is gone (a reboot): bind it again */
    if (source)
        snprintf(source, source_size, "%s", src);
    if (size_bytes)
        *size_bytes = (uint64_t)json_integer_value(json_object_get(j, "size_bytes"));
    return 1;
}

int public_remove(const char *data_dir, const char *name, struct sl_error *err)
{
    if (!public_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_name", "'%s' is not a dataset name", name);
    cleanup_free char *state = state_path(data_dir, name);
    cleanup_free char *dir = public_dir(data_dir);
    cleanup_free char *mp = xasprintf("%s/%s", dir, name);
    struct stat st;

    if (unlink(state) < 0 && errno != ENOENT)
        return sl_fail_errno(err, "unable to remove '%s'", state);
    if (lstat(mp, &st) < 0)
        return errno == ENOENT ? 0 : sl_fail_errno(err, "unable to stat '%s'", mp);
    /* a bound directory: the operator's files stay; only the mount goes */
    int mounted = 0;
    for (int i = 0; i < 16 && (mounted = disk_mounted(mp, NULL, 0, NULL, 0, err)) == 1; i++)
        if (umount2(mp, MNT_DETACH) < 0)
            return sl_fail_errno(err, "unable to unmount '%s'", mp);
    if (mounted < 0)
        return -1;
    if (mounted == 1)
        return sl_fail(err, SL_E_INTERNAL, "busy", "'%s' is still mounted", mp);
    if (rmdir(mp) == 0 || errno == ENOENT)
        return 0;
    /* an unpacked tree: out of sight at once, then deleted */
    cleanup_free char *gone = xasprintf("%s/public-tmp/gone-%s.XXXXXX", data_dir, name);
    if (!mkdtemp(gone))
        return sl_fail_errno(err, "unable to make '%s'", gone);
    if (rename(mp, gone) < 0) {
        int e = errno;
        rmdir(gone);
        errno = e;
        return sl_fail_errno(err, "unable to move '%s' aside", mp);
    }
    return fs_remove_tree(gone, err);
}

int public_unpack(const char *data_dir, const char *name, const char *archive, const char *source,
                  const struct image_limits *limits, struct sl_error *err)
{
    if (!public_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_name", "'%s' is not a dataset name", name);
    cleanup_free char *tmp = xasprintf("%s/public-tmp/new-%s.XXXXXX", data_dir, name);
    cleanup_free char *dir = public_dir(data_dir);
    cleanup_free char *mp = xasprintf("%s/%s", dir, name);
    struct image_budget budget;
    char digest[IMAGE_DIGEST_HEX];
    uint64_t tar_size;
    struct sl_error e = SL_ERROR_INIT;

    cleanup_free char *tmp_dir = xasprintf("%s/public-tmp", data_dir);
    if (fs_mkdir_p(dir, 0755, err) < 0 || fs_mkdir_p(tmp_dir, 0700, err) < 0)
        return -1;
    if (!mkdtemp(tmp))
        return sl_fail_errno(err, "unable to make '%s'", tmp);
    cleanup_close int fd = open(archive, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fs_remove_tree(tmp, &e);
        return sl_fail_errno(err, "unable to open '%s'", archive);
    }
    image_budget_init(&budget, limits);
    if (image_layer_unpack(fd, tmp, IMAGE_LAYER_DATASET, name, "dataset", &budget, digest,
                           &tar_size, err) < 0) {
        fs_remove_tree(tmp, &e);
        return -1;
    }
    uint64_t size = tree_size(tmp);
    cleanup_free char *state = xasprintf("%s/public-state", data_dir);
    int rc = fs_mkdir_p(state, 0700, err);
    if (rc == 0 && chmod(tmp, 0755) < 0)
        rc = sl_fail_errno(err, "unable to chmod '%s'", tmp);
    if (rc == 0)
        rc = public_remove(data_dir, name, err);
    if (rc == 0 && rename(tmp, mp) < 0)
        rc = sl_fail_errno(err, "unable to move the dataset to '%s'", mp);
    if (rc < 0) {
        fs_remove_tree(tmp, &e);
        return -1;
    }
    return write_state(data_dir, name, source, size, err);
}

/* Whether `inner` is `outer` or below it (both real paths). */
static bool path_within(const char *inner, const char *outer)
{
    size_t n = strlen(outer);
    if (strcmp(outer, "/") == 0)
        return true;
    return strncmp(inner, outer, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

int public_bind(const char *data_dir, const char *name, const char *path, struct sl_error *err)
{
    char real[PATH_MAX], data_real[PATH_MAX];
    struct stat st;

    if (!public_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_name", "'%s' is not a dataset name", name);
    if (path[0] != '/')
        return sl_fail(err, SL_E_INVALID, "invalid_path", "the dataset's path '%s' is not absolute",
                       path);
    if (!realpath(path, real) || stat(real, &st) < 0)
        return sl_fail_errno(err, "no directory '%s' on this host", path);
    if (!S_ISDIR(st.st_mode))
        return sl_fail(err, SL_E_INVALID, "invalid_path", "'%s' is not a directory", path);
    if (!realpath(data_dir, data_real))
        return sl_fail_errno(err, "unable to resolve '%s'", data_dir);
    if (strcmp(real, "/") == 0 || path_within(real, data_real) || path_within(data_real, real))
        return sl_fail(err, SL_E_INVALID, "invalid_path",
                       "'%s' is the host's root, the agent's data directory or holds it: publish "
                       "a directory of the dataset's own",
                       path);
    cleanup_free char *dir = public_dir(data_dir);
    cleanup_free char *mp = xasprintf("%s/%s", dir, name);
    cleanup_free char *state = xasprintf("%s/public-state", data_dir);
    if (fs_mkdir_p(dir, 0755, err) < 0 || fs_mkdir_p(state, 0700, err) < 0 ||
        public_remove(data_dir, name, err) < 0)
        return -1;
    if (mkdir(mp, 0755) < 0 && errno != EEXIST)
        return sl_fail_errno(err, "unable to make '%s'", mp);
    /* private: nothing mounted here later travels back to the source, and
     * the flags are the bind's own (ro, nosuid, nodev, noexec) */
    if (mount(real, mp, NULL, MS_BIND, NULL) < 0) {
        int e = errno;
        rmdir(mp);
        errno = e;
        return sl_fail_errno(err, "unable to bind '%s' at '%s'", real, mp);
    }
    if (mount(NULL, mp, NULL, MS_PRIVATE, NULL) < 0 ||
        mount(NULL, mp, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0) {
        int e = errno;
        umount2(mp, MNT_DETACH);
        rmdir(mp);
        errno = e;
        return sl_fail_errno(err, "unable to make '%s' read-only", mp);
    }
    cleanup_free char *source = xasprintf("path:%s", path);
    return write_state(data_dir, name, source, tree_size(mp), err);
}

/* The agent's part. a->datasets: {name: {"source": s, "state": "building" |
 * "failed", "message": m}} for each dataset being made or whose making
 * failed; a failure is not tried again until its source changes. */

struct public_job {
    struct agent *agent;
    char name[PUBLIC_NAME_MAX + 1];
    char *source; /* "sha256:<hex>" or "path:/abs" */
};

static int fetch_and_unpack(struct agent *a, const struct public_job *job, struct sl_error *err)
{
    const char *sha = job->source + 7;
    cleanup_free char *dir = xasprintf("%s/downloads", a->cfg->data_dir);
    cleanup_free char *file = xasprintf("%s/%s.dataset.part", dir, sha);
    cleanup_free char *path = xasprintf("/v1/nodes/%s/uploads/%s", a->node_id, sha);
    struct sl_client c;
    char got[65];

    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    sl_client_init(&c, a->cfg->server, a->token); /* a handle of its own: another thread */
    int rc = sl_client_download(&c, path, file, got, err);
    sl_client_release(&c);
    if (rc < 0)
        return -1;
    if (strcmp(got, sha) != 0) {
        unlink(file);
        return sl_fail(err, SL_E_INVALID, "bad_digest",
                       "the archive arrived with SHA-256 %s, not %s: upload it again", got, sha);
    }
    struct image_limits limits;
    agent_image_limits(a->cfg, &limits);
    rc = public_unpack(a->cfg->data_dir, job->name, file, job->source, &limits, err);
    unlink(file);
    return rc;
}

static void *make_dataset(void *p)
{
    struct public_job *job = p;
    struct agent *a = job->agent;
    struct sl_error err = SL_ERROR_INIT;
    int rc;

    if (strncmp(job->source, "path:", 5) == 0) {
        log_info("agent: dataset %s: binding %s", job->name, job->source + 5);
        rc = public_bind(a->cfg->data_dir, job->name, job->source + 5, &err);
    } else {
        log_info("agent: dataset %s: fetching %.19s", job->name, job->source);
        rc = fetch_and_unpack(a, job, &err);
    }
    pthread_mutex_lock(&a->lock);
    json_t *entry = json_object_get(a->datasets, job->name);
    const char *src = json_string_value(json_object_get(entry, "source"));
    if (src && strcmp(src, job->source) == 0) {
        if (rc < 0) {
            json_object_set_new(entry, "state", json_string("failed"));
            json_object_set_new(entry, "message", json_string(err.message));
        } else {
            json_object_del(a->datasets, job->name);
        }
    }
    a->acted = a->kicked = true; /* report it now */
    pthread_cond_broadcast(&a->wake);
    pthread_mutex_unlock(&a->lock);
    if (rc < 0)
        log_error("agent: dataset %s: %s", job->name, err.message);
    else
        log_info("agent: dataset %s ready", job->name);
    free(job->source);
    free(job);
    return NULL;
}

static char *wanted_source(json_t *w)
{
    const char *sha = json_string_value(json_object_get(w, "sha256"));
    const char *path = json_string_value(json_object_get(w, "path"));
    if (sha && strlen(sha) == 64 && strspn(sha, "0123456789abcdef") == 64)
        return xasprintf("sha256:%s", sha);
    if (path && path[0] == '/')
        return xasprintf("path:%s", path);
    return NULL;
}

static bool named(json_t *wanted, const char *name)
{
    size_t i;
    json_t *w;
    json_array_foreach(wanted, i, w)
    {
        const char *n = json_string_value(json_object_get(w, "name"));
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

void agent_public_converge(struct agent *a, json_t *wanted)
{
    size_t i;
    json_t *w;

    if (!json_is_array(wanted))
        return; /* not said (a suanlid without datasets, or none read yet): keep what is here */
    json_array_foreach(wanted, i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        cleanup_free char *source = wanted_source(w);
        char have[PATH_MAX + 16];
        if (!name || !public_name_valid(name) || !source)
            continue;
        pthread_mutex_lock(&a->lock);
        json_t *entry = json_object_get(a->datasets, name);
        const char *src = json_string_value(json_object_get(entry, "source"));
        bool busy = src && strcmp(src, source) == 0;
        pthread_mutex_unlock(&a->lock);
        if (busy)
            continue; /* being made, or failed from this source */
        if (public_present(a->cfg->data_dir, name, have, sizeof(have), NULL) == 1 &&
            strcmp(have, source) == 0)
            continue;
        pthread_mutex_lock(&a->lock);
        json_object_set_new(
            a->datasets, name,
            json_pack("{s:s, s:s, s:s}", "source", source, "state", "building", "message", ""));
        pthread_mutex_unlock(&a->lock);
        struct public_job *job = xzalloc(sizeof(*job));
        job->agent = a;
        snprintf(job->name, sizeof(job->name), "%s", name);
        job->source = xstrdup(source);
        pthread_t t;
        if (pthread_create(&t, NULL, make_dataset, job) == 0) {
            pthread_detach(t);
        } else {
            make_dataset(job);
        }
    }
    /* datasets no longer published go, unless one is being made (what is in
     * DATA/public: a crash between the rename and its state file leaves a
     * directory without one) */
    cleanup_free char *dir = public_dir(a->cfg->data_dir);
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!public_name_valid(e->d_name) || named(wanted, e->d_name))
            continue;
        pthread_mutex_lock(&a->lock);
        bool busy = json_object_get(a->datasets, e->d_name) != NULL;
        pthread_mutex_unlock(&a->lock);
        struct sl_error err = SL_ERROR_INIT;
        if (busy)
            continue;
        if (public_remove(a->cfg->data_dir, e->d_name, &err) < 0)
            log_error("agent: dataset %s: %s", e->d_name, err.message);
        else
            log_info("agent: dataset %s removed", e->d_name);
    }
    pthread_mutex_lock(&a->lock);
    const char *name;
    json_t *v, *tmp;
    json_object_foreach_safe(a->datasets, tmp, name, v)
    {
        if (!named(wanted, name) &&
            strcmp(json_string_value(json_object_get(v, "state")), "failed") == 0)
            json_object_del(a->datasets, name);
    }
    pthread_mutex_unlock(&a->lock);
}

json_t *agent_public_report(struct agent *a)
{
    cleanup_free char *state = xasprintf("%s/public-state", a->cfg->data_dir);
    json_t *out = json_array();
    cleanup_dir DIR *d = opendir(state);
    struct dirent *e;

    pthread_mutex_lock(&a->lock);
    while (d && (e = readdir(d))) {
        uint64_t size = 0;
        if (!public_name_valid(e->d_name) || json_object_get(a->datasets, e->d_name) ||
            public_present(a->cfg->data_dir, e->d_name, NULL, 0, &size) != 1)
            continue;
        json_array_append_new(out,
                              json_pack("{s:s, s:s, s:s, s:I}", "name", e->d_name, "state", "ready",
                                        "message", "", "size_bytes", (json_int_t)size));
    }
    const char *name;
    json_t *v;
    json_object_foreach(a->datasets, name, v)
    {
        json_array_append_new(out, json_pack("{s:s, s:O, s:O, s:I}", "name", name, "state",
                                             json_object_get(v, "state"), "message",
                                             json_object_get(v, "message"), "size_bytes",
                                             (json_int_t)0));
    }
    pthread_mutex_unlock(&a->lock);
    return out;
}
