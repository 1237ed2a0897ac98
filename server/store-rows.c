/* Many rows to a statement (store-rows.h). */
#include "store-rows.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <inttypes.h>

#include <pthread.h>

static pthread_mutex_t texts_lock = PTHREAD_MUTEX_INITIALIZER;

/* "(?1, ?2, ...), (...)": rows of columns numbered from ?1 */
static void values_sql(struct sl_buf *sql, size_t rows, size_t columns)
{
    for (size_t r = 0; r < rows; r++) {
        sl_buf_adds(sql, r ? ", (" : "(");
        for (size_t c = 0; c < columns; c++)
            sl_buf_addf(sql, "%s?%zu", c ? ", " : "", r * columns + c + 1);
        sl_buf_adds(sql, ")");
    }
}

const char *store_rows_text(struct store_rows_sql *s, int k)
{
    char *text = __atomic_load_n(&s->sql[k], __ATOMIC_ACQUIRE);

    if (text)
        return text;
    pthread_mutex_lock(&texts_lock);
    if (!s->sql[k]) {
        struct sl_buf sql = SL_BUF_INIT;
        sl_buf_adds(&sql, s->head);
        values_sql(&sql, (size_t)1 << k, s->columns);
        sl_buf_adds(&sql, s->tail);
        __atomic_store_n(&s->sql[k], sl_buf_detach(&sql, NULL), __ATOMIC_RELEASE);
    }
    text = s->sql[k];
    pthread_mutex_unlock(&texts_lock);
    return text;
}

size_t store_rows_per_statement(const struct store *st, const struct store_rows_sql *s)
{
    return s->arrays && store_takes_arrays(st) ? STORE_ARRAY_ROWS : STORE_ROWS_MAX;
}

/* One element of an array literal: a number, NULL, or a quoted text. */
static void array_element(struct sl_buf *b, const struct db_arg *a)
{
    switch (a->type) {
    case DB_ARG_INT:
        sl_buf_addf(b, "%" PRId64, a->i);
        break;
    case DB_ARG_TEXT:
        sl_buf_add(b, "\"", 1);
        for (const char *c = a->text; *c; c++) {
            if (*c == '"' || *c == '\\')
                sl_buf_add(b, "\\", 1);
            sl_buf_add(b, c, 1);
        }
        sl_buf_add(b, "\"", 1);
        break;
    case DB_ARG_NULL:
    case DB_ARG_END:
        sl_buf_adds(b, "NULL");
        break;
    }
}

/* rows rows of args as s->arrays: one array per column */
static int write_arrays(struct store *st, const struct store_rows_sql *s, const struct db_arg *args,
                        size_t rows, struct sl_error *err)
{
    cleanup_free struct sl_buf *cols = xcalloc(s->columns, sizeof(*cols));
    cleanup_free struct db_arg *params = xcalloc(s->columns + 1, sizeof(*params));

    for (size_t c = 0; c < s->columns; c++) {
        sl_buf_init(&cols[c]);
        sl_buf_adds(&cols[c], "{");
        for (size_t r = 0; r < rows; r++) {
            if (r)
                sl_buf_adds(&cols[c], ",");
            array_element(&cols[c], &args[r * s->columns + c]);
        }
        sl_buf_adds(&cols[c], "}");
        params[c] = DB_TEXT(cols[c].data);
    }
    params[s->columns] = (struct db_arg){ .type = DB_ARG_END };
    int rc = store_exec(st, s->arrays, params, err);
    for (size_t c = 0; c < s->columns; c++)
        sl_buf_release(&cols[c]);
    return rc;
}

int64_t store_write_rows(struct store *st, struct store_rows_sql *s, struct db_arg *args,
                         size_t rows, struct sl_error *err)
{
    int64_t changed = 0;
    size_t done = 0;

    if (s->arrays && store_takes_arrays(st)) {
        for (; done < rows; done += STORE_ARRAY_ROWS) {
            size_t size = rows - done < STORE_ARRAY_ROWS ? rows - done : STORE_ARRAY_ROWS;
            int rc = write_arrays(st, s, &args[done * s->columns], size, err);
            if (rc < 0)
                return -1;
            changed += rc;
        }
        return changed;
    }

    for (int k = STORE_ROWS_SIZES - 1; k >= 0; k--) {
        size_t size = (size_t)1 << k;
        for (; rows - done >= size; done += size) {
            struct db_arg *end = &args[(done + size) * s->columns], kept = *end;
            *end = (struct db_arg){ .type = DB_ARG_END };
            int rc = store_exec(st, store_rows_text(s, k), &args[done * s->columns], err);
            *end = kept;
            if (rc < 0)
                return -1;
            changed += rc;
        }
    }
    return changed;
}
