#!/usr/bin/env bash
# Under `set -o pipefail`, a pipeline whose last command stops reading early
# (head, grep -q, awk's exit) fails with status 141 whenever the writer is
# still writing: its output is longer than a pipe's 64 KiB, or it is slow. That
# depends on the machine (how many libraries ldconfig lists, say), so such a
# pipeline passes on one machine and fails the script on another. This check
# lists them in the project's scripts; read the input whole first instead
# (a variable and <<<, `sed -n 1p`, `find -print -quit`).
#
#   scripts/check-pipes.sh [FILE...]     (default: scripts/*.sh .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(scripts/*.sh .ci/run)
found=0
for f in "${files[@]}"; do
    grep -q 'pipefail' "$f" || continue
    # A pipe into head, into grep -q/-m, or into an awk program that exits.
    if hits=$(grep -nE '(^|[^|])\|[[:space:]]*(head\b|grep[[:space:]]+(-[[:alnum:]]*[qm]|--quiet|--max-count)|awk\b.*\bexit\b)' "$f" |
              grep -vE '^[0-9]+:[[:space:]]*#'); then
        echo "$f: a pipe into a reader that stops early fails under pipefail with 141:" >&2
        echo "$hits" | sed 's/^/    /' >&2
        found=1
    fi
done
[[ $found = 0 ]] && echo "no pipe into an early-stopping reader under pipefail (${#files[@]} files)"
exit "$found"
