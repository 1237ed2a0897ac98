/* server/ledger.c: double entry, idempotency, overflow, append-only, check. */
#include "harness.h"

#include "../../lib/id.h"
#include "../../server/ledger.h"

#include <inttypes.h>
#include <stdio.h>

#define N_ACCOUNTS 5

static const char *const accounts[N_ACCOUNTS] = {
    "system:gateway", "system:revenue", "user:u-a", "user:u-b", "user:u-c",
};

static int64_t count(struct store *st, const char *sql)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t n = -1;

    if (store_get_int(st, sql, DB_NO_ARGS, &n, &err) != 1)
        test_fail(__FILE__, __LINE__, "%s: %s", sql, err.message);
    return n;
}

static struct store *ledger_store(void)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    for (int i = 0; i < N_ACCOUNTS; i++)
        if (ledger_open_account(st, accounts[i], NULL, &err) < 0)
            test_fail(__FILE__, __LINE__, "open %s: %s", accounts[i], err.message);
    /* opening again is harmless */
    if (ledger_open_account(st, accounts[0], NULL, &err) < 0)
        test_fail(__FILE__, __LINE__, "open again: %s", err.message);
    return st;
}

static void check_clean(struct store *st, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    struct ledger_check c;

    if (ledger_check(st, &c, &err) < 0) {
        test_fail(file, line, "ledger_check: %s", err.message);
        return;
    }
    if (c.bad_balances || c.unbalanced_txns || c.bad_running)
        test_fail(file, line,
                  "ledger problems: %" PRId64 " bad balances, %" PRId64 " unbalanced, %" PRId64
                  " bad running",
                  c.bad_balances, c.unbalanced_txns, c.bad_running);
}

#define CHECK_CLEAN(st) check_clean(st, __FILE__, __LINE__)

static struct ledger_txn two(const char *key, const char *from, const char *to, int64_t amount)
{
    return (struct ledger_txn){
        .kind = "credit",
        .memo = "test",
        .idempotency_key = key,
        .entries = { { from, -amount }, { to, amount } },
        .n_entries = 2,
    };
}

TEST(random_postings_keep_invariants)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    int64_t want[N_ACCOUNTS] = { 0 };
    char key[64], txn_id[SL_ID_MAX];
    int posted = 0;

    for (int k = 0; k < 300 && test_ok(); k++) {
        struct ledger_txn txn = { .kind = "charge", .idempotency_key = key };
        int n = (int)test_rand_range(2, 4);
        int64_t sum = 0;
        bool used[N_ACCOUNTS] = { false };
        for (int i = 0; i < n; i++) {
            int a;
            do
                a = (int)test_rand_range(0, N_ACCOUNTS - 1);
            while (used[a]);
            used[a] = true;
            int64_t amount = test_rand_range(1, 5000000000LL);
            txn.entries[i] =
                (struct ledger_entry){ accounts[a], test_rand() % 2 ? amount : -amount };
            if (i < n - 1)
                sum += txn.entries[i].amount_micros;
        }
        if (sum == 0) {
            /* moving the first entry away from zero makes the sum nonzero */
            txn.entries[0].amount_micros += txn.entries[0].amount_micros > 0 ? 1 : -1;
            sum += txn.entries[0].amount_micros > 0 ? 1 : -1;
        }
        txn.entries[n - 1].amount_micros = -sum;
        txn.n_entries = n;
        snprintf(key, sizeof(key), "random-%d", k);
        bool existed = true;
        if (!CHECK_EQ_INT(ledger_post(st, &txn, txn_id, &existed, &err), 0)) {
            printf("    %s\n", err.message);
            break;
        }
        CHECK(!existed);
        CHECK(sl_id_valid(txn_id, "txn-"));
        for (int i = 0; i < n; i++)
            for (int a = 0; a < N_ACCOUNTS; a++)
                if (strcmp(accounts[a], txn.entries[i].account) == 0)
                    want[a] += txn.entries[i].amount_micros;
        posted++;
        if (k % 50 == 0)
            CHECK_CLEAN(st);
    }
    CHECK_EQ_INT(posted, 300);
    int64_t total = 0;
    for (int a = 0; a < N_ACCOUNTS; a++) {
        int64_t b = 0;
        CHECK_EQ_INT(ledger_balance(st, accounts[a], &b, &err), 0);
        CHECK_EQ_INT(b, want[a]);
        total += b;
    }
    CHECK_EQ_INT(total, 0);
    CHECK_CLEAN(st);
    struct ledger_check c;
    CHECK_EQ_INT(ledger_check(st, &c, &err), 0);
    CHECK_EQ_INT(c.accounts, N_ACCOUNTS);
    CHECK_EQ_INT(c.transactions, posted);

    /* the same invariants, checked directly */
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM (SELECT txn_id FROM ledger_entries"
                           " GROUP BY txn_id HAVING SUM(amount_micros) != 0) t"),
                 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM accounts a WHERE balance_micros !="
                           " (SELECT COALESCE(SUM(amount_micros), 0) FROM ledger_entries e"
                           "  WHERE e.account_id = a.id)"),
                 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM accounts a WHERE balance_micros !="
                           " COALESCE((SELECT balance_after_micros FROM ledger_entries e"
                           "  WHERE e.account_id = a.id ORDER BY seq DESC LIMIT 1), 0)"),
                 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_entries WHERE amount_micros = 0"), 0);
}

static void check_refused(struct store *st, const struct ledger_txn *txn, enum sl_error_kind kind,
                          const char *code, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    char txn_id[SL_ID_MAX];
    bool existed = false;
    int64_t txns = count(st, "SELECT COUNT(*) FROM ledger_txns");
    int64_t entries = count(st, "SELECT COUNT(*) FROM ledger_entries");
    int64_t balances = count(st, "SELECT SUM(balance_micros % 1000003) FROM accounts");

    if (ledger_post(st, txn, txn_id, &existed, &err) == 0) {
        test_fail(file, line, "posted");
        return;
    }
    if (err.kind != kind)
        test_fail(file, line, "kind %d, want %d (%s)", err.kind, kind, err.message);
    if (code && strcmp(err.code, code) != 0)
        test_fail(file, line, "code %s, want %s", err.code, code);
    if (count(st, "SELECT COUNT(*) FROM ledger_txns") != txns ||
        count(st, "SELECT COUNT(*) FROM ledger_entries") != entries ||
        count(st, "SELECT SUM(balance_micros % 1000003) FROM accounts") != balances)
        test_fail(file, line, "a refused posting left something behind");
    if (store_tx_depth(st) != 0)
        test_fail(file, line, "a transaction is still open");
}

#define REFUSED(st, txn, kind, code) check_refused(st, txn, kind, code, __FILE__, __LINE__)

TEST(bad_transactions_refused)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    char txn_id[SL_ID_MAX];
    bool existed;
    struct ledger_txn t = two("seed", accounts[0], accounts[2], 1000);

    CHECK_EQ_INT(ledger_post(st, &t, txn_id, &existed, &err), 0);

    t = two("unbalanced", accounts[0], accounts[2], 5);
    t.entries[0].amount_micros = -4;
    REFUSED(st, &t, SL_E_INTERNAL, NULL);
    t = two("zero", accounts[0], accounts[2], 0);
    REFUSED(st, &t, SL_E_INTERNAL, NULL);
    t = (struct ledger_txn){
        .kind = "credit",
        .idempotency_key = "zero3",
        .entries = { { accounts[0], -5 }, { accounts[1], 0 }, { accounts[2], 5 } },
        .n_entries = 3
    };
    REFUSED(st, &t, SL_E_INTERNAL, NULL);
    t = two("one", accounts[0], accounts[2], 5);
    t.n_entries = 1;
    REFUSED(st, &t, SL_E_INTERNAL, NULL);
    t.n_entries = 0;
    REFUSED(st, &t, SL_E_INTERNAL, NULL);
    t.n_entries = LEDGER_MAX_ENTRIES + 1;
    REFUSED(st, &t, SL_E_INTERNAL, NULL);
    /* entries whose sum overflows on the way */
    t = (struct ledger_txn){
        .kind = "credit",
        .idempotency_key = "sum-overflow",
        .entries = { { accounts[0], INT64_MAX }, { accounts[1], INT64_MAX }, { accounts[2], 2 } },
        .n_entries = 3
    };
    REFUSED(st, &t, SL_E_INVALID, "amount_out_of_range");
    /* an unknown account, after a known one was already changed */
    t = two("unknown", accounts[2], "user:u-nobody", 5);
    REFUSED(st, &t, SL_E_NOT_FOUND, "no_account");
    CHECK_CLEAN(st);
    int64_t b;
    CHECK_EQ_INT(ledger_balance(st, "user:u-nobody", &b, &err), -1);
    CHECK_STR(err.code, "no_account");
}

TEST(idempotency_key_posts_once)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    char first[SL_ID_MAX], again[SL_ID_MAX];
    bool existed = true;
    struct ledger_txn t = two("topup-1", accounts[0], accounts[2], 2500000);
    int64_t b;

    CHECK_EQ_INT(ledger_post(st, &t, first, &existed, &err), 0);
    CHECK(!existed);
    for (int i = 0; i < 3; i++) {
        existed = false;
        CHECK_EQ_INT(ledger_post(st, &t, again, &existed, &err), 0);
        CHECK(existed);
        CHECK_STR(again, first);
    }
    /* the key decides, even with other entries */
    t.entries[1].amount_micros = 7;
    t.entries[0].amount_micros = -7;
    CHECK_EQ_INT(ledger_post(st, &t, again, &existed, &err), 0);
    CHECK(existed);
    CHECK_STR(again, first);
    CHECK_EQ_INT(ledger_balance(st, accounts[2], &b, &err), 0);
    CHECK_EQ_INT(b, 2500000);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_txns"), 1);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_entries"), 2);
    CHECK_EQ_INT(store_tx_depth(st), 0);

    /* another key posts again */
    t = two("topup-2", accounts[0], accounts[2], 2500000);
    CHECK_EQ_INT(ledger_post(st, &t, again, &existed, &err), 0);
    CHECK(!existed);
    CHECK(strcmp(again, first) != 0);
    CHECK_EQ_INT(ledger_balance(st, accounts[2], &b, &err), 0);
    CHECK_EQ_INT(b, 5000000);
    CHECK_CLEAN(st);
}

/* ledger_post_many: 300 transactions (statements of 128, 128, 32, 8 and
 * 4 rows), the same accounts in many, one running balance each; a key
 * posted before, an unknown account or an overflow refuses them all. */
TEST(many_postings_together)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    enum {
        N = 300
    };
    static char ids[N][SL_ID_MAX], keys[N][32];
    struct ledger_txn txns[N];
    int64_t want[N_ACCOUNTS] = { 0 }, b;

    for (int i = 0; i < N; i++) {
        int from = (int)test_rand_range(0, N_ACCOUNTS - 1), to = (from + 1) % N_ACCOUNTS;
        int64_t amount = test_rand_range(1, 5000000);
        sl_id_new(ids[i], "txn-");
        snprintf(keys[i], sizeof(keys[i]), "many-%d", i);
        txns[i] = two(keys[i], accounts[from], accounts[to], amount);
        txns[i].id = ids[i];
        want[from] -= amount;
        want[to] += amount;
    }
    CHECK_EQ_INT(ledger_post_many(st, txns, N, &err), 0);
    for (int a = 0; a < N_ACCOUNTS; a++) {
        CHECK_EQ_INT(ledger_balance(st, accounts[a], &b, &err), 0);
        CHECK_EQ_INT(b, want[a]);
    }
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_txns"), N);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_entries"), 2 * N);
    CHECK_CLEAN(st);

    /* refused whole: a key posted before (the last of three), an unknown
     * account, an overflowing balance */
    struct ledger_txn more[3];
    char more_ids[3][SL_ID_MAX];
    for (int i = 0; i < 3; i++) {
        sl_id_new(more_ids[i], "txn-");
        more[i] = two(i < 2 ? (i ? "more-1" : "more-0") : keys[7], accounts[0], accounts[2], 5);
        more[i].id = more_ids[i];
    }
    CHECK(ledger_post_many(st, more, 3, &err) < 0);
    sl_error_clear(&err);
    more[2] = two("more-2", accounts[0], "user:u-nobody", 5);
    more[2].id = more_ids[2];
    CHECK(ledger_post_many(st, more, 3, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_NOT_FOUND);
    sl_error_clear(&err);
    int top = 0; /* the richest account: above 0, as the balances sum to 0 */
    for (int a = 1; a < N_ACCOUNTS; a++)
        if (want[a] > want[top])
            top = a;
    more[2] = two("more-2", accounts[(top + 1) % N_ACCOUNTS], accounts[top], INT64_MAX);
    more[2].id = more_ids[2];
    CHECK(ledger_post_many(st, more, 3, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_INVALID);
    sl_error_clear(&err);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_txns"), N);
    CHECK_EQ_INT(ledger_balance(st, accounts[2], &b, &err), 0);
    CHECK_EQ_INT(b, want[2]);
    CHECK_EQ_INT(store_tx_depth(st), 0);
    CHECK_CLEAN(st);
}

TEST(overflowing_balance_refused)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    char txn_id[SL_ID_MAX];
    bool existed;
    struct ledger_txn t = two("max", accounts[0], accounts[2], INT64_MAX);
    int64_t b;

    CHECK_EQ_INT(ledger_post(st, &t, txn_id, &existed, &err), 0);
    CHECK_EQ_INT(ledger_balance(st, accounts[2], &b, &err), 0);
    CHECK_EQ_INT(b, INT64_MAX);
    CHECK_EQ_INT(ledger_balance(st, accounts[0], &b, &err), 0);
    CHECK_EQ_INT(b, -INT64_MAX);
    /* the first entry applies, the second overflows: both must go */
    t = two("over", accounts[0], accounts[2], 1);
    REFUSED(st, &t, SL_E_INVALID, "amount_out_of_range");
    t = two("under", accounts[2], accounts[0], -2);
    REFUSED(st, &t, SL_E_INVALID, "amount_out_of_range");
    CHECK_EQ_INT(ledger_balance(st, accounts[0], &b, &err), 0);
    CHECK_EQ_INT(b, -INT64_MAX);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_txns WHERE idempotency_key = 'over'"), 0);
    /* the key of a refused posting is free */
    t = two("over", accounts[2], accounts[1], 1);
    CHECK_EQ_INT(ledger_post(st, &t, txn_id, &existed, &err), 0);
    CHECK(!existed);
    CHECK_CLEAN(st);
}

TEST(refusal_inside_outer_transaction_keeps_outer_work)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    char txn_id[SL_ID_MAX];
    bool existed;
    struct ledger_txn ok = two("outer-ok", accounts[0], accounts[3], 10);
    struct ledger_txn bad = two("outer-bad", accounts[3], "system:none", 10);

    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(ledger_post(st, &ok, txn_id, &existed, &err), 0);
    CHECK(ledger_post(st, &bad, txn_id, &existed, &err) < 0);
    CHECK_EQ_INT(store_tx_depth(st), 1);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    int64_t b;
    CHECK_EQ_INT(ledger_balance(st, accounts[3], &b, &err), 0);
    CHECK_EQ_INT(b, 10);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_txns"), 1);
    CHECK_CLEAN(st);
}

TEST(ledger_is_append_only)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    char txn_id[SL_ID_MAX];
    bool existed;
    struct ledger_txn t = two("append", accounts[0], accounts[2], 42);

    CHECK_EQ_INT(ledger_post(st, &t, txn_id, &existed, &err), 0);
    CHECK(store_exec(st, "UPDATE ledger_entries SET amount_micros = 0", DB_NO_ARGS, &err) < 0);
    CHECK_CONTAINS(err.message, "append-only");
    CHECK(store_exec(st, "DELETE FROM ledger_entries", DB_NO_ARGS, &err) < 0);
    CHECK_CONTAINS(err.message, "append-only");
    CHECK(store_exec(st, "UPDATE ledger_txns SET memo = 'x'", DB_NO_ARGS, &err) < 0);
    CHECK(store_exec(st, "DELETE FROM ledger_txns", DB_NO_ARGS, &err) < 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_entries WHERE amount_micros = 42"), 1);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM ledger_txns"), 1);
    CHECK_CLEAN(st);
}

TEST(check_detects_corruption)
{
    struct store *st = ledger_store();
    struct sl_error err = SL_ERROR_INIT;
    char txn_id[SL_ID_MAX];
    bool existed;
    struct ledger_check c;

    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        struct ledger_txn t = two(key, accounts[0], accounts[2 + i % 3], 100 + i);
        CHECK_EQ_INT(ledger_post(st, &t, txn_id, &existed, &err), 0);
    }
    CHECK_EQ_INT(ledger_check(st, &c, &err), 0);
    CHECK_EQ_INT(c.accounts, N_ACCOUNTS);
    CHECK_EQ_INT(c.transactions, 5);
    CHECK_EQ_INT(c.bad_balances, 0);
    CHECK_EQ_INT(c.unbalanced_txns, 0);
    CHECK_EQ_INT(c.bad_running, 0);

    /* a cached balance changed behind the ledger's back */
    CHECK_EQ_INT(store_exec(st,
                            "UPDATE accounts SET balance_micros = balance_micros + 1"
                            " WHERE id = 'user:u-b'",
                            DB_NO_ARGS, &err),
                 1);
    CHECK_EQ_INT(ledger_check(st, &c, &err), 0);
    CHECK_EQ_INT(c.bad_balances, 1);
    CHECK_EQ_INT(c.unbalanced_txns, 0);
    CHECK_EQ_INT(c.bad_running, 0);

    /* an entry written around ledger_post: unbalanced, and its running
     * balance does not follow */
    CHECK_EQ_INT(store_exec(st,
                            "INSERT INTO ledger_txns (id, kind, idempotency_key, created_at)"
                            " VALUES ('txn-forged', 'credit', 'forged', 0)",
                            DB_NO_ARGS, &err),
                 1);
    CHECK_EQ_INT(store_exec(st,
                            "INSERT INTO ledger_entries (txn_id, account_id, amount_micros,"
                            " balance_after_micros, created_at)"
                            " VALUES ('txn-forged', 'user:u-c', 5, 5, 0)",
                            DB_NO_ARGS, &err),
                 1);
    CHECK_EQ_INT(ledger_check(st, &c, &err), 0);
    CHECK_EQ_INT(c.bad_balances, 2);
    CHECK_EQ_INT(c.unbalanced_txns, 1);
    CHECK_EQ_INT(c.bad_running, 1);
}

TEST(user_account_name)
{
    char buf[LEDGER_ACCOUNT_MAX];

    CHECK_STR(ledger_user_account(buf, "u-abc"), "user:u-abc");
}
