#!/usr/bin/env bash
# Builds the broker image kafkastreams/kafka:<KAFKA_VERSION> FROM scratch
# (see Dockerfile beside this script). Run through `make kafka-image`, which
# first fetches the jars (`make kafka-jars`).
#
# Inputs (environment):
#   KAFKA_VERSION  Kafka version, e.g. 4.1.1 (required)
#   KAFKA_LIBS     directory of the Kafka jars [<repo>/.cache/kafka/$KAFKA_VERSION/libs]
#   KAFKA_IMAGE    image tag [kafkastreams/kafka:$KAFKA_VERSION]
#   JAVA_HOME      JDK whose jlink and jmods make the runtime [the JDK of `java` in PATH]
#   FORCE=1        rebuild even if the image's input hash label matches
#
# The image carries the label io.kafkastreams.inputs: a SHA-256 over every
# input (this script, the Dockerfile, the entrypoint and kraftconfig sources,
# the jars, the JDK version). When an image with the same tag and label exists
# the build is skipped.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
version="${KAFKA_VERSION:?KAFKA_VERSION must be set, e.g. 4.1.1}"
libs="${KAFKA_LIBS:-$root/.cache/kafka/$version/libs}"
image="${KAFKA_IMAGE:-kafkastreams/kafka:$version}"
ctx="$root/.cache/kafka-image/$version"

# Modules of the Java runtime. Generous on purpose: jdeps cannot analyse the
# Kafka jar set, and a missing module only shows up as a runtime
# NoClassDefFoundError deep inside the broker.
modules=java.base,java.compiler,java.desktop,java.instrument,java.logging,java.management,java.management.rmi,java.naming,java.net.http,java.rmi,java.scripting,java.security.jgss,java.security.sasl,java.sql,java.transaction.xa,java.xml,jdk.crypto.ec,jdk.jfr,jdk.management,jdk.naming.dns,jdk.net,jdk.security.auth,jdk.security.jgss,jdk.unsupported,jdk.zipfs

die() { echo "build.sh: $*" >&2; exit 1; }

[[ -f "$libs/kafka_2.13-$version.jar" ]] || die "no Kafka jars in $libs: run 'make kafka-jars' (they come from Maven Central)"
if [[ -z "${JAVA_HOME:-}" ]]; then
  java_bin="$(command -v java || true)"
  [[ -n "$java_bin" ]] || die "java not found: install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)"
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$java_bin")")")"
fi
[[ -x "$JAVA_HOME/bin/jlink" ]] || die "no jlink in $JAVA_HOME/bin: install a full JDK 17 (openjdk-17-jdk-headless), not a JRE"
[[ -d "$JAVA_HOME/jmods" ]] || die "no jmods in $JAVA_HOME: jlink needs them (openjdk-17-jdk-headless ships them)"
command -v docker >/dev/null || die "docker client not found (Debian: apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "no Docker daemon answers (start it: dockerd >/tmp/dockerd.log 2>&1 &)"

hash="$(
  {
    cat "$here/build.sh" "$here/Dockerfile"
    cat "$here"/entrypoint/*.go "$here"/../kraftconfig/*.go
    echo "$modules"
    "$JAVA_HOME/bin/java" -version 2>&1
    (cd "$libs" && sha256sum -- *.jar)
  } | sha256sum | cut -c1-32
)"
current="$(docker image inspect --format '{{ index .Config.Labels "io.kafkastreams.inputs" }}' "$image" 2>/dev/null || true)"
if [[ "$current" == "$hash" && "${FORCE:-}" != 1 ]]; then
  echo "build.sh: $image is up to date (inputs $hash)"
  exit 0
fi

echo "build.sh: building $image (inputs $hash) from $JAVA_HOME and $libs"
rm -rf "$ctx"
rootfs="$ctx/rootfs"
mkdir -p "$rootfs/opt/kafka" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"

"$JAVA_HOME/bin/jlink" --add-modules "$modules" --strip-debug --no-man-pages \
  --no-header-files --compress=2 --output "$rootfs/opt/java"

# Shared libraries: whatever the runtime's binaries and libraries link,
# copied at the same absolute path (the dynamic loader's path is baked into
# bin/java). The runtime's own libraries resolve inside rootfs through
# LD_LIBRARY_PATH and are not copied twice. The GUI-only libraries of
# java.desktop are not scanned: a headless broker never loads them, and they
# would drag in X11, ALSA and font libraries. libstdc++/libgcc_s are added for
# the JNI libraries that Kafka's compression jars unpack at run time
# (snappy-java links libstdc++).
gui='libawt_xawt.so|libsplashscreen.so|libjawt.so|libjsound.so|libfontmanager.so|liblcms.so|libjavajpeg.so'
declare -A seen=()
copy_lib() {
  local p="$1"
  [[ -n "${seen[$p]:-}" ]] && return 0
  seen[$p]=1
  mkdir -p "$rootfs$(dirname "$p")"
  cp -L "$p" "$rootfs$p"
}
missing=()
jlibs="$rootfs/opt/java/lib:$rootfs/opt/java/lib/server"
while IFS= read -r f; do
  [[ "$(basename "$f")" =~ ^($gui)$ ]] && continue
  while IFS= read -r line; do
    case "$line" in
      *"not found"*) missing+=("$(basename "$f"): ${line%% =>*}") ;;
      *"=> /"*) p="${line#*=> }"; p="${p%% (*}"; [[ "$p" == "$rootfs"* ]] || copy_lib "$p" ;;
      /*) p="${line%% (*}"; copy_lib "$p" ;;
    esac
  done < <(LD_LIBRARY_PATH="$jlibs" ldd "$f" 2>/dev/null | sed 's/^[[:space:]]*//')
done < <(find "$rootfs/opt/java" -type f \( -name '*.so' -o -path '*/bin/*' \))
for extra in libstdc++.so.6 libgcc_s.so.1; do
  # awk reads to the end (no early exit): ldconfig must not get SIGPIPE,
  # which pipefail turns into exit 141 of the whole build.
  p="$(ldconfig -p | awk -v l="$extra" '$1 == l && /x86-64/ && !found { print $NF; found = 1 }')"
  [[ -n "$p" ]] && copy_lib "$p"
done
((${#missing[@]} == 0)) || die "unresolved shared libraries: ${missing[*]}"

cp -r "$libs" "$rootfs/opt/kafka/libs"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$rootfs/entrypoint" ./integration/kafkaenv/image/entrypoint)
cp "$here/Dockerfile" "$ctx/Dockerfile"

# The legacy builder: Debian's docker.io has no buildx plugin, and a
# FROM-scratch COPY needs nothing more.
if ! DOCKER_BUILDKIT=0 docker build -q --label "io.kafkastreams.inputs=$hash" \
  --label "io.kafkastreams.kafka-version=$version" -t "$image" "$ctx" >"$ctx/build.log" 2>&1; then
  cat "$ctx/build.log" >&2
  die "docker build of $image failed"
fi
echo "build.sh: built $image ($(docker image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1/1e6 }'))"
