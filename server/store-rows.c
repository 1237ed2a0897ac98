/* Many rows to a statement (store-rows.h). */
#include "store-rows.h"

#include "../lib/buf.h"

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

int64_t store_write_rows(struct store *st, struct store_rows_sql *s, struct db_arg *args,
                         size_t rows, struct sl_error *err)
{
    int64_t changed = 0;
    size_t done = 0;

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
