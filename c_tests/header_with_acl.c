/* npualloc.h and the ACL headers in one translation unit, in both orders:
 * both declare `typedef void *aclrtStream;`, which C11 accepts when identical.
 * Built against the project's own declarations, and (when CMake finds them)
 * once more against the real ACL headers with NPUALLOC_TEST_REAL_ACL. */
#ifdef NPUALLOC_TEST_REAL_ACL
#include "acl/acl.h"
#else
#include "acl_decls.h"
#endif
#include "npualloc.h"
#ifdef NPUALLOC_TEST_REAL_ACL
#include "acl/acl.h"
#else
#include "acl_decls.h"
#endif

#include "test_helper.h"

int main(void) {
    aclrtStream stream = NULL;
    CHECK(stream == NULL);
    CHECK_EQ_INT(sizeof(aclrtStream), sizeof(void *));
    CHECK_EQ_INT(npualloc_abi_version(), NPUALLOC_ABI_VERSION);
    return TEST_SUMMARY();
}
