/* The pure rules of a data disk resize (server/disk-resize.c): the size
 * range, never smaller, the host's room, and what the growth adds to the
 * daily charge. The store, the agent and the online grow are
 * tests/integration/test_t600_disk_resize.py's. */
#include "harness.h"

#include "../../server/disk-resize.h"

#include <stdint.h>
#include <string.h>

static int judge(int64_t have, int64_t want, int64_t max, int64_t room, struct sl_error *err)
{
    *err = (struct sl_error)SL_ERROR_INIT;
    return disk_resize_judge("i-1", "gpu-7", have, want, max, room, err);
}

TEST(disk_resize_judge_grows_within_range_and_room)
{
    struct sl_error err;
    CHECK_EQ_INT(judge(50, 200, 4096, 150, &err), 1); /* exactly the room */
    CHECK_EQ_INT(judge(50, 51, 4096, 1, &err), 1);
    CHECK_EQ_INT(judge(50, 4096, 4096, INT64_MAX, &err), 1);
    CHECK_EQ_INT(judge(50, 50, 4096, 0, &err), 0); /* that size already: nothing */
}

TEST(disk_resize_judge_refuses_sizes_out_of_range)
{
    struct sl_error err;
    const int64_t bad[] = { 0, -1, -1000000000, 4097, 1000000000, INT64_MAX };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(judge(50, bad[i], 4096, INT64_MAX, &err), -1);
        CHECK_EQ_INT(err.kind, SL_E_INVALID);
        CHECK_STR(err.code, "invalid_field");
        CHECK(strstr(err.message, "from 1 to 4096") != NULL);
    }
}

TEST(disk_resize_judge_refuses_to_shrink_and_says_what_to_do)
{
    struct sl_error err;
    CHECK_EQ_INT(judge(200, 100, 4096, INT64_MAX, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "disk_shrink");
    CHECK(strstr(err.message, "only grows") != NULL);
    CHECK(strstr(err.message, "suanli create --data-disk 100") != NULL);
    CHECK(strstr(err.message, "release this one") != NULL);
    /* a shrink is refused even where there is no room at all */
    CHECK_EQ_INT(judge(200, 100, 4096, -50, &err), -1);
    CHECK_STR(err.code, "disk_shrink");
}

TEST(disk_resize_judge_refuses_what_the_host_cannot_hold)
{
    struct sl_error err;
    CHECK_EQ_INT(judge(50, 201, 4096, 150, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "insufficient_disk");
    CHECK(strstr(err.message, "host 'gpu-7'") != NULL);
    CHECK(strstr(err.message, "can grow to there is 200 GiB") != NULL);
    CHECK(strstr(err.message, "suanli migrate i-1") != NULL);
    /* a host already over its promises (its disk filled by other things) */
    CHECK_EQ_INT(judge(50, 60, 4096, -20, &err), -1);
    CHECK_STR(err.code, "insufficient_disk");
    CHECK(strstr(err.message, "no disk room left") != NULL);
    CHECK_EQ_INT(judge(50, 60, 4096, 0, &err), -1);
    CHECK_STR(err.code, "insufficient_disk");
}

TEST(disk_resize_extra_per_day_counts_only_gib_over_the_free_size)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t extra = -1;
    /* 50 free: 50 -> 200 adds 150 GiB-days a day */
    CHECK_EQ_INT(disk_resize_extra_per_day(50, 200, 50, 7000, &extra, &err), 0);
    CHECK_EQ_INT(extra, 150 * 7000);
    /* 20 -> 60: only the 10 over the free 50 */
    CHECK_EQ_INT(disk_resize_extra_per_day(20, 60, 50, 7000, &extra, &err), 0);
    CHECK_EQ_INT(extra, 10 * 7000);
    /* within the free size, or free of charge: nothing */
    CHECK_EQ_INT(disk_resize_extra_per_day(10, 50, 50, 7000, &extra, &err), 0);
    CHECK_EQ_INT(extra, 0);
    CHECK_EQ_INT(disk_resize_extra_per_day(50, 500, 50, 0, &extra, &err), 0);
    CHECK_EQ_INT(extra, 0);
    /* an overflow is an error, not a wrapped small amount */
    CHECK_EQ_INT(disk_resize_extra_per_day(0, INT64_MAX, 0, INT64_MAX / 2, &extra, &err), -1);
}
