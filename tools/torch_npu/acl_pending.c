/* The ACL answers the wrapper libascendcl.so still gives by hand because the
 * emulator does not export them yet. Every name here is a gap in the
 * emulator (emu/README.md lists what it implements). */
#include <stdint.h>
#include <stddef.h>

#define API __attribute__((visibility("default")))
#define ACL_ERROR_INVALID_PARAM 100000
typedef int aclError;
