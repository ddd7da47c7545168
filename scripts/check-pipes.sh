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
#   scripts/check-pipes.sh --self-test   (the check finds what it must, and only that)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} = --self-test ]]; then
    t=$(mktemp -d)
    trap 'rm -rf "$t"' EXIT
    printf '%s\n' 'set -o pipefail' 'x=$(ldconfig -p | head -1)' >"$t/head.sh"
    printf '%s\n' 'set -o pipefail' 'ldconfig -p | grep -q libc && echo yes' >"$t/grepq.sh"
    printf '%s\n' 'set -o pipefail' "p=\$(ldconfig -p | awk '/libc/ {print; exit}')" >"$t/awk.sh"
    printf '%s\n' 'set -o pipefail' 'c=$(ldconfig -p)' 'x=$(sed -n 1p <<<"$c")' 'a || grep -q b f' \
        '# ldconfig -p | head -1 (a comment)' >"$t/clean.sh"
    printf '%s\n' 'ldconfig -p | head -1' >"$t/no-pipefail.sh"
    bad=0
    for f in head grepq awk; do
        if bash "$0" "$t/$f.sh" >/dev/null 2>&1; then echo "FAIL self-test: $f.sh not found" >&2; bad=1; fi
    done
    for f in clean no-pipefail; do
        if ! bash "$0" "$t/$f.sh" >/dev/null 2>&1; then echo "FAIL self-test: $f.sh flagged" >&2; bad=1; fi
    done
    [[ $bad = 0 ]] && echo "check-pipes self-test: 5 passed"
    exit "$bad"
fi
files=("$@")
# This script's own self-test fixtures hold such pipes as data.
if [[ ${#files[@]} -eq 0 ]]; then
    for f in scripts/*.sh .ci/run; do [[ $f = scripts/check-pipes.sh ]] || files+=("$f"); done
fi
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
