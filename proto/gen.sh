#!/usr/bin/env bash
# Regenerates the Go code beside every .proto file under proto/.
# protoc comes from Debian's protobuf-compiler package; the Go plugins are the
# versions pinned as tool dependencies in go.mod, so output is reproducible.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v protoc >/dev/null; then
  echo "proto/gen.sh: protoc not found: install Debian's protobuf-compiler (apt-get install protobuf-compiler)" >&2
  exit 1
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc
mapfile -t files < <(find proto -name '*.proto' | sort)
protoc -I proto \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --go_out=proto --go_opt=paths=source_relative \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
  "${files[@]}"
echo "proto/gen.sh: generated Go for ${#files[@]} file(s) with $(protoc --version)"
