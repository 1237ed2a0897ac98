/* The terminal in the browser, the node's half (docs/design/access.md,
 * "Terminal"): a websocket server on a unix socket that only the node's
 * nginx reaches, after suanlid accepted the request's ticket. Each
 * connection is one root shell in the instance through the runtime's
 * `exec -t` (the container's namespaces, cgroups, capabilities and seccomp
 * filter apply), inside `tmux new-session -A -s console` when the image has
 * tmux, so a closed tab or a dropped network loses nothing.
 *
 * A connection is served only when it carries the key nginx.conf holds
 * (X-Suanli-Terminal-Key: made at every agent start, never written
 * anywhere an instance or a worker's other users read) and names its
 * instance (X-Suanli-Terminal, from suanlid's answer). The socket's
 * directory and file let only root and the nginx workers' group in.
 *
 * Frames: the browser sends binary frames (keystrokes) and text frames
 * holding JSON control messages ({"type":"resize","cols":C,"rows":R}); the
 * server sends binary frames (the terminal's output), a ping every 30 s,
 * and closes when the shell ends or nothing came from the client for
 * 90 s. */
#ifndef SL_NODE_TERMINAL_H
#define SL_NODE_TERMINAL_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime.h"
#include "../lib/error.h"

#define TERMINAL_KEY_HEX  65 /* 256 random bits in hex + NUL */
#define TERMINAL_MIN_COLS 10 /* smaller sizes in resize messages are ignored */
#define TERMINAL_MIN_ROWS 3

struct terminal_config {
    const char *socket_path;   /* e.g. /run/suanli-node/terminal-NODE.sock */
    const struct runtime *rt;  /* the instances' runtime: its exec */
    unsigned max_per_instance; /* terminals open at once per instance */
    bool drop_privileges;      /* nginx's workers run as nobody:nogroup */
    const char *data_dir;      /* the agent's DATA: the renter's files (files.h) */
};

struct terminal_server;

/* Listens on cfg->socket_path (a stale socket there is replaced) and makes
 * the key nginx must send (terminal_key). cfg's strings and runtime must
 * outlive the server. */
struct terminal_server *terminal_start(const struct terminal_config *cfg, struct sl_error *err);

/* The key nginx.conf carries, TERMINAL_KEY_HEX - 1 hex digits. */
const char *terminal_key(const struct terminal_server *t);

/* How many terminals of instance id are open (0 for a NULL server). */
unsigned terminal_open(struct terminal_server *t, const char *id);

/* The value of header name in a request's header lines (text, each line
 * ending in CRLF) into out; false when absent or too long. */
bool terminal_header(const char *text, const char *name, char *out, size_t size);

/* Stops listening, ends every open terminal (the tmux sessions inside live
 * on) and removes the socket. NULL is a no-op. */
void terminal_stop(struct terminal_server *t);

/* The shell command run inside (sh -c): tmux when the image has it, else a
 * login shell after a one-line notice. */
extern const char terminal_shell_script[];

/* Sends all of data on the socket fd (the terminal's and the files' answers
 * on the agent's socket); false when the peer is gone. */
bool terminal_send_all(int fd, const void *data, size_t len);

#endif
