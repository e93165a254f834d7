/*
 * fs_tier.c: an engine loop over a small primary tier (in a shared region)
 * and the built-in file-system tier.
 *
 * Run 1 serves a few chat requests with a primary tier too small to hold
 * them: every block the "GPU" writes into the region cascades to files.
 * Run 2 is a fresh engine (new region, new manager) over the same
 * directory, as after a restart: it replays the same requests, finds every
 * block on disk, promotes it into the primary tier, and checks its bytes.
 *
 *     fs_tier [--segments] [DIRECTORY]
 *
 * DIRECTORY: default a new directory under /tmp, removed at the end.
 * --segments: the tier keeps blocks in records of preallocated segment
 * files (KVTIER_FS_LAYOUT_SEGMENTS, for local storage used by one process)
 * instead of a file per block.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"
#include "example_util.h"

#define SLOTS 16u
#define SLOT_BYTES ((size_t)64 * 1024)
#define REQUESTS 8
#define BLOCKS_PER_REQUEST 6
#define KEY_LEN 16

static int fail(const char *what, kvtier_status s) {
    fprintf(stderr, "fs_tier: %s: %s: %s\n", what, kvtier_status_str(s),
            kvtier_last_error_message());
    return EXIT_FAILURE;
}

/* Requests share a 2-block system prompt, then have their own blocks. */
static void make_key(int request, int block, uint8_t out[KEY_LEN]) {
    memset(out, 0, KEY_LEN);
    snprintf((char *)out, KEY_LEN, "r%02d-b%02d", block < 2 ? 0 : request, block);
}

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = ms * 1000000L;
    nanosleep(&ts, NULL);
}

/* Seconds on the monotonic clock. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* How long disk work may take before it counts as hung: a deadline, not a
 * number of steps, so a loaded machine or a sanitizer build passes too. */
#define HANG_SECONDS 120.0

static double fs_stat(const kvtier_manager *m, size_t tier, const char *name) {
    kvtier_tier_stat stats[256];
    size_t n = 0;
    if (kvtier_manager_read_tier_stats(m, tier, stats, 256, &n) != KVTIER_STATUS_OK) return -1.0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, name) == 0) return stats[i].value;
    return -1.0;
}

struct totals {
    int hit_blocks;
    int stored_blocks;
    int bad_bytes;
};

/* One request: look up its blocks (waiting while promotions run), load
 * the hits (checking their bytes), store the rest. */
static int serve(kvtier_manager *m, kvtier_region *region, int r, struct totals *t) {
    char req[32];
    snprintf(req, sizeof req, "req-%d", r);
    uint8_t kb[BLOCKS_PER_REQUEST][KEY_LEN];
    kvtier_key keys[BLOCKS_PER_REQUEST];
    for (int b = 0; b < BLOCKS_PER_REQUEST; b++) {
        make_key(r, b, kb[b]);
        keys[b].data = kb[b];
        keys[b].len = KEY_LEN;
    }
    kvtier_request_handle h = 0;
    kvtier_status s = kvtier_manager_request_begin(m, req, NULL, &h, NULL);
    if (s != KVTIER_STATUS_OK) return fail("request_begin", s);

    size_t hits = 0;
    double deadline = now_s() + HANG_SECONDS;
    for (;;) {
        kvtier_lookup_answer answer;
        s = kvtier_manager_lookup(m, h, keys, BLOCKS_PER_REQUEST, &answer);
        if (s != KVTIER_STATUS_OK) return fail("lookup", s);
        hits = answer.hits;
        /* Nothing on its way: load the hits, compute the rest. */
        if (answer.pending == 0) break;
        /* The lookup started the promotions of every block of the prefix
         * the fs tier has; `pending` are on their way from disk: end the
         * step, ask again in the next. */
        s = kvtier_manager_schedule_end(m);
        if (s != KVTIER_STATUS_OK) return fail("schedule_end", s);
        if (now_s() > deadline) {
            fprintf(stderr, "fs_tier: %s: promotions never finished (%.0f s)\n", req, HANG_SECONDS);
            return EXIT_FAILURE;
        }
        sleep_ms(1);
    }

    if (hits > 0) {
        uint32_t slots[BLOCKS_PER_REQUEST];
        s = kvtier_manager_prepare_load(m, h, keys, hits, slots);
        if (s != KVTIER_STATUS_OK) return fail("prepare_load", s);
        for (size_t b = 0; b < hits; b++) {
            void *addr = NULL;
            s = kvtier_region_slot_address(region, slots[b], &addr);
            if (s != KVTIER_STATUS_OK) return fail("slot_address", s);
            const uint8_t *p = (const uint8_t *)addr;
            for (size_t i = 0; i < SLOT_BYTES; i++)
                if (p[i] != example_pattern(kb[b], KEY_LEN, i)) {
                    t->bad_bytes++;
                    break;
                }
        }
        s = kvtier_manager_touch(m, h, keys, hits);
        if (s != KVTIER_STATUS_OK) return fail("touch", s);
        s = kvtier_manager_complete_load(m, h, keys, hits);
        if (s != KVTIER_STATUS_OK) return fail("complete_load", s);
        t->hit_blocks += (int)hits;
    }

    size_t rest = BLOCKS_PER_REQUEST - hits;
    if (rest > 0) {
        size_t idx[BLOCKS_PER_REQUEST];
        uint32_t slots[BLOCKS_PER_REQUEST];
        kvtier_store_plan plan = {idx, slots, NULL, 0, 0, true};
        /* Refused while every slot is pinned by cascades still writing to
         * disk: end the step and offer the blocks again. */
        deadline = now_s() + HANG_SECONDS;
        while (plan.refused) {
            s = kvtier_manager_prepare_store(m, h, keys + hits, rest, &plan);
            if (s != KVTIER_STATUS_OK) return fail("prepare_store", s);
            if (!plan.refused) break;
            if (now_s() > deadline) {
                fprintf(stderr, "fs_tier: %s: no room in the primary tier (%.0f s)\n", req, HANG_SECONDS);
                return EXIT_FAILURE;
            }
            s = kvtier_manager_schedule_end(m);
            if (s != KVTIER_STATUS_OK) return fail("schedule_end", s);
            sleep_ms(1);
        }
        {
            size_t n_store = plan.store_count;
            kvtier_key stored[BLOCKS_PER_REQUEST];
            for (size_t i = 0; i < n_store; i++) {
                /* The GPU writes the block's KV bytes into its slot. */
                void *addr = NULL;
                s = kvtier_region_slot_address(region, slots[i], &addr);
                if (s != KVTIER_STATUS_OK) return fail("slot_address", s);
                uint8_t *p = (uint8_t *)addr;
                const uint8_t *k = kb[hits + idx[i]];
                for (size_t j = 0; j < SLOT_BYTES; j++) p[j] = example_pattern(k, KEY_LEN, j);
                stored[i] = keys[hits + idx[i]];
            }
            s = kvtier_manager_complete_store(m, h, stored, n_store, true, NULL);
            if (s != KVTIER_STATUS_OK) return fail("complete_store", s);
            t->stored_blocks += (int)n_store;
        }
    }
    s = kvtier_manager_request_finished(m, h);
    if (s != KVTIER_STATUS_OK) return fail("request_finished", s);
    s = kvtier_manager_schedule_end(m);
    if (s != KVTIER_STATUS_OK) return fail("schedule_end", s);
    return EXIT_SUCCESS;
}

static int run(const char *dir, kvtier_fs_layout layout, int number, struct totals *t, double *fs_loads,
               double *fs_blocks) {
    char name[64];
    snprintf(name, sizeof name, "kvtier-fs-example-%ld-%d", (long)getpid(), number);
    kvtier_region_options ro = kvtier_region_options_default();
    ro.name = name;
    ro.slot_count = SLOTS;
    ro.slot_bytes = SLOT_BYTES;
    kvtier_region *region = NULL;
    kvtier_status s = kvtier_region_new(&ro, &region);
    if (s != KVTIER_STATUS_OK) return fail("kvtier_region_new", s);

    kvtier_manager_options mo = kvtier_manager_options_default();
    mo.capacity = SLOTS;
    mo.block_bytes = SLOT_BYTES;
    /* This program's steps last a millisecond, far less than an engine's:
     * bound a request's wait for its blocks in time (the hang deadline),
     * not in steps, so that a loaded machine still finds every block. */
    mo.progress_wait_steps = 0;
    mo.progress_wait_ms = (uint32_t)(HANG_SECONDS * 1000);
    kvtier_manager *m = NULL;
    s = kvtier_manager_new(&mo, region, &m); /* its slots are the region's */
    if (s != KVTIER_STATUS_OK) return fail("kvtier_manager_new", s);

    kvtier_fs_options fo = kvtier_fs_options_default();
    fo.directory = dir;
    fo.read_threads = 2;
    fo.write_threads = 2;
    fo.capacity_bytes = 64u << 20;
    fo.layout = layout;
    size_t tier = 0;
    s = kvtier_manager_add_fs_tier(m, &fo, &tier);
    if (s != KVTIER_STATUS_OK) return fail("kvtier_manager_add_fs_tier", s);
    /* The tier opened at once.  Run 1 shut down cleanly, so it loaded the
     * index persisted then and is ready now; after a crash it would read
     * the directory in the background, serving what it has found so far.
     * This run checks that every block comes back, so it waits until
     * readiness no longer says "fs tier rebuilding" (an engine need not:
     * it just serves, and a block not found yet is a miss).  The tier
     * takes what its scan found at the engine's calls: end steps
     * meanwhile. */
    for (double until = now_s() + HANG_SECONDS;;) {
        char why[512];
        size_t written = 0;
        s = kvtier_manager_readiness(m, why, sizeof why, &written);
        if (s != KVTIER_STATUS_OK && s != KVTIER_STATUS_BUFFER_TOO_SMALL) return fail("readiness", s);
        if (s == KVTIER_STATUS_OK && written == 1) break; /* the empty text: ready */
        if (now_s() > until) {
            fprintf(stderr, "fs_tier: the tier never became ready: %s\n", s == KVTIER_STATUS_OK ? why : "?");
            return EXIT_FAILURE;
        }
        s = kvtier_manager_schedule_end(m);
        if (s != KVTIER_STATUS_OK) return fail("schedule_end", s);
        sleep_ms(1);
    }

    int rc = EXIT_SUCCESS;
    for (int r = 0; r < REQUESTS && rc == EXIT_SUCCESS; r++) rc = serve(m, region, r, t);
    /* Let the last cascades reach the disk (the statistics below count
     * them all). */
    bool pending = true;
    double deadline = now_s() + HANG_SECONDS;
    while (pending && rc == EXIT_SUCCESS) {
        s = kvtier_manager_schedule_end(m);
        if (s == KVTIER_STATUS_OK) s = kvtier_manager_has_pending_work(m, &pending);
        if (s != KVTIER_STATUS_OK) rc = fail("draining", s);
        if (!pending || rc != EXIT_SUCCESS) break;
        if (now_s() > deadline) {
            fprintf(stderr, "fs_tier: the cascades never reached the disk (%.0f s)\n", HANG_SECONDS);
            rc = EXIT_FAILURE;
            break;
        }
        sleep_ms(1);
    }
    *fs_loads = fs_stat(m, tier, "loads");
    *fs_blocks = fs_stat(m, tier, "blocks");
    s = kvtier_manager_shutdown(m);
    if (s != KVTIER_STATUS_OK && rc == EXIT_SUCCESS) rc = fail("shutdown", s);
    kvtier_manager_free(m);
    bool kept = false;
    s = kvtier_region_close(region, &kept);
    if (s != KVTIER_STATUS_OK && rc == EXIT_SUCCESS) rc = fail("kvtier_region_close", s);
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv) {
    kvtier_fs_layout layout = KVTIER_FS_LAYOUT_FILES;
    if (argc > 1 && strcmp(argv[1], "--segments") == 0) {
        layout = KVTIER_FS_LAYOUT_SEGMENTS;
        argc--;
        argv++;
    }
    char tmp[64];
    const char *dir = argc > 1 ? argv[1] : example_temp_dir(tmp, sizeof tmp, "fs-example");
    if (dir == NULL) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    struct totals first = {0, 0, 0}, second = {0, 0, 0};
    double loads1 = 0, blocks1 = 0, loads2 = 0, blocks2 = 0;
    int rc = run(dir, layout, 1, &first, &loads1, &blocks1);
    if (rc == EXIT_SUCCESS) rc = run(dir, layout, 2, &second, &loads2, &blocks2);
    int distinct = 2 + REQUESTS * (BLOCKS_PER_REQUEST - 2);
    printf("run 1: %d blocks hit, %d stored; fs tier holds %.0f blocks\n",
           first.hit_blocks, first.stored_blocks, blocks1);
    printf("run 2: %d blocks hit (%.0f loaded from the fs tier), %d stored, %d bad\n",
           second.hit_blocks, loads2, second.stored_blocks, second.bad_bytes);
    if (rc == EXIT_SUCCESS) {
        if (first.stored_blocks < distinct || blocks1 != distinct) {
            fprintf(stderr, "fs_tier: run 1 should store all %d blocks to disk\n", distinct);
            rc = EXIT_FAILURE;
        } else if (second.hit_blocks != REQUESTS * BLOCKS_PER_REQUEST ||
                   second.stored_blocks != 0 || second.bad_bytes != 0 ||
                   loads2 < distinct) {
            fprintf(stderr, "fs_tier: run 2 should hit every block the first run stored\n");
            rc = EXIT_FAILURE;
        }
    }
    if (argc <= 1) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
