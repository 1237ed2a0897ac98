/* Scope-bound cleanup of owned resources, after crun and systemd.
 *
 *   cleanup_free char *p = NULL;      free(p) at end of scope
 *   cleanup_close int fd = -1;        close(fd) when fd >= 0
 *   cleanup_fclose FILE *f = NULL;    fclose(f) when f is not NULL
 *   cleanup_dir DIR *d = NULL;        closedir(d) when d is not NULL
 *   cleanup_buf struct sl_buf b = SL_BUF_INIT;
 *                                     sl_buf_release(&b)
 *   cleanup_json json_t *j = NULL;    json_decref(j) (lib/json.h)
 *
 * TAKE_PTR(p) hands ownership on: it returns p and leaves NULL behind, so the
 * cleanup at end of scope does nothing; TAKE_FD(fd) likewise leaves -1, and
 * sl_buf_detach(&b, &len) (lib/buf.h) hands on a buffer's bytes and leaves it
 * empty. A cleanup variable is initialised where it is declared, so no early
 * return or goto can reach its cleanup with garbage in it. */
#ifndef SL_CLEANUP_H
#define SL_CLEANUP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "buf.h"

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

static inline void sl_cleanup_closedirp(DIR **d)
{
    if (*d)
        closedir(*d);
}

static inline void sl_cleanup_bufp(struct sl_buf *b)
{
    sl_buf_release(b);
}

#define cleanup_free   __attribute__((cleanup(sl_cleanup_freep)))
#define cleanup_dir    __attribute__((cleanup(sl_cleanup_closedirp)))
#define cleanup_buf    __attribute__((cleanup(sl_cleanup_bufp)))
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
