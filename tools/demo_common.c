/*
 * kvtier-demo: failures, memory, time, workloads (read or generated), the
 * bytes a block holds, and the fs tier's directory.  See demo.h.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo.h"

const char *prog = "kvtier-demo";

void die_status(const char *what, kvtier_status s) {
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, kvtier_status_str(s), kvtier_last_error_message());
    exit(EXIT_FAILURE);
}

void die(const char *message) {
    fprintf(stderr, "%s: %s\n", prog, message);
    exit(EXIT_FAILURE);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) die("out of memory");
    *cap = c;
    return q;
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

unsigned long num_arg(int argc, char **argv, int *i, bool positive, void (*usage)(void)) {
    if (*i + 1 >= argc) usage();
    char *end = NULL;
    unsigned long v = strtoul(argv[++*i], &end, 10);
    if (!end || *end || argv[*i][0] == '-' || (positive && v == 0)) {
        fprintf(stderr, "%s: %s wants a %s number, not %s\n", prog, argv[*i - 1],
                positive ? "positive" : "whole", argv[*i]);
        exit(2);
    }
    return v;
}

/* ---- workloads ---------------------------------------------------------- */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static char *next_token(char **cur) {
    char *p = *cur;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\0' || *p == '\n') {
        *cur = p;
        return NULL;
    }
    char *t = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    if (*p == ' ' || *p == '\t') *p++ = '\0';
    *cur = p;
    return t;
}

/* Adds a request named `name` (kept, not copied) with no keys yet. */
static void add_request(workload *wl, char *name) {
    wl->reqs = (wl_request *)grow(wl->reqs, &wl->cap_reqs, wl->n_reqs + 1, sizeof *wl->reqs);
    wl_request *r = &wl->reqs[wl->n_reqs++];
    r->name = name;
    r->first = wl->n_keys;
    r->n = 0;
}

/* Adds a key of `len` bytes to the last request. */
static void add_key(workload *wl, const uint8_t *bytes, size_t len) {
    wl->pool = (uint8_t *)grow(wl->pool, &wl->cap_pool, wl->pool_len + len, 1);
    memcpy(wl->pool + wl->pool_len, bytes, len);
    wl->keys = (kvtier_key *)grow(wl->keys, &wl->cap_keys, wl->n_keys + 1, sizeof *wl->keys);
    /* Offsets for now: the pool may still move (see fix_keys). */
    wl->keys[wl->n_keys].data = (const uint8_t *)(uintptr_t)wl->pool_len;
    wl->keys[wl->n_keys].len = len;
    wl->n_keys++;
    wl->pool_len += len;
    size_t n = ++wl->reqs[wl->n_reqs - 1].n;
    if (n > wl->max_keys) wl->max_keys = n;
}

static void fix_keys(workload *wl) {
    for (size_t i = 0; i < wl->n_keys; i++) wl->keys[i].data = wl->pool + (uintptr_t)wl->keys[i].data;
}

void workload_load(const char *path, workload *wl) {
    memset(wl, 0, sizeof *wl);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
        exit(EXIT_FAILURE);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    if (size < 0) die("cannot read the workload");
    wl->text = (char *)xmalloc((size_t)size + 1);
    if (fread(wl->text, 1, (size_t)size, f) != (size_t)size) die("cannot read the workload");
    fclose(f);
    wl->text[size] = '\0';

    size_t line_no = 0;
    char *line = wl->text;
    while (*line) {
        line_no++;
        char *end = strchr(line, '\n');
        char *next = end ? end + 1 : line + strlen(line);
        if (end) *end = '\0';
        char *cur = line;
        char *tag = next_token(&cur);
        if (tag && tag[0] != '#') {
            char *name = next_token(&cur);
            char *count = next_token(&cur);
            char *stop = NULL;
            unsigned long n = count ? strtoul(count, &stop, 10) : 0;
            if (strcmp(tag, "R") != 0 || !name || !count || *stop != '\0') {
                fprintf(stderr, "%s: %s:%zu: expected `R <req_id> <n_keys> <key_hex>...`\n", prog, path, line_no);
                exit(EXIT_FAILURE);
            }
            add_request(wl, name);
            for (unsigned long k = 0; k < n; k++) {
                char *hex = next_token(&cur);
                size_t hl = hex ? strlen(hex) : 0;
                uint8_t bytes[MAX_KEY_LEN];
                if (!hex || hl == 0 || hl % 2 || hl / 2 > MAX_KEY_LEN) {
                    fprintf(stderr, "%s: %s:%zu: key %lu missing or not 1..64 bytes of hex\n", prog, path,
                            line_no, k);
                    exit(EXIT_FAILURE);
                }
                for (size_t b = 0; b < hl / 2; b++) {
                    int hi = hexval(hex[2 * b]), lo = hexval(hex[2 * b + 1]);
                    if (hi < 0 || lo < 0) {
                        fprintf(stderr, "%s: %s:%zu: bad hex in key %lu\n", prog, path, line_no, k);
                        exit(EXIT_FAILURE);
                    }
                    bytes[b] = (uint8_t)(hi * 16 + lo);
                }
                add_key(wl, bytes, hl / 2);
            }
            if (next_token(&cur)) {
                fprintf(stderr, "%s: %s:%zu: more keys than %lu\n", prog, path, line_no, n);
                exit(EXIT_FAILURE);
            }
        }
        line = next;
    }
    fix_keys(wl);
}

/* splitmix64: the generator of the stress workload. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A 16-byte key: a tag, a number, and a block index. */
static void put_key(workload *wl, char tag, uint64_t number, uint32_t block) {
    uint8_t k[16];
    memset(k, 0, sizeof k);
    k[0] = (uint8_t)tag;
    for (int i = 0; i < 8; i++) k[1 + i] = (uint8_t)(number >> (8 * i));
    for (int i = 0; i < 4; i++) k[9 + i] = (uint8_t)(block >> (8 * i));
    add_key(wl, k, sizeof k);
}

void workload_zipf(const zipf_shape *z, workload *wl) {
    memset(wl, 0, sizeof *wl);
    if (z->documents == 0 || z->min_blocks == 0 || z->max_blocks < z->min_blocks) die("bad stress workload shape");
    uint64_t state = z->seed;
    size_t *len = (size_t *)xmalloc(z->documents * sizeof *len);
    double *cdf = (double *)xmalloc(z->documents * sizeof *cdf);
    double sum = 0.0;
    for (size_t d = 0; d < z->documents; d++) {
        len[d] = z->min_blocks + (size_t)(next_random(&state) % (z->max_blocks - z->min_blocks + 1));
        sum += 1.0 / (double)(d + 1);
        cdf[d] = sum;
    }
    wl->names = (char *)xmalloc(z->requests * 32);
    for (size_t i = 0; i < z->requests; i++) {
        double u = (double)(next_random(&state) >> 11) * 0x1.0p-53 * sum;
        size_t lo = 0, hi = z->documents - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        char *name = wl->names + i * 32;
        snprintf(name, 32, "req-%zu", i);
        add_request(wl, name);
        for (size_t b = 0; b < len[lo]; b++) put_key(wl, 'd', lo, (uint32_t)b);
        put_key(wl, 'q', i, 0);
    }
    fix_keys(wl);
    free(len);
    free(cdf);
}

void workload_free(workload *wl) {
    free(wl->reqs);
    free(wl->keys);
    free(wl->pool);
    free(wl->text);
    free(wl->names);
}

/* ---- block bytes -------------------------------------------------------- */

static uint64_t key_seed(const kvtier_key *k) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < k->len; i++) h = (h ^ k->data[i]) * 1099511628211ull;
    return h | 1;
}

void write_block(uint8_t *slot, size_t bytes, const kvtier_key *k) {
    uint64_t seed = key_seed(k);
    size_t words = bytes / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t v = seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
        memcpy(slot + i * 8, &v, 8);
    }
}

bool check_block(const uint8_t *slot, size_t bytes, const kvtier_key *k) {
    uint64_t seed = key_seed(k);
    size_t words = bytes / 8;
    uint64_t diff = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t v;
        memcpy(&v, slot + i * 8, 8);
        diff |= v ^ (seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull));
    }
    return diff == 0;
}

/* ---- the manager and the directory -------------------------------------- */

double stat_value(const kvtier_manager *m, size_t tier, const char *name) {
    kvtier_tier_stat stats[256];
    size_t n = 0;
    CALL("read_tier_stats", kvtier_manager_read_tier_stats(m, tier, stats, 256, &n));
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, name) == 0) return stats[i].value;
    return 0.0;
}

uint64_t wait_wake(int fd, int timeout_ms) {
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    uint64_t v = 0;
    if (poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN)) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0; /* EAGAIN: another reader won */
    }
    return v;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The directory the demo made, removed at exit whatever happens. */
static char demo_dir[4096];

static void remove_at_exit(void) {
    if (demo_dir[0]) nftw(demo_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    demo_dir[0] = '\0';
}

void make_demo_dir(const char *parent, char *dir) {
    if (!parent || !*parent) parent = "/tmp";
    snprintf(dir, 4096, "%s/kvtier-demo-XXXXXX", parent);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "%s: cannot create a directory under %s: %s\n", prog, parent, strerror(errno));
        exit(EXIT_FAILURE);
    }
    static bool registered = false;
    if (!registered) atexit(remove_at_exit);
    registered = true;
    memcpy(demo_dir, dir, sizeof demo_dir);
}

int remove_demo_dir(const char *dir) {
    int removed = nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    demo_dir[0] = '\0';
    return removed;
}
