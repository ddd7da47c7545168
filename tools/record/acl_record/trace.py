"""Writing acl-trace v1 (the format of src/trace/mod.rs)."""

import gzip


class TraceEvents:
    """The events of one trace, in order, with the live bytes and their peak."""

    def __init__(self):
        self.lines = []
        self.sizes = {}
        self.live = 0
        self.next_id = 0

    def alloc(self, nbytes, stream):
        tid = self.next_id
        self.next_id += 1
        self.sizes[tid] = nbytes
        self.live += nbytes
        self.lines.append(f"a {tid} {nbytes} {stream}")
        return tid

    def merge_into(self, new, old):
        """The allocation `new` was really made in `old`'s memory (an in-place
        operation); `old` is about to be freed. Drops `new`'s line and keeps
        `old` live in its place; returns False (changing nothing) unless
        nothing but frees came after `new`'s line."""
        line = f"a {new} {self.sizes.get(new)} "
        for i in range(len(self.lines) - 1, -1, -1):
            if self.lines[i].startswith(line):
                break
            if self.lines[i][0] != "f":
                return False
        else:
            return False
        if self.sizes.get(old) != self.sizes[new]:
            return False
        del self.lines[i]
        self.live -= self.sizes.pop(new)
        return True

    @property
    def peak(self):
        """The largest sum of live requested bytes at any point."""
        sizes, live, peak = {}, 0, 0
        for line in self.lines:
            parts = line.split()
            if parts[0] == "a":
                sizes[parts[1]] = int(parts[2])
                live += int(parts[2])
                peak = max(peak, live)
            elif parts[0] == "f":
                live -= sizes.pop(parts[1])
        return peak

    def free(self, tid):
        self.live -= self.sizes.pop(tid)
        self.lines.append(f"f {tid}")

    def use(self, tid, stream):
        if tid in self.sizes:
            self.lines.append(f"u {tid} {stream}")

    def wait(self, stream):
        self.lines.append(f"w {stream}")

    def alloc_sizes(self):
        """The requested sizes of every allocation, in order."""
        return [int(line.split()[2]) for line in self.lines if line[0] == "a"]

    def write(self, path, source, comments=()):
        """Writes the trace (gzip when the path ends in .gz)."""
        text = "# acl-trace v1\n# source: " + source + "\n"
        text += "".join(f"# {c}\n" for c in comments)
        text += "\n".join(self.lines) + "\n"
        data = text.encode()
        if str(path).endswith(".gz"):
            # mtime=0: the same events give the same file.
            with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as f:
                f.write(data)
        else:
            with open(path, "wb") as f:
                f.write(data)
