/* The real CANN headers, as bindgen reads them (rule: include only what we use). */
#include "acl/acl.h"
#include "acl/acl_rt_allocator.h"
