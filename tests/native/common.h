/* What the native test programs share: a checked driver call, and the PTX
 * read from the file named on the command line. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                            \
    do {                                                                       \
        CUresult rc_ = (call);                                                 \
        if (rc_ != CUDA_SUCCESS) {                                             \
            const char *name_ = "?";                                           \
            cuGetErrorName(rc_, &name_);                                       \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,      \
                    #call, name_);                                             \
            exit(3);                                                           \
        }                                                                      \
    } while (0)

__attribute__((unused)) static char *read_ptx(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(4);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    if (fread(text, 1, n, f) != (size_t)n)
        exit(4);
    text[n] = 0;
    fclose(f);
    return text;
}
