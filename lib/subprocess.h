/* Running a helper program (tar, mkfs.ext4, runc, a CNI plugin, ssh) and
 * collecting what it says, without a shell: argv is passed as is. */
#ifndef SL_SUBPROCESS_H
#define SL_SUBPROCESS_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "error.h"

struct sl_subprocess {
    const char *const *argv; /* argv[0] is searched in PATH when it has no '/' */
    const char *const *envp; /* NULL: the caller's environment */
    const void *input;       /* written to stdin, then closed; NULL: /dev/null */
    size_t input_len;
    struct sl_buf *out; /* stdout is appended here; NULL: discarded */
    struct sl_buf *err; /* stderr is appended here; NULL: only kept for messages */
    /* When set, stdout and stderr go to this file (created 0600, appended)
     * instead of pipes: for programs that leave a daemon behind holding them
     * (`runc run -d`). out and err are then unused. */
    const char *log_path;
    /* The child runs with umask 022 instead of the caller's 077 (private.h):
     * it makes files that others read, such as an image's. */
    bool shared_files;
};

/* Runs the program to completion. Returns its exit status (0..255), or 128 +
 * the signal that ended it. Returns -1 only when it could not be started
 * (a missing program is SL_E_UNAVAILABLE with code "missing_program"). */
int sl_subprocess_run(const struct sl_subprocess *sp, struct sl_error *err);

/* Like sl_subprocess_run, but any status other than 0 is a failure
 * (SL_E_INTERNAL, code "command_failed") whose message names the program and
 * quotes the last line of its stderr (or of log_path). */
int sl_subprocess_check(const struct sl_subprocess *sp, struct sl_error *err);

/* Shorthand: sl_subprocess_check of argv with no input, stdout into out
 * (may be NULL). */
int sl_run(const char *const *argv, struct sl_buf *out, struct sl_error *err);

#endif
