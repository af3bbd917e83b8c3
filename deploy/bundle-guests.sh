#!/usr/bin/env bash
# Copy every Reconciler (or ClusterReconciler) manifest under SRC, and the module it names, into the flat directory
# DEST, with each manifest's `module:` rewritten to the copied file: a self-contained guest
# bundle for an image, a volume or a ConfigMap.
#
#   deploy/bundle-guests.sh sample-guests /tmp/guests
set -euo pipefail
src=${1:?usage: bundle-guests.sh SRC DEST}
dest=${2:?usage: bundle-guests.sh SRC DEST}
mkdir -p "$dest"
found=0
while IFS= read -r manifest; do
  grep -qE '^kind: (Cluster)?Reconciler$' "$manifest" || continue
  module=$(sed -n 's/^  module: *//p' "$manifest" | head -n1)
  [ -n "$module" ] || { echo "$manifest: no spec.module" >&2; exit 1; }
  case "$module" in /*) path=$module ;; *) path=$(dirname "$manifest")/$module ;; esac
  [ -f "$path" ] || { echo "$manifest: module $path is missing (run make guests)" >&2; exit 1; }
  name=$(basename "$path")
  cp "$path" "$dest/$name"
  sed "s|^  module: .*|  module: $name|" "$manifest" > "$dest/$(basename "$(dirname "$manifest")").yaml"
  found=$((found + 1))
done < <(find "$src" -name '*.yaml' -not -path '*/target/*' | sort)
[ "$found" -gt 0 ] || { echo "no Reconciler manifests under $src" >&2; exit 1; }
echo "bundled $found guest(s) into $dest"
