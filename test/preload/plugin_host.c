/* plugin_host.c - a program that knows nothing of verbs: it opens a plugin with
 * dlopen(RTLD_LOCAL), so libibverbs is outside the global scope and dlsym(RTLD_NEXT)
 * cannot find it. Under the preload the plugin's registrations must still be cached. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *plugin_path;

static void test_plugin_registrations_cached(void)
{
    void *h = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "%s", dlerror());
    if (!h)
        return;
    int (*run)(int) = (int (*)(int))dlsym(h, "plugin_run");
    CHECK(run != NULL);
    const char *pre = getenv("LD_PRELOAD");
    int cached = pre && strstr(pre, "libmrcache") != NULL;
    CHECK(run && run(cached) == 0);
    /* The global scope must not have gained libibverbs: the point of the test. */
    CHECK(dlsym(RTLD_DEFAULT, "ibv_open_device") == NULL);
}

int main(int argc, char **argv)
{
    plugin_path = argc > 1 ? argv[1] : "libmrc_testplugin.so";
    RUN(test_plugin_registrations_cached);
    CHECK_EXIT();
}
