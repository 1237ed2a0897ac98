/* Images the desired state names and the host lacks: each fetched (an
 * archive an admin uploaded to suanlid) or built (a recipe, mmdebstrap) in
 * a thread of its own, so the loop goes on converging meanwhile; and the
 * images reported back. */
#include "agent-internal.h"
#include "fsutil.h"
#include "image-import.h"
#include "image.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct build_job {
    struct agent *agent;
    char name[IMAGE_NAME_MAX + 1];
    char sha256[65]; /* an uploaded archive to fetch, else "" (build the recipe) */
    char recipe[32];
    char source[80]; /* "upload:SHA256" or "recipe:NAME": what a failure was of */
};

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
    rc = sl_client_download(&c, path, file, got, err);
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

void agent_images_converge(struct agent *a, json_t *wanted)
{
    size_t i;
    json_t *w;

    forget_failures(a, wanted);
    json_array_foreach(wanted, i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        struct image img = { 0 };
        if (!name || !image_name_valid(name))
            continue;
        if (image_load(a->cfg->data_dir, name, &img, NULL) == 0) {
            image_release(&img);
            continue;
        }
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
        const char *recipe = json_string_value(json_object_get(w, "recipe"));
        const char *sha = json_string_value(json_object_get(w, "sha256"));
        job->agent = a;
        snprintf(job->name, sizeof(job->name), "%s", name);
        if (recipe && strcmp(recipe, "upload") == 0 && sha && strlen(sha) == 64)
            snprintf(job->sha256, sizeof(job->sha256), "%s", sha);
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
