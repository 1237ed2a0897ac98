#include "inventory.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

static bool is_disk_file(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && strcmp(name + n - 4, ".img") == 0) ||
           (n > 8 && strcmp(name + n - 8, ".img.new") == 0);
}

/* The bytes the instance disk files (the sparse *.img of each instance
 * directory under DATA/instances) take on the file system now: with the free
 * bytes, what the host can hold for the disks it was promised. */
static uint64_t instance_disks_bytes(const char *data_dir)
{
    cleanup_free char *path = xasprintf("%s/instances", data_dir);
    cleanup_dir DIR *top = opendir(path);
    struct dirent *e;
    uint64_t total = 0;

    while (top && (e = readdir(top))) {
        if (e->d_name[0] == '.')
            continue;
        int fd = openat(dirfd(top), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        cleanup_dir DIR *inst = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *f;
        struct stat st;
        if (!inst && fd >= 0)
            close(fd);
        while (inst && (f = readdir(inst))) {
            if (is_disk_file(f->d_name) &&
                fstatat(dirfd(inst), f->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode))
                total += (uint64_t)st.st_blocks * 512;
        }
    }
    return total;
}

json_t *inventory_json(struct gpu_source *gpus, const char *data_dir, const char *agent_version,
                       struct sl_error *err)
{
    struct gpu_inventory inv;
    struct sysinfo si;
    struct statvfs vfs;
    uint64_t total = 0, avail = 0, avail_bytes = 0;

    if (gpus->ops->inventory(gpus->state, &inv, err) < 0)
        return NULL;
    sysinfo(&si);
    if (statvfs(data_dir, &vfs) == 0) {
        total = (uint64_t)vfs.f_blocks * vfs.f_frsize >> 30;
        avail_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        avail = avail_bytes >> 30;
    }
    json_t *list = json_array();
    for (size_t i = 0; i < inv.n; i++)
        json_array_append_new(
            list, json_pack("{s:I, s:s, s:s, s:I, s:b}", "index", (json_int_t)inv.gpus[i].index,
                            "uuid", inv.gpus[i].uuid, "name", inv.gpus[i].name, "vram_mib",
                            (json_int_t)inv.gpus[i].vram_mib, "simulated", inv.gpus[i].simulated));
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:o}", "cpu_cores",
                     (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "memory_mib",
                     (json_int_t)((uint64_t)si.totalram * si.mem_unit >> 20), "disk_total_gib",
                     (json_int_t)total, "disk_free_gib", (json_int_t)avail, "disk_free_bytes",
                     (json_int_t)avail_bytes, "instance_disks_bytes",
                     (json_int_t)instance_disks_bytes(data_dir), "driver_version",
                     inv.driver_version, "cuda_version", inv.cuda_version, "agent_version",
                     agent_version, "gpus", list);
}

void inventory_default_address(char *buf, size_t len)
{
    struct ifaddrs *ifs, *i;

    snprintf(buf, len, "127.0.0.1");
    if (getifaddrs(&ifs) < 0)
        return;
    for (i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        if ((ntohl(a.s_addr) >> 24) == 127 || strncmp(i->ifa_name, "suanli", 6) == 0 ||
            strncmp(i->ifa_name, "veth", 4) == 0)
            continue;
        inet_ntop(AF_INET, &a, buf, (socklen_t)len);
        break;
    }
    freeifaddrs(ifs);
}
