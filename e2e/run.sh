#!/usr/bin/env bash
# End-to-end test: build memsnap, install the pinned MCP SDK, drive `memsnap serve` over stdio.
# Run from anywhere: bash e2e/run.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && go build -o "$tmp/memsnap" ./cmd/memsnap)
npm ci --prefix "$repo/e2e" --no-audit --no-fund --loglevel=error
node "$repo/e2e/client.mjs" "$tmp/memsnap" "$repo/testdata/scenarios"
