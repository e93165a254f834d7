/*
 * kvtierd-check: the node server `kvtierd` with engines in separate
 * processes, through kvtier_manager_connect (ctest runs each check; `make
 * demo-server` runs `demo`).
 *
 *   kvtierd-check --kvtierd PATH [--inspect PATH] CHECK
 *
 *   engines N      N (2 to 4) engines each store 16 blocks with their own
 *                  bytes, then load every block the others stored and
 *                  check every byte; with --inspect, `kvtier-inspect
 *                  server` lists every engine while they are connected.
 *   demo           `engines 2`, saying what happened, and the
 *                  inspector's table (with --inspect).
 *   client-killed  an engine holding pins and planned stores over every
 *                  slot is killed with SIGKILL: another engine's store is
 *                  refused before, and after the server released what the
 *                  killed one held (its pins, its stores, its line in the
 *                  metrics) the store goes in and the killed engine's
 *                  ready blocks load with their bytes.
 *   server-killed  the server is killed with SIGKILL: every call of both
 *                  engines is KVTIER_STATUS_DISCONNECTED within 5 s (an
 *                  alarm fails a hang), connecting with no server is too,
 *                  and a server restarted on the same socket path takes
 *                  both engines back (a fresh cache).
 *   refusals       another block size or fingerprint is refused with
 *                  KVTIER_STATUS_INVALID_ARGUMENT; a user not in
 *                  server.allowed_uids with KVTIER_STATUS_PEER_FAILED; as
 *                  root, a child that became uid 65534 likewise by a
 *                  server that allows only its own user.
 *
 * Each check starts its own server in a fresh directory under /tmp and
 * stops it with SIGTERM (which must end it with status 0).  Exit status 0
 * when the check passed; 1 with a message when it did not; a check (or
 * an engine) that takes more than 30 s is ended by SIGALRM, and the
 * server and engines die with the check (PR_SET_PDEATHSIG).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier.h"
#include "kvtierd_harness.h"

#define BLOCKS 16 /* blocks each engine stores */

static const char *kvtierd_path;
static const char *inspect_path;

/* ---- engines N / demo ---- */

typedef struct {
    const char *socket;
    int index, engines, verbose;
} engine_arg;

static int engine_body(const kh_link *link, void *p) {
    const engine_arg *e = (const engine_arg *)p;
    char name[32], prefix[32], req[48];
    snprintf(name, sizeof name, "engine-%d", e->index);
    kvtier_manager *m = kh_connect(e->socket, name, 10000);
    kvtier_server_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    KH_CHECK(kvtier_manager_server_info(m, &info));
    if (info.slot_bytes != KH_BLOCK_BYTES || info.capacity != 256) {
        kh_fail("%s: server info: %llu-byte blocks, capacity %u", name, (unsigned long long)info.slot_bytes,
                info.capacity);
    }
    kh_keys k;
    snprintf(prefix, sizeof prefix, "e%d", e->index);
    kh_keys_make(&k, prefix, 0, BLOCKS);
    snprintf(req, sizeof req, "%s-store", name);
    size_t stored = kh_store(m, req, &k);
    if (stored != BLOCKS) kh_fail("%s: stored %zu of %d blocks", name, stored, BLOCKS);
    if (e->verbose) printf("  engine-%d (pid %d) stored %zu blocks\n", e->index, (int)getpid(), stored);
    kh_send(link->to_parent, stored);
    kh_receive(link->from_parent); /* every engine has stored */
    uint64_t loaded = 0;
    for (int other = 0; other < e->engines; other++) {
        if (other == e->index) continue;
        snprintf(prefix, sizeof prefix, "e%d", other);
        kh_keys_make(&k, prefix, 0, BLOCKS);
        snprintf(req, sizeof req, "%s-load-%d", name, other);
        size_t got = kh_load(m, req, &k);
        if (got != BLOCKS) kh_fail("%s: found %zu of engine-%d's %d blocks", name, got, other, BLOCKS);
        if (e->verbose) {
            printf("  engine-%d (pid %d) loaded %zu blocks engine-%d stored, every byte as written\n", e->index,
                   (int)getpid(), got, other);
        }
        loaded += got;
    }
    kh_send(link->to_parent, loaded);
    kh_receive(link->from_parent); /* the inspector has looked */
    kvtier_manager_free(m);
    return 0;
}

/* Runs the inspector on the socket; with `check`, its output must name
 * every engine (the demo prints it instead). */
static void inspect_server(const char *socket, int engines, int check) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' server '%s'", inspect_path, socket);
    fflush(stdout);
    if (!check) {
        if (system(cmd) != 0) kh_fail("%s failed", cmd);
        return;
    }
    FILE *p = popen(cmd, "r");
    if (p == NULL) kh_fail("popen %s: %s", cmd, strerror(errno));
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    if (pclose(p) != 0) kh_fail("%s failed:\n%s", cmd, out);
    for (int i = 0; i < engines; i++) {
        char name[32];
        snprintf(name, sizeof name, "engine-%d ", i);
        if (strstr(out, name) == NULL) kh_fail("%s does not list %s:\n%s", cmd, name, out);
    }
}

static int check_engines(int engines, int verbose) {
    if (engines < 2 || engines > 4) kh_fail("engines: 2 to 4, not %d", engines);
    kh_server s;
    kh_server_init(&s, "engines", 256, "");
    kh_server_start(&s, kvtierd_path);
    if (verbose) printf("kvtierd (pid %d) serves %s\n", (int)s.pid, s.socket);
    kh_child c[4];
    engine_arg args[4];
    for (int i = 0; i < engines; i++) {
        args[i] = (engine_arg){s.socket, i, engines, verbose};
        c[i] = kh_spawn(engine_body, &args[i]);
    }
    uint64_t stored = 0, loaded = 0;
    for (int i = 0; i < engines; i++) stored += kh_receive(c[i].from_child);
    if (verbose) printf("%d engine processes stored %llu blocks (%d each)\n", engines, (unsigned long long)stored, BLOCKS);
    for (int i = 0; i < engines; i++) kh_send(c[i].to_child, 1);
    for (int i = 0; i < engines; i++) loaded += kh_receive(c[i].from_child);
    if (inspect_path != NULL) inspect_server(s.socket, engines, !verbose);
    for (int i = 0; i < engines; i++) kh_send(c[i].to_child, 1);
    for (int i = 0; i < engines; i++) {
        if (kh_wait(&c[i]) != 0) kh_fail("engine-%d failed", i);
    }
    uint64_t want = (uint64_t)engines * (uint64_t)(engines - 1) * BLOCKS;
    if (loaded != want) kh_fail("loads served: %llu, not %llu", (unsigned long long)loaded, (unsigned long long)want);
    kh_server_stop(&s);
    kh_server_cleanup(&s);
    printf("kvtierd: %d engines stored %llu blocks; %llu blocks one engine stored were served to another, "
           "every byte checked; the server stopped cleanly\n",
           engines, (unsigned long long)stored, (unsigned long long)loaded);
    return 0;
}

/* ---- client-killed ---- */

#define KILL_CAPACITY 32

static int victim_body(const kh_link *link, void *p) {
    kvtier_manager *m = kh_connect((const char *)p, "victim", 10000);
    kh_keys ready, planned;
    kh_keys_make(&ready, "v", 0, KILL_CAPACITY / 2);
    kh_keys_make(&planned, "w", 0, KILL_CAPACITY / 2);
    if (kh_store(m, "victim-store", &ready) != ready.n) kh_fail("victim: store refused");
    /* Pin every ready block and plan stores over every other slot. */
    kvtier_request_handle req = 0;
    KH_CHECK(kvtier_manager_request_begin(m, "victim-hold", NULL, &req, NULL));
    kvtier_lookup_answer a;
    KH_CHECK(kvtier_manager_lookup(m, req, ready.keys, ready.n, &a));
    if (a.hits != ready.n) kh_fail("victim: %zu hits of %zu", a.hits, ready.n);
    uint32_t slots[64];
    size_t positions[64];
    KH_CHECK(kvtier_manager_prepare_load(m, req, ready.keys, ready.n, slots));
    kvtier_store_plan plan = {positions, slots, NULL, 0, 0, false};
    KH_CHECK(kvtier_manager_prepare_store(m, req, planned.keys, planned.n, &plan));
    if (plan.refused || plan.store_count != planned.n) kh_fail("victim: planned %zu of %zu", plan.store_count, planned.n);
    kh_send(link->to_parent, 1);
    kh_receive(link->from_parent); /* never comes: SIGKILL */
    return 1;
}

/* Whether the Prometheus text has a `kvtier_server_client_pinned_blocks`
 * line of the client named `name` with value `value` (any value: -1). */
static int pinned_line(const char *text, const char *name, long value) {
    char head[96];
    snprintf(head, sizeof head, "kvtier_server_client_pinned_blocks{client=\"%s#", name);
    for (const char *at = strstr(text, head); at != NULL; at = strstr(at + 1, head)) {
        const char *v = strstr(at, "} ");
        if (v != NULL && (value < 0 || strtol(v + 2, NULL, 10) == value)) return 1;
    }
    return 0;
}

static int survivor_body(const kh_link *link, void *p) {
    kvtier_manager *m = kh_connect((const char *)p, "survivor", 10000);
    kh_keys mine, victims;
    kh_keys_make(&mine, "s", 0, 8);
    kh_keys_make(&victims, "v", 0, KILL_CAPACITY / 2);
    kh_receive(link->from_parent); /* the victim holds every slot */
    if (kh_primary_stat(m, "pinned") != KILL_CAPACITY / 2 || kh_primary_stat(m, "write_pending") != KILL_CAPACITY / 2) {
        kh_fail("survivor: before the kill: pinned %g, write pending %g", kh_primary_stat(m, "pinned"),
                kh_primary_stat(m, "write_pending"));
    }
    char *text = kh_prometheus(m);
    if (!pinned_line(text, "victim", KILL_CAPACITY / 2)) kh_fail("survivor: no pinned_blocks line of the victim:\n%s", text);
    free(text);
    if (kh_store(m, "survivor-early", &mine) != 0) kh_fail("survivor: a store went in while every slot was held");
    kh_send(link->to_parent, 1);
    kh_receive(link->from_parent); /* the victim is dead */
    alarm(10);
    int released = 0;
    for (int i = 0; i < 1000 && !released; i++) {
        released = kh_primary_stat(m, "pinned") == 0 && kh_primary_stat(m, "write_pending") == 0;
        if (!released) usleep(5000);
    }
    if (!released) kh_fail("survivor: the victim's pins and stores were not released within 5 s");
    text = kh_prometheus(m);
    if (pinned_line(text, "victim", -1)) kh_fail("survivor: the victim still has a metrics line:\n%s", text);
    free(text);
    alarm(30);
    size_t stored = kh_store(m, "survivor-store", &mine);
    if (stored != mine.n) kh_fail("survivor: stored %zu of %zu after the kill", stored, mine.n);
    if (kh_load(m, "survivor-load", &mine) != mine.n) kh_fail("survivor: its own blocks did not load");
    if (kh_load(m, "survivor-load-victim", &victims) != victims.n) kh_fail("survivor: the victim's blocks did not load");
    kvtier_manager_free(m);
    return 0;
}

static int check_client_killed(void) {
    kh_server s;
    kh_server_init(&s, "client-killed", KILL_CAPACITY, "\"max_pinned_share\": 1.0, \"max_store_share\": 1.0");
    kh_server_start(&s, kvtierd_path);
    kh_child victim = kh_spawn(victim_body, s.socket);
    kh_receive(victim.from_child);
    kh_child survivor = kh_spawn(survivor_body, s.socket);
    kh_send(survivor.to_child, 1);
    kh_receive(survivor.from_child);
    kill(victim.pid, SIGKILL);
    if (kh_wait(&victim) != 128 + SIGKILL) kh_fail("the victim did not die of SIGKILL");
    kh_send(survivor.to_child, 1);
    if (kh_wait(&survivor) != 0) kh_fail("the survivor failed");
    kh_server_stop(&s);
    kh_server_cleanup(&s);
    printf("kvtierd: a killed engine's %d pins and %d planned stores were released; the other engine went on\n",
           KILL_CAPACITY / 2, KILL_CAPACITY / 2);
    return 0;
}

/* ---- server-killed ---- */

static int reconnecting_body(const kh_link *link, void *p) {
    const char *socket = (const char *)p;
    char name[32], prefix[32];
    snprintf(name, sizeof name, "engine-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "p%d", (int)getpid());
    kvtier_manager *m = kh_connect(socket, name, 3000);
    kh_keys k;
    kh_keys_make(&k, prefix, 0, 8);
    if (kh_store(m, "before", &k) != k.n) kh_fail("%s: store refused", name);
    kvtier_request_handle held = 0;
    KH_CHECK(kvtier_manager_request_begin(m, "held", NULL, &held, NULL));
    kh_send(link->to_parent, 1);
    kh_receive(link->from_parent); /* the server is dead */
    alarm(5);
    kvtier_request_handle req = 0;
    kvtier_lookup_answer a;
    uint32_t slots[64];
    size_t positions[64];
    kvtier_store_plan plan = {positions, slots, NULL, 0, 0, false};
    kvtier_manager_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    bool pending = false;
    KH_EXPECT(kvtier_manager_lookup(m, held, k.keys, k.n, &a), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_prepare_load(m, held, k.keys, k.n, slots), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_prepare_store(m, held, k.keys, k.n, &plan), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_complete_store(m, held, k.keys, k.n, true, NULL), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_request_finished(m, held), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_request_begin(m, "after", NULL, &req, NULL), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_schedule_end(m), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_has_pending_work(m, &pending), KVTIER_STATUS_DISCONNECTED);
    KH_EXPECT(kvtier_manager_read_stats(m, &st), KVTIER_STATUS_DISCONNECTED);
    alarm(30);
    kvtier_manager_free(m);
    kh_send(link->to_parent, 1);
    kh_receive(link->from_parent); /* a new server listens */
    m = kh_connect(socket, name, 3000);
    if (kh_load(m, "old-blocks", &k) != 0) kh_fail("%s: the new server has the old server's blocks", name);
    kh_keys_make(&k, prefix, 100, 8);
    if (kh_store(m, "again", &k) != k.n) kh_fail("%s: store refused after reconnecting", name);
    if (kh_load(m, "again-load", &k) != k.n) kh_fail("%s: load failed after reconnecting", name);
    kvtier_manager_free(m);
    return 0;
}

static int check_server_killed(void) {
    kh_server s;
    kh_server_init(&s, "server-killed", 64, "");
    kh_server_start(&s, kvtierd_path);
    kh_child c[2];
    for (int i = 0; i < 2; i++) c[i] = kh_spawn(reconnecting_body, s.socket);
    for (int i = 0; i < 2; i++) kh_receive(c[i].from_child);
    kh_server_kill(&s);
    for (int i = 0; i < 2; i++) kh_send(c[i].to_child, 1);
    for (int i = 0; i < 2; i++) kh_receive(c[i].from_child);
    /* Nobody listens on the stale socket now. */
    kvtier_manager *m = NULL;
    KH_EXPECT(kvtier_manager_connect(s.socket, NULL, &m), KVTIER_STATUS_DISCONNECTED);
    kh_server_start(&s, kvtierd_path);
    for (int i = 0; i < 2; i++) kh_send(c[i].to_child, 1);
    for (int i = 0; i < 2; i++) {
        if (kh_wait(&c[i]) != 0) kh_fail("engine %d failed", i);
    }
    kh_server_stop(&s);
    kh_server_cleanup(&s);
    printf("kvtierd: after SIGKILL every call of both engines was DISCONNECTED; a restarted server took them back\n");
    return 0;
}

/* ---- refusals ---- */

static int nobody_body(const kh_link *link, void *p) {
    (void)link;
    if (setgid(65534) != 0 || setuid(65534) != 0) kh_fail("setuid 65534: %s", strerror(errno));
    kvtier_connect_options o = kvtier_connect_options_default();
    o.fingerprint = "model-a";
    kvtier_manager *m = NULL;
    KH_EXPECT(kvtier_manager_connect((const char *)p, &o, &m), KVTIER_STATUS_PEER_FAILED);
    return 0;
}

static int check_refusals(void) {
    /* Socket and region open to everyone (mode 0666, a directory anyone
     * may enter), so that only the server's check of the peer refuses. */
    kh_server s;
    kh_server_init(&s, "refusals", 16, "\"fingerprint\": \"model-a\", \"mode\": 438");
    if (chmod(s.dir, 0755) != 0) kh_fail("chmod %s: %s", s.dir, strerror(errno));
    kh_server_start(&s, kvtierd_path);
    if (getuid() == 0) {
        kh_child c = kh_spawn(nobody_body, s.socket);
        if (kh_wait(&c) != 0) kh_fail("uid 65534 was not refused with PEER_FAILED");
    } else {
        printf("kvtierd: not root: the check of another user (setuid) is skipped\n");
    }
    kvtier_connect_options o = kvtier_connect_options_default();
    kvtier_manager *m = NULL;
    o.fingerprint = "model-a";
    o.block_bytes = 2 * KH_BLOCK_BYTES;
    KH_EXPECT(kvtier_manager_connect(s.socket, &o, &m), KVTIER_STATUS_INVALID_ARGUMENT);
    o.block_bytes = KH_BLOCK_BYTES;
    o.fingerprint = "model-b";
    KH_EXPECT(kvtier_manager_connect(s.socket, &o, &m), KVTIER_STATUS_INVALID_ARGUMENT);
    o.fingerprint = NULL;
    KH_EXPECT(kvtier_manager_connect(s.socket, &o, &m), KVTIER_STATUS_INVALID_ARGUMENT);
    o.fingerprint = "model-a";
    KH_CHECK(kvtier_manager_connect(s.socket, &o, &m));
    kvtier_manager_free(m);
    kh_server_stop(&s);
    kh_server_cleanup(&s);

    char other[64];
    snprintf(other, sizeof other, "\"allowed_uids\": [%u]", (unsigned)getuid() + 1);
    kh_server_init(&s, "refusals-uid", 16, other);
    kh_server_start(&s, kvtierd_path);
    m = NULL;
    KH_EXPECT(kvtier_manager_connect(s.socket, NULL, &m), KVTIER_STATUS_PEER_FAILED);
    if (m != NULL) kh_fail("a refused connect wrote a handle");
    kh_server_stop(&s);
    kh_server_cleanup(&s);
    printf("kvtierd: another layout was refused with INVALID_ARGUMENT, a user not allowed with PEER_FAILED\n");
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: kvtierd-check --kvtierd PATH [--inspect PATH] "
                    "engines N | demo | client-killed | server-killed | refusals\n");
    exit(2);
}

int main(int argc, char **argv) {
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "--kvtierd") == 0) {
            kvtierd_path = argv[i + 1];
        } else if (strcmp(argv[i], "--inspect") == 0) {
            inspect_path = argv[i + 1];
        } else {
            usage();
        }
    }
    if (kvtierd_path == NULL || i >= argc) usage();
    setvbuf(stdout, NULL, _IOLBF, 0); /* the engines' lines and the check's in order */
    signal(SIGPIPE, SIG_IGN);
    alarm(30); /* a hang fails the check */
    const char *check = argv[i];
    if (strcmp(check, "engines") == 0 && i + 1 < argc) return check_engines(atoi(argv[i + 1]), 0);
    if (strcmp(check, "demo") == 0) return check_engines(2, 1);
    if (strcmp(check, "client-killed") == 0) return check_client_killed();
    if (strcmp(check, "server-killed") == 0) return check_server_killed();
    if (strcmp(check, "refusals") == 0) return check_refusals();
    usage();
    return 2;
}
