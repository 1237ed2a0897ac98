/* The heartbeat: what the host has, posted to suanlid after every pass
 * that acted and at the interval suanlid asks for otherwise. */
#include "agent-internal.h"
#include "activity.h"
#include "inventory.h"
#include "storage.h"
#include "transfer.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <pthread.h>

int agent_heartbeat(struct agent *a, json_t *desired, struct sl_error *err)
{
    cleanup_json json_t *inv = inventory_json(&a->gpus, a->cfg->data_dir, AGENT_VERSION, err);
    cleanup_json json_t *report = json_array();
    cleanup_json json_t *out = NULL;
    size_t i;
    json_t *d;

    if (!inv)
        return -1;
    json_array_foreach(json_object_get(desired, "instances"), i, d)
    {
        json_t *rep = agent_instance_report(a, d); /* NULL: a worker has it */
        if (rep) {
            transfer_report(a->cfg->data_dir, d, rep); /* a copy here (transfer.h) */
            json_array_append_new(report, rep);
        }
    }
    /* the revision of the desired state that was converged to */
    int64_t revision = json_integer_value(json_object_get(desired, "revision"));
    cleanup_json json_t *body =
        json_pack("{s:O, s:I, s:O, s:o}", "inventory", inv, "revision", (json_int_t)revision,
                  "instances", report, "images", agent_images_report(a));
    /* where this host serves disk copies for clones (transfer.h) */
    json_object_set_new(body, "transfer_port", json_integer(transfer_server_port()));
    /* the public datasets here (public-data.h) */
    json_object_set_new(body, "datasets", agent_public_report(a));
    /* the use of the file storage mounted here (storage.h) */
    json_t *storage = json_object_get(desired, "storage");
    if (storage)
        json_object_set_new(body, "storage", storage_report(a->cfg->data_dir, storage));
    /* whether it serves the browser's terminal: not without nginx, nor in a
     * chroot (agent.c) */
    json_object_set_new(body, "terminals", json_boolean(a->terminal != NULL));
    /* for the idle stop: SSH sessions and GPU use of what runs; an open
     * terminal (terminal.h) is a session as an SSH one is */
    json_t *activity = activity_report(&a->rt, &a->gpus, json_object_get(desired, "instances"));
    json_t *item;
    json_array_foreach(activity, i, item)
    {
        unsigned open = terminal_open(a->terminal, json_string_value(json_object_get(item, "id")));
        if (open)
            json_object_set_new(
                item, "ssh_sessions",
                json_integer(json_integer_value(json_object_get(item, "ssh_sessions")) + open));
    }
    json_object_set_new(body, "activity", activity);
    /* the instances' samples since the last heartbeat (metrics.h); kept
     * for the next one when this one fails */
    json_t *samples = metrics_take(a->metrics);
    if (samples)
        json_object_set(body, "metrics", samples);
    cleanup_free char *path = xasprintf("/v1/nodes/%s/heartbeat", a->node_id);
    int rc = sl_client_request(&a->client, "POST", path, body, NULL, &out, err);
    metrics_sent(a->metrics, samples, rc == 0);
    if (rc < 0)
        return -1;
    int64_t hb = json_integer_value(json_object_get(out, "heartbeat_interval_seconds"));
    if (hb > 0) {
        pthread_mutex_lock(&a->lock);
        a->heartbeat_s = hb;
        pthread_mutex_unlock(&a->lock);
    }
    return 0;
}
