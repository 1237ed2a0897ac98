/* The request's headers, query and cookies as the dispatcher's unit tests
 * hand them to server/api.c (struct api_io), in place of libmicrohttpd's. */
#ifndef SL_TEST_FAKE_IO_H
#define SL_TEST_FAKE_IO_H

#include "../../server/api.h"

#include <stddef.h>
#include <strings.h>

struct fake_io {
    const char *headers[8][2];
    const char *query[4][2];
    const char *cookies[2][2];
};

static inline const char *fake_io_lookup(const char *table[][2], size_t n, const char *name)
{
    for (size_t i = 0; i < n && table[i][0]; i++)
        if (strcasecmp(table[i][0], name) == 0)
            return table[i][1];
    return NULL;
}

static inline const char *fake_header(void *ctx, const char *name)
{
    return fake_io_lookup(((struct fake_io *)ctx)->headers, 8, name);
}

static inline const char *fake_query(void *ctx, const char *name)
{
    return fake_io_lookup(((struct fake_io *)ctx)->query, 4, name);
}

static inline const char *fake_cookie(void *ctx, const char *name)
{
    return fake_io_lookup(((struct fake_io *)ctx)->cookies, 2, name);
}

/* .io of a struct api_request reading io */
static inline struct api_io fake_io_of(struct fake_io *io)
{
    return (struct api_io){ fake_header, fake_query, fake_cookie, io };
}

#endif
