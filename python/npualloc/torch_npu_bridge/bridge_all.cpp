// The bridge's one translation unit. torch's and torch_npu's headers take most of a compile; the
// bridge's sources included into one unit parse them once, not once per source (the compiler's
// work for the whole bridge is then a little more than one source's). The order is COMPILED's in
// __init__.py; a test checks the two agree.

#include "bridge.cpp"
#include "stats.cpp"
#include "limit.cpp"
#include "history.cpp"
#include "trace.cpp"
#include "leaks.cpp"
#include "ipc.cpp"
#include "hccl.cpp"
#include "checkpoint.cpp"
#include "boundary.cpp"
