#include "buf.h"
#include "xalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char sl_buf_empty[1];

void sl_buf_init(struct sl_buf *b)
{
    b->data = sl_buf_empty;
    b->len = 0;
    b->cap = 0;
}

void sl_buf_release(struct sl_buf *b)
{
    if (b->cap)
        free(b->data);
    sl_buf_init(b);
}

void sl_buf_reset(struct sl_buf *b)
{
    b->len = 0;
    if (b->cap)
        b->data[0] = '\0';
}

static void grow(struct sl_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->data = b->cap ? xrealloc(b->data, cap) : xmalloc(cap);
    if (!b->cap)
        b->data[0] = '\0';
    b->cap = cap;
}

void sl_buf_add(struct sl_buf *b, const void *data, size_t len)
{
    grow(b, len);
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void sl_buf_adds(struct sl_buf *b, const char *s)
{
    sl_buf_add(b, s, strlen(s));
}

void sl_buf_addf(struct sl_buf *b, const char *fmt, ...)
{
    va_list ap, ap2;

    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        grow(b, (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

char *sl_buf_detach(struct sl_buf *b, size_t *len)
{
    char *p = b->cap ? b->data : xstrdup("");
    if (len)
        *len = b->len;
    sl_buf_init(b);
    return p;
}
