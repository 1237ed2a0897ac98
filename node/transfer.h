/* Disk copies between agents, for clones (docs/design/instances.md,
 * "Clones"). Two halves:
 *
 * The server: each agent serves, on its address and transfer.port (8790),
 * the disks of the instances suanlid exports from it (the desired state's
 * `exports`: [{instance, token_sha256}]) to the bearer of that export's
 * one-time token, and nothing else:
 *
 *   GET /v1/exports/ID/DISK          {"size": BYTES, "block_size": 4194304}
 *   GET /v1/exports/ID/DISK/N        block N: header X-Suanli-Block "zero"
 *                                    (a hole or zeros: no body) or "data"
 *                                    with X-Suanli-Blake2b and the bytes
 *
 * DISK is system.img or data.img, the only names ever opened (read-only,
 * no symbolic link followed, a regular file). Anything else, a missing or
 * wrong token, or an instance not exported, is 403 (404 for a disk the
 * export lacks; 503 until the agent has read its first desired state), and
 * reads nothing. Tokens are compared by their SHA-256,
 * in constant time.
 *
 * The client: for a desired instance with `copy_from` {url, token,
 * instance, failed}, a thread copies data.img, then system.img into
 * DATA/instances/ID/ as DISK.part, block by block: each data block's
 * BLAKE2b-256 is checked, written with pwrite (holes stay holes), and every 64
 * MiB the file is synced and the next block recorded in DISK.progress, so a
 * restarted agent goes on from there. A file complete is renamed into place;
 * the system disk loses the source's SSH host keys before it is (a clone is
 * a new machine). A copy that cannot go on (the token refused, the source
 * silent for transfer.retry_s, a block that keeps arriving damaged) fails:
 * its .part and .progress files are removed. */
#ifndef SL_NODE_TRANSFER_H
#define SL_NODE_TRANSFER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"

#define TRANSFER_BLOCK_SIZE   (4u << 20)
#define TRANSFER_PORT_DEFAULT 8790

/* Starts serving exported disks of data_dir on address:port. A port that
 * cannot be bound is logged and the agent goes on without (0 is reported,
 * and suanlid does not clone from this host). */
void transfer_server_start(const char *data_dir, const char *address, unsigned port);
void transfer_server_stop(void);
/* The port served, 0 when none. */
unsigned transfer_server_port(void);

/* Takes the exports and the instances of a new desired state: the exports
 * served change, and copies of instances no longer desired running with
 * copy_from are told to stop. */
void transfer_sync(json_t *desired);

/* For a desired instance d with copy_from (running: a clone; stopped: a
 * moved instance, which lands stopped): true when its disks are in place
 * (the start goes on); false while the copy runs (it is started when it is
 * not) or after it failed. retry_s: how long a silent source is waited
 * for. A copy into the source's own id (a move) keeps the SSH host keys; a
 * clone loses them. */
bool transfer_ready(const char *data_dir, json_t *d, int64_t retry_s);

/* Adds the copy to an instance's report rep (agent_instance_report): copy
 * {bytes_done, bytes_total} while it runs; state failed with the reason
 * once it failed; copy {done: true} once its disks are in data_dir. */
void transfer_report(const char *data_dir, json_t *d, json_t *rep);

/* The copy itself, run by transfer_ready's thread (exposed for tests):
 * copies the disks of source instance `source` from url with token into
 * DATA/instances/id. *cancel stops it between blocks; done and total (may
 * be NULL) follow the bytes. */
int transfer_copy(const char *data_dir, const char *id, const char *url, const char *token,
                  const char *source, int64_t retry_s, volatile bool *cancel,
                  volatile int64_t *done, volatile int64_t *total, struct sl_error *err);

#endif
