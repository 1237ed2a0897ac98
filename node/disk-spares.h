/* Formatted disks kept ready: a first start takes one (a rename) instead of
 * waiting for mkfs.ext4, and another is made in the background. They live in
 * DATA/spare-disks as GIB-NNNN.img: sparse files of a few MiB on the host's
 * disk, nothing an instance can see until a start moves one into its own
 * directory. A stop or a crash midway leaves a .new, which disk_spares_init
 * removes. */
#ifndef SL_NODE_DISK_SPARES_H
#define SL_NODE_DISK_SPARES_H

#include "../lib/error.h"

/* Disks of one size kept ready; and of all sizes together (the sizes starts
 * asked for last win: another size's oldest is removed to make room). */
#define DISK_SPARES_PER_SIZE 1
#define DISK_SPARES_MAX      4

/* Makes DATA/spare-disks and removes what a stop left half made. */
int disk_spares_init(const char *data_dir, struct sl_error *err);

/* Moves a spare disk of gib GiB to path (which must not exist): 1 when it
 * did, 0 when none was ready. */
int disk_spares_take(const char *data_dir, unsigned gib, const char *path, struct sl_error *err);

/* Makes one more disk of gib GiB in the background (at nice 19) when fewer
 * than DISK_SPARES_PER_SIZE are ready or under way: called once a start
 * made its disks, so a size that fails (a host out of space) is not tried
 * again behind its back. */
void disk_spares_refill(const char *data_dir, unsigned gib);

/* Waits until no spare is being made (tests; a stopping agent need not). */
void disk_spares_wait(void);

#endif
