// A minimal npualloc host: creates an allocator on device 0, allocates and
// frees a few blocks, prints the allocator's statistics and destroys it.
//
// The ACL runtime is found the usual way (config key acl_library, else
// NPUALLOC_ACL_LIBRARY, ...); on a machine without an NPU, point
// NPUALLOC_ACL_LIBRARY at the emulator's libascendcl.so.
//
// Exit status: 0 on success, 1 on any failure.
#include <npualloc.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

bool check(npualloc_status st, const char *what) {
    if (st == NPUALLOC_OK) {
        return true;
    }
    std::fprintf(stderr, "npualloc_consumer: %s: %s: %s\n", what, npualloc_status_name(st), npualloc_last_error());
    return false;
}

unsigned long long mib(std::uint64_t bytes) { return static_cast<unsigned long long>(bytes >> 20); }

}  // namespace

int main() {
    if (const char *acl = std::getenv("NPUALLOC_ACL_LIBRARY")) {
        std::printf("npualloc %s, ACL runtime %s\n", npualloc_version(), acl);
    } else {
        std::printf("npualloc %s, ACL runtime from the default search\n", npualloc_version());
    }
#ifdef NPUALLOC_EXPECTED_VERSION
    // The version the build system found (find_package, pkg-config).
    if (std::strcmp(npualloc_version(), NPUALLOC_EXPECTED_VERSION) != 0) {
        std::fprintf(stderr, "npualloc_consumer: library version %s, package version %s\n", npualloc_version(),
                     NPUALLOC_EXPECTED_VERSION);
        return 1;
    }
#endif
    if (npualloc_abi_version() != NPUALLOC_ABI_VERSION) {
        std::fprintf(stderr, "npualloc_consumer: library ABI %u, header ABI %u\n",
                     static_cast<unsigned>(npualloc_abi_version()), static_cast<unsigned>(NPUALLOC_ABI_VERSION));
        return 1;
    }

    npualloc_allocator *alloc = nullptr;
    if (!check(npualloc_create("", 0, &alloc), "npualloc_create")) {
        return 1;
    }

    constexpr std::array<std::size_t, 4> sizes{512, 64 << 10, 3 << 20, 40 << 20};
    std::array<void *, sizes.size()> blocks{};
    bool ok = true;
    for (int round = 0; round < 2 && ok; ++round) {  // the second round reuses the cache
        for (std::size_t i = 0; i < sizes.size() && ok; ++i) {
            ok = check(npualloc_malloc(alloc, sizes[i], nullptr, &blocks[i]), "npualloc_malloc");
        }
        for (void *&p : blocks) {
            if (p != nullptr) {
                ok = check(npualloc_free(alloc, p), "npualloc_free") && ok;
                p = nullptr;
            }
        }
    }

    npualloc_stats stats{};
    stats.struct_size = sizeof stats;
    ok = ok && check(npualloc_get_stats(alloc, &stats), "npualloc_get_stats");
    if (ok) {
        std::printf("allocs %llu, frees %llu, live %llu, peak allocated %llu MiB, reserved %llu MiB, "
                    "device mallocs %llu, maps %llu\n",
                    static_cast<unsigned long long>(stats.num_allocs), static_cast<unsigned long long>(stats.num_frees),
                    static_cast<unsigned long long>(stats.active_blocks), mib(stats.allocated_bytes_peak),
                    mib(stats.reserved_bytes), static_cast<unsigned long long>(stats.num_device_mallocs),
                    static_cast<unsigned long long>(stats.num_maps));
        const std::uint64_t expected = 2 * sizes.size();
        if (stats.num_allocs != expected || stats.num_frees != expected || stats.active_blocks != 0) {
            std::fprintf(stderr, "npualloc_consumer: expected %llu allocs and frees and nothing live\n",
                         static_cast<unsigned long long>(expected));
            ok = false;
        }
    }

    ok = check(npualloc_destroy(alloc), "npualloc_destroy") && ok;
    std::printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
