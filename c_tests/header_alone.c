/* npualloc.h must compile on its own as C11 with -Wall -Wextra -Werror -pedantic
 * (CMakeLists.txt builds every C test with those flags). */
#include "npualloc.h"
#include "npualloc.h" /* the include guard works */

int main(void) {
    npualloc_status status = NPUALLOC_OK;
    aclrtStream stream = NULL;
    (void)stream;
    return (int)status;
}
