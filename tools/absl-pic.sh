#!/usr/bin/env bash
# Builds position-independent static Abseil archives for libbfc_alloc.so from
# Debian's own abseil source package -- the exact version whose headers
# (libabsl-dev) the build compiles against, Debian's patches applied -- and
# installs them under a cache directory that CMake finds
# (BFC_ABSL_PIC_DIR, default ~/.cache/bfc/absl-pic). Debian ships libabsl_*.a,
# but not position-independent: their local-exec TLS cannot be linked into a
# shared object, so the .so would need libabsl_*.so at load time, which the
# processes it is loaded into (pip-installed PyTorch, CuPy) do not have.
#
#   tools/absl-pic.sh [PREFIX]
#
# Does nothing when PREFIX already holds a build of the installed version.
# The source comes through apt (signature-checked, from Debian's archive) with
# a private source list; nothing in /etc/apt is changed. Takes ~5-10 minutes
# on 2 cores the first time (ccache, when present, makes rebuilds fast).
set -euo pipefail

prefix=${1:-${BFC_ABSL_PIC_DIR:-$HOME/.cache/bfc/absl-pic}}
version=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null || true)
if [[ -z "$version" ]]; then
  echo "absl-pic.sh: libabsl-dev is not installed (run tools/deps.sh)" >&2
  exit 2
fi
if [[ -f "$prefix/VERSION" && "$(cat "$prefix/VERSION")" == "$version" ]] &&
   compgen -G "$prefix/lib/libabsl_*.a" > /dev/null; then
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "absl-pic.sh: building position-independent Abseil $version into $prefix" >&2

# A private apt state with deb-src lines for the suites Debian ships it from.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
mkdir -p "$work/lists/partial"
cat > "$work/sources.list" <<SRC
deb-src http://deb.debian.org/debian $codename main
deb-src http://deb.debian.org/debian $codename-updates main
deb-src http://deb.debian.org/debian-security $codename-security main
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list"
          -o "Dir::Etc::SourceParts=/dev/null"
          -o "Dir::State::Lists=$work/lists"
          -o "APT::Sandbox::User=root")
apt-get -qq "${apt_opts[@]}" update
(cd "$work" && apt-get -qq "${apt_opts[@]}" source "abseil=$version" > /dev/null)
src=$(find "$work" -maxdepth 1 -type d -name 'abseil-*' | head -1)
[[ -n "$src" ]] || { echo "absl-pic.sh: no source unpacked" >&2; exit 1; }
# The headers the build uses must be these very ones (same inline namespace,
# same options).
if ! cmp -s "$src/absl/base/options.h" /usr/include/absl/base/options.h; then
  echo "absl-pic.sh: $src/absl/base/options.h differs from the installed one" >&2
  exit 1
fi

launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF \
  -DBUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$work/install" \
  "${launcher[@]}" > "$work/configure.log" 2>&1
cmake --build "$work/build" -j"$(nproc)" > "$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log" >&2; exit 1; }
cmake --install "$work/build" > /dev/null
rm -rf "$prefix"
mkdir -p "$prefix/lib"
cp "$work/install/lib/"libabsl_*.a "$prefix/lib/"
echo "$version" > "$prefix/VERSION"
echo "absl-pic.sh: done ($(ls "$prefix/lib" | wc -l) archives)" >&2
