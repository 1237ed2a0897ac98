/* Copying a whole installation's database from one store to another:
 * `suanlid migrate` (migrate-cmd.c; docs/operations.md, "Moving to
 * PostgreSQL"). */
#ifndef SL_STORE_COPY_H
#define SL_STORE_COPY_H

#include <stdint.h>

#include "store.h"

/* Copies every table of src into dst, an empty PostgreSQL database, in one
 * transaction on each side: src is read in one snapshot (its write lock
 * held), dst is migrated to the binary's schema version and filled, then
 * checked (every table's row count equal to src's, the ledger check
 * passing) before its commit. Any failure rolls dst back whole, schema
 * included. report(table, rows, ctx) runs for each table after the check.
 * Refuses (SL_E_INVALID) a src whose schema version is not the binary's
 * ("schema_version"), a dst that already holds a schema ("not_empty"), a
 * dst that is not PostgreSQL, and a table or column on one side only
 * ("schema_mismatch"). */
int store_copy(struct store *src, struct store *dst,
               void (*report)(const char *table, int64_t rows, void *ctx), void *ctx,
               struct sl_error *err);

#endif
