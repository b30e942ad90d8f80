#!/usr/bin/env bash
# Moving a fetched model to the GPU machine, whose calls carry at most 64 MiB:
#   here:   bash scripts/carry-model.sh split [SIZE] [MODEL] -> .model/partaa, partab, ... and
#           .model/manifest (ignored); SIZE of each part, default 49M; MODEL a short name
#           of scripts/fetch-model.sh (default smollm2-135m: two parts; qwen2.5-0.5b: ten)
#   there:  one call per part, each carrying .model/manifest and that part and running
#           `bash scripts/carry-model.sh take`, back to back (the machine keeps its files
#           only while it stays warm); the call that brings the last part assembles the
#           file and checks its SHA-256 against the manifest.
set -euo pipefail
cd "$(dirname "$0")/.."
models="${LOWBIT_CACHE:-$HOME/.cache/lowbit}/models"
case "${1:-}" in
  split)
    size="${2:-49M}"
    model="${3:-smollm2-135m}"
    path="$(bash scripts/fetch-model.sh "$model")"  # checks it (or fetches it) first
    rm -rf .model && mkdir -p .model
    split -b "$size" "$path" .model/part
    { echo "name $(basename "$path")"
      echo "sha256 $(sha256sum "$path" | cut -d' ' -f1)"
      (cd .model && ls part*) | sed 's/^/part /'; } >.model/manifest
    ls -l .model ;;
  take)
    [ -f .model/manifest ] || { echo "carry-model: no .model/manifest (carry it with each part)" >&2; exit 2; }
    name="$(sed -n 's/^name //p' .model/manifest)"
    sha="$(sed -n 's/^sha256 //p' .model/manifest)"
    mkdir -p "$models/.parts"
    mv .model/part* "$models/.parts/" 2>/dev/null || true
    missing=()
    while read -r part; do
      [ -f "$models/.parts/$part" ] || missing+=("$part")
    done < <(sed -n 's/^part //p' .model/manifest)
    if [ ${#missing[@]} -gt 0 ]; then
      echo "carry-model: $name: waiting for ${missing[*]}"
      exit 0
    fi
    sed -n 's/^part //p' .model/manifest | (cd "$models/.parts" && xargs cat) >"$models/$name.partial"
    got="$(sha256sum "$models/$name.partial" | cut -d' ' -f1)"
    if [ "$got" != "$sha" ]; then
      rm -f "$models/$name.partial"
      echo "carry-model: $name: SHA-256 $got, expected $sha (a part is missing or damaged)" >&2
      exit 1
    fi
    mv "$models/$name.partial" "$models/$name" && rm -rf "$models/.parts"
    echo "carry-model: $models/$name ($(stat -c %s "$models/$name") bytes, SHA-256 checked)" ;;
  *) echo "usage: scripts/carry-model.sh split [SIZE] [MODEL] | take" >&2; exit 2 ;;
esac
