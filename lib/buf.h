/* A growable byte buffer that always keeps a terminating NUL (git's strbuf). */
#ifndef SL_BUF_H
#define SL_BUF_H

#include <stddef.h>

struct sl_buf {
    char *data; /* never NULL after sl_buf_init */
    size_t len;
    size_t cap;
};

/* What sl_buf_init leaves, as an initialiser: `struct sl_buf b = SL_BUF_INIT;`
 * (with cleanup_buf from lib/cleanup.h, released at the end of the scope). */
extern char sl_buf_empty[1];
#define SL_BUF_INIT                                                                                \
    {                                                                                              \
        .data = sl_buf_empty, .len = 0, .cap = 0                                                   \
    }

void sl_buf_init(struct sl_buf *b);
/* Frees the bytes and leaves b as sl_buf_init does (so a second release, or
 * cleanup_buf after a release, does nothing). */
void sl_buf_release(struct sl_buf *b);
void sl_buf_reset(struct sl_buf *b);
void sl_buf_add(struct sl_buf *b, const void *data, size_t len);
void sl_buf_adds(struct sl_buf *b, const char *s);
void sl_buf_addf(struct sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the bytes to the caller (free() them) and leaves b empty. */
char *sl_buf_detach(struct sl_buf *b, size_t *len);

#endif
