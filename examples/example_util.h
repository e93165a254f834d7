/*
 * example_util.h: helpers the kvtier example programs share.
 *
 * Header-only (static inline), compiles as C11 and as C++17.  Include it
 * after <stdio.h>/<stdlib.h> are available (it includes them itself) and
 * "kvtier.h".
 *
 *   CHECK(call)          runs a kvtier call; on any status but OK prints
 *                        file, line, status name and the last error message
 *                        to stderr and exits with EXIT_FAILURE.
 *   example_pattern()    byte `offset` of the block a key's data is made of:
 *                        what the "GPU" writes into a slot and what a load
 *                        must bring back.
 *   example_byte_keys()  key views of single bytes.
 *   example_temp_dir()   a fresh private directory under /tmp (mkdtemp).
 */
#ifndef KVTIER_EXAMPLE_UTIL_H
#define KVTIER_EXAMPLE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"

/* Exits the program, naming `file`:`line`, the status and this thread's
 * last error message, unless `st` is KVTIER_STATUS_OK. */
static inline void example_check(kvtier_status st, const char *file, int line) {
    if (st != KVTIER_STATUS_OK) {
        fprintf(stderr, "%s:%d: %s: %s\n", file, line, kvtier_status_str(st), kvtier_last_error_message());
        exit(EXIT_FAILURE);
    }
}

/* Runs `call` (an expression of type kvtier_status) and exits on failure. */
#define CHECK(call) example_check((call), __FILE__, __LINE__)

/* Byte `offset` of the pattern for the key `key` (`len` bytes): an FNV-1a
 * hash of the key mixed with the offset, so every key and every position
 * gets its own value. */
static inline uint8_t example_pattern(const uint8_t *key, size_t len, size_t offset) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ key[i]) * 16777619u;
    return (uint8_t)((h >> 8) + offset * 31u);
}

/* Points keys[i] at the single byte bytes[i], for i < n (the keys borrow
 * `bytes`, which must outlive them). */
static inline void example_byte_keys(const uint8_t *bytes, size_t n, kvtier_key *keys) {
    for (size_t i = 0; i < n; i++) {
        keys[i].data = &bytes[i];
        keys[i].len = 1;
    }
}

/* Creates a fresh directory /tmp/kvtier-<name>-<6 random characters>
 * (mode 0700, with mkdtemp) and writes its path to `out` (`len` bytes).
 * Returns `out`, or NULL if the name does not fit or mkdtemp failed. */
static inline char *example_temp_dir(char *out, size_t len, const char *name) {
    int n = snprintf(out, len, "/tmp/kvtier-%s-", name);
    if (n < 0 || (size_t)n + 7 > len) return NULL;
    memset(out + n, 'X', 6); /* mkdtemp's template characters */
    out[n + 6] = '\0';
    return mkdtemp(out);
}

#endif /* KVTIER_EXAMPLE_UTIL_H */
