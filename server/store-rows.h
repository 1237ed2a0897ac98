/* Many rows to a statement: one text per power of two of rows (1, 2, 4,
 * ... STORE_ROWS_MAX), made once and kept while suanlid runs. A statement
 * per row cost a round trip each on PostgreSQL and most of a settlement
 * pass's CPU on SQLite; the stores cache prepared statements by their
 * text's address, and SQLite's parse of a statement with a thousand
 * numbered parameters is quadratic in them, so the texts are few and
 * fixed. */
#ifndef SL_STORE_ROWS_H
#define SL_STORE_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STORE_ROWS_SIZES 8 /* statements of 1, 2, 4, ... 128 rows */
#define STORE_ROWS_MAX   (1 << (STORE_ROWS_SIZES - 1))
/* Rows to a statement where the store takes arrays: the statement's text
 * no longer grows with them, so only memory bounds them. */
#define STORE_ARRAY_ROWS 2048

/* head "(?1, ?2, ...), (...)" tail: rows of `columns` parameters each,
 * numbered from ?1. arrays, if not NULL, is the same statement for a store
 * that takes arrays (store_takes_arrays): column c of every row in the
 * one parameter ?c, an array (PostgreSQL's unnest(?1::bigint[], ...)).
 * PostgreSQL's parse and plan of a VALUES list of 128 rows cost as much
 * as writing them; an array of any length is one parameter. */
struct store_rows_sql {
    const char *head, *tail, *arrays;
    size_t columns;
    char *sql[STORE_ROWS_SIZES]; /* made on first use */
};

#define STORE_ROWS_SQL(h, t, n, a)                                                                 \
    {                                                                                              \
        .head = (h), .tail = (t), .arrays = (a), .columns = (n)                                    \
    }

/* The most rows store_write_rows writes in one statement on st. */
size_t store_rows_per_statement(const struct store *st, const struct store_rows_sql *s);

/* The text for 2^k rows. */
const char *store_rows_text(struct store_rows_sql *s, int k);

/* Runs s over `rows` rows of args (s->columns each; args has one more
 * slot, overwritten and restored, for each statement's end), the largest
 * statements first, or as arrays of STORE_ARRAY_ROWS rows at most.
 * Returns the rows the statements changed, or -1. */
int64_t store_write_rows(struct store *st, struct store_rows_sql *s, struct db_arg *args,
                         size_t rows, struct sl_error *err);

#endif
