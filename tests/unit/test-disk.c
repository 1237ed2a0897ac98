/* node/disk.c without root: reading mountinfo (escapes, stacked mounts,
 * exact paths), the size checks and the sparse file of disk_create (with
 * the real mkfs.ext4 on a file), and a disk no loop device holds. Mounting
 * needs root: node-smoke and the integration tests do it. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../node/disk.h"
#include "../../node/disk-spares.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Lines as the kernel writes them: optional fields up to "-", then the
 * type and source; a space in a path is \040. */
static const char mountinfo[] =
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "310 22 7:3 / /var/lib/suanli-node/instances/i-1/data rw,nosuid,nodev shared:150 - ext4 "
    "/dev/loop3 rw\n"
    "311 22 7:4 / /var/lib/suanli-node/instances/i-1/data2 rw shared:151 - ext4 /dev/loop4 rw\n"
    "312 22 7:5 / /srv/with\\040space rw shared:152 master:3 - ext4 /dev/loop\\0405 rw\n"
    "313 22 0:61 / /srv/broken rw shared:153\n"
    "314 310 0:62 / /var/lib/suanli-node/instances/i-1/data rw,nosuid - tmpfs tmpfs rw\n";

static int find(const char *path, char *src, size_t src_size, char *type, size_t type_size)
{
    FILE *f = fmemopen((void *)mountinfo, sizeof(mountinfo) - 1, "r");
    if (!f) {
        test_fail(__FILE__, __LINE__, "fmemopen failed");
        return -1;
    }
    int rc = disk_mountinfo_find(f, path, src, src_size, type, type_size);
    fclose(f);
    return rc;
}

TEST(disk_mountinfo_find_exact_path_and_top_mount)
{
    char src[64] = "", type[16] = "";

    CHECK_EQ_INT(find("/", src, sizeof(src), type, sizeof(type)), 1);
    CHECK_STR(src, "/dev/nvme0n1p2");
    CHECK_STR(type, "ext4");

    /* two mounts there: the one on top (the later line) answers */
    CHECK_EQ_INT(
        find("/var/lib/suanli-node/instances/i-1/data", src, sizeof(src), type, sizeof(type)), 1);
    CHECK_STR(src, "tmpfs");
    CHECK_STR(type, "tmpfs");

    CHECK_EQ_INT(
        find("/var/lib/suanli-node/instances/i-1/data2", src, sizeof(src), type, sizeof(type)), 1);
    CHECK_STR(src, "/dev/loop4");

    /* neither a prefix nor a longer path matches */
    CHECK_EQ_INT(find("/var/lib/suanli-node/instances/i-1", NULL, 0, NULL, 0), 0);
    CHECK_EQ_INT(find("/var/lib/suanli-node/instances/i-1/dat", NULL, 0, NULL, 0), 0);
    CHECK_EQ_INT(find("/var/lib/suanli-node/instances/i-1/data/x", NULL, 0, NULL, 0), 0);
}

TEST(disk_mountinfo_find_undoes_escapes)
{
    char src[64] = "", type[16] = "";

    CHECK_EQ_INT(find("/srv/with space", src, sizeof(src), type, sizeof(type)), 1);
    CHECK_STR(src, "/dev/loop 5");
    CHECK_STR(type, "ext4");
    CHECK_EQ_INT(find("/srv/with\\040space", NULL, 0, NULL, 0), 0);
}

TEST(disk_mountinfo_find_skips_a_line_without_a_type)
{
    char src[64] = "unchanged";

    CHECK_EQ_INT(find("/srv/broken", src, sizeof(src), NULL, 0), 0);
    CHECK_STR(src, "unchanged");
}

/* src and type are cut to their buffers, never overrun */
TEST(disk_mountinfo_find_small_buffers)
{
    char src[6], type[3];

    CHECK_EQ_INT(find("/", src, sizeof(src), type, sizeof(type)), 1);
    CHECK_STR(src, "/dev/");
    CHECK_STR(type, "ex");
}

/* the real /proc/self/mountinfo: /proc is proc, a fresh directory is not
 * a mount point, a missing path is not mounted (no error) */
TEST(disk_mounted_reads_this_process_mounts)
{
    struct sl_error err = SL_ERROR_INIT;
    char src[64] = "", type[16] = "";

    CHECK_EQ_INT(disk_mounted("/proc", src, sizeof(src), type, sizeof(type), &err), 1);
    CHECK_STR(type, "proc");
    CHECK_EQ_INT(disk_mounted(test_tmpdir(), NULL, 0, NULL, 0, &err), 0);
    CHECK_EQ_INT(disk_mounted(test_path("missing"), NULL, 0, NULL, 0, &err), 0);
}

TEST(disk_create_refuses_sizes_out_of_range)
{
    static const uint64_t bad[] = { 0, DISK_MAX_GIB + 1, UINT64_MAX >> 20, UINT64_MAX };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_error err = SL_ERROR_INIT;
        const char *path = test_path("bad.img");
        CHECK_EQ_INT(disk_create(path, bad[i], &err), -1);
        CHECK_EQ_INT(err.kind, SL_E_INVALID);
        CHECK_STR(err.code, "invalid_disk_size");
        CHECK_CONTAINS(err.message, "use 1..65536");
        CHECK(access(path, F_OK) != 0); /* nothing made */
    }
}

/* A 1 GiB disk is a 1 GiB sparse file holding ext4 (mkfs.ext4 on a file
 * needs no root), of which a few MiB are real; a second create of the same
 * path is a conflict and leaves the first alone; a disk no loop device
 * holds is found on none and removed. */
TEST(disk_create_sparse_file_then_remove)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *path = test_path("system.img");
    struct stat st;

    if (!CHECK_EQ_INT(disk_create(path, 1, &err), 0)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    if (!CHECK_EQ_INT(stat(path, &st), 0))
        return;
    CHECK_EQ_INT(st.st_size, 1LL << 30);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    CHECK((long long)st.st_blocks * 512 < (64LL << 20)); /* sparse */

    /* ext4's superblock magic 0xEF53 at byte 1024 + 56 */
    FILE *f = fopen(path, "rb");
    unsigned char magic[2] = { 0 };
    CHECK(f && fseek(f, 1024 + 56, SEEK_SET) == 0 && fread(magic, 1, 2, f) == 2);
    if (f)
        fclose(f);
    CHECK_EQ_INT(magic[0] | magic[1] << 8, 0xEF53);

    CHECK_EQ_INT(disk_create(path, 2, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "disk_exists");
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_size, 1LL << 30);

    char dev[64] = "";
    CHECK_EQ_INT(disk_find_loop(path, dev, sizeof(dev), &err), 0);
    CHECK_EQ_INT(disk_remove(path, &err), 0);
    CHECK(access(path, F_OK) != 0);
    CHECK_EQ_INT(disk_remove(path, &err), 0); /* gone already: fine */
}

static int spares_in(const char *dir, unsigned gib)
{
    int n = 0;
    for (unsigned seq = 0; seq < 64; seq++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/spare-disks/%u-%u.img", dir, gib, seq);
        n += access(path, F_OK) == 0;
    }
    return n;
}

static bool is_ext4(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char magic[2] = { 0 };
    bool ok = f && fseek(f, 1024 + 56, SEEK_SET) == 0 && fread(magic, 1, 2, f) == 2;
    if (f)
        fclose(f);
    return ok && (magic[0] | magic[1] << 8) == 0xEF53;
}

/* A start with no spare ready makes its own (0); one is made when asked
 * (once, however often), and the next start takes it (1): a whole ext4
 * disk, moved. A path that exists is never replaced; what a stop left half
 * made goes at init; the spares of other sizes make room, never more than
 * DISK_SPARES_MAX in all. */
TEST(disk_spares_are_taken_whole_and_made_again)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *data = test_path("spares-data");
    const char *first = test_path("spares-first.img");
    const char *second = test_path("spares-second.img");
    char half[512];

    CHECK_EQ_INT(mkdir(data, 0700), 0);
    CHECK_EQ_INT(disk_spares_init(data, &err), 0);
    snprintf(half, sizeof(half), "%s/spare-disks/1-40.img.new", data);
    FILE *f = fopen(half, "w");
    if (f)
        fclose(f);
    CHECK_EQ_INT(disk_spares_init(data, &err), 0);
    CHECK(access(half, F_OK) != 0);

    CHECK_EQ_INT(disk_spares_take(data, 1, first, &err), 0);
    disk_spares_wait();
    CHECK_EQ_INT(spares_in(data, 1), 0); /* none made until asked */
    disk_spares_refill(data, 1);
    disk_spares_refill(data, 1); /* one under way already */
    disk_spares_wait();
    CHECK_EQ_INT(spares_in(data, 1), 1);
    disk_spares_refill(data, 1); /* one ready already */
    disk_spares_wait();
    CHECK_EQ_INT(spares_in(data, 1), 1);
    CHECK_EQ_INT(disk_spares_take(data, 1, first, &err), 1);
    CHECK(is_ext4(first));
    CHECK_EQ_INT(spares_in(data, 1), 0);
    disk_spares_refill(data, 1);
    disk_spares_wait();
    CHECK_EQ_INT(spares_in(data, 1), 1); /* made again */

    /* an existing path stays; the spare too */
    f = fopen(second, "w");
    if (f)
        fclose(f);
    CHECK_EQ_INT(disk_spares_take(data, 1, second, &err), -1);
    CHECK_EQ_INT(err.sys_errno, EEXIST);
    CHECK_EQ_INT(spares_in(data, 1), 1);
    disk_spares_wait();

    /* other sizes make room: at most DISK_SPARES_MAX spares in all */
    for (unsigned gib = 2; gib < 2 + DISK_SPARES_MAX; gib++) {
        err = (struct sl_error)SL_ERROR_INIT;
        CHECK_EQ_INT(disk_spares_take(data, gib, test_path("spares-other.img"), &err), 0);
        disk_spares_refill(data, gib);
        disk_spares_wait();
    }
    int total = 0;
    for (unsigned gib = 1; gib < 2 + DISK_SPARES_MAX; gib++)
        total += spares_in(data, gib);
    CHECK_EQ_INT(total, DISK_SPARES_MAX);
    CHECK_EQ_INT(spares_in(data, 1), 0); /* the oldest went */
    CHECK_EQ_INT(spares_in(data, 1 + DISK_SPARES_MAX), 1);
}

/* Big-endian-free reads of the superblock: its size in bytes (block count
 * times block size), as mkfs or resize2fs left it on the file. */
static long long ext4_size(const char *path)
{
    unsigned char sb[1024];
    FILE *f = fopen(path, "rb");
    bool ok = f && fseek(f, 1024, SEEK_SET) == 0 && fread(sb, 1, sizeof(sb), f) == sizeof(sb);
    if (f)
        fclose(f);
    if (!ok)
        return -1;
    unsigned long long lo = sb[4] | sb[5] << 8 | sb[6] << 16 | (unsigned long long)sb[7] << 24;
    unsigned long long hi =
        sb[0x150] | sb[0x151] << 8 | sb[0x152] << 16 | (unsigned long long)sb[0x153] << 24;
    unsigned log = sb[24] | sb[25] << 8;
    return (long long)((hi << 32 | lo) << (10 + log));
}

/* A disk no loop device holds grows offline (e2fsck, resize2fs on the
 * file): the file and its ext4 are the new size, still sparse; the same
 * size again is a no-op that works; smaller is refused and changes
 * nothing; a symbolic link is never followed (an instance's files are no
 * path to the host's). */
TEST(disk_grow_offline_then_refuses_to_shrink)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *path = test_path("data.img");
    struct stat st;

    if (!CHECK_EQ_INT(disk_create(path, 1, &err), 0)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    CHECK_EQ_INT(ext4_size(path), 1LL << 30);
    if (!CHECK_EQ_INT(disk_grow(path, 3, &err), 0)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_size, 3LL << 30);
    CHECK((long long)st.st_blocks * 512 < (128LL << 20)); /* still sparse */
    CHECK_EQ_INT(ext4_size(path), 3LL << 30);
    CHECK_EQ_INT(disk_grow(path, 3, &err), 0);

    CHECK_EQ_INT(disk_grow(path, 2, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_INVALID);
    CHECK_STR(err.code, "disk_shrink");
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_size, 3LL << 30);
    CHECK_EQ_INT(disk_grow(path, 0, &err), -1);
    CHECK_STR(err.code, "invalid_disk_size");

    const char *link = test_path("link.img");
    CHECK_EQ_INT(symlink(path, link), 0);
    CHECK_EQ_INT(disk_grow(link, 4, &err), -1);
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_size, 3LL << 30);
    unlink(link);
    CHECK_EQ_INT(disk_remove(path, &err), 0);
}
