#!/usr/bin/env bash
# Regenerates this module's replace lines from k8s.io/kubernetes's own go.mod.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver,
# ...) at v0.0.0 and replaces them with ./staging/src/... in its own go.mod;
# those replaces do not apply to a module that depends on it, so every
# staging module it names is replaced here by the published vX.Y.Z matching
# the kubernetes release (v1.37.2 -> v0.37.2). Run it after changing
# KUBE_VERSION, then `go mod tidy`.
set -euo pipefail
cd "$(dirname "$0")"
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
staging_version="v0.${KUBE_VERSION#v1.}"

gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[ -n "$gomod" ] || { echo "gen-replace: no go.mod for k8s.io/kubernetes@${KUBE_VERSION}" >&2; exit 1; }

mods=$(sed -n 's|^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*|\1|p' "$gomod")
[ -n "$mods" ] || { echo "gen-replace: no staging replaces in $gomod" >&2; exit 1; }

# Drop the old k8s.io replaces, then add the new ones.
for old in $(go mod edit -json | sed -n 's/^[[:space:]]*"Path": "\(k8s\.io\/[^"]*\)".*/\1/p' | sort -u); do
	go mod edit -dropreplace="$old" 2>/dev/null || true
done
args=()
for m in $mods; do
	args+=("-replace=${m}=${m}@${staging_version}")
done
go mod edit -require="k8s.io/kubernetes@${KUBE_VERSION}" "${args[@]}"
echo "gen-replace: $(echo "$mods" | wc -l) staging modules replaced at ${staging_version}"
