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
 * Each step serves a batch of requests as an engine's scheduler does
 * (demo_engine.c): one kvtier_manager_lookup per request, which starts the
 * promotions of every block of its prefix the fs tier holds; a request
 * with blocks on their way (`pending` > 0) asks again next step; then it
 * loads its `hits` and computes and stores the rest.  At the end it waits
 * for the last transfers, prints a summary and removes what it created
 * (the region's name goes as soon as the region is mapped; the directory
 * at exit).  Exits non-zero on any verification failure or failed call.
 *
 *     kvtier-demo --workload FILE [--slots N] [--block-kib N] [--batch N]
 *                 [--policy lru|arc] [--fs-threads N] [--fs-capacity-mib N]
 *                 [--fs-layout L] [--dir PARENT] [--require-promotions]
 *     kvtier-demo --stress [...]   many requests, a small primary tier (demo_stress.c)
 *     kvtier-demo --prefix [...]   steps to bring a prefix back from disk (demo_stress.c)
 *
 * --fs-layout: `segments` (default: records in preallocated segment files,
 * the capacity reserved at start) or `files` (a file per block).
 *
 * Uses only the public header.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

static void usage(void) {
    fprintf(stderr,
            "usage: %s --workload FILE [--slots N] [--block-kib N] [--batch N] [--policy lru|arc]\n"
            "          [--fs-threads N] [--fs-capacity-mib N] [--fs-layout segments|files] [--dir PARENT]\n"
            "          [--require-promotions]\n"
            "       %s --stress [--help for its options]\n"
            "       %s --prefix [--help for its options]\n",
            prog, prog, prog);
    exit(2);
}

static void print_summary(const engine_config *c, const engine_result *t, const char *wl_path, const workload *wl,
                          double t_parse) {
    size_t block_bytes = (size_t)c->block_kib * 1024;
    size_t loaded = t->primary_hits + t->waited_hits;
    double gib = 1024.0 * 1024.0 * 1024.0, wall = t->wall;
    double engine_in = (double)loaded * (double)block_bytes;
    double engine_out = (double)t->computed * (double)block_bytes;
    printf("kvtier demo: %s\n", wl_path);
    printf("  primary tier     %lu slots x %lu KiB = %.0f MiB, %s, in /dev/shm/%s\n", c->slots, c->block_kib,
           (double)c->slots * (double)block_bytes / (1024.0 * 1024.0), c->policy, t->region_name);
    printf("  fs tier          %s (%s, %s, %lu read + %lu write threads, %lu MiB)\n", t->dir,
           c->fs_layout == KVTIER_FS_LAYOUT_SEGMENTS ? "segment files" : "a file per block",
           t->direct > 0 ? "O_DIRECT" : "buffered", c->fs_threads, c->fs_threads, c->fs_cap_mib);
    printf("  requests         %zu (%zu block references) in %zu steps of up to %lu\n", wl->n_reqs, wl->n_keys,
           t->steps, c->batch);
    printf("  lookups          %zu, one per request and step; per request up to its load: mean %.2f,\n"
           "                   at most %zu (%zu requests served at their first)\n",
           t->lookups, t->finished ? (double)t->sum_lookups / (double)t->finished : 0.0, t->max_lookups,
           t->served_first);
    printf("  deferred         %zu times for blocks on their way, %zu for want of room for a store (at most\n"
           "                   %zu times for one request, which then ran again); %zu steps idle on the wake fd\n",
           t->deferrals, t->refused, t->max_refusals, t->idle_waits);
    printf("  blocks loaded    %zu ready at the request's first lookup, %zu came in while it waited\n"
           "                   (%.0f promoted from the fs tier in %.0f jobs)\n",
           t->primary_hits, t->waited_hits, t->promo_blocks, t->promo_jobs);
    printf("  blocks computed  %zu (%zu stored; the rest were in the primary tier already, or on their way)\n", t->computed, t->stored);
    printf("  wait bound       passed for %zu requests, which computed what had not come in\n", t->timed_out);
    printf("  evictions        %.0f from the primary tier, %.0f from the fs tier (%.0f blocks in it at the end)\n",
           t->evictions, t->fs_evictions, t->fs_blocks);
    printf("  engine -> slots  %.2f GiB written (computed blocks)\n", engine_out / gib);
    printf("  slots -> engine  %.2f GiB read and verified (loaded blocks)\n", engine_in / gib);
    printf("  slots -> fs      %.2f GiB in %.0f blocks: %.2f GB/s over the wall time, %.2f GB/s per busy I/O thread\n",
           t->write_bytes / gib, t->cascade_blocks, t->write_bytes / wall / 1e9,
           t->write_us > 0 ? t->write_bytes / (t->write_us * 1e-6) / 1e9 : 0.0);
    printf("  fs -> slots      %.2f GiB in %.0f blocks: %.2f GB/s over the wall time, %.2f GB/s per busy I/O thread\n",
           t->read_bytes / gib, t->promo_blocks, t->read_bytes / wall / 1e9,
           t->read_us > 0 ? t->read_bytes / (t->read_us * 1e-6) / 1e9 : 0.0);
    printf("  failed jobs      %.0f promotions, %.0f cascades\n", t->promo_fail, t->cascade_fail);
    printf("  wall time        %.2f s replaying and draining (%.2f s reading the workload)\n", wall, t_parse);
    printf("  verification     %zu failures in %zu loaded blocks\n", t->failures, loaded);
    printf("  removed          /dev/shm/%s (once mapped) and %s\n", t->region_name, t->dir);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--stress") == 0) return stress_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "--prefix") == 0) return prefix_main(argc - 1, argv + 1);
    const char *wl_path = NULL;
    engine_config c = engine_config_default();
    c.retry_refused = true; /* every computed block is kept */
    bool require_promotions = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--workload") == 0 && i + 1 < argc) wl_path = argv[++i];
        else if (strcmp(argv[i], "--slots") == 0) c.slots = num_arg(argc, argv, &i, true, usage);
        else if (strcmp(argv[i], "--block-kib") == 0) c.block_kib = num_arg(argc, argv, &i, true, usage);
        else if (strcmp(argv[i], "--batch") == 0) c.batch = num_arg(argc, argv, &i, true, usage);
        else if (strcmp(argv[i], "--fs-threads") == 0) c.fs_threads = num_arg(argc, argv, &i, true, usage);
        else if (strcmp(argv[i], "--fs-capacity-mib") == 0) c.fs_cap_mib = num_arg(argc, argv, &i, true, usage);
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc) c.policy = argv[++i];
        else if (strcmp(argv[i], "--step-us") == 0) c.step_us = num_arg(argc, argv, &i, false, usage);
        else if (strcmp(argv[i], "--fs-layout") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "segments") == 0) c.fs_layout = KVTIER_FS_LAYOUT_SEGMENTS;
            else if (strcmp(l, "files") == 0) c.fs_layout = KVTIER_FS_LAYOUT_FILES;
            else usage();
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) c.parent = argv[++i];
        else if (strcmp(argv[i], "--require-promotions") == 0) require_promotions = true;
        else usage();
    }
    if (!wl_path || c.slots > UINT32_MAX || c.block_kib % 4 != 0) {
        if (c.block_kib % 4 != 0) fprintf(stderr, "%s: --block-kib must be a multiple of 4 (pages)\n", prog);
        usage();
    }

    workload wl;
    double t_parse = now_s();
    workload_load(wl_path, &wl);
    t_parse = now_s() - t_parse;
    if (wl.n_reqs == 0) {
        fprintf(stderr, "%s: %s holds no requests\n", prog, wl_path);
        return EXIT_FAILURE;
    }

    engine_result t;
    engine_run(&c, &wl, &t);
    print_summary(&c, &t, wl_path, &wl, t_parse);

    int rc = EXIT_SUCCESS;
    if (t.failures > 0) {
        fprintf(stderr, "%s: %zu loaded blocks had wrong bytes\n", prog, t.failures);
        rc = EXIT_FAILURE;
    }
    if (t.pending_left) {
        fprintf(stderr, "%s: work still pending after %.0f s\n", prog, WAIT_LIMIT_S);
        rc = EXIT_FAILURE;
    }
    if (t.cleanup_failed) rc = EXIT_FAILURE;
    if (require_promotions && (t.waited_hits == 0 || t.promo_blocks == 0)) {
        fprintf(stderr, "%s: no block came back from the fs tier (primary tier too large?)\n", prog);
        rc = EXIT_FAILURE;
    }
    workload_free(&wl);
    return rc;
}
