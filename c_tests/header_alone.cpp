// npualloc.h must compile on its own as C++17 with -Wall -Wextra -Werror -pedantic
// (CMakeLists.txt builds every C++ test with those flags), and link from C++.
#include "npualloc.h"

#include <cstdio>
#include <cstring>

int main() {
    npualloc_status status = NPUALLOC_OK;
    aclrtStream stream = nullptr;
    static_assert(sizeof(npualloc_status) == 4, "npualloc_status is 32 bits");
    (void)stream;
    const char *name = npualloc_status_name(status);
    bool ok = name != nullptr && std::strcmp(name, "NPUALLOC_OK") == 0 &&
              npualloc_abi_version() == NPUALLOC_ABI_VERSION;
    std::printf("%d passed, %d failed\n", ok ? 1 : 0, ok ? 0 : 1);
    return ok ? 0 : 1;
}
