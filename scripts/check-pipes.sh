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
self=$(realpath "$0")
# Arguments are named from where the script was started, not from the
# checkout it moves to.
args=()
for a in "$@"; do
    if [[ $a = --* ]]; then args+=("$a"); else args+=("$(realpath -m -- "$a")"); fi
done
set -- "${args[@]+"${args[@]}"}"
cd "$(dirname "$self")/.."
if [[ ${1:-} = --self-test ]]; then
    t=$(mktemp -d)
    trap 'rm -rf "$t"' EXIT
    printf '%s\n' 'set -o pipefail' 'x=$(ldconfig -p | head -1)' >"$t/head.sh"
    printf '%s\n' 'set -o pipefail' 'ldconfig -p | grep -q libc && echo yes' >"$t/grepq.sh"
    printf '%s\n' 'set -o pipefail' "p=\$(ldconfig -p | awk '/libc/ {print; exit}')" >"$t/awk.sh"
    printf '%s\n' 'set -o pipefail' 'c=$(ldconfig -p)' 'x=$(sed -n 1p <<<"$c")' 'a || grep -q b f' \
        '# ldconfig -p | head -1 (a comment)' >"$t/clean.sh"
    printf '%s\n' 'ldconfig -p | head -1' >"$t/no-pipefail.sh"
    printf '%s\n' 'set -o pipefail' 'x=$(ldconfig -p | sed 1q)' >"$t/sedq.sh"
    printf '%s\n' 'set -o pipefail' "grep -c x f | awk '{print}'; exit 0" >"$t/exit-after.sh"
    bad=0
    for f in head grepq awk sedq missing; do
        if bash "$self" "$t/$f.sh" >/dev/null 2>&1; then echo "FAIL self-test: $f.sh not found" >&2; bad=1; fi
    done
    for f in clean no-pipefail exit-after; do
        if ! bash "$self" "$t/$f.sh" >/dev/null 2>&1; then echo "FAIL self-test: $f.sh flagged" >&2; bad=1; fi
    done
    [[ $bad = 0 ]] && echo "check-pipes self-test: 8 passed"
    exit "$bad"
fi
files=("$@")
# This script's own self-test fixtures hold such pipes as data.
if [[ ${#files[@]} -eq 0 ]]; then
    for f in scripts/*.sh .ci/run; do [[ $f = scripts/check-pipes.sh ]] || files+=("$f"); done
fi
# A pipe (not ||) into head, sed's q, grep -q/-m, or an awk program with exit.
q="'"
early="(^|[^|])\\|[[:space:]]*(head\\b|sed[[:space:]]+(-n[[:space:]]+)?$q?[0-9]*q|grep[[:space:]]+(-[[:alnum:]]*[qm]|--quiet|--max-count)|awk\\b[^|$q]*$q[^$q]*\\bexit\\b)"
found=0
for f in "${files[@]}"; do
    if [[ ! -r $f ]]; then
        echo "$f: cannot be read" >&2
        found=1
        continue
    fi
    grep -q 'pipefail' "$f" || continue
    if hits=$(grep -nE "$early" "$f" |
              grep -vE '^[0-9]+:[[:space:]]*#'); then
        echo "$f: a pipe into a reader that stops early fails under pipefail with 141:" >&2
        echo "$hits" | sed 's/^/    /' >&2
        found=1
    fi
done
[[ $found = 0 ]] && echo "no pipe into an early-stopping reader under pipefail (${#files[@]} files)"
exit "$found"
