/* api_probe.c - the smallest user of mrcache.h, and the only code here that includes
 * nothing else of ours: test_api.sh compiles it as strict ISO C99 and as C++, and
 * against the installed header through pkg-config. Prints what it finds. */
#include <stdio.h>

#include <mrcache.h>

int main(void)
{
    unsigned major = 0, minor = 0;
    int rc = mrcache_version(&major, &minor);
    if (rc == -ENOSYS) {
        puts("absent");
        return 0;
    }
    struct mrcache_stats s;
    if (rc || mrcache_stats_read(sizeof(s), &s))
        return 1;
    printf("libmrcache %u.%u monitors %d stats %u\n", major, minor, mrcache_monitors(), (unsigned)s.size);
    return 0;
}
