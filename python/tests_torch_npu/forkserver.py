"""A process that has imported torch and torch_npu once and forks a child for each test script.

Importing torch and torch_npu takes most of a test child's time (seconds, against milliseconds
for a script's own work), and every test runs at least one child. The server imports
``npu_emu`` (torch, then torch_npu) and nothing else: no ACL call, no NPU initialization, no
npualloc, so each forked child starts where a fresh ``python script.py`` would be right after
those imports, and initializes the NPU, enables npualloc or not, and exits on its own, its
interpreter's exit handlers included. Forking after ``import torch`` is what PyTorch's
DataLoader workers do; torch_npu marks a child forked after NPU initialization as a bad fork,
which cannot happen here.

Only a child whose environment differs from the server's in ``SAFE_KEYS`` (read after the
imports) comes from the server; conftest.run_npu starts any other as a fresh process, and
``NPUALLOC_TEST_FORKSERVER=0`` starts every one that way.

Run as ``python forkserver.py``: requests come one JSON line at a time on stdin
(``script``, ``cwd``, ``env``, ``stdout``, ``stderr``: paths), and for each the server writes
``{"pid": N}`` when the child starts and ``{"status": S}`` when it ends (S as
``subprocess``'s returncode: negative for a signal) on stdout. It ends when stdin closes."""

import json
import os
import sys

# Environment variables a child may set differently from the server: read only when a script
# runs, never by the imports (npualloc's config, read when npualloc starts; the name of the
# test pytest is running).
SAFE_KEYS = frozenset({"NPUALLOC_CONF", "PYTEST_CURRENT_TEST"})


def _child(request):
    """Runs in the forked child: becomes ``python script`` with the request's environment,
    working directory and output files, and never returns."""
    import runpy
    import traceback

    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["script"]
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    # The interpreter's own exit, as at the end of `python script`: exit handlers, then flushes.
    sys.exit(code)


def serve():
    # Replies go on the pipe that was stdout; what the imports print goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import npu_emu  # noqa: F401  (torch, then torch_npu)

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            protocol.close()
            _child(request)
        protocol.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        protocol.write(json.dumps({"status": code}) + "\n")


class Server:
    """The client: one server process for the test session."""

    def __init__(self, python, env, cwd):
        import subprocess

        self.env = dict(env)
        self._pending = b""
        # What the server itself prints (the imports' warnings, or why it ended).
        self.log = os.path.join(str(cwd), "forkserver.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([python, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=self.env, cwd=cwd, text=True,
                                         bufsize=1)

    def serves(self, env):
        """Whether a child with environment ``env`` can come from this server."""
        keys = set(env) | set(self.env)
        return self.proc.poll() is None and all(env.get(k) == self.env.get(k) for k in keys - SAFE_KEYS)

    def run(self, script, cwd, env, stdout, stderr, timeout):
        """Runs ``script`` in a forked child; returns its exit status, or raises
        ``TimeoutError`` after killing it when it takes longer than ``timeout`` seconds."""
        import signal

        request = {"script": str(script), "cwd": str(cwd), "env": env, "stdout": str(stdout),
                   "stderr": str(stderr)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = self._message(None)["pid"]
        try:
            return self._message(timeout)["status"]
        except TimeoutError:
            for kill in (os.killpg, os.kill):  # its group; the child alone if it has none yet
                try:
                    kill(pid, signal.SIGKILL)
                    break
                except ProcessLookupError:
                    pass
            self._message(None)
            raise

    def _message(self, timeout):
        """The server's next line, read from its pipe unbuffered so that a waiting line is
        never hidden from select in a buffer."""
        import select
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                with open(self.log, errors="replace") as log:
                    said = log.read()[-4000:]
                raise RuntimeError(f"the torch_npu fork server ended; it said:\n{said}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


if __name__ == "__main__":
    serve()
