/*
 * kvtier-demo's parts: the workload (read from a file, or generated for the
 * stress run), the bytes a block holds, and the engine that replays a
 * workload through a primary tier in a shared region and the fs tier.
 *
 *   demo_common.c  failures, memory, time, workloads, block bytes
 *   demo_engine.c  the engine: one scheduler step after another
 *   demo_stress.c  the stress run and the prefix run (--stress, --prefix)
 *   kvtier-demo.c  the command line and the replay of a workload file
 *
 * Uses only the public header.
 */
#ifndef KVTIER_DEMO_H
#define KVTIER_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define MAX_KEY_LEN 64
/* A request that cannot run for this long (blocks never promoted, no room
 * ever), or transfers still running this long after the last request, is
 * a failure, not a slow disk. */
#ifndef WAIT_LIMIT_S
#define WAIT_LIMIT_S 60.0
#endif

extern const char *prog;

void die_status(const char *what, kvtier_status s);

#define CALL(what, expr)                                  \
    do {                                                  \
        kvtier_status s_ = (expr);                        \
        if (s_ != KVTIER_STATUS_OK) die_status(what, s_); \
    } while (0)

void die(const char *message);
void *xmalloc(size_t n);
void *grow(void *p, size_t *cap, size_t need, size_t elem);
double now_s(void);
/* The number after option argv[*i] (whole, or positive), else usage. */
unsigned long num_arg(int argc, char **argv, int *i, bool positive, void (*usage)(void));

/* ---- workloads ---------------------------------------------------------- */

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
    char *text; /* the file's text (request names point into it), or NULL */
    char *names; /* generated request names, or NULL */
} workload;

/* Reads `R <req_id> <n_keys> <key_hex>...` lines (and `#` comments). */
void workload_load(const char *path, workload *wl);

/* The stress run's workload: `requests` requests over `documents`
 * documents of `min_blocks`..`max_blocks` blocks each, the document of
 * each request drawn from a Zipf distribution (exponent 1) with `seed`;
 * each request's keys are its document's blocks and one block of its own
 * (the question). */
typedef struct {
    size_t requests, documents, min_blocks, max_blocks;
    uint64_t seed;
} zipf_shape;
void workload_zipf(const zipf_shape *shape, workload *wl);

void workload_free(workload *wl);

/* ---- block bytes -------------------------------------------------------- */

/* The "GPU" computes a block: a pattern unique to the key and the offset. */
void write_block(uint8_t *slot, size_t bytes, const kvtier_key *k);
/* The "GPU" reads a block: true if every byte is the key's pattern. */
bool check_block(const uint8_t *slot, size_t bytes, const kvtier_key *k);

/* ---- the manager -------------------------------------------------------- */

/* The value of tier `tier`'s statistic `name` (0 if it has none). */
double stat_value(const kvtier_manager *m, size_t tier, const char *name);
/* Sleeps until the wake descriptor is readable or `timeout_ms` passed;
 * returns how many jobs it counted as finished (0 on a timeout). */
uint64_t wait_wake(int fd, int timeout_ms);
/* Makes a fresh directory under `parent` (removed at exit if the program
 * ends early); `dir` has room for 4096 bytes. */
void make_demo_dir(const char *parent, char *dir);
/* Removes the directory make_demo_dir made: 0 on success. */
int remove_demo_dir(const char *dir);

/* ---- the engine --------------------------------------------------------- */

typedef struct {
    unsigned long slots, block_kib, batch, fs_threads, fs_cap_mib;
    kvtier_fs_layout fs_layout;
    const char *parent; /* where the fs tier's directory is made */
    const char *policy; /* "lru" or "arc" */
    /* vLLM 0.33's rules: kvtier_manager_lookup_per_key (stops at the first
     * key not ready: one promotion per step), no holds, no wait bound. */
    bool vllm_rules;
    /* The manager's wait bound in steps (progress_wait_steps), without
     * vllm_rules; 0: no bound in steps. */
    uint32_t wait_steps;
    /* Sleep this long at the end of each step (the GPU's work), 0: none. */
    unsigned long step_us;
    /* Stop when no request finished for this many steps (0: never). */
    size_t stall_steps;
    /* A request whose store finds no room gives its loads back and runs
     * again in a later step (else its blocks are computed, not kept). */
    bool retry_refused;
} engine_config;

typedef struct {
    size_t steps, lookups, deferrals, idle_waits;
    size_t finished, started;
    size_t primary_hits;   /* loaded, ready at the request's first lookup */
    size_t waited_hits;    /* loaded, on their way at its first lookup */
    size_t computed, stored, refused, failures;
    size_t timed_out, no_room; /* loads after a lookup whose prefix ended so */
    size_t max_lookups;        /* most lookups of one request up to its load
                                  (since its last refused store) */
    size_t max_refusals;       /* most refused stores of one request */
    size_t sum_lookups;
    size_t served_first;       /* requests loaded at their first lookup */
    char max_name[64];         /* the request that made the most */
    bool stalled;              /* stopped: no request finished for stall_steps */
    bool pending_left;         /* transfers still running at the end */
    /* The manager's figures at the end. */
    double promo_blocks, promo_jobs, promo_fail, cascade_blocks, cascade_fail;
    double read_bytes, write_bytes, read_us, write_us, fs_blocks, direct, evictions, fs_evictions;
    kvtier_manager_stats stats;
    double wall;
    bool cleanup_failed;
    char region_name[96];
    char dir[4096];
} engine_result;

/* Starts a default configuration: 4096 slots of 16 KiB, batch 16, 4 fs
 * threads, a 2 GiB segments fs tier, LRU, the manager's progress rules
 * (holds on, its default wait bound). */
engine_config engine_config_default(void);

/* Replays `wl` (see demo_engine.c); exits on a failed call. */
void engine_run(const engine_config *c, const workload *wl, engine_result *r);

/* The stress and prefix runs (demo_stress.c): the program's exit status. */
int stress_main(int argc, char **argv);
int prefix_main(int argc, char **argv);

#endif
