/*
 * region_two_process.c: two processes share one kvtier region.
 *
 * The first process creates the region, then forks and re-executes itself
 * with the arguments `join <name>`: that process joins the same region by
 * name, writes a pattern into every slot, removes the name (everyone has
 * joined) and exits.  The creator checks the pattern through its own
 * mapping and that the backing file is gone, then cleans up.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtier.h"

#define SLOTS 16u
#define SLOT_BYTES ((size_t)4 * 4096)

static uint8_t pattern(uint32_t slot, size_t i) {
    return (uint8_t)(slot * 131u + i * 7u + 1u);
}

static int fail(const char *role, const char *what, kvtier_status s) {
    fprintf(stderr, "%s: %s: %s: %s\n", role, what, kvtier_status_str(s),
            kvtier_last_error_message());
    return EXIT_FAILURE;
}

static kvtier_region_options make_options(const char *name) {
    kvtier_region_options o = kvtier_region_options_default();
    o.name = name;
    o.slot_count = SLOTS;
    o.slot_bytes = SLOT_BYTES;
    o.join_timeout_ms = 10000;
    return o;
}

static int joiner(const char *name) {
    kvtier_region_options o = make_options(name);
    kvtier_region *region = NULL;
    kvtier_status s = kvtier_region_new(&o, &region);
    if (s != KVTIER_STATUS_OK) return fail("joiner", "kvtier_region_new", s);
    kvtier_region_role role = 0;
    s = kvtier_region_read_role(region, &role);
    if (s != KVTIER_STATUS_OK) return fail("joiner", "kvtier_region_read_role", s);
    if (role != KVTIER_REGION_ROLE_JOINER) {
        fprintf(stderr, "joiner: expected to join, got role %d\n", (int)role);
        return EXIT_FAILURE;
    }
    for (uint32_t slot = 0; slot < SLOTS; slot++) {
        void *addr = NULL;
        s = kvtier_region_slot_address(region, slot, &addr);
        if (s != KVTIER_STATUS_OK) return fail("joiner", "kvtier_region_slot_address", s);
        uint8_t *bytes = (uint8_t *)addr;
        for (size_t i = 0; i < SLOT_BYTES; i++) bytes[i] = pattern(slot, i);
    }
    /* Both processes have joined: remove the name now, so the memory goes
       away with the last mapping however the processes exit. */
    bool removed = false;
    s = kvtier_region_unlink(region, &removed);
    if (s != KVTIER_STATUS_OK) return fail("joiner", "kvtier_region_unlink", s);
    bool kept = true;
    s = kvtier_region_close(region, &kept);
    if (s != KVTIER_STATUS_OK) return fail("joiner", "kvtier_region_close", s);
    if (!removed || kept) {
        fprintf(stderr, "joiner: removed=%d kept=%d\n", (int)removed, (int)kept);
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}

static int creator(const char *self) {
    char name[64];
    snprintf(name, sizeof name, "kvtier-example-%ld", (long)getpid());
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);

    kvtier_region_options o = make_options(name);
    kvtier_region *region = NULL;
    kvtier_status s = kvtier_region_new(&o, &region);
    if (s != KVTIER_STATUS_OK) return fail("creator", "kvtier_region_new", s);
    kvtier_region_role role = 0;
    kvtier_region_read_role(region, &role);
    if (role != KVTIER_REGION_ROLE_CREATOR) {
        fprintf(stderr, "creator: expected to create, got role %d\n", (int)role);
        kvtier_region_free(region);
        return EXIT_FAILURE;
    }

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        kvtier_region_free(region);
        return EXIT_FAILURE;
    }
    if (pid == 0) {
        /* argv[0] names this program when run by path (as ctest does);
           /proc/self/exe otherwise. */
        const char *exe = strchr(self, '/') != NULL ? self : "/proc/self/exe";
        execl(exe, self, "join", name, (char *)NULL);
        perror("execl");
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "creator: joiner failed (status %d)\n", status);
        kvtier_region_free(region);
        return EXIT_FAILURE;
    }

    size_t errors = 0;
    for (uint32_t slot = 0; slot < SLOTS; slot++) {
        void *addr = NULL;
        s = kvtier_region_slot_address(region, slot, &addr);
        if (s != KVTIER_STATUS_OK) return fail("creator", "kvtier_region_slot_address", s);
        const uint8_t *bytes = (const uint8_t *)addr;
        for (size_t i = 0; i < SLOT_BYTES; i++) errors += bytes[i] != pattern(slot, i);
    }
    void *beyond = NULL;
    if (kvtier_region_slot_address(region, SLOTS, &beyond) != KVTIER_STATUS_INVALID_ARGUMENT) {
        fprintf(stderr, "creator: slot %u should be out of range\n", SLOTS);
        errors++;
    }
    if (access(path, F_OK) == 0 || errno != ENOENT) {
        fprintf(stderr, "creator: %s still exists after the joiner removed it\n", path);
        errors++;
    }
    bool kept = true;
    s = kvtier_region_close(region, &kept);
    if (s != KVTIER_STATUS_OK) return fail("creator", "kvtier_region_close", s);
    if (kept || access(path, F_OK) == 0) {
        fprintf(stderr, "creator: mapping kept or file left behind\n");
        errors++;
    }
    if (errors != 0) {
        fprintf(stderr, "creator: %zu errors\n", errors);
        return EXIT_FAILURE;
    }
    printf("joiner wrote %u slots of %zu bytes; creator read them back; %s is gone\n", SLOTS,
           SLOT_BYTES, path);
    return EXIT_SUCCESS;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "join") == 0) return joiner(argv[2]);
    return creator(argv[0]);
}
