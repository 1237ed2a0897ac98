/* A growable byte buffer that always keeps a terminating NUL (git's strbuf). */
#ifndef SL_BUF_H
#define SL_BUF_H

#include <stddef.h>

struct sl_buf {
    char *data; /* never NULL after sl_buf_init */
    size_t len;
    size_t cap;
};

void sl_buf_init(struct sl_buf *b);
void sl_buf_release(struct sl_buf *b);
void sl_buf_reset(struct sl_buf *b);
void sl_buf_add(struct sl_buf *b, const void *data, size_t len);
void sl_buf_adds(struct sl_buf *b, const char *s);
void sl_buf_addf(struct sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the bytes to the caller (free() them) and leaves b empty. */
char *sl_buf_detach(struct sl_buf *b, size_t *len);

#endif
