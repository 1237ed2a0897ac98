/* Simulated GPUs: a stand-in for hardware a development or demo host lacks.
 * They are named after a catalog model and reported with simulated=true, so
 * the market, the node list and every instance show them as such. */
#include "gpu.h"

#include "../lib/xalloc.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sim {
    unsigned count;
    char model[GPU_NAME_MAX];
};

static int sim_inventory(void *state, struct gpu_inventory *inv, struct sl_error *err)
{
    struct sim *s = state;
    (void)err;

    memset(inv, 0, sizeof(*inv));
    for (unsigned i = 0; i < s->count; i++) {
        struct gpu_info *g = &inv->gpus[i];
        g->index = i;
        g->minor = i;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-SIMULATED-%02u", i);
        snprintf(g->name, sizeof(g->name), "%s", s->model);
        g->vram_mib = 24576;
        g->simulated = true;
    }
    inv->n = s->count;
    snprintf(inv->driver_version, sizeof(inv->driver_version), "simulated");
    snprintf(inv->cuda_version, sizeof(inv->cuda_version), "simulated");
    return 0;
}

/* Idle: nothing runs on a GPU that is not there. */
static int sim_usage(void *state, struct gpu_usage *out, size_t *n, struct sl_error *err)
{
    struct sim *s = state;
    (void)err;

    for (unsigned i = 0; i < s->count; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].index = i;
        out[i].total_mib = 24576;
        out[i].temperature_c = -1;
        out[i].power_mw = -1;
    }
    *n = s->count;
    return 0;
}

static void sim_release(void *state)
{
    free(state);
}

static const struct gpu_ops gpu_sim_ops = {
    .name = "simulated",
    .inventory = sim_inventory,
    .usage = sim_usage,
    .release = sim_release,
};

int gpu_sim_open(const char *spec, struct gpu_source *src, struct sl_error *err)
{
    const char *colon = strchr(spec, ':');
    char *end;
    unsigned long n = strtoul(spec, &end, 10);

    if (!colon || end != colon || n < 1 || n > GPU_MAX || !colon[1] ||
        strlen(colon + 1) >= GPU_NAME_MAX)
        return sl_fail(err, SL_E_INVALID, "invalid_config",
                       "--simulate-gpus takes COUNT:MODEL with 1 to %d GPUs of a catalog model, "
                       "such as \"8:RTX 4090\"; got '%s'",
                       GPU_MAX, spec);
    struct sim *s = xzalloc(sizeof(*s));
    s->count = (unsigned)n;
    snprintf(s->model, sizeof(s->model), "%s", colon + 1);
    src->ops = &gpu_sim_ops;
    src->state = s;
    return 0;
}
