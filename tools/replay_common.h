/* Pieces of the workload replay driver that do not touch kvtier: the
 * workload file, an unbounded key set (the `mem` tier's contents), and a
 * monotonic clock.  Header-only, included by kvtier-replay.c. */
#ifndef KVTIER_REPLAY_COMMON_H
#define KVTIER_REPLAY_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvtier.h"

/* Longest key, in bytes: the size of the header's owned key buffer. */
#define REPLAY_MAX_KEY_LEN sizeof(((kvtier_key_buf *)0)->bytes)

/* ---- the workload ------------------------------------------------------ */

/* One request of the workload: its id string and its keys (into the
 * workload's key array). */
typedef struct {
    char *name;
    size_t first_key;
    size_t n_keys;
} wl_request;

/* A parsed workload: every key reference as a kvtier_key pointing into one
 * byte pool, in file order. */
typedef struct {
    wl_request *requests;
    size_t n_requests;
    kvtier_key *keys;
    size_t n_keys;
    uint8_t *pool;
    size_t max_keys_per_request;
} workload;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "kvtier-replay: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return q;
}

static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads a workload file (`R <req_id> <n_keys> <key_hex>...` lines, `#`
 * comments).  Returns 0, or -1 after printing what was wrong. */
static int workload_load(const char *path, workload *wl) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvtier-replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fprintf(stderr, "kvtier-replay: cannot seek %s\n", path);
        fclose(f);
        return -1;
    }
    long size = ftell(f);
    rewind(f);
    char *text = (char *)xrealloc(NULL, (size_t)size + 1);
    if (size < 0 || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "kvtier-replay: cannot read %s\n", path);
        free(text);
        fclose(f);
        return -1;
    }
    fclose(f);
    text[size] = '\0';

    memset(wl, 0, sizeof *wl);
    size_t cap_req = 0, cap_keys = 0, pool_len = 0, line_no = 0;
    /* Key bytes are at most half the file's size. */
    wl->pool = (uint8_t *)xrealloc(NULL, (size_t)size / 2 + 1);
    char *p = text;
    char *end = text + size;
    while (p < end) {
        char *eol = (char *)memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        line_no++;
        if (eol == p || *p == '#') {
            p = eol + 1;
            continue;
        }
        if (p[0] != 'R' || p[1] != ' ') {
            fprintf(stderr, "kvtier-replay: %s:%zu: expected a line starting with 'R '\n", path,
                    line_no);
            goto fail;
        }
        char *name = p + 2;
        char *sp = (char *)memchr(name, ' ', (size_t)(eol - name));
        if (!sp) {
            fprintf(stderr, "kvtier-replay: %s:%zu: missing key count\n", path, line_no);
            goto fail;
        }
        *sp = '\0';
        char *q = sp + 1;
        char *after = NULL;
        unsigned long long n = strtoull(q, &after, 10);
        if (after == q) {
            fprintf(stderr, "kvtier-replay: %s:%zu: bad key count\n", path, line_no);
            goto fail;
        }
        q = after;
        if (wl->n_requests == cap_req) {
            cap_req = cap_req ? cap_req * 2 : 1024;
            wl->requests = (wl_request *)xrealloc(wl->requests, cap_req * sizeof(wl_request));
        }
        wl_request *r = &wl->requests[wl->n_requests++];
        size_t name_len = (size_t)(sp - name);
        r->name = (char *)xrealloc(NULL, name_len + 1);
        memcpy(r->name, name, name_len + 1);
        r->first_key = wl->n_keys;
        r->n_keys = (size_t)n;
        if (r->n_keys > wl->max_keys_per_request) wl->max_keys_per_request = r->n_keys;
        for (unsigned long long i = 0; i < n; i++) {
            while (q < eol && *q == ' ') q++;
            char *tok = q;
            while (q < eol && *q != ' ') q++;
            size_t hex_len = (size_t)(q - tok);
            if (hex_len == 0 || hex_len % 2 != 0 || hex_len / 2 > REPLAY_MAX_KEY_LEN) {
                fprintf(stderr, "kvtier-replay: %s:%zu: key %llu is not 1 to 64 bytes of hex\n",
                        path, line_no, i);
                goto fail;
            }
            if (wl->n_keys == cap_keys) {
                cap_keys = cap_keys ? cap_keys * 2 : 65536;
                wl->keys = (kvtier_key *)xrealloc(wl->keys, cap_keys * sizeof(kvtier_key));
            }
            uint8_t *dst = wl->pool + pool_len;
            for (size_t j = 0; j < hex_len / 2; j++) {
                int hi = hex_value(tok[2 * j]), lo = hex_value(tok[2 * j + 1]);
                if (hi < 0 || lo < 0) {
                    fprintf(stderr, "kvtier-replay: %s:%zu: key %llu is not hex\n", path,
                            line_no, i);
                    goto fail;
                }
                dst[j] = (uint8_t)(hi * 16 + lo);
            }
            /* Offsets for now: the pool does not move, pointers are fixed below. */
            wl->keys[wl->n_keys].data = NULL;
            wl->keys[wl->n_keys].len = hex_len / 2;
            wl->n_keys++;
            pool_len += hex_len / 2;
        }
        while (q < eol && (*q == ' ' || *q == '\r')) q++;
        if (q != eol) {
            fprintf(stderr, "kvtier-replay: %s:%zu: more keys than the count says\n", path,
                    line_no);
            goto fail;
        }
        p = eol + 1;
    }
    free(text);
    {
        size_t off = 0;
        for (size_t i = 0; i < wl->n_keys; i++) {
            wl->keys[i].data = wl->pool + off;
            off += wl->keys[i].len;
        }
    }
    return 0;
fail:
    free(text);
    return -1;
}

static void workload_free(workload *wl) {
    for (size_t i = 0; i < wl->n_requests; i++) free(wl->requests[i].name);
    free(wl->requests);
    free(wl->keys);
    free(wl->pool);
    memset(wl, 0, sizeof *wl);
}

/* ---- an unbounded set of keys ------------------------------------------ */

/* Open addressing with linear probing; each entry holds a copy of the key
 * (length byte + up to 64 bytes) in an arena, found by its hash. */
typedef struct {
    uint64_t *hashes;   /* 0 = empty (real hashes are forced non-zero) */
    uint32_t *entries;  /* arena index of each occupied slot */
    size_t mask;
    size_t count;
    uint8_t *arena;     /* entries of (1 + REPLAY_MAX_KEY_LEN) bytes */
    size_t arena_cap;
} key_set;

#define KEY_SET_ENTRY (1 + REPLAY_MAX_KEY_LEN)

static uint64_t key_hash(const uint8_t *data, size_t len) {
    /* FNV-1a, then a murmur-style finalizer so low bits mix well. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= data[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;
}

static void key_set_init(key_set *s) {
    memset(s, 0, sizeof *s);
    s->mask = 1023;
    s->hashes = (uint64_t *)calloc(s->mask + 1, sizeof(uint64_t));
    s->entries = (uint32_t *)calloc(s->mask + 1, sizeof(uint32_t));
    if (!s->hashes || !s->entries) {
        fprintf(stderr, "kvtier-replay: out of memory\n");
        exit(1);
    }
}

static void key_set_free(key_set *s) {
    free(s->hashes);
    free(s->entries);
    free(s->arena);
    memset(s, 0, sizeof *s);
}

static int key_set_entry_eq(const key_set *s, uint32_t e, const uint8_t *data, size_t len) {
    const uint8_t *k = s->arena + (size_t)e * KEY_SET_ENTRY;
    return k[0] == len && memcmp(k + 1, data, len) == 0;
}

static int key_set_contains(const key_set *s, const uint8_t *data, size_t len) {
    uint64_t h = key_hash(data, len);
    for (size_t i = (size_t)h & s->mask;; i = (i + 1) & s->mask) {
        if (s->hashes[i] == 0) return 0;
        if (s->hashes[i] == h && key_set_entry_eq(s, s->entries[i], data, len)) return 1;
    }
}

static void key_set_grow(key_set *s) {
    size_t old_cap = s->mask + 1;
    uint64_t *old_h = s->hashes;
    uint32_t *old_e = s->entries;
    s->mask = old_cap * 2 - 1;
    s->hashes = (uint64_t *)calloc(s->mask + 1, sizeof(uint64_t));
    s->entries = (uint32_t *)calloc(s->mask + 1, sizeof(uint32_t));
    if (!s->hashes || !s->entries) {
        fprintf(stderr, "kvtier-replay: out of memory\n");
        exit(1);
    }
    for (size_t j = 0; j < old_cap; j++) {
        if (old_h[j] == 0) continue;
        size_t i = (size_t)old_h[j] & s->mask;
        while (s->hashes[i] != 0) i = (i + 1) & s->mask;
        s->hashes[i] = old_h[j];
        s->entries[i] = old_e[j];
    }
    free(old_h);
    free(old_e);
}

/* Adds a key; returns 1 if it was new. */
static int key_set_insert(key_set *s, const uint8_t *data, size_t len) {
    uint64_t h = key_hash(data, len);
    size_t i = (size_t)h & s->mask;
    for (;; i = (i + 1) & s->mask) {
        if (s->hashes[i] == 0) break;
        if (s->hashes[i] == h && key_set_entry_eq(s, s->entries[i], data, len)) return 0;
    }
    if (s->count == s->arena_cap) {
        s->arena_cap = s->arena_cap ? s->arena_cap * 2 : 4096;
        s->arena = (uint8_t *)xrealloc(s->arena, s->arena_cap * KEY_SET_ENTRY);
    }
    uint8_t *k = s->arena + s->count * KEY_SET_ENTRY;
    k[0] = (uint8_t)len;
    memcpy(k + 1, data, len);
    s->hashes[i] = h;
    s->entries[i] = (uint32_t)s->count;
    s->count++;
    if (s->count * 4 > (s->mask + 1) * 3) key_set_grow(s);
    return 1;
}

/* ---- time ---------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif /* KVTIER_REPLAY_COMMON_H */
