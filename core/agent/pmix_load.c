/* Loading the PMIx host module (see pmix_host.h). */
#include "config.h"
#include "pmix_host.h"

#include <dlfcn.h>
#include <stdio.h>

const struct sh_pmix_ops *sh_pmix_load(char *err, size_t errlen)
{
    static const struct sh_pmix_ops *ops;
    void *handle;
    const char *why;

    if (ops != NULL)
        return ops;
    handle = dlopen(SH_PMIX_MODULE_PATH, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        why = dlerror();
        snprintf(err, errlen, "cannot load the PMIx host module: %s",
                 why != NULL ? why : SH_PMIX_MODULE_PATH);
        return NULL;
    }
    ops = dlsym(handle, "sh_pmix_module_ops");
    if (ops == NULL || ops->run == NULL || ops->outcome_free == NULL ||
        ops->make_nspace == NULL) {
        why = dlerror();
        snprintf(err, errlen, "%s: no sh_pmix_module_ops: %s", SH_PMIX_MODULE_PATH,
                 why != NULL ? why : "incomplete");
        ops = NULL;
        dlclose(handle);
        return NULL;
    }
    return ops;
}
