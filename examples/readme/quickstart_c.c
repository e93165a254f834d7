/*
 * The README's C quick start, compiled and run by ctest as it stands:
 * CMake copies the block after README.md's `<!-- ctest: readme_c -->`
 * line into readme_c.inc, included as the body of main() below, with the
 * helpers the block names (CHECK from example_util.h, copy_from_gpu and
 * copy_to_gpu, which write and check a pattern of each key's own).  A
 * README that no longer compiles, or whose blocks come back wrong, fails
 * ctest.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "example_util.h"

/* The README's slot_bytes. */
#define BLOCK_BYTES 4096

static int wrong_blocks = 0;
static int loaded_blocks = 0;

/* The GPU -> slot copy: the key's pattern. */
static void copy_from_gpu(const kvtier_key *key, void *slot) {
    for (size_t i = 0; i < BLOCK_BYTES; i++) ((uint8_t *)slot)[i] = example_pattern(key->data, key->len, i);
}

/* The slot -> GPU copy: the slot must hold the key's pattern. */
static void copy_to_gpu(const kvtier_key *key, const void *slot) {
    loaded_blocks++;
    for (size_t i = 0; i < BLOCK_BYTES; i++) {
        if (((const uint8_t *)slot)[i] != example_pattern(key->data, key->len, i)) {
            wrong_blocks++;
            return;
        }
    }
}

int main(void) {
    /* The README's fs directory, from an earlier run. */
    if (system("rm -rf /tmp/kvtier-quickstart") != 0) return EXIT_FAILURE;
    {
#include "readme_c.inc"
    }
    if (system("rm -rf /tmp/kvtier-quickstart") != 0) return EXIT_FAILURE;
    if (loaded_blocks != 2 || wrong_blocks != 0) {
        fprintf(stderr, "readme_c: %d blocks loaded, %d of them wrong\n", loaded_blocks, wrong_blocks);
        return EXIT_FAILURE;
    }
    printf("readme_c: the README's C quick start stored 2 blocks and loaded them back\n");
    return EXIT_SUCCESS;
}
