"""in-terminal.py TRANSCRIPT COMMAND [ARG...]: runs COMMAND with a new
pseudo-terminal as its controlling terminal, as at a user's terminal; what it
writes there is copied to stdout and to the file TRANSCRIPT. Exits with
COMMAND's status. (test-python.sh checks what a pip build shows a user.)"""

import os
import pty
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with open(sys.argv[1], "wb") as transcript:

        def read(fd):
            data = os.read(fd, 4096)
            transcript.write(data)
            return data

        status = pty.spawn(sys.argv[2:], read)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
