/* server/event-stream.c: the rounds of instance changes a stream reads.
 * One statement can bump many of a renter's instances to one revision (a
 * trigger on users or nodes); a round that stopped inside that revision and
 * moved the cursor past it would lose the rest for good. */
#include "harness.h"

#include "../../server/event-stream.h"
#include "../../server/store.h"
#include "../../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>

static void revision(struct store *st, const char *user, int i, int64_t rev)
{
    struct sl_error err = SL_ERROR_INIT;
    char id[32];

    snprintf(id, sizeof(id), "i-%s-%03d", user, i);
    if (store_exec(st,
                   "INSERT INTO instance_revisions (instance_id, user_id, rev)"
                   " VALUES (?1, ?2, ?3)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(user), DB_INT(rev)), &err) < 0)
        test_fail(__FILE__, __LINE__, "insert: %s", err.message);
}

/* Reads a's changes round by round, as the stream's cursor moves: every
 * instance exactly once. */
static int read_all(struct store *st, int limit, int *rounds)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t cursor = 0;
    int seen = 0;

    *rounds = 0;
    for (;;) {
        cleanup_free struct instance_change *c = NULL;
        size_t n;
        if (event_instance_changes(st, "a", cursor, limit, &c, &n, &err) < 0) {
            test_fail(__FILE__, __LINE__, "changes: %s", err.message);
            return -1;
        }
        if (n == 0)
            return seen;
        ++*rounds;
        for (size_t i = 1; i < n; i++)
            CHECK(c[i - 1].rev <= c[i].rev);
        seen += (int)n;
        cursor = c[n - 1].rev; /* the stream's cursor after the round's last */
    }
}

TEST(a_round_never_stops_inside_a_shared_revision)
{
    struct store *st = test_store();
    int rounds;

    /* 3 alone, then 250 bumped by one statement, then 2 more; b's between */
    for (int i = 0; i < 3; i++)
        revision(st, "a", i, 10 + i);
    for (int i = 3; i < 253; i++)
        revision(st, "a", i, 20);
    revision(st, "b", 0, 21);
    revision(st, "a", 253, 30);
    revision(st, "a", 254, 31);
    CHECK_EQ_INT(read_all(st, 100, &rounds), 255);
    CHECK_EQ_INT(rounds, 2); /* 3 + 250 (past the limit), then 2 */
    CHECK_EQ_INT(read_all(st, 2, &rounds), 255);
    test_store_close(st);
}

TEST(a_round_stops_at_the_limit_between_revisions)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free struct instance_change *c = NULL;
    size_t n;
    int rounds;

    for (int i = 0; i < 150; i++)
        revision(st, "a", i, 100 + i);
    if (!CHECK(event_instance_changes(st, "a", 0, 100, &c, &n, &err) == 0))
        return;
    CHECK_EQ_INT(n, 100);
    CHECK_EQ_INT(c[99].rev, 199);
    CHECK_EQ_INT(read_all(st, 100, &rounds), 150);
    CHECK_EQ_INT(rounds, 2);
    test_store_close(st);
}
