#!/usr/bin/env bash
# Re-fetches the dashboard's JavaScript libraries from the npm registry at pinned versions
# into service/static/vendor/ (committed: the dashboard has no build step and loads nothing
# from a CDN). Bump a version here, run this, check the dashboard, update vendor/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

UPLOT_VERSION=1.6.32
JS_YAML_VERSION=5.5.0

vendor=service/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() {  # fetch NAME VERSION -> unpacked package in $work/NAME
  local name=$1 version=$2
  (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
  mkdir -p "$work/$name"
  tar -xzf "$work/$name-$version.tgz" -C "$work/$name" --strip-components=1
}

fetch uplot "$UPLOT_VERSION"
rm -rf "$vendor/uplot" && mkdir -p "$vendor/uplot"
cp "$work/uplot/dist/uPlot.esm.js" "$work/uplot/dist/uPlot.min.css" "$work/uplot/LICENSE" \
  "$vendor/uplot/"

fetch js-yaml "$JS_YAML_VERSION"
rm -rf "$vendor/js-yaml" && mkdir -p "$vendor/js-yaml"
# The browser ES module build, renamed .js so every static server types it as JavaScript.
cp "$work/js-yaml/dist/browser/js-yaml.esm.min.mjs" "$vendor/js-yaml/js-yaml.esm.min.js"
cp "$work/js-yaml/LICENSE" "$vendor/js-yaml/"

(cd "$vendor" && sha256sum uplot/* js-yaml/*)
