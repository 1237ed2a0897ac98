/* The money ledger: append-only, double-entry. Every transaction's entries sum
 * to zero across accounts ("user:ID" for renters, "system:*" for the
 * platform's side); an account's balance is the sum of its entries, and the
 * cached balance is updated in the same transaction. */
#ifndef SL_LEDGER_H
#define SL_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/id.h"
#include "store.h"

#define LEDGER_ACCOUNT_MAX 48
#define LEDGER_MAX_ENTRIES 8

struct ledger_entry {
    const char *account;
    int64_t amount_micros;
};

struct ledger_txn {
    const char *id;   /* NULL: a new one (txn_id gets it) */
    const char *kind; /* "credit", "topup", "charge", "refund" */
    const char *memo;
    const char *idempotency_key; /* unique across the ledger */
    const char *actor;           /* user id of who caused it, or NULL */
    struct ledger_entry entries[LEDGER_MAX_ENTRIES];
    int n_entries;
};

/* "user:u-..." into buf (LEDGER_ACCOUNT_MAX). */
char *ledger_user_account(char *buf, const char *user_id);

/* Creates the account if it does not exist. */
int ledger_open_account(struct store *st, const char *account, const char *user_id,
                        struct sl_error *err);

/* Posts txn atomically. When its idempotency key was posted before, nothing
 * is written, *existed is set and txn_id names the earlier transaction.
 * Fails on an unbalanced transaction, a zero entry, an unknown account or an
 * overflowing balance. txn_id holds SL_ID_MAX bytes. */
int ledger_post(struct store *st, const struct ledger_txn *txn, char *txn_id, bool *existed,
                struct sl_error *err);

/* Posts n new transactions together, each with its id (txn->id) and a key
 * never posted before (one posted before fails them all, as a conflict):
 * a few statements for all of them, where ledger_post takes about ten
 * each (the settlement posts a chunk's renters at once). An account in
 * several gets their entries in order, each with its running balance.
 * Runs in one store transaction of its own or the caller's. */
int ledger_post_many(struct store *st, const struct ledger_txn *txns, size_t n,
                     struct sl_error *err);

int ledger_balance(struct store *st, const char *account, int64_t *balance, struct sl_error *err);

struct ledger_check {
    int64_t accounts;
    int64_t transactions;
    int64_t bad_balances;    /* cached balance != sum of entries */
    int64_t unbalanced_txns; /* entries of a txn do not sum to zero */
    int64_t bad_running;     /* balance_after does not follow */
};

/* Verifies the invariants over the whole ledger. */
int ledger_check(struct store *st, struct ledger_check *out, struct sl_error *err);

#endif
