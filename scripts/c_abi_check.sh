#!/usr/bin/env bash
# Checks the C interface's shared library: its SONAME is libfedcase_client.so.1, it exports
# every function of fedcase_client.h and nothing else (nm -D --defined-only), each under the
# FEDCASE_CLIENT_1 version node, and it has no undefined symbol of the SDK left.
#   scripts/c_abi_check.sh build/client_sdk/libfedcase_client.so
set -euo pipefail
lib=${1:?usage: $0 LIBRARY}
header=$(dirname "$0")/../client_sdk/fedcase_client.h
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libfedcase_client.so.1 ] || { echo "c_abi_check: SONAME is '$soname'" >&2; exit 1; }
# Defined dynamic symbols, less the version node's own absolute symbol.
exported=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
stray=$(grep -v '^fedcase_' <<< "$exported" || true)
if [ -n "$stray" ]; then
  echo "c_abi_check: symbols outside fedcase_* are exported:" >&2
  head -20 <<< "$stray" >&2
  exit 1
fi
declared=$(grep -o 'fedcase_[a-z_]*(' "$header" | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$missing" ] || { echo "c_abi_check: declared but not exported: $missing" >&2; exit 1; }
unversioned=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '$2 == "T"' |
              grep -vc '@@FEDCASE_CLIENT_1$' || true)
[ "$unversioned" -eq 0 ] || { echo "c_abi_check: $unversioned functions lack FEDCASE_CLIENT_1" >&2; exit 1; }
echo "c_abi_check: $(wc -l <<< "$exported") symbols, all fedcase_*, SONAME $soname"
