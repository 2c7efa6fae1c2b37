/* clone — command-line front end (placeholder until its issue lands). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: clone [options]\n");
        return 0;
    }
    fprintf(stderr, "clone: not implemented yet; see --help\n");
    return 2;
}
