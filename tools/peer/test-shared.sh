#!/usr/bin/env bash
# test-shared.sh DIR -- checks of FAKECUDA_SHARED (fakecudart_shared.h) with
# DIR/shared_check, which links the fake runtime (DIR/fake/libcudart.so.13),
# and DIR/shared_exit_check (the runtime's sources linked in).
# No torch needed: test.sh runs it in a peer build, and scripts/build-peer.sh
# SYNTAX_ONLY=1 (scripts/test.sh), with the CUDA runtime headers it fetches.
set -uo pipefail
cd "${1:?usage: test-shared.sh DIR}"
pass=0; fail=0
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "PASS $name"; pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi; }
# FAKECUDA_SHARED: processes naming one segment share one device's capacity.
MIB=$((1 << 20))
CAP=$((1000 * MIB)) # 60% and 30% of it are whole 2 MiB pages
SEG=fakecuda-test-$$
export FAKECUDA_MEM_BYTES=$CAP
# hold BYTES [MODE]: a background shared_check keeps BYTES allocated until
# release() closes its standard input; fifos carry its input and output; what
# it printed before "held" is in HELD.
hold() {
  rm -f "$SEG.in" "$SEG.out" && mkfifo "$SEG.in" "$SEG.out" || return 1
  ./shared_check "$1" "${2:-hold}" <"$SEG.in" >"$SEG.out" &
  HOLDER_PID=$!
  exec 7>"$SEG.in" 8<"$SEG.out"
  local line
  HELD=
  while read -r -u 8 line && [ "$line" != held ]; do HELD+="$line"$'\n'; done
  [ "$line" = held ]
}
release() {
  exec 7>&-
  cat <&8
  exec 8<&-
  wait "$HOLDER_PID"
  rm -f "$SEG.in" "$SEG.out"
}
shared() { FAKECUDA_SHARED=$SEG "$@"; }
rm -f "/dev/shm/$SEG"
export -n FAKECUDA_SHARED
FAKECUDA_SHARED=$SEG hold $((600 * MIB))
second=$(shared ./shared_check $((600 * MIB)))
third=$(shared ./shared_check $((300 * MIB)))
release >"$SEG.released" # in this shell, which holds the fifo's write end
after=$(tail -1 "$SEG.released")
rm -f "$SEG.released"
again=$(shared ./shared_check $((600 * MIB)))
check "shared: a second process's 60% is refused while another holds 60%" \
  bash -c "grep -qx 'malloc refused' <<<'$second' && grep -qx 'free $((400 * MIB)) total $CAP' <<<'$second'"
check "shared: free memory is what both processes leave" \
  bash -c "grep -qx 'malloc ok' <<<'$third' && grep -qx 'free $((100 * MIB)) total $CAP' <<<'$third'"
check "shared: a process's memory is the device's again when it exits or frees" \
  bash -c "[ '$after' = 'free $CAP total $CAP' ] && grep -qx 'malloc ok' <<<'$again'"
check "shared: a process asking for another capacity sees no device" \
  bash -c "! FAKECUDA_SHARED=$SEG FAKECUDA_MEM_BYTES=$((CAP / 2)) ./shared_check $MIB 2>/dev/null"
rm -f "/dev/shm/$SEG"

# A child made by fork() inherits the mapping and the parent's used count;
# its normal exit must not give the parent's 600 MiB back to the device.
FAKECUDA_SHARED=$SEG hold $((600 * MIB)) fork-hold
forked=${HELD%$'\n'}
other=$(shared ./shared_check $((600 * MIB)))
release >/dev/null
check "shared: a forked child's exit leaves its parent's memory charged" \
  bash -c "grep -qx 'child exited' <<<'$forked' &&
           [ \"\$(tail -1 <<<'$forked')\" = 'free $((400 * MIB)) total $CAP' ] &&
           grep -qx 'malloc refused' <<<'$other'"
rm -f "/dev/shm/$SEG"

# A free after the process has left the device at exit (a thread freeing
# while it exits) takes nothing: neither count wraps below zero.
check "shared: a free after the exit detach wraps no count" \
  bash -c "[ \"\$(FAKECUDA_SHARED=$SEG ./shared_exit_check $((600 * MIB)))\" = 'used 0 shared 0' ]"
rm -f "/dev/shm/$SEG"

hold $((600 * MIB))
alone=$(./shared_check $((600 * MIB)))
release >/dev/null
check "unset: each process has a device of its own" \
  bash -c "grep -qx 'malloc ok' <<<'$alone' && grep -qx 'free $((400 * MIB)) total $CAP' <<<'$alone'"

rm -f "/dev/shm/$SEG"
unset FAKECUDA_MEM_BYTES
echo "shared device: $pass passed, $fail failed"
[ $fail -eq 0 ]
