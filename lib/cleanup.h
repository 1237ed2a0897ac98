/* Scope-bound cleanup of owned resources, after crun and systemd.
 *
 *   cleanup_free char *p = NULL;      free(p) at end of scope
 *   cleanup_close int fd = -1;        close(fd) when fd >= 0
 *   cleanup_json json_t *j = NULL;    json_decref(j)
 *
 * TAKE_PTR(p) hands ownership on: it returns p and leaves NULL behind, so the
 * cleanup at end of scope does nothing. */
#ifndef SL_CLEANUP_H
#define SL_CLEANUP_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void sl_cleanup_freep(void *p)
{
    free(*(void **)p);
}

static inline void sl_cleanup_closep(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

static inline void sl_cleanup_fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

#define cleanup_free   __attribute__((cleanup(sl_cleanup_freep)))
#define cleanup_close  __attribute__((cleanup(sl_cleanup_closep)))
#define cleanup_fclose __attribute__((cleanup(sl_cleanup_fclosep)))

#define TAKE_PTR(p)                                                                                \
    ({                                                                                             \
        __typeof__(p) taken_ = (p);                                                                \
        (p) = NULL;                                                                                \
        taken_;                                                                                    \
    })

#define TAKE_FD(fd)                                                                                \
    ({                                                                                             \
        int taken_fd_ = (fd);                                                                      \
        (fd) = -1;                                                                                 \
        taken_fd_;                                                                                 \
    })

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
