#include "activity.h"
#include "fsutil.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP_ESTABLISHED 1
#define PROC_NET_MAX    (8 << 20)

unsigned activity_count_established(const char *text, unsigned port)
{
    unsigned n = 0;

    /* "  sl  local_address rem_address   st ...": the first line is the
     * header; addresses are HEX:PORT in hex, st is the state in hex */
    for (const char *line = text ? strchr(text, '\n') : NULL; line && line[1];
         line = strchr(line + 1, '\n')) {
        char local[64], remote[64];
        unsigned state;
        if (sscanf(line + 1, " %*s %63s %63s %x", local, remote, &state) != 3)
            continue;
        const char *colon = strrchr(local, ':');
        if (!colon || state != TCP_ESTABLISHED)
            continue;
        char *end;
        unsigned long p = strtoul(colon + 1, &end, 16);
        if (*end == '\0' && p == port)
            n++;
    }
    return n;
}

unsigned activity_count_sessions(const char *text, unsigned desktop_port)
{
    return activity_count_established(text, 22) +
           (desktop_port ? activity_count_established(text, desktop_port) : 0);
}

/* The port of the instance's desktop (a port whose app is "desktop"), or 0. */
static unsigned desktop_port(json_t *instance)
{
    size_t i;
    json_t *p;

    json_array_foreach(json_object_get(instance, "ports"), i, p)
    {
        const char *app = json_string_value(json_object_get(p, "app"));
        if (app && strcmp(app, "desktop") == 0)
            return (unsigned)json_integer_value(json_object_get(p, "port"));
    }
    return 0;
}

static unsigned ssh_sessions(pid_t pid, unsigned desktop)
{
    unsigned n = 0;
    static const char *const files[] = { "tcp", "tcp6" };

    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        cleanup_free char *path = xasprintf("/proc/%d/net/%s", (int)pid, files[i]);
        cleanup_free char *text = fs_read_file(path, PROC_NET_MAX, NULL, NULL);
        n += activity_count_sessions(text, desktop);
    }
    return n;
}

json_t *activity_report(const struct runtime *rt, struct gpu_source *gpus, json_t *instances)
{
    struct gpu_usage usage[GPU_MAX];
    size_t n_usage = 0, i;
    json_t *d, *out = json_array();
    /* utilisation means something only for real GPUs */
    bool real = gpu_host_inventory() != NULL && gpus->ops && gpus->ops->usage &&
                gpus->ops->usage(gpus->state, usage, &n_usage, NULL) == 0;

    json_array_foreach(instances, i, d)
    {
        const char *id = json_string_value(json_object_get(d, "id"));
        const char *desired = json_string_value(json_object_get(d, "desired"));
        struct runtime_state rs;
        if (!id || !desired || strcmp(desired, "running") != 0 ||
            rt->ops->state(rt, id, &rs, NULL) < 0 || rs.status != RUNTIME_RUNNING || rs.pid <= 0)
            continue;
        json_t *item = json_pack("{s:s, s:I}", "id", id, "ssh_sessions",
                                 (json_int_t)ssh_sessions(rs.pid, desktop_port(d)));
        size_t k;
        json_t *g;
        int busiest = -1;
        json_array_foreach(json_object_get(d, "gpus"), k, g)
        {
            for (size_t u = 0; real && u < n_usage; u++)
                if (usage[u].index == (unsigned)json_integer_value(g) &&
                    (int)usage[u].gpu_percent > busiest)
                    busiest = (int)usage[u].gpu_percent;
        }
        if (busiest >= 0)
            json_object_set_new(item, "gpu_percent", json_integer(busiest > 100 ? 100 : busiest));
        json_array_append_new(out, item);
    }
    return out;
}
