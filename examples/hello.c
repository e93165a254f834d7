/*
 * hello.c: prints the library version, checks it against the header, and
 * shows the error path: a failing call returns a documented status and a
 * readable message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"

int main(void) {
    const char *version = kvtier_version();
    printf("kvtier %s (header %d.%d.%d)\n", version, KVTIER_VERSION_MAJOR, KVTIER_VERSION_MINOR,
           KVTIER_VERSION_PATCH);

    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.", KVTIER_VERSION_MAJOR, KVTIER_VERSION_MINOR);
    if (strncmp(version, expected, strlen(expected)) != 0) {
        fprintf(stderr, "library %s does not match header %s*\n", version, expected);
        return EXIT_FAILURE;
    }

    /* Status names are total: unknown values have a name too. */
    if (strcmp(kvtier_status_str(KVTIER_STATUS_NULL_ARGUMENT), "KVTIER_STATUS_NULL_ARGUMENT") != 0 ||
        strcmp(kvtier_status_str(-7), "KVTIER_STATUS_UNKNOWN") != 0) {
        fprintf(stderr, "unexpected status names\n");
        return EXIT_FAILURE;
    }

    /* The last error message is never NULL. */
    if (kvtier_last_error_message() == NULL) {
        fprintf(stderr, "kvtier_last_error_message returned NULL\n");
        return EXIT_FAILURE;
    }
    printf("ok\n");
    return EXIT_SUCCESS;
}
