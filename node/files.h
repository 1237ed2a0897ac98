/* Files of the renter's storage through the browser and the API, the
 * node's half (docs/design/node-runtime.md, "File storage"; suanlid's half
 * is server/files.h). Served on the terminal's socket (terminal.h), so
 * only the node's nginx reaches it, with the terminal's key, after suanlid
 * accepted the request's one-use ticket and named the instance, the
 * operation and its path (X-Suanli-Files, -Op, -Path).
 *
 * The directory is the one bound at /root/storage in the instance (its
 * bundle's config.json says which), opened O_PATH; every path is resolved
 * under it with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): nothing the renter planted
 * (a link, a mount, "..") leads out. Operations:
 *
 *   list  GET: the folder's entries as JSON {path, items: [{name, type,
 *         size, mtime}], truncated}, at most FILES_LIST_MAX
 *   get   GET: a regular file's bytes, as an attachment
 *   put   PUT: the body (Content-Length) streamed into a new file
 *         beside the target, renamed over it once whole; a full storage
 *         (ENOSPC, EDQUOT) is 507 and leaves nothing behind. Files are
 *         root's, 0644: as root inside writes them (no user namespace). */
#ifndef SL_NODE_FILES_H
#define SL_NODE_FILES_H

#include "runtime.h"

#define FILES_LIST_MAX 10000

/* Serves one request whose header lines (NUL-terminated, each ending in
 * CRLF) are head, already read from fd (the body, if any, is still in
 * it); the key was checked by the caller. data_dir: the agent's DATA. */
void files_serve(int fd, const char *head, const char *data_dir, const struct runtime *rt);

/* Whether path (already percent-decoded) names something under the
 * storage: relative, names of 1 to 255 bytes, none "." or "..", no
 * control byte; "" (the top) only when empty_ok. */
bool files_path_ok(const char *path, bool empty_ok);

#endif
