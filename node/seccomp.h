/* The seccomp profile runc applies to every process of an instance: an
 * allow-list with Docker's default semantics (docs/design/node-runtime.md,
 * "Seccomp"). Anything not allowed fails with EPERM; clone3 fails with
 * ENOSYS so that glibc falls back to clone, whose flags the filter can see. */
#ifndef SL_NODE_SECCOMP_H
#define SL_NODE_SECCOMP_H

#include <jansson.h>
#include <stddef.h>

/* The OCI "linux.seccomp" object (a new reference, never NULL) for a
 * container holding exactly the capabilities CAPS ("CAP_SYS_CHROOT", ...):
 * the groups Docker gates on a capability are allowed only when it is held. */
json_t *seccomp_profile(const char *const *caps, size_t n_caps);

#endif
