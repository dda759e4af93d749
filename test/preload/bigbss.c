/* bigbss.c - a tiny library holding a large static buffer in .bss, for the dlclose
 * test: the program registers the buffer, dlcloses the library (ld.so unmaps it with
 * its own munmap), dlopens it again at the same address and registers again. */
#define BIGBSS_LEN (4u << 20)

__attribute__((aligned(4096))) static char big[BIGBSS_LEN];

__attribute__((visibility("default"))) char *bigbss_buf(unsigned long *len);
char *bigbss_buf(unsigned long *len)
{
    *len = BIGBSS_LEN;
    return big;
}
