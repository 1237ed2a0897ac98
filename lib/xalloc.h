/* Allocation that never returns NULL: on exhaustion the process reports it and
 * aborts, so callers never check (tmux's xmalloc). */
#ifndef SL_XALLOC_H
#define SL_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xzalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
