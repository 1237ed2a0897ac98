#include "series.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct sl_series sl_series_base[SL_SERIES_BASE] = {
    { "cpu_cores", "cores", 1000, "cpu_cores", NULL, "CPU used, in cores." },
    { "cpu_share", "ratio", 10000, "cpu_share_ratio", NULL,
      "CPU used as a fraction of the instance's CPU quota (1: all of it)." },
    { "memory_used_bytes", "bytes", 1, "memory_used_bytes", NULL,
      "Memory used, page cache that can be dropped at once aside." },
    { "memory_limit_bytes", "bytes", 1, "memory_limit_bytes", NULL,
      "The instance's memory limit." },
    { "pids", "count", 1, "pids", NULL, "Processes and threads." },
    { "system_disk_used_bytes", "bytes", 1, "disk_used_bytes", "disk=\"system\"",
      "Bytes used on the disk." },
    { "system_disk_size_bytes", "bytes", 1, "disk_size_bytes", "disk=\"system\"",
      "Size of the disk's file system." },
    { "data_disk_used_bytes", "bytes", 1, "disk_used_bytes", "disk=\"data\"",
      "Bytes used on the disk." },
    { "data_disk_size_bytes", "bytes", 1, "disk_size_bytes", "disk=\"data\"",
      "Size of the disk's file system." },
    { "disk_read_bytes_per_second", "bytes/s", 1, "disk_read_bytes_per_second", NULL,
      "Bytes read from both disks per second." },
    { "disk_write_bytes_per_second", "bytes/s", 1, "disk_write_bytes_per_second", NULL,
      "Bytes written to both disks per second." },
    { "network_rx_bytes_per_second", "bytes/s", 1, "network_receive_bytes_per_second", NULL,
      "Bytes received per second." },
    { "network_tx_bytes_per_second", "bytes/s", 1, "network_transmit_bytes_per_second", NULL,
      "Bytes sent per second." },
};

const struct sl_series sl_series_gpu[SL_SERIES_PER_GPU] = {
    { "utilization_percent", "percent", 100, "gpu_utilization_percent", NULL,
      "Of the last sample period, the time the GPU was busy (NVML)." },
    { "memory_used_bytes", "bytes", 1, "gpu_memory_used_bytes", NULL, "GPU memory used (NVML)." },
    { "temperature_celsius", "celsius", 1, "gpu_temperature_celsius", NULL,
      "The GPU core's temperature (NVML)." },
    { "power_watts", "watts", 1000, "gpu_power_watts", NULL, "Power drawn by the GPU (NVML)." },
};

int sl_series_position(const char *name)
{
    for (int i = 0; i < SL_SERIES_BASE; i++)
        if (strcmp(name, sl_series_base[i].name) == 0)
            return i;
    if (strncmp(name, "gpu", 3) != 0)
        return -1;
    char *end;
    unsigned long k = strtoul(name + 3, &end, 10);
    if (end == name + 3 || *end != '_' || k >= SL_SERIES_GPU_MAX ||
        (name[3] == '0' && end > name + 4))
        return -1;
    for (int j = 0; j < SL_SERIES_PER_GPU; j++)
        if (strcmp(end + 1, sl_series_gpu[j].name) == 0)
            return SL_SERIES_BASE + (int)k * SL_SERIES_PER_GPU + j;
    return -1;
}

const struct sl_series *sl_series_at(int pos, unsigned *gpu)
{
    *gpu = 0;
    if (pos < 0 || pos >= SL_SERIES_MAX)
        return NULL;
    if (pos < SL_SERIES_BASE)
        return &sl_series_base[pos];
    *gpu = (unsigned)(pos - SL_SERIES_BASE) / SL_SERIES_PER_GPU;
    return &sl_series_gpu[(pos - SL_SERIES_BASE) % SL_SERIES_PER_GPU];
}

void sl_series_name(int pos, char *out)
{
    unsigned gpu;
    const struct sl_series *s = sl_series_at(pos, &gpu);

    if (!s)
        snprintf(out, SL_SERIES_NAME_MAX, "?");
    else if (pos < SL_SERIES_BASE)
        snprintf(out, SL_SERIES_NAME_MAX, "%s", s->name);
    else
        snprintf(out, SL_SERIES_NAME_MAX, "gpu%u_%s", gpu, s->name);
}

/* Label values here are ids (letters, digits, '-'): escaped anyway. */
static void add_label_value(struct sl_buf *out, const char *v)
{
    for (; v && *v; v++) {
        if (*v == '\\' || *v == '"')
            sl_buf_addf(out, "\\%c", *v);
        else if (*v == '\n')
            sl_buf_adds(out, "\\n");
        else
            sl_buf_add(out, v, 1);
    }
}

static void render_family(struct sl_buf *out, const struct sl_series *fam, bool gpu_family,
                          const struct sl_series_latest *items, size_t n)
{
    bool header = false;

    for (size_t i = 0; i < n; i++) {
        for (int pos = 0; pos < (int)items[i].n; pos++) {
            unsigned gpu;
            const struct sl_series *s = sl_series_at(pos, &gpu);
            if (!s || strcmp(s->family, fam->family) != 0 ||
                (pos >= SL_SERIES_BASE) != gpu_family || isnan(items[i].values[pos]))
                continue;
            if (!header)
                sl_buf_addf(out, "# HELP suanli_instance_%s %s\n# TYPE suanli_instance_%s gauge\n",
                            fam->family, fam->help, fam->family);
            header = true;
            sl_buf_addf(out, "suanli_instance_%s{instance_id=\"", s->family);
            add_label_value(out, items[i].instance_id);
            sl_buf_adds(out, "\",renter=\"");
            add_label_value(out, items[i].renter);
            sl_buf_adds(out, "\"");
            if (gpu_family)
                sl_buf_addf(out, ",gpu=\"%u\"", gpu);
            if (s->label)
                sl_buf_addf(out, ",%s", s->label);
            sl_buf_addf(out, "} %.10g\n", items[i].values[pos]);
        }
    }
}

void sl_series_render_prom(struct sl_buf *out, const struct sl_series_latest *items, size_t n)
{
    for (int i = 0; i < SL_SERIES_BASE; i++) {
        bool seen = false; /* a family shared by two series (disks) once */
        for (int j = 0; j < i; j++)
            seen = seen || strcmp(sl_series_base[j].family, sl_series_base[i].family) == 0;
        if (!seen)
            render_family(out, &sl_series_base[i], false, items, n);
    }
    for (int j = 0; j < SL_SERIES_PER_GPU; j++)
        render_family(out, &sl_series_gpu[j], true, items, n);
}
