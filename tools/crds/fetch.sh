#!/bin/sh
# Copies the CRDs named in crds.txt from their Go modules into CACHE/crds (CACHE: the
# first argument). The go command downloads each module through the module proxy and
# checks it against the checksum database; a file already in the cache is kept.
set -eu
cache=$1
here=$(cd "$(dirname "$0")" && pwd)
grep -v '^#' "$here/crds.txt" | while read -r module version path; do
  [ -n "$module" ] || continue
  dest="$cache/crds/${module##*/}@$version"
  [ -f "$dest/${path##*/}" ] && continue
  # Outside any module, so the download is recorded in no go.mod or go.sum of ours.
  dir=$(cd / && go mod download -json "$module@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { echo "fetch.sh: go mod download $module@$version gave no folder" >&2; exit 1; }
  mkdir -p "$dest"
  cp "$dir/$path" "$dest/${path##*/}.tmp"
  chmod 0644 "$dest/${path##*/}.tmp"
  mv "$dest/${path##*/}.tmp" "$dest/${path##*/}"
  echo "fetch.sh: $module@$version $path"
done
