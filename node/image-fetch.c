/* Images the desired state names and the host lacks: each fetched (an
 * archive an admin uploaded to suanlid) or built (a recipe, mmdebstrap) in
 * a thread of its own, so the loop goes on converging meanwhile; and the
 * images reported back. */
#include "agent-internal.h"
#include "fsutil.h"
#include "disk.h"
#include "image-capture.h"
#include "image-import.h"
#include "image-save.h"
#include "image.h"
#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct build_job {
    struct agent *agent;
    char name[IMAGE_NAME_MAX + 1];
    char sha256[65]; /* an uploaded archive to fetch, else "" (build the recipe) */
    char recipe[32];
    char parent[IMAGE_NAME_MAX + 1]; /* recipe "layer": the image it is saved over */
    char source[80]; /* "upload:SHA256", "layer:SHA256" or "recipe:NAME": what a failure was of */
};

/* Tries of a download before the image is failed on this host: the last
 * waits 2^(FETCH_TRIES-2) s after the one before. */
#define FETCH_TRIES 6

/* Fetches an archive an admin uploaded to suanlid, checks its digest and
 * imports it (image-import.h: rootfs tarball, docker save or OCI layout). */
static int fetch_and_import(struct agent *a, const struct build_job *job, struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/downloads", a->cfg->data_dir);
    cleanup_free char *file = xasprintf("%s/%s.part", dir, job->sha256);
    cleanup_free char *path = xasprintf("/v1/nodes/%s/uploads/%s", a->node_id, job->sha256);
    struct sl_client c;
    char got[65];
    int rc;

    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    sl_client_init(&c, a->cfg->server, a->token); /* a handle of its own: another thread */
    /* a download cut short (the network, suanlid restarting, this agent
     * stopped) goes on from where it was: the .part file stays, and the
     * next try, or the next agent, asks for the rest */
    for (unsigned attempt = 0, pause = 1;; attempt++, pause *= 2) {
        uint64_t kept = 0;
        rc = sl_client_download_resume(&c, path, file, got, &kept, err);
        if (rc == 0 && kept)
            log_info("agent: image %s: resumed its download after %llu bytes", job->name,
                     (unsigned long long)kept);
        if (rc == 0 || err->kind != SL_E_UNAVAILABLE || attempt >= FETCH_TRIES - 1 || *a->stop)
            break;
        log_warn("agent: image %s: %s; trying again in %u s", job->name, err->message, pause);
        sl_error_clear(err);
        sleep(pause);
    }
    sl_client_release(&c);
    if (rc < 0)
        return -1;
    if (strcmp(got, job->sha256) != 0) {
        unlink(file);
        return sl_fail(err, SL_E_INVALID, "bad_digest",
                       "the archive arrived with SHA-256 %s, not %s: upload it again", got,
                       job->sha256);
    }
    struct image_limits limits;
    agent_image_limits(a->cfg, &limits);
    if (strcmp(job->recipe, "layer") == 0) /* a saved image (image-save.h) */
        rc = image_save_stack(a->cfg->data_dir, job->name, file, job->sha256, job->parent, &limits,
                              err);
    else
        rc = image_import(a->cfg->data_dir, file, job->name, &limits, err);
    unlink(file);
    return rc;
}

static void *build_image(void *p)
{
    struct build_job *job = p;
    struct agent *a = job->agent;
    struct sl_error err = SL_ERROR_INIT;

    int rc;
    if (job->sha256[0]) {
        log_info("agent: fetching image %s (%.12s)", job->name, job->sha256);
        rc = fetch_and_import(a, job, &err);
    } else {
        log_info("agent: building image %s with mmdebstrap", job->name);
        rc = image_build_recipe(a->cfg->data_dir, job->name, job->recipe, "bookworm", &err);
    }
    pthread_mutex_lock(&a->lock);
    if (rc < 0) {
        json_object_set_new(a->builds, job->name,
                            json_pack("{s:s, s:s, s:s}", "state", "failed", "message", err.message,
                                      "source", job->source));
        log_error("agent: image %s: %s", job->name, err.message);
    } else {
        json_object_del(a->builds, job->name);
        log_info("agent: image %s ready", job->name);
    }
    pthread_mutex_unlock(&a->lock);
    free(job);
    return NULL;
}

/* What the desired state asks of an image: "upload:SHA256" or
 * "recipe:NAME". */
static void wanted_source(json_t *w, char *out, size_t size)
{
    const char *recipe = json_string_value(json_object_get(w, "recipe"));
    const char *sha = json_string_value(json_object_get(w, "sha256"));

    if (recipe && strcmp(recipe, "upload") == 0 && sha)
        snprintf(out, size, "upload:%s", sha);
    else if (recipe && strcmp(recipe, "layer") == 0 && sha)
        snprintf(out, size, "layer:%s", sha);
    else
        snprintf(out, size, "recipe:%s", recipe ? recipe : "base");
}

/* Forgets the failures of images no longer wanted, or now wanted from
 * another archive or recipe (an admin deleted the image and imported
 * another under its name): those are tried afresh, and the hosts' report
 * stops naming the old failure. A failure of what is still wanted stays,
 * never retried in a loop. */
static void forget_failures(struct agent *a, json_t *wanted)
{
    const char *name;
    json_t *v, *w;
    void *tmp;
    size_t i;

    pthread_mutex_lock(&a->lock);
    json_object_foreach_safe(a->builds, tmp, name, v)
    {
        const char *source = json_string_value(json_object_get(v, "source"));
        char want[80] = "";
        if (strcmp(json_string_value(json_object_get(v, "state")), "failed") != 0)
            continue;
        json_array_foreach(wanted, i, w)
        {
            const char *n = json_string_value(json_object_get(w, "name"));
            if (n && strcmp(n, name) == 0)
                wanted_source(w, want, sizeof(want));
        }
        if (!want[0] || !source || strcmp(source, want) != 0)
            json_object_del(a->builds, name);
    }
    pthread_mutex_unlock(&a->lock);
}

struct keep {
    struct agent *a;
    json_t *wanted;
};

/* A saved image is kept while wanted, or while this host is making it. */
static bool wanted_name(void *ctx, const char *name)
{
    struct keep *k = ctx;
    json_t *w;
    size_t i;

    pthread_mutex_lock(&k->a->lock);
    bool making = json_object_get(k->a->builds, name) != NULL;
    pthread_mutex_unlock(&k->a->lock);
    if (making)
        return true;
    json_array_foreach(k->wanted, i, w)
    {
        const char *n = json_string_value(json_object_get(w, "name"));
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

void agent_images_converge(struct agent *a, json_t *wanted)
{
    size_t i;
    json_t *w;

    forget_failures(a, wanted);
    /* saved images deleted by their owner go, with their own layers; a
     * name saved again over other content is fetched anew */
    if (json_is_array(wanted)) {
        struct keep k = { a, wanted };
        image_saved_gc(a->cfg->data_dir, wanted_name, &k);
    }
    json_array_foreach(wanted, i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        const char *recipe = json_string_value(json_object_get(w, "recipe"));
        const char *sha = json_string_value(json_object_get(w, "sha256"));
        const char *parent = json_string_value(json_object_get(w, "parent"));
        bool layer = recipe && strcmp(recipe, "layer") == 0;
        struct image img = { 0 };
        if (!name || !image_name_valid(name))
            continue;
        if (layer && (!sha || strlen(sha) != 64 || !parent || !image_name_valid(parent)))
            continue;
        if (layer && image_saved_other(a->cfg->data_dir, name, sha)) {
            cleanup_free char *stale = xasprintf("%s/images/%s.json", a->cfg->data_dir, name);
            unlink(stale); /* an earlier image of that name, deleted */
        }
        if (image_load(a->cfg->data_dir, name, &img, NULL) == 0) {
            image_release(&img);
            continue;
        }
        /* a saved image waits for its parent on this host */
        if (layer && image_load(a->cfg->data_dir, parent, &img, NULL) < 0)
            continue;
        image_release(&img);
        pthread_mutex_lock(&a->lock);
        bool known = json_object_get(a->builds, name) != NULL;
        char source[80];
        wanted_source(w, source, sizeof(source));
        if (!known)
            json_object_set_new(a->builds, name,
                                json_pack("{s:s, s:s}", "state", "building", "source", source));
        pthread_mutex_unlock(&a->lock);
        if (known)
            continue;
        struct build_job *job = xzalloc(sizeof(*job));
        job->agent = a;
        snprintf(job->name, sizeof(job->name), "%s", name);
        if (recipe && (strcmp(recipe, "upload") == 0 || layer) && sha && strlen(sha) == 64)
            snprintf(job->sha256, sizeof(job->sha256), "%s", sha);
        if (layer)
            snprintf(job->parent, sizeof(job->parent), "%s", parent);
        /* a recipe this node does not know fails the build with its name */
        snprintf(job->recipe, sizeof(job->recipe), "%s", recipe ? recipe : "base");
        wanted_source(w, job->source, sizeof(job->source));
        pthread_t t;
        pthread_create(&t, NULL, build_image, job);
        pthread_detach(t);
    }
}

static bool reported_ready(json_t *list, const char *name)
{
    size_t i;
    json_t *e;

    json_array_foreach(list, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            return true;
    }
    return false;
}

json_t *agent_images_report(struct agent *a)
{
    cleanup_free char *dir = xasprintf("%s/images", a->cfg->data_dir);
    json_t *out = json_array();
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;

    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        struct image img = { 0 };
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *name = xstrndup(e->d_name, n - 5);
        if (image_load(a->cfg->data_dir, name, &img, NULL) < 0)
            continue;
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "name", name,
                                             "state", "ready", "os", img.os, "python", img.python,
                                             "cuda", img.cuda, "framework", img.framework,
                                             "size_bytes", (json_int_t)img.size_bytes));
        image_release(&img);
    }
    pthread_mutex_lock(&a->lock);
    const char *name;
    json_t *v;
    json_object_foreach(a->builds, name, v)
    {
        const char *message = json_string_value(json_object_get(v, "message"));
        if (reported_ready(out, name))
            continue; /* usable now, whatever a rebuild in progress does */
        /* with what it was made from: suanlid ignores a report of an image
         * since deleted and made again from another archive */
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s}", "name", name, "state",
                                             json_string_value(json_object_get(v, "state")),
                                             "message", message ? message : "", "source",
                                             json_string_value(json_object_get(v, "source"))));
    }
    pthread_mutex_unlock(&a->lock);
    return out;
}

/* Saves this host captures (image-save.h): {image: true} while a thread
 * does. */
static pthread_mutex_t saves_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *saves_running;

struct save_job {
    struct agent *a;
    char image[IMAGE_NAME_MAX + 1], parent[IMAGE_NAME_MAX + 1], instance[SL_ID_MAX];
};

/* Captures the instance's overlay upper directory into dir/layer.tar. A
 * stopped instance's system disk is mounted aside for it (the instance's
 * own mount point is its start's); a running one's is read where it is,
 * after its file system is synced. */
static int save_capture(struct agent *a, const struct save_job *job, const char *dir,
                        const char *tar, char digest[IMAGE_DIGEST_HEX],
                        struct image_capture_stats *stats, struct sl_error *err)
{
    cleanup_free char *inst = xasprintf("%s/instances/%s", a->cfg->data_dir, job->instance);
    cleanup_free char *sys = xasprintf("%s/sys", inst);
    cleanup_free char *system = xasprintf("%s/system.img", inst);
    cleanup_free char *mnt = xasprintf("%s/mnt", dir);
    int mounted = disk_mounted(sys, NULL, 0, NULL, 0, err);

    if (mounted < 0)
        return -1;
    if (mounted) {
        cleanup_free char *upper = xasprintf("%s/upper", sys);
        cleanup_close int fd = open(upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || syncfs(fd) < 0)
            return sl_fail_errno(err, "unable to sync '%s'", upper);
        return image_capture(upper, tar, digest, stats, err);
    }
    if (access(system, F_OK) < 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_disk",
                       "instance %s has no system disk on this host", job->instance);
    if (disk_mount(system, mnt, err) < 0)
        return -1;
    cleanup_free char *upper = xasprintf("%s/upper", mnt);
    int rc = access(upper, F_OK) < 0
                 ? sl_fail(err, SL_E_CONFLICT, "never_started",
                           "instance %s never started: it has nothing to save over its image",
                           job->instance)
                 : image_capture(upper, tar, digest, stats, err);
    struct sl_error e = SL_ERROR_INIT;
    if (disk_unmount(mnt, &e) < 0)
        log_warn("agent: save %s: %s", job->image, e.message);
    return rc;
}

static void *save_image(void *p)
{
    struct save_job *job = p;
    struct agent *a = job->a;
    struct sl_error err = SL_ERROR_INIT;
    char digest[IMAGE_DIGEST_HEX];
    struct image_capture_stats stats;
    cleanup_free char *dir = xasprintf("%s/saves/%s", a->cfg->data_dir, job->image);
    cleanup_free char *tar = xasprintf("%s/layer.tar", dir);
    cleanup_free char *mnt = xasprintf("%s/mnt", dir);
    cleanup_free char *ename = sl_client_escape(job->image);
    struct sl_client c;
    int rc;

    log_info("agent: saving instance %s as image %s", job->instance, job->image);
    sl_client_init(&c, a->cfg->server, a->token); /* a handle of its own: another thread */
    c.timeout_s = 3600;
    /* a mount left by an agent stopped mid-save */
    rc = disk_unmount(mnt, &err) < 0 || fs_mkdir_p(dir, 0700, &err) < 0
             ? -1
             : save_capture(a, job, dir, tar, digest, &stats, &err);
    if (rc == 0) {
        log_info("agent: image %s: layer %.12s, %llu bytes, %llu entries (%llu left out, %llu "
                 "set-id bits dropped)",
                 job->image, digest, (unsigned long long)stats.bytes,
                 (unsigned long long)stats.entries, (unsigned long long)stats.skipped,
                 (unsigned long long)stats.stripped);
        cleanup_free char *source = xasprintf("layer:%s", digest);
        pthread_mutex_lock(&a->lock); /* the fetch leaves it to this thread */
        json_object_set_new(a->builds, job->image,
                            json_pack("{s:s, s:s}", "state", "building", "source", source));
        pthread_mutex_unlock(&a->lock);
        cleanup_free char *path = xasprintf("/v1/nodes/%s/saves/%s/layer", a->node_id, ename);
        json_t *out = NULL;
        rc = sl_client_upload(&c, "PUT", path, tar, NULL, NULL, &out, &err);
        json_decref(out);
        if (rc < 0) {
            pthread_mutex_lock(&a->lock);
            json_object_del(a->builds, job->image);
            pthread_mutex_unlock(&a->lock);
        }
    }
    if (rc < 0) {
        log_error("agent: save of image %s failed: %s", job->image, err.message);
        cleanup_free char *path = xasprintf("/v1/nodes/%s/saves/%s/failure", a->node_id, ename);
        cleanup_json json_t *body = json_pack("{s:s}", "message", err.message);
        struct sl_error e = SL_ERROR_INIT;
        /* a fresh handle: an upload cut short leaves its own in an upload's
         * settings */
        sl_client_release(&c);
        sl_client_init(&c, a->cfg->server, a->token);
        c.timeout_s = 60;
        json_t *answer = NULL;
        if (sl_client_request(&c, "POST", path, body, NULL, &answer, &e) < 0)
            log_warn("agent: unable to report the failed save of %s: %s", job->image, e.message);
        json_decref(answer);
    } else {
        /* this host has the layer already: it stacks it without fetching */
        struct image_limits limits;
        agent_image_limits(a->cfg, &limits);
        sl_error_clear(&err);
        rc =
            image_save_stack(a->cfg->data_dir, job->image, tar, digest, job->parent, &limits, &err);
        pthread_mutex_lock(&a->lock);
        if (rc < 0)
            json_object_set_new(a->builds, job->image,
                                json_pack("{s:s, s:s, s:s}", "state", "failed", "message",
                                          err.message, "source", "layer:"));
        else
            json_object_del(a->builds, job->image);
        pthread_mutex_unlock(&a->lock);
        if (rc < 0)
            log_error("agent: image %s: %s", job->image, err.message);
        else
            log_info("agent: image %s saved and ready", job->image);
    }
    sl_client_release(&c);
    unlink(tar);
    rmdir(mnt);
    rmdir(dir);
    pthread_mutex_lock(&saves_lock);
    json_object_del(saves_running, job->image);
    pthread_mutex_unlock(&saves_lock);
    pthread_mutex_lock(&a->lock);
    a->kicked = true; /* report at once */
    a->acted = true;
    pthread_cond_broadcast(&a->wake);
    pthread_mutex_unlock(&a->lock);
    free(job);
    return NULL;
}

void agent_saves_converge(struct agent *a, json_t *saves)
{
    size_t i;
    json_t *s;

    json_array_foreach(saves, i, s)
    {
        const char *image = json_string_value(json_object_get(s, "image"));
        const char *instance = json_string_value(json_object_get(s, "instance"));
        const char *parent = json_string_value(json_object_get(s, "parent"));
        if (!image || !instance || !parent || !image_name_valid(image) ||
            !image_name_valid(parent) || !sl_id_valid(instance, "i-"))
            continue;
        pthread_mutex_lock(&saves_lock);
        if (!saves_running)
            saves_running = json_object();
        bool known = json_object_get(saves_running, image) != NULL;
        if (!known)
            json_object_set_new(saves_running, image, json_true());
        pthread_mutex_unlock(&saves_lock);
        if (known)
            continue;
        struct save_job *job = xzalloc(sizeof(*job));
        job->a = a;
        snprintf(job->image, sizeof(job->image), "%s", image);
        snprintf(job->parent, sizeof(job->parent), "%s", parent);
        snprintf(job->instance, sizeof(job->instance), "%s", instance);
        pthread_t t;
        pthread_create(&t, NULL, save_image, job);
        pthread_detach(t);
    }
}
