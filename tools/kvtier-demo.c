/*
 * kvtier-demo: the main job, end to end.  An engine-like scheduler replays
 * a multi-turn chat workload (the project's workload generator's format)
 * with real bytes, through a primary tier in a shared memory region and
 * the file-system tier in a fresh temporary directory.
 *
 * When the engine computes a block it writes a pattern derived from the
 * block's key into the block's slot before completing the store; the
 * completed store cascades to the fs tier.  The primary tier is smaller
 * than the working set, so blocks are evicted and later come back from
 * disk (promotions).  Every block the engine loads is checked byte for
 * byte against its key's pattern.
 *
 * Each step serves a batch of requests as an engine's scheduler does:
 * lookups (a request whose blocks are being promoted waits for a later
 * step, keeping the leading blocks it already has pinned), loads of the
 * leading hits, a store of the rest, the end of the step, then the "GPU"
 * work and the completions.  A request whose store finds no free slot runs
 * again later; when no request can run, the engine sleeps on the
 * manager's wake-up descriptor.  At the end it waits for the last
 * transfers, prints a summary and removes what it created (the region's
 * name goes as soon as the region is mapped; the directory at exit).
 * Exits non-zero on any verification failure or failed call.
 *
 *     kvtier-demo --workload FILE [--slots N] [--block-kib N] [--batch N]
 *                 [--fs-threads N] [--fs-capacity-mib N] [--fs-layout L] [--dir PARENT]
 *                 [--require-promotions]
 *
 * --fs-layout: `segments` (default: records in preallocated segment files,
 * the capacity reserved at start) or `files` (a file per block).
 *
 * Uses only the public header.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"

#define MAX_KEY_LEN 64
/* A request that cannot run for this long (blocks never promoted, no room
 * ever), or transfers still running this long after the last request, is
 * a failure, not a slow disk. */
#ifndef WAIT_LIMIT_S
#define WAIT_LIMIT_S 60.0
#endif

static const char *prog = "kvtier-demo";

static void die_status(const char *what, kvtier_status s) {
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, kvtier_status_str(s), kvtier_last_error_message());
    exit(EXIT_FAILURE);
}

#define CALL(what, expr)                                 \
    do {                                                 \
        kvtier_status s_ = (expr);                       \
        if (s_ != KVTIER_STATUS_OK) die_status(what, s_); \
    } while (0)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", prog, n);
        exit(EXIT_FAILURE);
    }
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the workload ------------------------------------------------------ */

typedef struct {
    char *name;
    size_t first; /* index of its first key in workload.keys */
    size_t n;
} wl_request;

typedef struct {
    wl_request *reqs;
    size_t n_reqs, cap_reqs;
    kvtier_key *keys;
    size_t n_keys, cap_keys;
    uint8_t *pool; /* key bytes; kvtier_key.data points here */
    size_t pool_len, cap_pool;
    size_t max_keys;
    char *text;
} workload;

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        fprintf(stderr, "%s: out of memory\n", prog);
        exit(EXIT_FAILURE);
    }
    *cap = c;
    return q;
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

/* Reads `R <req_id> <n_keys> <key_hex>...` lines (and `#` comments). */
static void workload_load(const char *path, workload *wl) {
    memset(wl, 0, sizeof *wl);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
        exit(EXIT_FAILURE);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    if (size < 0) {
        fprintf(stderr, "%s: cannot read %s\n", prog, path);
        exit(EXIT_FAILURE);
    }
    wl->text = (char *)xmalloc((size_t)size + 1);
    if (fread(wl->text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: cannot read %s\n", prog, path);
        exit(EXIT_FAILURE);
    }
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
            wl->reqs = (wl_request *)grow(wl->reqs, &wl->cap_reqs, wl->n_reqs + 1, sizeof *wl->reqs);
            wl_request *r = &wl->reqs[wl->n_reqs++];
            r->name = name;
            r->first = wl->n_keys;
            r->n = n;
            for (unsigned long k = 0; k < n; k++) {
                char *hex = next_token(&cur);
                size_t hl = hex ? strlen(hex) : 0;
                if (!hex || hl == 0 || hl % 2 || hl / 2 > MAX_KEY_LEN) {
                    fprintf(stderr, "%s: %s:%zu: key %lu missing or not 1..64 bytes of hex\n", prog, path,
                            line_no, k);
                    exit(EXIT_FAILURE);
                }
                wl->pool = (uint8_t *)grow(wl->pool, &wl->cap_pool, wl->pool_len + hl / 2, 1);
                for (size_t b = 0; b < hl / 2; b++) {
                    int hi = hexval(hex[2 * b]), lo = hexval(hex[2 * b + 1]);
                    if (hi < 0 || lo < 0) {
                        fprintf(stderr, "%s: %s:%zu: bad hex in key %lu\n", prog, path, line_no, k);
                        exit(EXIT_FAILURE);
                    }
                    wl->pool[wl->pool_len + b] = (uint8_t)(hi * 16 + lo);
                }
                wl->keys = (kvtier_key *)grow(wl->keys, &wl->cap_keys, wl->n_keys + 1, sizeof *wl->keys);
                /* Offsets for now: the pool may still move. */
                wl->keys[wl->n_keys].data = (const uint8_t *)(uintptr_t)wl->pool_len;
                wl->keys[wl->n_keys].len = hl / 2;
                wl->n_keys++;
                wl->pool_len += hl / 2;
            }
            if (next_token(&cur)) {
                fprintf(stderr, "%s: %s:%zu: more keys than %lu\n", prog, path, line_no, n);
                exit(EXIT_FAILURE);
            }
            if (n > wl->max_keys) wl->max_keys = n;
        }
        line = next;
    }
    for (size_t i = 0; i < wl->n_keys; i++) wl->keys[i].data = wl->pool + (uintptr_t)wl->keys[i].data;
}

static void workload_free(workload *wl) {
    free(wl->reqs);
    free(wl->keys);
    free(wl->pool);
    free(wl->text);
}

/* ---- the bytes a block holds ------------------------------------------- */

static uint64_t key_seed(const kvtier_key *k) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < k->len; i++) h = (h ^ k->data[i]) * 1099511628211ull;
    return h | 1;
}

/* The "GPU" computes a block: a pattern unique to the key and the offset. */
static void write_block(uint8_t *slot, size_t bytes, const kvtier_key *k) {
    uint64_t seed = key_seed(k);
    size_t words = bytes / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t v = seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
        memcpy(slot + i * 8, &v, 8);
    }
}

/* The "GPU" reads a block: true if every byte is the key's pattern. */
static bool check_block(const uint8_t *slot, size_t bytes, const kvtier_key *k) {
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

/* ---- clean-up ---------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The directory the demo made, removed at exit whatever happens. */
static char demo_dir[4096];

static void remove_demo_dir(void) {
    if (demo_dir[0]) nftw(demo_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    demo_dir[0] = '\0';
}

/* The value of tier `tier`'s statistic `name` (0 if it has none). */
static double stat_value(const kvtier_manager *m, size_t tier, const char *name) {
    kvtier_tier_stat stats[256];
    size_t n = 0;
    kvtier_status st = kvtier_manager_read_tier_stats(m, tier, stats, 256, &n);
    if (st != KVTIER_STATUS_OK) die_status("read_tier_stats", st);
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, name) == 0) return stats[i].value;
    return 0.0;
}

/* ---- the engine -------------------------------------------------------- */

/* One request in the running batch, with buffers sized for the longest. */
typedef struct {
    const wl_request *r;
    kvtier_request_handle handle; /* from kvtier_manager_request_begin */
    bool deferred;      /* waiting for blocks being promoted */
    size_t defers;      /* steps deferred in a row */
    double since;       /* when the first of them began */
    size_t h;           /* blocks loaded this step */
    size_t pinned;      /* leading blocks pinned (prepare_load) so far */
    uint32_t *slots;    /* their slots */
    size_t n_store;     /* blocks computed this step */
    size_t *store_idx;  /* their positions after h */
    uint32_t *store_slots;
    kvtier_key *store_keys;
    uint8_t *promoted;  /* per key: this request's lookup started its promotion */
} active_req;

typedef struct {
    size_t steps, lookups, deferrals, waits;
    size_t primary_hits, promoted_hits, computed, refused, failures;
    size_t max_defers;
} totals;

/* The request waits for a later step (blocks being promoted, or room). */
static void defer(active_req *q, totals *t) {
    t->deferrals++;
    if (q->defers++ == 0) q->since = now_s();
    if (q->defers > t->max_defers) t->max_defers = q->defers;
    if (now_s() - q->since > WAIT_LIMIT_S) {
        fprintf(stderr, "%s: request %s could not run for %.0f s (%zu steps)\n", prog, q->r->name,
                WAIT_LIMIT_S, q->defers);
        exit(EXIT_FAILURE);
    }
}

static void usage(void) {
    fprintf(stderr,
            "usage: %s --workload FILE [--slots N] [--block-kib N] [--batch N]\n"
            "          [--fs-threads N] [--fs-capacity-mib N] [--fs-layout segments|files] [--dir PARENT]\n"
            "          [--require-promotions]\n",
            prog);
    exit(2);
}

static unsigned long num_arg(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) usage();
    char *end = NULL;
    unsigned long v = strtoul(argv[++*i], &end, 10);
    if (!end || *end || v == 0) {
        fprintf(stderr, "%s: %s wants a positive number, not %s\n", prog, argv[*i - 1], argv[*i]);
        exit(2);
    }
    return v;
}

static void wait_wake(int fd, int timeout_ms) {
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN)) {
        uint64_t v;
        ssize_t got = read(fd, &v, sizeof v);
        (void)got; /* EAGAIN if another reader won: nothing to do */
    }
}

int main(int argc, char **argv) {
    const char *wl_path = NULL;
    const char *parent = getenv("TMPDIR");
    unsigned long slots = 4096, block_kib = 16, batch = 16, fs_threads = 4, fs_cap_mib = 2048;
    kvtier_fs_layout fs_layout = KVTIER_FS_LAYOUT_SEGMENTS;
    bool require_promotions = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--workload") == 0 && i + 1 < argc) wl_path = argv[++i];
        else if (strcmp(argv[i], "--slots") == 0) slots = num_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--block-kib") == 0) block_kib = num_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--batch") == 0) batch = num_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--fs-threads") == 0) fs_threads = num_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--fs-capacity-mib") == 0) fs_cap_mib = num_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--fs-layout") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "segments") == 0) fs_layout = KVTIER_FS_LAYOUT_SEGMENTS;
            else if (strcmp(l, "files") == 0) fs_layout = KVTIER_FS_LAYOUT_FILES;
            else usage();
        }
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) parent = argv[++i];
        else if (strcmp(argv[i], "--require-promotions") == 0) require_promotions = true;
        else usage();
    }
    if (!wl_path || slots > UINT32_MAX || block_kib % 4 != 0) {
        if (block_kib % 4 != 0) fprintf(stderr, "%s: --block-kib must be a multiple of 4 (pages)\n", prog);
        usage();
    }
    if (!parent || !*parent) parent = "/tmp";
    size_t block_bytes = (size_t)block_kib * 1024;

    workload wl;
    double t_parse = now_s();
    workload_load(wl_path, &wl);
    t_parse = now_s() - t_parse;
    if (wl.n_reqs == 0) {
        fprintf(stderr, "%s: %s holds no requests\n", prog, wl_path);
        return EXIT_FAILURE;
    }

    /* What the demo creates, removed at the end: a region name and a directory. */
    char region_name[96];
    snprintf(region_name, sizeof region_name, "kvtier-demo-%ld-%ld", (long)getpid(), (long)time(NULL));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/kvtier-demo-XXXXXX", parent);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "%s: cannot create a directory under %s: %s\n", prog, parent, strerror(errno));
        return EXIT_FAILURE;
    }
    memcpy(demo_dir, dir, sizeof dir);
    atexit(remove_demo_dir);

    kvtier_region_options ro = kvtier_region_options_default();
    ro.name = region_name;
    ro.slot_count = (uint32_t)slots;
    ro.slot_bytes = block_bytes;
    kvtier_region *region = NULL;
    CALL("kvtier_region_new", kvtier_region_new(&ro, &region));
    /* Every process that maps the region (only this one here) has it:
     * remove its name now, so that even a crash leaves nothing in /dev/shm.
     * The mapping stays until the region is closed and the manager freed. */
    bool unlinked = false;
    CALL("kvtier_region_unlink", kvtier_region_unlink(region, &unlinked));
    void *base_v = NULL;
    size_t stride = 0;
    CALL("kvtier_region_base", kvtier_region_base(region, &base_v));
    CALL("kvtier_region_stride", kvtier_region_stride(region, &stride));
    uint8_t *base = (uint8_t *)base_v;

    kvtier_manager_options mo = kvtier_manager_options_default();
    mo.capacity = (uint32_t)slots;
    mo.block_bytes = block_bytes;
    kvtier_manager *m = NULL;
    /* The manager's slots are the region's: the fs tier copies through them. */
    CALL("kvtier_manager_new", kvtier_manager_new(&mo, region, &m));

    kvtier_fs_options fo = kvtier_fs_options_default();
    fo.directory = dir;
    fo.read_threads = (uint32_t)fs_threads;
    fo.write_threads = (uint32_t)fs_threads;
    fo.capacity_bytes = (uint64_t)fs_cap_mib << 20;
    fo.layout = fs_layout;
    size_t fs_tier = 0;
    CALL("kvtier_manager_add_fs_tier", kvtier_manager_add_fs_tier(m, &fo, &fs_tier));
    int wake = -1;
    CALL("kvtier_manager_wake_fd", kvtier_manager_wake_fd(m, &wake));

    size_t mk = wl.max_keys ? wl.max_keys : 1;
    active_req *act = (active_req *)xmalloc(batch * sizeof *act);
    for (size_t a = 0; a < batch; a++) {
        act[a].slots = (uint32_t *)xmalloc(mk * sizeof(uint32_t));
        act[a].store_idx = (size_t *)xmalloc(mk * sizeof(size_t));
        act[a].store_slots = (uint32_t *)xmalloc(mk * sizeof(uint32_t));
        act[a].store_keys = (kvtier_key *)xmalloc(mk * sizeof(kvtier_key));
        act[a].promoted = (uint8_t *)xmalloc(mk);
    }
    active_req **run = (active_req **)xmalloc(batch * sizeof *run);
    active_req **spare = (active_req **)xmalloc(batch * sizeof *spare);
    for (size_t a = 0; a < batch; a++) spare[a] = &act[batch - 1 - a];
    size_t n_run = 0, n_spare = batch, next = 0;

    totals t;
    memset(&t, 0, sizeof t);
    double t0 = now_s();

    while (next < wl.n_reqs || n_run > 0) {
        t.steps++;
        /* 1. New requests join the batch. */
        while (n_run < batch && next < wl.n_reqs) {
            active_req *q = spare[--n_spare];
            q->r = &wl.reqs[next++];
            q->defers = 0;
            q->pinned = 0;
            memset(q->promoted, 0, q->r->n);
            CALL("request_begin", kvtier_manager_request_begin(m, q->r->name, NULL, &q->handle, NULL));
            run[n_run++] = q;
        }
        /* 2. Lookups; loads of leading hits; stores of the rest. */
        for (size_t a = 0; a < n_run; a++) {
            active_req *q = run[a];
            const kvtier_key *keys = wl.keys + q->r->first;
            /* The blocks it pinned while waiting are hits: look up the rest. */
            size_t n = q->r->n, i = q->pinned;
            bool pending = false;
            q->h = 0;
            q->n_store = 0;
            /* Past a pending key, keep looking so that every block this
             * request can get from the fs tier is promoted in one job.  One
             * key per lookup here (an engine that does not pin as it goes
             * passes them all at once): each leading hit is pinned before
             * the next lookup, whose promotion could evict it otherwise. */
            for (; i < n; i++) {
                kvtier_lookup_answer ans;
                CALL("lookup", kvtier_manager_lookup(m, q->handle, &keys[i], 1, &ans));
                t.lookups++;
                if (ans.stop == KVTIER_LOOKUP_HIT) {
                    /* Pin each leading hit at once: a promotion started by
                     * a later lookup (this request's or, while it waits,
                     * another's) could evict it otherwise, and the request
                     * would go round again. */
                    if (i == q->pinned) {
                        CALL("prepare_load", kvtier_manager_prepare_load(m, q->handle, keys + i, 1, q->slots + i));
                        q->pinned++;
                    }
                    continue;
                }
                if (ans.stop == KVTIER_LOOKUP_RETRY || ans.stop == KVTIER_LOOKUP_HIT_PENDING) {
                    if (ans.stop == KVTIER_LOOKUP_RETRY) q->promoted[i] = 1;
                    pending = true;
                    continue;
                }
                break; /* MISS */
            }
            q->deferred = pending;
            if (pending) {
                /* Its leading blocks stay pinned while the rest comes in. */
                defer(q, &t);
                continue;
            }
            q->h = i;
            if (q->pinned != q->h) {
                fprintf(stderr, "%s: request %s: %zu leading hits but %zu pinned\n", prog, q->r->name, q->h,
                        q->pinned);
                exit(EXIT_FAILURE);
            }
            if (q->h > 0) CALL("touch", kvtier_manager_touch(m, q->handle, keys, q->h));
            if (q->h < n) {
                kvtier_store_plan plan = {q->store_idx, q->store_slots, NULL, 0, 0, false};
                CALL("prepare_store", kvtier_manager_prepare_store(m, q->handle, keys + q->h, n - q->h, &plan));
                q->n_store = plan.store_count;
                if (plan.refused) {
                    /* No free slot (they are pinned by loads and by stores
                     * still on their way to disk): give the loaded blocks
                     * back and run the whole request in a later step. */
                    if (n - q->h > slots) {
                        fprintf(stderr, "%s: request %s stores %zu blocks; the primary tier has %lu slots\n",
                                prog, q->r->name, n - q->h, slots);
                        exit(EXIT_FAILURE);
                    }
                    t.refused++;
                    if (q->pinned)
                        CALL("complete_load", kvtier_manager_complete_load(m, q->handle, keys, q->pinned));
                    q->pinned = 0;
                    q->h = 0;
                    q->n_store = 0;
                    q->deferred = true;
                    defer(q, &t);
                }
            }
        }
        /* 3. End of the scheduler step: promotions go to the fs tier. */
        CALL("schedule_end", kvtier_manager_schedule_end(m));
        /* 4. The "GPU" runs: reads the loaded blocks, computes the rest. */
        size_t kept = 0;
        for (size_t a = 0; a < n_run; a++) {
            active_req *q = run[a];
            if (q->deferred) {
                run[kept++] = q;
                continue;
            }
            const kvtier_key *keys = wl.keys + q->r->first;
            for (size_t j = 0; j < q->h; j++) {
                if (!check_block(base + (size_t)q->slots[j] * stride, block_bytes, &keys[j])) {
                    if (t.failures++ < 10)
                        fprintf(stderr, "%s: request %s: block %zu (slot %u) has wrong bytes\n", prog,
                                q->r->name, j, q->slots[j]);
                }
                if (q->promoted[j]) t.promoted_hits++;
                else t.primary_hits++;
            }
            if (q->h) CALL("complete_load", kvtier_manager_complete_load(m, q->handle, keys, q->h));
            q->pinned = 0;
            for (size_t s = 0; s < q->n_store; s++) {
                const kvtier_key *k = &keys[q->h + q->store_idx[s]];
                write_block(base + (size_t)q->store_slots[s] * stride, block_bytes, k);
                q->store_keys[s] = *k;
            }
            if (q->n_store)
                CALL("complete_store",
                     kvtier_manager_complete_store(m, q->handle, q->store_keys, q->n_store, true, NULL));
            t.computed += q->n_store;
            CALL("request_finished", kvtier_manager_request_finished(m, q->handle));
            spare[n_spare++] = q;
        }
        /* Every request left is waiting on the disk: sleep until a job ends. */
        /* No request could run (the batch is full, or the workload is
         * done, and all wait on the disk): sleep until a job ends. */
        if (kept > 0 && kept == n_run) {
            t.waits++;
            wait_wake(wake, 100);
        }
        n_run = kept;
    }

    /* The last cascades reach the disk (bounded wait on the wake fd). */
    bool pending = true;
    double drain_start = now_s();
    for (;;) {
        CALL("schedule_end", kvtier_manager_schedule_end(m));
        CALL("has_pending_work", kvtier_manager_has_pending_work(m, &pending));
        if (!pending || now_s() - drain_start > WAIT_LIMIT_S) break;
        wait_wake(wake, 100);
    }
    double wall = now_s() - t0;

    double promo_blocks = stat_value(m, fs_tier, "promotion_blocks");
    double promo_fail = stat_value(m, fs_tier, "promotion_failures");
    double cascade_blocks = stat_value(m, fs_tier, "cascade_blocks");
    double cascade_fail = stat_value(m, fs_tier, "cascade_failures");
    double read_bytes = stat_value(m, fs_tier, "read_bytes");
    double write_bytes = stat_value(m, fs_tier, "write_bytes");
    double read_us = stat_value(m, fs_tier, "read_time_us");
    double write_us = stat_value(m, fs_tier, "write_time_us");
    double fs_blocks = stat_value(m, fs_tier, "blocks");
    double direct = stat_value(m, fs_tier, "direct_io");
    double evicted = stat_value(m, 0, "evictions");

    double t_close = now_s();
    kvtier_status sd = kvtier_manager_shutdown(m);
    kvtier_manager_free(m);
    bool kept_mapping = false;
    kvtier_status sc = kvtier_region_close(region, &kept_mapping);
    t_close = now_s() - t_close;
    double t_remove = now_s();
    int removed = nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    demo_dir[0] = '\0';
    t_remove = now_s() - t_remove;

    size_t loaded = t.primary_hits + t.promoted_hits;
    double gib = 1024.0 * 1024.0 * 1024.0;
    double engine_in = (double)loaded * (double)block_bytes, engine_out = (double)t.computed * (double)block_bytes;
    printf("kvtier demo: %s\n", wl_path);
    printf("  primary tier     %lu slots x %lu KiB = %.0f MiB, LRU, in /dev/shm/%s\n", slots, block_kib,
           (double)slots * (double)block_bytes / (1024.0 * 1024.0), region_name);
    printf("  fs tier          %s (%s, %s, %lu read + %lu write threads, %lu MiB)\n", dir,
           fs_layout == KVTIER_FS_LAYOUT_SEGMENTS ? "segment files" : "a file per block",
           direct > 0 ? "O_DIRECT" : "buffered", fs_threads, fs_threads, fs_cap_mib);
    printf("  requests         %zu (%zu block references, %zu lookups) in %zu steps of up to %lu\n", wl.n_reqs,
           wl.n_keys, t.lookups, t.steps, batch);
    printf("  deferred         %zu times for promotions, %zu for a free slot (at most %zu steps in a row);\n"
           "                   %zu steps idle on the wake fd\n",
           t.deferrals - t.refused, t.refused, t.max_defers, t.waits);
    printf("  blocks hit       %zu in the primary tier, %zu promoted from the fs tier (%.0f promoted in all)\n",
           t.primary_hits, t.promoted_hits, promo_blocks);
    printf("  blocks computed  %zu (stored)\n", t.computed);
    printf("  evictions        %.0f from the primary tier; the fs tier holds %.0f blocks at the end\n", evicted,
           fs_blocks);
    printf("  engine -> slots  %.2f GiB written (computed blocks)\n", engine_out / gib);
    printf("  slots -> engine  %.2f GiB read and verified (loaded blocks)\n", engine_in / gib);
    printf("  slots -> fs      %.2f GiB in %.0f blocks: %.2f GB/s over the wall time, %.2f GB/s per busy I/O thread\n",
           write_bytes / gib, cascade_blocks, write_bytes / wall / 1e9,
           write_us > 0 ? write_bytes / (write_us * 1e-6) / 1e9 : 0.0);
    printf("  fs -> slots      %.2f GiB in %.0f blocks: %.2f GB/s over the wall time, %.2f GB/s per busy I/O thread\n",
           read_bytes / gib, promo_blocks, read_bytes / wall / 1e9,
           read_us > 0 ? read_bytes / (read_us * 1e-6) / 1e9 : 0.0);
    printf("  failed jobs      %.0f promotions, %.0f cascades\n", promo_fail, cascade_fail);
    printf("  wall time        %.2f s replaying and draining (%.2f s reading the workload, %.2f s shutting down)\n",
           wall, t_parse, t_close);
    printf("  verification     %zu failures in %zu loaded blocks\n", t.failures, loaded);
    printf("  removed          /dev/shm/%s (once mapped) and %s (%.2f s)\n", region_name, dir, t_remove);

    int rc = EXIT_SUCCESS;
    if (t.failures > 0) {
        fprintf(stderr, "%s: %zu loaded blocks had wrong bytes\n", prog, t.failures);
        rc = EXIT_FAILURE;
    }
    if (pending) {
        fprintf(stderr, "%s: work still pending after %.0f s\n", prog, WAIT_LIMIT_S);
        rc = EXIT_FAILURE;
    }
    if (sd != KVTIER_STATUS_OK || sc != KVTIER_STATUS_OK || kept_mapping || !unlinked || removed != 0) {
        fprintf(stderr, "%s: clean-up failed (shutdown %s, region close %s, directory removal %d)\n", prog,
                kvtier_status_str(sd), kvtier_status_str(sc), removed);
        rc = EXIT_FAILURE;
    }
    if (require_promotions && (t.promoted_hits == 0 || promo_blocks == 0)) {
        fprintf(stderr, "%s: no block came back from the fs tier (primary tier too large?)\n", prog);
        rc = EXIT_FAILURE;
    }

    for (size_t a = 0; a < batch; a++) {
        free(act[a].slots);
        free(act[a].store_idx);
        free(act[a].store_slots);
        free(act[a].store_keys);
        free(act[a].promoted);
    }
    free(act);
    free(run);
    free(spare);
    workload_free(&wl);
    return rc;
}
