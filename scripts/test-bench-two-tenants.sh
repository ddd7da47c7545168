#!/usr/bin/env bash
# Checks of scripts/bench-two-tenants.sh's failure paths with stand-ins for
# two_tenants and replay_torch (no build, no trace read): a tenant that fails
# on either side stops the script with status 1, naming the allocator, the
# tenant and its error, and prints no row for the failed run; when nothing
# fails, every row is there.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "== bench-two-tenants.sh: failures are reported, not printed as rows"
STUBS=$(mktemp -d)
trap 'rm -rf "$STUBS"' EXIT
# two_tenants A B ROOM: the table of tools/examples/two_tenants.rs, or with
# STUB_FAIL=npualloc the error it gives when a tenant's replay fails.
cat >"$STUBS/two_tenants" <<'STUB'
#!/usr/bin/env bash
if [ "${STUB_FAIL:-}" = npualloc ]; then
  echo "two_tenants: tenant 1 (b.trace.gz) failed in part 3 of 1000: the stub fails" >&2
  exit 1
fi
echo "config npualloc: device 1.0 MiB = $3 x the combined live peak 1.0 MiB (1100 B = $3 x 1000 B)"
echo "| trace | peak live MiB | peak rsv MiB | x live | alone on 64 GiB, MiB | handles | OOMs | fits |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
echo "| a.trace.gz | 1.0 | 2.0 | 2.000 | 2.0 | 3 | 0 | yes |"
echo "| b.trace.gz | 1.0 | 4.0 | 4.000 | 4.0 | 5 | 0 | yes |"
STUB
# replay_torch: --combined-peak, --tenant K/2 (tenant 1 fails with
# STUB_FAIL=pytorch-1; tenant 0 then stops as tenants.h makes it), alone.
cat >"$STUBS/replay_torch" <<'STUB'
#!/usr/bin/env bash
case $1 in
  --combined-peak) echo "combined live peak 1000 B"; echo "capacity 1100" ;;
  --tenant)
    t=${2%/2}
    if [ "${STUB_FAIL:-}" = pytorch-1 ]; then
      if [ "$t" = 1 ]; then echo "cannot load the stub's trace" >&2; exit 1; fi
      sleep 0.5
      echo "tenant 1 (pid 1) failed; tenant 0 stops" >&2
      exit 1
    fi
    echo 'TENANT {"peak_reserved":2097152,"peak_live":1048576,"handles":3,"ooms":0}' ;;
  *) echo 'RESULT {"peak_reserved":2097152}' ;;
esac
STUB
chmod +x "$STUBS/two_tenants" "$STUBS/replay_torch"
pass=0 fail=0
check() {
  if "${@:2}"; then
    echo "PASS $1"; pass=$((pass + 1))
  else
    echo "FAIL $1; the script printed:"; sed 's/^/    /' "$STUBS/out"
    echo "  and on stderr:"; sed 's/^/    /' "$STUBS/err"
    fail=$((fail + 1))
  fi
}
# run STUB_FAIL: the script's status, stdout in $STUBS/out, stderr in $STUBS/err.
run() {
  STUB_FAIL=$1 PEER=$STUBS EXAMPLES=$STUBS ROOMS=1.10 \
    bash scripts/bench-two-tenants.sh a.trace.gz b.trace.gz >"$STUBS/out" 2>"$STUBS/err"
}
npualloc_fails() {
  run npualloc
  [ $? = 1 ] && ! grep -q '^| 1.10 |' "$STUBS/out" &&
    grep -q '^npualloc at ROOM 1.10: two_tenants failed' "$STUBS/err" &&
    grep -q 'tenant 1 (b.trace.gz) failed in part 3 of 1000: the stub fails' "$STUBS/err"
}
pytorch_tenant_fails() {
  run pytorch-1
  [ $? = 1 ] && ! grep -q '^| 1.10 | pytorch ' "$STUBS/out" && grep -q '^| 1.10 | npualloc |' "$STUBS/out" &&
    grep -q '^pytorch at ROOM 1.10: replay_torch tenants failed' "$STUBS/err" &&
    grep -q '^  tenant 1 (b): failed, status 1' "$STUBS/err" &&
    grep -q '^    cannot load the stub' "$STUBS/err" &&
    grep -q '^  tenant 0 (a): ' "$STUBS/err"
}
nothing_fails() {
  run ""
  [ $? = 0 ] && [ "$(grep -c '^| 1.10 | ' "$STUBS/out")" = 3 ] &&
    grep -q '^| 1.10 | npualloc | 2.0 (2.000) | 3 | 0 | 4.0 (4.000) | 5 | 0 | yes |$' "$STUBS/out" &&
    grep -q '^  pytorch 2.0 2.0$' "$STUBS/out" && [ ! -s "$STUBS/err" ]
}
check "a failing npualloc tenant: status 1, its error, no row" npualloc_fails
check "a failing replay_torch tenant: status 1, which tenant and its error, no row" pytorch_tenant_fails
check "nothing failing: every row" nothing_fails
echo "bench-two-tenants.sh: $pass passed, $fail failed"
[ $fail = 0 ]
