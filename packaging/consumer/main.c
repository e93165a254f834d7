/* Consumer of an installed kvtier: checks the library matches its header. */
#include <stdio.h>
#include <string.h>

#include <kvtier.h>

int main(void) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", KVTIER_VERSION_MAJOR, KVTIER_VERSION_MINOR,
             KVTIER_VERSION_PATCH);
    if (strcmp(kvtier_version(), expected) != 0) {
        fprintf(stderr, "library %s, header %s\n", kvtier_version(), expected);
        return 1;
    }
    printf("consumer linked kvtier %s\n", kvtier_version());
    return 0;
}
