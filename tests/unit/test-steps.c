/* node/steps.c: a start's trace, as bench/instances.py reads it. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../lib/xalloc.h"
#include "../../node/steps.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static void pause_ms(long ms)
{
    struct timespec ts = { .tv_nsec = ms * 1000000L };
    nanosleep(&ts, NULL);
}

static void *other_thread(void *p)
{
    steps_mark("not traced"); /* another thread's mark goes nowhere */
    struct steps *s = p;
    steps_begin(s, 0);
    pause_ms(2);
    steps_mark("network: bridge");
    steps_end();
    return NULL;
}

TEST(steps_trace_marks_merges_and_writes)
{
    steps_mark("before any trace"); /* no trace open: a no-op */
    CHECK(steps_current() == NULL);

    struct steps s, beside;
    steps_begin(&s, 1234);
    CHECK(steps_current() == &s);
    pause_ms(2);
    steps_mark("disks");
    pause_ms(1);
    steps_mark("mount");
    pause_ms(1);
    steps_mark("mount"); /* the same step again adds to it */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, &beside) == 0);
    pthread_join(t, NULL);
    steps_beside(&s, &beside);
    steps_end();
    CHECK(steps_current() == NULL);
    steps_mark("after the end");

    CHECK_EQ_INT(s.n, 2);
    CHECK_STR(s.step[0].name, "disks");
    CHECK(s.step[0].us >= 2000);
    CHECK_STR(s.step[1].name, "mount");
    CHECK(s.step[1].us >= 2000);
    CHECK_EQ_INT(s.n_beside, 1);
    CHECK_STR(s.beside[0].name, "network: bridge");

    char text[256];
    steps_format(&s, text, sizeof(text));
    CHECK_PREFIX(text, "disks ");
    CHECK_CONTAINS(text, "; beside: network: bridge ");

    cleanup_free char *path = xasprintf("%s/timing.json", test_tmpdir());
    struct sl_error err = SL_ERROR_INIT;
    CHECK(steps_write(&s, path, "\"generation\": 7", &err) == 0);
    json_error_t jerr;
    cleanup_json json_t *obj = json_load_file(path, 0, &jerr);
    if (!CHECK(obj != NULL))
        return;
    CHECK_EQ_INT(json_integer_value(json_object_get(obj, "desired_wall_us")), 1234);
    CHECK_EQ_INT(json_integer_value(json_object_get(obj, "generation")), 7);
    CHECK(json_integer_value(json_object_get(obj, "wall_us")) > 0);
    CHECK(json_integer_value(json_object_get(obj, "total_us")) >= 4000);
    json_t *steps = json_object_get(obj, "steps");
    CHECK_EQ_INT(json_array_size(steps), 2);
    CHECK_STR(json_string_value(json_array_get(json_array_get(steps, 1), 0)), "mount");
    CHECK_EQ_INT(json_array_size(json_object_get(obj, "beside")), 1);
}
