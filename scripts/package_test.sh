#!/usr/bin/env bash
# The Debian packages end to end: builds them with CPack from the build tree, checks their
# control data and contents (dpkg-deb -I/-c), the maintainer scripts (shellcheck), the systemd
# unit (systemd-analyze verify) and lintian's verdict, unpacks them
# into a scratch root (dpkg -x: nothing is installed on this machine), then starts the unpacked
# coordinator binary with the unpacked default config (made temporary: port 0, a temp
# database, tokens in the environment as the unit's EnvironmentFile gives them) and asks its
# admin API and /metrics; the unpacked CLI lists the jobs; the unpacked C header and library
# build and run a C program; the unpacked Python package imports over the unpacked library.
#   scripts/package_test.sh --build-dir build
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
dir=$(mktemp -d /tmp/fedcase-packages-XXXXXX)
coordinator_pid=
cleanup() {
  local status=$?
  [ -n "$coordinator_pid" ] && kill "$coordinator_pid" 2>/dev/null && wait "$coordinator_pid" || true
  if [ "$status" -eq 0 ]; then rm -rf "$dir"; else echo "package_test: files kept in $dir" >&2; fi
}
trap cleanup EXIT
fail() { echo "package_test: $*" >&2; exit 1; }
say() { echo "package_test: $*"; }

say "building the packages"
cpack --config "$build/CPackConfig.cmake" -B "$dir/out" > "$dir/cpack.log" 2>&1 ||
  { cat "$dir/cpack.log"; fail "cpack failed"; }
[ ! -e /etc/fedcase ] || [ -e /etc/fedcase/coordinator.env ] ||
  fail "cpack wrote /etc/fedcase on this machine"
declare -A deb
for name in fedcase-coordinator fedcase-cli libfedcase-client1 libfedcase-client-dev python3-fedcase; do
  deb[$name]=$(ls "$dir"/out/${name}_1.0.0_*.deb 2>/dev/null | head -1)
  [ -f "${deb[$name]}" ] || fail "no package $name in $(ls "$dir/out")"
done

# field PACKAGE NAME: a control field of a package
field() { dpkg-deb -f "${deb[$1]}" "$2"; }
# has PACKAGE PATH...: the package holds each path
has() {
  local package=$1; shift
  dpkg-deb -c "${deb[$package]}" | awk '{print $6}' | sed 's|^\./|/|' > "$dir/$package.files"
  for path in "$@"; do grep -qxF "$path" "$dir/$package.files" || fail "$package lacks $path"; done
}
say "checking control data and contents"
dpkg-deb -I "${deb[fedcase-coordinator]}" > "$dir/coordinator.info"
for script in postinst prerm postrm conffiles; do
  grep -q " $script" "$dir/coordinator.info" || fail "fedcase-coordinator has no $script"
done
[[ $(field fedcase-coordinator Depends) == *libtorch* ]] ||
  fail "fedcase-coordinator does not depend on libtorch: $(field fedcase-coordinator Depends)"
[[ $(field libfedcase-client-dev Depends) == *"libfedcase-client1 (= 1.0.0)"* ]] ||
  fail "libfedcase-client-dev does not depend on its library: $(field libfedcase-client-dev Depends)"
[[ $(field python3-fedcase Depends) == *libfedcase-client1* ]] || fail "python3-fedcase deps"
[ "$(field python3-fedcase Architecture)" = all ] || fail "python3-fedcase is not Architecture: all"
has fedcase-coordinator /usr/bin/fedcase-coordinator /etc/fedcase/coordinator.json \
  /lib/systemd/system/fedcase-coordinator.service /usr/share/doc/fedcase-coordinator/README.Debian
has fedcase-cli /usr/bin/fedcase
has libfedcase-client1 /usr/lib/libfedcase_client.so.1.0.0 /usr/lib/libfedcase_client.so.1
has libfedcase-client-dev /usr/include/fedcase_client.h /usr/lib/libfedcase_client.so \
  /usr/lib/pkgconfig/fedcase_client.pc /usr/lib/cmake/fedcase_client/fedcase_clientConfig.cmake \
  /usr/include/fedcase/client_sdk/session.h /usr/lib/libfedcase_client_sdk.a
has python3-fedcase /usr/lib/python3/dist-packages/fedcase/__init__.py \
  /usr/lib/python3/dist-packages/fedcase/torch_trainer.py
if grep -q '^/usr/lib/libfedcase_client' "$dir/fedcase-coordinator.files"; then
  fail "the coordinator package carries the client library"
fi
dpkg-deb -e "${deb[fedcase-coordinator]}" "$dir/control"
grep -qx /etc/fedcase/coordinator.json "$dir/control/conffiles" || fail "the config is no conffile"
grep -q 'useradd --system' "$dir/control/postinst" || fail "postinst makes no system user"
shellcheck "$dir/control/postinst" "$dir/control/prerm" "$dir/control/postrm"

say "unpacking into a scratch root"
root=$dir/root
for d in "${deb[@]}"; do dpkg -x "$d" "$root"; done
unit=$root/lib/systemd/system/fedcase-coordinator.service
for setting in User=fedcase NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes \
               StateDirectory=fedcase CapabilityBoundingSet= SystemCallFilter=@system-service; do
  grep -qx "$setting" "$unit" || fail "the unit lacks $setting"
done
# Without systemd running here, verify still parses every setting (a bad value or an unknown key
# is reported with its line); its one complaint that is about this machine is the binary, which
# is in the scratch root and not in /usr/bin.
systemd-analyze verify "$unit" > "$dir/verify.log" 2>&1 || true
if grep -v 'Command /usr/bin/fedcase-coordinator is not executable' "$dir/verify.log" | grep .; then
  fail "systemd-analyze verify found problems in the unit"
fi
say "systemd-analyze verify: every setting of the unit parses"

say "lintian"
command -v lintian > /dev/null || fail "lintian is not installed (scripts/install-deps.sh installs it)"
lintian --no-tag-display-limit --suppress-tags-from-file packaging/lintian-suppressions \
  "${deb[@]}" > "$dir/lintian.log" 2>&1 || true
if grep -E '^(E|W): ' "$dir/lintian.log"; then
  fail "lintian reports errors or warnings above (packaging/lintian-suppressions lists the accepted ones)"
fi
say "lintian: $(grep -c '^[IPN]:' "$dir/lintian.log" || true) notes, no error or warning"

say "starting the unpacked coordinator"
admin=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
jq --arg db "sqlite:$dir/fedcase.db" --arg pf "$dir/port" --arg ds "$dir/datasets" \
  '.port = 0 | .port_file = $pf | .database = $db | .datasets_dir = $ds | .eval_samples = 100' \
  "$root/etc/fedcase/coordinator.json" > "$dir/coordinator.json"
FEDCASE_ADMIN_TOKEN=$admin FEDCASE_ENROLLMENT_TOKEN=$enrollment \
  "$root/usr/bin/fedcase-coordinator" --config "$dir/coordinator.json" > "$dir/coordinator.log" 2>&1 &
coordinator_pid=$!
for _ in $(seq 600); do [ -s "$dir/port" ] && break; sleep 0.05; done
[ -s "$dir/port" ] || { cat "$dir/coordinator.log"; fail "the unpacked coordinator did not start"; }
port=$(cat "$dir/port")
code=$(curl -s -o "$dir/jobs.json" -w '%{http_code}' -H "Authorization: Bearer $admin" \
  "http://127.0.0.1:$port/v1/admin/jobs")
[ "$code" = 200 ] || fail "GET /v1/admin/jobs answered $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/admin/jobs")
[ "$code" = 401 ] || fail "GET /v1/admin/jobs without a token answered $code"
# Read whole before it is searched: `grep -q` stops at the first match, and under pipefail the
# curl it cut off would fail the check.
curl -sf -o "$dir/metrics.txt" -H "Authorization: Bearer $admin" "http://127.0.0.1:$port/metrics" ||
  fail "GET /metrics failed"
grep -q '^fedcase_' "$dir/metrics.txt" || fail "/metrics has no fedcase_ metric"
FEDCASE_URL=http://127.0.0.1:$port FEDCASE_TOKEN=$admin "$root/usr/bin/fedcase" jobs list --json |
  jq -e 'type == "array" or type == "object"' > /dev/null || fail "the unpacked CLI did not list jobs"
kill -TERM "$coordinator_pid"
wait "$coordinator_pid" || fail "the coordinator did not stop cleanly on SIGTERM"
coordinator_pid=

say "building a C program against the unpacked -dev package"
cat > "$dir/version.c" <<'C'
#include <fedcase_client.h>
#include <stdio.h>
int main(void) {
  printf("%s %d\n", fedcase_version(), fedcase_abi_version());
  return fedcase_abi_version() == FEDCASE_ABI_VERSION ? 0 : 1;
}
C
# The .pc file is relocatable (${pcfiledir}), so it points into the scratch root.
# shellcheck disable=SC2046  # the flags are words
cc "$dir/version.c" $(PKG_CONFIG_PATH=$root/usr/lib/pkgconfig pkg-config --cflags --libs fedcase_client) \
  -Wl,-rpath,"$root/usr/lib" -o "$dir/version"
[ "$("$dir/version")" = "1.0.0 1" ] || fail "the C program printed $("$dir/version")"
PYTHONPATH=$root/usr/lib/python3/dist-packages \
  FEDCASE_CLIENT_LIBRARY=$root/usr/lib/libfedcase_client.so.1 \
  /usr/bin/python3 -c 'import fedcase; assert fedcase.sdk_version == "1.0.0"' ||
  fail "the unpacked Python package does not import"
say "passed ($(cd "$dir/out" && ls *.deb | tr '\n' ' '))"
