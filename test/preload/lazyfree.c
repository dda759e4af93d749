/* lazyfree.c - a library linked for lazy binding (-z lazy), loaded with the test program:
 * its PLT slot of free is still unbound when libmrcache's constructor runs. */
#include <stdlib.h>

__attribute__((visibility("default"))) void mrc_lazyfree(void *p);

void mrc_lazyfree(void *p)
{
    free(p);
}
