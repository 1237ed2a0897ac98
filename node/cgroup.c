#include "cgroup.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <string.h>

#define CGROUP_ROOT "/sys/fs/cgroup"

/* The value of the line "KEY N" in a flat-keyed cgroup file, or -1. */
static int64_t keyed_value(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[256];
    int64_t value = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        long long v;
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ' &&
            sscanf(line + klen + 1, "%lld", &v) == 1) {
            value = v;
            break;
        }
    }
    fclose(f);
    return value;
}

int64_t cgroup_oom_kills(const char *cgroup_path)
{
    /* v1 first: on a hybrid host the v2 mount holds no memory controller */
    cleanup_free char *v1 = xasprintf(CGROUP_ROOT "/memory%s/memory.oom_control", cgroup_path);
    int64_t n = keyed_value(v1, "oom_kill");
    if (n >= 0)
        return n;
    cleanup_free char *v2 = xasprintf(CGROUP_ROOT "%s/memory.events", cgroup_path);
    return keyed_value(v2, "oom_kill");
}
