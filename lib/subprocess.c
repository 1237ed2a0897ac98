#include "subprocess.h"
#include "cleanup.h"
#include "xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Failing in the child: the status tells the parent why exec did not happen. */
#define EXIT_EXEC_FAILED 127

static void child(const struct sl_subprocess *sp, int in_fd, int out_fd, int err_fd, int exec_fd)
{
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        _exit(EXIT_EXEC_FAILED);
    if (in_fd < 0)
        in_fd = devnull;
    if (out_fd < 0)
        out_fd = devnull;
    if (err_fd < 0)
        err_fd = devnull;
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(EXIT_EXEC_FAILED);
    /* Keep only exec_fd (close-on-exec) to report a failed exec. */
    if (exec_fd > 3) {
        close_range(3, exec_fd - 1, 0);
        close_range(exec_fd + 1, ~0U, 0);
    } else if (exec_fd == 3) {
        close_range(4, ~0U, 0);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (sp->shared_files)
        umask(022);
    char *const *envp = sp->envp ? (char *const *)sp->envp : environ;
    execvpe(sp->argv[0], (char *const *)sp->argv, envp);
    int e = errno;
    if (write(exec_fd, &e, sizeof(e)) < 0)
        _exit(EXIT_EXEC_FAILED);
    _exit(EXIT_EXEC_FAILED);
}

static void set_cloexec_nonblock(int fd)
{
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int pump(const struct sl_subprocess *sp, int in_fd, int out_fd, int err_fd,
                struct sl_buf *errbuf)
{
    size_t written = 0;
    struct pollfd p[3];
    char chunk[16384];

    for (;;) {
        int n = 0;
        int in_i = -1, out_i = -1, err_i = -1;
        if (in_fd >= 0) {
            p[n] = (struct pollfd){ .fd = in_fd, .events = POLLOUT };
            in_i = n++;
        }
        if (out_fd >= 0) {
            p[n] = (struct pollfd){ .fd = out_fd, .events = POLLIN };
            out_i = n++;
        }
        if (err_fd >= 0) {
            p[n] = (struct pollfd){ .fd = err_fd, .events = POLLIN };
            err_i = n++;
        }
        if (n == 0)
            return 0;
        if (poll(p, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (in_i >= 0 && p[in_i].revents) {
            ssize_t w = write(in_fd, (const char *)sp->input + written, sp->input_len - written);
            if (w > 0)
                written += w;
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                written = sp->input_len; /* the child stopped reading: EPIPE */
            if (written >= sp->input_len) {
                close(in_fd);
                in_fd = -1;
            }
        }
        if (out_i >= 0 && p[out_i].revents) {
            ssize_t r = read(out_fd, chunk, sizeof(chunk));
            if (r > 0 && sp->out)
                sl_buf_add(sp->out, chunk, r);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close(out_fd);
                out_fd = -1;
            }
        }
        if (err_i >= 0 && p[err_i].revents) {
            ssize_t r = read(err_fd, chunk, sizeof(chunk));
            if (r > 0) {
                sl_buf_add(errbuf, chunk, r);
                if (sp->err)
                    sl_buf_add(sp->err, chunk, r);
            }
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close(err_fd);
                err_fd = -1;
            }
        }
    }
}

static int run(const struct sl_subprocess *sp, struct sl_buf *errbuf, struct sl_error *err)
{
    int in[2] = { -1, -1 }, out[2] = { -1, -1 }, errp[2] = { -1, -1 };
    int exec_pipe[2] = { -1, -1 };
    cleanup_close int log_fd = -1;

    if (sp->log_path) {
        log_fd = open(sp->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log_fd < 0)
            return sl_fail_errno(err, "unable to open '%s'", sp->log_path);
    }
    if ((sp->input && pipe2(in, O_CLOEXEC) < 0) || (!sp->log_path && pipe2(out, O_CLOEXEC) < 0) ||
        (!sp->log_path && pipe2(errp, O_CLOEXEC) < 0) || pipe2(exec_pipe, O_CLOEXEC) < 0) {
        sl_fail_errno(err, "unable to create a pipe");
        goto fail_fds;
    }

    /* A child that dies before reading its input must not kill us. */
    struct sigaction ign = { .sa_handler = SIG_IGN }, old_pipe;
    sigaction(SIGPIPE, &ign, &old_pipe);

    pid_t pid = fork();
    if (pid < 0) {
        sl_fail_errno(err, "unable to fork for '%s'", sp->argv[0]);
        sigaction(SIGPIPE, &old_pipe, NULL);
        goto fail_fds;
    }
    if (pid == 0)
        child(sp, in[0], sp->log_path ? log_fd : out[1], sp->log_path ? log_fd : errp[1],
              exec_pipe[1]);
    close(exec_pipe[1]);

    if (in[0] >= 0)
        close(in[0]);
    if (out[1] >= 0)
        close(out[1]);
    if (errp[1] >= 0)
        close(errp[1]);
    if (in[1] >= 0)
        set_cloexec_nonblock(in[1]);
    if (out[0] >= 0)
        set_cloexec_nonblock(out[0]);
    if (errp[0] >= 0)
        set_cloexec_nonblock(errp[0]);
    pump(sp, in[1], out[0], errp[0], errbuf);
    sigaction(SIGPIPE, &old_pipe, NULL);

    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return sl_fail_errno(err, "unable to wait for '%s'", sp->argv[0]);
    }
    int exec_errno = 0;
    ssize_t got = read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
    close(exec_pipe[0]);
    if (got == (ssize_t)sizeof(exec_errno)) {
        errno = exec_errno;
        if (exec_errno == ENOENT)
            return sl_fail(err, SL_E_UNAVAILABLE, "missing_program",
                           "unable to run '%s': not installed", sp->argv[0]);
        return sl_fail_errno(err, "unable to run '%s'", sp->argv[0]);
    }
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);

fail_fds:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
        if (exec_pipe[i] >= 0)
            close(exec_pipe[i]);
    }
    return -1;
}

int sl_subprocess_run(const struct sl_subprocess *sp, struct sl_error *err)
{
    cleanup_buf struct sl_buf errbuf = SL_BUF_INIT;
    return run(sp, &errbuf, err);
}

/* The last non-empty line of text, trimmed, at most 300 bytes. */
static void last_line(const char *text, size_t len, char *out, size_t out_size)
{
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        len--;
    size_t start = len;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    size_t n = len - start;
    if (n >= out_size)
        n = out_size - 1;
    memcpy(out, text + start, n);
    out[n] = '\0';
}

static void tail_of_file(const char *path, char *out, size_t out_size)
{
    out[0] = '\0';
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > 2048 ? end - 2048 : 0;
    char text[2048];
    ssize_t r = pread(fd, text, sizeof(text), from);
    if (r > 0)
        last_line(text, r, out, out_size);
}

int sl_subprocess_check(const struct sl_subprocess *sp, struct sl_error *err)
{
    cleanup_buf struct sl_buf errbuf = SL_BUF_INIT;
    int rc = run(sp, &errbuf, err);
    if (rc > 0) {
        char line[300];
        if (sp->log_path)
            tail_of_file(sp->log_path, line, sizeof(line));
        else
            last_line(errbuf.data, errbuf.len, line, sizeof(line));
        if (rc > 128)
            sl_fail(err, SL_E_INTERNAL, "command_failed", "'%s' killed by signal %d%s%s",
                    sp->argv[0], rc - 128, line[0] ? ": " : "", line);
        else
            sl_fail(err, SL_E_INTERNAL, "command_failed", "'%s' exited with status %d%s%s",
                    sp->argv[0], rc, line[0] ? ": " : "", line);
        rc = -1;
    }
    return rc < 0 ? -1 : 0;
}

int sl_run(const char *const *argv, struct sl_buf *out, struct sl_error *err)
{
    struct sl_subprocess sp = { .argv = argv, .out = out };
    return sl_subprocess_check(&sp, err);
}
