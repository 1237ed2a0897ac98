#include "terminal.h"
#include "files.h"
#include "fsutil.h"
#include "websocket.h"
#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define HEADERS_MAX       8192
#define HEADERS_TIMEOUT_S 10
#define CONNECTIONS_MAX   64    /* of all instances: a thread each */
#define FRAME_MAX         65536 /* a client frame's payload */
#define OUTPUT_CHUNK      16384 /* the most output one frame carries */
#define PING_EVERY_MS     30000
#define SILENT_MAX_MS     90000 /* no frame from the client (pongs count): gone */
#define EXIT_WAIT_MS      3000  /* after the pty closed, before SIGKILL */
#define SIZE_WAIT_MS      1000  /* for the browser's size, before the shell starts */

const char terminal_shell_script[] =
    "cd /root 2>/dev/null || cd /\n"
    "export TERM=xterm-256color\n"
    "if command -v tmux >/dev/null 2>&1; then exec tmux -u new-session -A -s console; fi\n"
    "printf '%s\\r\\n' 'suanli: this image has no tmux: this shell ends when the tab closes "
    "(apt-get install tmux keeps it)'\n"
    "if command -v bash >/dev/null 2>&1; then exec bash -l; fi\n"
    "exec sh -l\n";

struct open_terminal {
    char id[SL_ID_MAX];
    unsigned count;
};

struct terminal_server {
    struct terminal_config cfg;
    char key[TERMINAL_KEY_HEX];
    int listen_fd;
    int stop_pipe[2]; /* written once: the accept loop and every session end */
    uid_t worker_uid;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned connections; /* threads serving a connection */
    struct open_terminal open[CONNECTIONS_MAX];
};

struct connection {
    struct terminal_server *t;
    int fd;
    char id[SL_ID_MAX]; /* counted in t->open once set */
};

const char *terminal_key(const struct terminal_server *t)
{
    return t->key;
}

static void reply(int fd, const char *status, const char *message)
{
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s\n",
                     status, strlen(message) + 1, message);
    if (n > 0 && (size_t)n < sizeof(text) && send(fd, text, (size_t)n, MSG_NOSIGNAL) < 0)
        log_debug("terminal: unable to answer: %s", strerror(errno));
}

/* The value of header name in the request's header lines (NUL-terminated
 * text, lines ending "\r\n"), copied into out; false when absent or too
 * long. */
static bool header(const char *text, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, n) != 0 || line[n] != ':')
            continue;
        const char *v = line + n + 1;
        v += strspn(v, " \t");
        size_t vn = strcspn(v, "\r\n");
        while (vn > 0 && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
            vn--;
        if (vn >= size)
            return false;
        memcpy(out, v, vn);
        out[vn] = '\0';
        return true;
    }
    return false;
}

bool terminal_header(const char *text, const char *name, char *out, size_t size)
{
    return header(text, name, out, size);
}

static bool has_token(const char *value, const char *token)
{
    size_t n = strlen(token);
    for (const char *p = value; *p;) {
        p += strspn(p, " \t,");
        size_t k = strcspn(p, " \t,");
        if (k == n && strncasecmp(p, token, n) == 0)
            return true;
        p += k;
    }
    return false;
}

/* Counts a terminal of id; false when the instance has its most open. */
static bool open_take(struct terminal_server *t, const char *id)
{
    struct open_terminal *free_slot = NULL;
    bool ok = false;

    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < CONNECTIONS_MAX; i++) {
        if (t->open[i].count && strcmp(t->open[i].id, id) == 0) {
            if (t->open[i].count < t->cfg.max_per_instance) {
                t->open[i].count++;
                ok = true;
            }
            free_slot = NULL;
            goto done;
        }
        if (!t->open[i].count && !free_slot)
            free_slot = &t->open[i];
    }
    if (free_slot && t->cfg.max_per_instance > 0) {
        snprintf(free_slot->id, sizeof(free_slot->id), "%s", id);
        free_slot->count = 1;
        ok = true;
    }
done:
    pthread_mutex_unlock(&t->lock);
    return ok;
}

unsigned terminal_open(struct terminal_server *t, const char *id)
{
    unsigned n = 0;

    if (!t || !id)
        return 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < CONNECTIONS_MAX; i++)
        if (t->open[i].count && strcmp(t->open[i].id, id) == 0)
            n = t->open[i].count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

static void open_give(struct terminal_server *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < CONNECTIONS_MAX; i++)
        if (t->open[i].count && strcmp(t->open[i].id, id) == 0) {
            t->open[i].count--;
            break;
        }
    pthread_mutex_unlock(&t->lock);
}

bool terminal_send_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static bool send_frame(int fd, int opcode, const void *payload, size_t len)
{
    unsigned char hdr[WS_HEADER_MAX];
    size_t hn = ws_header(hdr, opcode, len);
    return terminal_send_all(fd, hdr, hn) && (len == 0 || terminal_send_all(fd, payload, len));
}

static void send_close(int fd, unsigned code, const char *reason)
{
    unsigned char body[125];
    size_t n = strlen(reason);
    if (n > sizeof(body) - 2)
        n = sizeof(body) - 2;
    body[0] = (unsigned char)(code >> 8);
    body[1] = (unsigned char)code;
    memcpy(body + 2, reason, n);
    send_frame(fd, WS_OP_CLOSE, body, n + 2);
}

/* A pty whose other side runs the runtime's exec of the shell in instance
 * id: the master (non-blocking) and the child's pid. */
static int spawn(const struct terminal_server *t, const char *id, const struct winsize *size,
                 pid_t *pid, struct sl_error *err)
{
    const struct runtime *rt = t->cfg.rt;
    const char *argv[] = { rt->binary,
                           "--root",
                           rt->root,
                           "exec",
                           "-t",
                           "--cwd",
                           "/",
                           id,
                           "/bin/sh",
                           "-c",
                           terminal_shell_script,
                           NULL };
    cleanup_close int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);

    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0)
        return sl_fail_errno(err, "unable to open a pseudo-terminal");
    char slave_name[64];
    if (ptsname_r(master, slave_name, sizeof(slave_name)) != 0)
        return sl_fail_errno(err, "unable to name the pseudo-terminal");
    ioctl(master, TIOCSWINSZ, size);
    *pid = fork();
    if (*pid < 0)
        return sl_fail_errno(err, "unable to start a terminal");
    if (*pid == 0) {
        /* the runtime's process is the session leader of the pty: it gets
         * SIGWINCH on a resize and SIGHUP when the websocket ends */
        setsid();
        int slave = open(slave_name, O_RDWR);
        if (slave < 0)
            _exit(126);
        ioctl(slave, TIOCSCTTY, 0);
        /* raw: the runtime's own pty inside echoes and edits, this one
         * only carries bytes (before the runtime sets it raw itself,
         * early keystrokes would show twice) */
        struct termios tio;
        if (tcgetattr(slave, &tio) == 0) {
            cfmakeraw(&tio);
            tcsetattr(slave, TCSANOW, &tio);
        }
        dup2(slave, 0);
        dup2(slave, 1);
        dup2(slave, 2);
        closefrom(3);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    return TAKE_FD(master);
}

/* A resize message's size into ws; false for anything else, and for sizes
 * no screen has: a box not laid out yet measures 1x1, and tmux would shrink
 * its window to that, pushing the screen into its history for good. */
static bool resize_message(const unsigned char *text, size_t len, struct winsize *ws)
{
    json_error_t jerr;
    cleanup_json json_t *msg = json_loadb((const char *)text, len, 0, &jerr);
    const char *type = json_string_value(json_object_get(msg, "type"));
    json_int_t cols = json_integer_value(json_object_get(msg, "cols"));
    json_int_t rows = json_integer_value(json_object_get(msg, "rows"));

    if (!type || strcmp(type, "resize") != 0 || cols < TERMINAL_MIN_COLS || cols > 1000 ||
        rows < TERMINAL_MIN_ROWS || rows > 1000)
        return false;
    *ws = (struct winsize){ .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
    return true;
}

/* Starts the shell and relays between the websocket and its pty until
 * either ends; *pid: the runtime's process, 0 when none started. The shell
 * starts at the size the browser sends first (or 80x24 after
 * SIZE_WAIT_MS): tmux attaching at a default size would shrink its window
 * to it and push the top of the screen into its history. */
static void relay(struct terminal_server *t, int fd, const char *id, pid_t *pid)
{
    cleanup_free unsigned char *in = xmalloc(FRAME_MAX + 16);
    cleanup_free unsigned char *out = xmalloc(OUTPUT_CHUNK);
    cleanup_buf struct sl_buf pending = SL_BUF_INIT; /* keystrokes the pty did not take yet */
    cleanup_close int master = -1;
    struct winsize size = { .ws_row = 24, .ws_col = 80 };
    bool sized = false;
    size_t have = 0;
    int64_t last_heard = sl_time_mono_ms(), last_ping = last_heard, opened = last_heard;

    for (;;) {
        if (master < 0 && (sized || sl_time_mono_ms() - opened >= SIZE_WAIT_MS)) {
            struct sl_error err = SL_ERROR_INIT;
            master = spawn(t, id, &size, pid, &err);
            if (master < 0) {
                log_warn("terminal: %s: %s", id, err.message);
                send_close(fd, 1011, "the terminal could not start");
                return;
            }
            log_info("terminal: opened for %s (pid %d, %ux%u)", id, (int)*pid, size.ws_col,
                     size.ws_row);
        }
        struct pollfd p[3] = {
            { .fd = fd, .events = pending.len < FRAME_MAX ? POLLIN : 0 },
            { .fd = master, .events = POLLIN | (pending.len ? POLLOUT : 0) },
            { .fd = t->stop_pipe[0], .events = POLLIN },
        };
        int n = poll(p, 3, master < 0 ? 100 : 1000); /* a negative fd is left out */
        if (n < 0 && errno != EINTR)
            return;
        int64_t now = sl_time_mono_ms();
        if (p[2].revents) {
            send_close(fd, 1001, "the host's agent is stopping");
            return;
        }
        if (now - last_heard > SILENT_MAX_MS)
            return;
        if (now - last_ping >= PING_EVERY_MS) {
            if (!send_frame(fd, WS_OP_PING, NULL, 0))
                return;
            last_ping = now;
        }
        if (p[1].revents & POLLIN) {
            ssize_t k = read(master, out, OUTPUT_CHUNK);
            if (k > 0 && !send_frame(fd, WS_OP_BINARY, out, (size_t)k))
                return;
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                send_close(fd, 1000, "the shell ended");
                return;
            }
        } else if (p[1].revents & (POLLHUP | POLLERR)) {
            send_close(fd, 1000, "the shell ended");
            return;
        }
        if ((p[1].revents & POLLOUT) && pending.len) {
            ssize_t k = write(master, pending.data, pending.len);
            if (k > 0) {
                memmove(pending.data, pending.data + k, pending.len - (size_t)k);
                pending.len -= (size_t)k;
            }
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t k = recv(fd, in + have, FRAME_MAX + 16 - have, 0);
        if (k <= 0 && !(k < 0 && (errno == EINTR || errno == EAGAIN)))
            return;
        if (k < 0)
            continue;
        have += (size_t)k;
        last_heard = now;
        for (;;) {
            struct ws_frame f;
            ssize_t used = ws_parse(in, have, FRAME_MAX, &f);
            if (used < 0) {
                send_close(fd, 1002, "not a websocket frame this server takes");
                return;
            }
            if (used == 0)
                break;
            switch (f.opcode) {
            case WS_OP_BINARY:
            case WS_OP_CONTINUATION:
                sl_buf_add(&pending, f.payload, f.len);
                break;
            case WS_OP_TEXT:
                if (f.fin && resize_message(f.payload, f.len, &size)) {
                    sized = true;
                    if (master >= 0)
                        ioctl(master, TIOCSWINSZ, &size);
                }
                break;
            case WS_OP_PING:
                if (!send_frame(fd, WS_OP_PONG, f.payload, f.len))
                    return;
                break;
            case WS_OP_CLOSE:
                send_frame(fd, WS_OP_CLOSE, f.payload, f.len < 2 ? f.len : 2);
                return;
            default:
                break;
            }
            memmove(in, in + used, have - (size_t)used);
            have -= (size_t)used;
        }
        if (master >= 0 && pending.len && (p[1].revents & POLLOUT) == 0) {
            ssize_t w = write(master, pending.data, pending.len);
            if (w > 0) {
                memmove(pending.data, pending.data + w, pending.len - (size_t)w);
                pending.len -= (size_t)w;
            }
        }
    }
}

/* Ends the runtime's exec: the closed pty hangs it up (it passes SIGHUP on
 * to the shell: tmux's client detaches, its server and session live on),
 * then SIGKILL after a while. */
static void reap(pid_t pid)
{
    for (int64_t waited = 0; waited < EXIT_WAIT_MS; waited += 20) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return;
        usleep(20 * SL_USEC_PER_MSEC);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Reads the request's headers (HEADERS_TIMEOUT_S, HEADERS_MAX) into text. */
static bool read_headers(int fd, char *text, size_t size)
{
    size_t have = 0;
    struct timeval tv = { .tv_sec = HEADERS_TIMEOUT_S };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (have < size - 1) {
        /* one byte at a time would be slow; the peek keeps what follows
         * the headers (the first frames) in the socket */
        ssize_t n = recv(fd, text + have, size - 1 - have, MSG_PEEK);
        if (n <= 0)
            return false;
        text[have + (size_t)n] = '\0';
        char *end = strstr(text + (have > 3 ? have - 3 : 0), "\r\n\r\n");
        size_t take = end ? (size_t)(end + 4 - (text + have)) : (size_t)n;
        if (recv(fd, text + have, take, 0) != (ssize_t)take)
            return false;
        have += take;
        text[have] = '\0';
        if (end) {
            struct timeval none = { 0 };
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
            return true;
        }
    }
    return false;
}

static void serve(struct connection *c)
{
    struct terminal_server *t = c->t;
    char text[HEADERS_MAX], key[128], wskey[64], version[8], upgrade[64], connection[128];
    char accept[WS_ACCEPT_SIZE];
    struct sl_error err = SL_ERROR_INIT;

    if (!read_headers(c->fd, text, sizeof(text))) {
        reply(c->fd, "400 Bad Request", "the request's headers did not come in time");
        return;
    }
    if (!header(text, "X-Suanli-Terminal-Key", key, sizeof(key)) || !sl_secret_equal(key, t->key)) {
        reply(c->fd, "403 Forbidden", "this socket is the node's nginx's only");
        return;
    }
    /* the renter's files (files.h): their own server block in nginx */
    if (strncmp(text, "GET /files ", 11) == 0 || strncmp(text, "PUT /files ", 11) == 0) {
        files_serve(c->fd, text, t->cfg.data_dir, t->cfg.rt);
        return;
    }
    if (strncmp(text, "GET ", 4) != 0) {
        reply(c->fd, "405 Method Not Allowed", "a terminal is a websocket: GET");
        return;
    }
    if (!header(text, "X-Suanli-Terminal", c->id, sizeof(c->id)) || !sl_id_valid(c->id, "i-")) {
        c->id[0] = '\0';
        reply(c->fd, "403 Forbidden", "no instance named");
        return;
    }
    if (!header(text, "Upgrade", upgrade, sizeof(upgrade)) ||
        strcasecmp(upgrade, "websocket") != 0 ||
        !header(text, "Connection", connection, sizeof(connection)) ||
        !has_token(connection, "upgrade") ||
        !header(text, "Sec-WebSocket-Key", wskey, sizeof(wskey)) || strlen(wskey) != 24 ||
        !header(text, "Sec-WebSocket-Version", version, sizeof(version)) ||
        strcmp(version, "13") != 0) {
        c->id[0] = '\0';
        reply(c->fd, "400 Bad Request",
              "a terminal is a websocket (RFC 6455, version 13): open it from the console");
        return;
    }
    if (!open_take(t, c->id)) {
        log_info("terminal: refused one more for %s (%u open)", c->id, t->cfg.max_per_instance);
        c->id[0] = '\0';
        reply(c->fd, "429 Too Many Requests",
              "this instance has the most terminals open: close one first");
        return;
    }
    struct runtime_state st = { 0 };
    if (t->cfg.rt->ops->state(t->cfg.rt, c->id, &st, &err) < 0 || st.status != RUNTIME_RUNNING) {
        reply(c->fd, "409 Conflict",
              "the instance is not running on this host: start it, then open its "
              "terminal again");
        return;
    }
    pid_t pid = 0;
    ws_accept_key(wskey, accept);
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                     accept);
    /* a client that stops reading ends its terminal, not the agent's stop */
    struct timeval send_limit = { .tv_sec = SILENT_MAX_MS / 1000 };
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &send_limit, sizeof(send_limit));
    if (terminal_send_all(c->fd, head, (size_t)n))
        relay(t, c->fd, c->id, &pid);
    if (pid > 0)
        reap(pid);
    log_info("terminal: closed for %s", c->id);
}

static void *connection_thread(void *arg)
{
    struct connection *c = arg;
    struct terminal_server *t = c->t;

    serve(c);
    if (c->id[0])
        open_give(t, c->id);
    close(c->fd);
    free(c);
    pthread_mutex_lock(&t->lock);
    t->connections--;
    pthread_cond_broadcast(&t->idle);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Only root and the user nginx's workers run as. */
static bool peer_allowed(const struct terminal_server *t, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return false;
    return cred.uid == 0 || cred.uid == t->worker_uid || cred.uid == geteuid();
}

static void *accept_thread(void *arg)
{
    struct terminal_server *t = arg;

    for (;;) {
        struct pollfd p[2] = { { .fd = t->listen_fd, .events = POLLIN },
                               { .fd = t->stop_pipe[0], .events = POLLIN } };
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        int fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (!peer_allowed(t, fd)) {
            close(fd);
            continue;
        }
        pthread_mutex_lock(&t->lock);
        bool room = t->connections < CONNECTIONS_MAX;
        if (room)
            t->connections++;
        pthread_mutex_unlock(&t->lock);
        if (!room) {
            reply(fd, "503 Service Unavailable", "this host has the most terminals open");
            close(fd);
            continue;
        }
        struct connection *c = xcalloc(1, sizeof(*c));
        *c = (struct connection){ .t = t, .fd = fd };
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, connection_thread, c) != 0) {
            close(fd);
            free(c);
            pthread_mutex_lock(&t->lock);
            t->connections--;
            pthread_mutex_unlock(&t->lock);
        }
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

static int listen_on(struct terminal_server *t, struct sl_error *err)
{
    const char *path = t->cfg.socket_path;
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    cleanup_free char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');

    if (strlen(path) >= sizeof(addr.sun_path) || path[0] != '/' || !slash)
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'terminal.socket': '%s' is not an absolute path of at most %zu "
                       "bytes",
                       path, sizeof(addr.sun_path) - 1);
    *slash = '\0';
    if (*dir && fs_mkdir_p(dir, 0755, err) < 0)
        return -1;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    t->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t->listen_fd < 0)
        return sl_fail_errno(err, "unable to make the terminal socket");
    unlink(path); /* an agent's before this one */
    mode_t old = umask(0177);
    int rc = bind(t->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (rc < 0)
        return sl_fail_errno(err, "unable to bind '%s'", path);
    if (t->cfg.drop_privileges) {
        /* the workers (nobody:nogroup) connect: the group may, no one else */
        struct group *g = getgrnam("nogroup");
        struct passwd *pw = getpwnam("nobody");
        if (!g || !pw || chown(path, 0, g->gr_gid) < 0 || chmod(path, 0660) < 0)
            return sl_fail_errno(err, "unable to let nginx's workers reach '%s'", path);
        t->worker_uid = pw->pw_uid;
    } else {
        t->worker_uid = geteuid();
    }
    if (listen(t->listen_fd, 64) < 0)
        return sl_fail_errno(err, "unable to listen on '%s'", path);
    return 0;
}

struct terminal_server *terminal_start(const struct terminal_config *cfg, struct sl_error *err)
{
    struct terminal_server *t = xcalloc(1, sizeof(*t));

    t->cfg = *cfg;
    t->listen_fd = -1;
    t->stop_pipe[0] = t->stop_pipe[1] = -1;
    sl_random_hex(t->key, (TERMINAL_KEY_HEX - 1) / 2);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->idle, NULL);
    if (listen_on(t, err) < 0 || pipe2(t->stop_pipe, O_CLOEXEC) < 0 ||
        pthread_create(&t->thread, NULL, accept_thread, t) != 0) {
        if (!err->kind)
            sl_fail_errno(err, "unable to start the terminal server");
        if (t->listen_fd >= 0) {
            close(t->listen_fd);
            unlink(cfg->socket_path);
        }
        if (t->stop_pipe[0] >= 0) {
            close(t->stop_pipe[0]);
            close(t->stop_pipe[1]);
        }
        free(t);
        return NULL;
    }
    log_info("terminal: listening on %s", cfg->socket_path);
    return t;
}

void terminal_stop(struct terminal_server *t)
{
    if (!t)
        return;
    if (write(t->stop_pipe[1], "x", 1) < 0)
        log_warn("terminal: unable to signal the stop: %s", strerror(errno));
    pthread_join(t->thread, NULL);
    pthread_mutex_lock(&t->lock);
    while (t->connections)
        pthread_cond_wait(&t->idle, &t->lock);
    pthread_mutex_unlock(&t->lock);
    close(t->listen_fd);
    unlink(t->cfg.socket_path);
    close(t->stop_pipe[0]);
    close(t->stop_pipe[1]);
    free(t);
}
