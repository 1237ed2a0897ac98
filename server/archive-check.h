/* Checking an image archive an admin uploads before any host fetches it
 * (docs/design/node-runtime.md, "Image import", "What suanlid checks at
 * upload"). What the archive alone tells is refused at upload with the
 * reason: not a tar archive, damaged or cut short, compressed twice, an
 * entry that would leave the image's root, a docker save whose manifest names
 * files it lacks, more than max_unpacked_bytes once decompressed. What only
 * a host finds (a layer's digest against its config, the host's own
 * images.* limits and disk) stays the hosts' verdict. */
#ifndef SL_SERVER_ARCHIVE_CHECK_H
#define SL_SERVER_ARCHIVE_CHECK_H

#include "../lib/error.h"

#include <stdint.h>

enum archive_kind {
    ARCHIVE_ROOTFS, /* a root filesystem: one layer */
    ARCHIVE_DOCKER, /* a docker save: manifest.json */
    ARCHIVE_OCI,    /* a tarred OCI layout: oci-layout */
};

/* Reads the archive at path through (headers, and the data of a compressed
 * one, never held in memory) and says what it is in *kind. Fails with
 * SL_E_INVALID "bad_archive" (a message for the admin, naming the entry) or
 * SL_E_TOO_LARGE "archive_too_large" past max_unpacked_bytes; other errors
 * are the server's (unable to open the file). */
int archive_check(const char *path, uint64_t max_unpacked_bytes, enum archive_kind *kind,
                  struct sl_error *err);

/* "a root filesystem tarball", "a docker save tarball", "an OCI layout". */
const char *archive_kind_text(enum archive_kind kind);

#endif
