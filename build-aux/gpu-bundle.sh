#!/bin/bash
# gpu-bundle.sh — builds libmixprec here with CUDA for Hopper (sm_90 and
# sm_90a machine code plus compute_90 PTX) and packs, into one folder,
# everything its GPU checks need at run time on a machine that has only a
# driver, glibc and a Python with torch and NCCL: a borrowed GPU machine
# that cannot install packages.
#
#   build-aux/gpu-bundle.sh [--output DIR] [--builddir DIR] [--no-build]
#
# The folder (default _gpu/ in the source tree, ignored by git) holds:
#   run.sh                 the checks, in one command (see its --help)
#   MANIFEST               what the bundle expects the machine to provide
#   debian-packages.txt    the Debian packages its libraries came from
#   lib/                   libmixprec, the Debian runtime libraries it and
#                          the programs load (GLib, json-glib and theirs,
#                          from `apt-get download` + `dpkg -x` of the exact
#                          versions installed here), libcudart
#   plugins/.libs/         the cuda device, the NCCL comm and the optimizers
#   tests/, tools/, bench/ the GPU test programs, mixprec-inspect, the
#                          fused AdamW benchmark and its PyTorch peer
# laid out as in a build tree, so that the tests find their plugins through
# MIXPREC_TOP_BUILDDIR as they do under `make check`.
#
# The machine provides (MANIFEST): the NVIDIA driver's libcuda.so.1,
# libnccl.so.2 (run.sh finds the one of the nvidia-nccl pip package in the
# Python that has torch, or takes NCCL_LIBDIR), glibc at least as new as the
# bundle needs, bash and coreutils. The UCX comm plugin stays out: no GPU
# check uses it, and UCX's transports are modules of their own.
#
# Environment: BUILDDIR (default _build/gpu-bundle), BUNDLE (default _gpu),
# CUDA_PREFIX (default /usr/local/cuda), JOBS (default: the CPUs),
# DEB_CACHE (default _build/gpu-debs: the downloaded .deb files, kept).
set -euo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${BUILDDIR:-"$srcdir/_build/gpu-bundle"}
bundle=${BUNDLE:-"$srcdir/_gpu"}
cuda_prefix=${CUDA_PREFIX:-/usr/local/cuda}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
deb_cache=${DEB_CACHE:-"$srcdir/_build/gpu-debs"}
build=yes
gencode="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90"

while [ $# -gt 0 ]; do
  case $1 in
    --output) bundle=$2; shift ;;
    --output=*) bundle=${1#*=} ;;
    --builddir) builddir=$2; shift ;;
    --builddir=*) builddir=${1#*=} ;;
    --no-build) build=no ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

die() { echo "gpu-bundle: $*" >&2; exit 1; }
say() { printf '== %s\n' "$*"; }

[ -x "$cuda_prefix/bin/nvcc" ] || die "no nvcc in $cuda_prefix/bin: the bundle's point is the CUDA plugins (set CUDA_PREFIX)"
for tool in apt-get dpkg dpkg-query objdump readelf ldd; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing: this script runs on Debian with binutils"
done

# Programs of the build tree that go into the bundle, as build-tree paths.
programs="tests/test-device-cuda tests/test-comm-nccl tests/test-engine-device tests/test-fp8-engine
          tools/mixprec-inspect bench/bench-adamw-cuda"
plugins="device-cuda comm-nccl optim-adamw optim-sgd optim-lion"

# ------------------------------------------------------------ build
if [ "$build" = yes ]; then
  say "build in $builddir (nvcc: sm_90, sm_90a, compute_90)"
  if [ ! -x "$srcdir/configure" ] || [ "$srcdir/configure.ac" -nt "$srcdir/configure" ]; then
    (cd "$srcdir" && ./autogen.sh) >/dev/null
  fi
  mkdir -p "$builddir"
  if [ ! -f "$builddir/Makefile" ] || ! grep -q "sm_90a" "$builddir/Makefile"; then
    (cd "$builddir" && "$srcdir/configure" --enable-werror --disable-introspection --disable-docs \
       --with-cuda="$cuda_prefix" NVCC_GENCODE="$gencode" >configure.log) ||
      die "configure failed (see $builddir/configure.log)"
  fi
  grep -q '^NCCL_LIBS = .*-lnccl' "$builddir/Makefile" ||
    die "configure in $builddir found no NCCL: the comm-nccl plugin would be missing (see configure.log)"
  # All first: its generated headers come before any single program.
  # shellcheck disable=SC2086 # a list of make targets
  (cd "$builddir" && make -j"$jobs" >make.log 2>&1 && make -j"$jobs" $programs >>make.log 2>&1) ||
    { tail -n 30 "$builddir/make.log" >&2; die "make failed in $builddir (see make.log)"; }
fi
[ -f "$builddir/Makefile" ] || die "$builddir is not configured: run once without --no-build"

# ------------------------------------------------------------ pack
say "pack into $bundle"
rm -rf "$bundle"
mkdir -p "$bundle/lib" "$bundle/plugins/.libs" "$bundle/tests" "$bundle/tools" "$bundle/bench"

# A libtool program is a wrapper script with the real binary in .libs/.
real_program() {
  local path=$builddir/$1 dir base
  dir=$(dirname "$path"); base=$(basename "$path")
  if [ -f "$dir/.libs/$base" ]; then echo "$dir/.libs/$base"
  elif [ -f "$dir/.libs/lt-$base" ]; then echo "$dir/.libs/lt-$base"
  else echo "$path"
  fi
}
for p in $programs; do
  src=$(real_program "$p")
  head -c 4 "$src" | grep -q ELF || die "$p: no ELF program at $src"
  install -m 0755 "$src" "$bundle/$p"
done
cp -L "$builddir/libmixprec/.libs/libmixprec.so.0" "$bundle/lib/"
for p in $plugins; do
  install -m 0755 "$builddir/plugins/.libs/mixprec-$p.so" "$bundle/plugins/.libs/"
done
install -m 0644 "$srcdir/bench/adamw-torch-cuda.py" "$srcdir/bench/adamw-cuda-compare.py" "$bundle/bench/"
install -m 0755 "$srcdir/build-aux/gpu-run.sh" "$bundle/run.sh"

elf_files() { find "$bundle" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print; }

# The package that owns an installed file; Debian 12 records libraries
# under /lib or /usr/lib, whichever the package shipped (merged /usr).
owner_of() {
  local f=$1 alt found
  case $f in /usr/lib/*) alt=${f#/usr} ;; /lib/*) alt=/usr$f ;; *) alt=$f ;; esac
  found=$(dpkg -S "$f" 2>/dev/null || dpkg -S "$alt" 2>/dev/null || true)
  [ -n "$found" ] && echo "${found%%:*}" | head -n 1
}

# Libraries the machine provides, by soname: glibc's (package libc6), the
# driver's and NCCL.
device_provided='^(libcuda\.so\.1|libnccl\.so\.2)$'

say "runtime libraries"
mkdir -p "$deb_cache"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
: > "$stage/packages"
# ldd's closure, bundle first; repeat until nothing new comes in.
for round in 1 2 3 4; do
  new=0
  while read -r soname path; do
    [[ $soname =~ $device_provided ]] && continue
    [ -e "$bundle/lib/$soname" ] && continue
    [ -n "$path" ] && [ "$path" != "not" ] || die "$soname: not found here, so it cannot be bundled"
    case $path in
      "$cuda_prefix"/*|/usr/local/cuda*/*)
        # The CUDA runtime: from the toolkit that built the plugins.
        cp -L "$path" "$bundle/lib/$soname"; new=1; continue ;;
    esac
    pkg=$(owner_of "$(readlink -f "$path")") || true
    [ -n "$pkg" ] || pkg=$(owner_of "$path") || true
    [ -n "$pkg" ] || die "$path ($soname) belongs to no Debian package: refusing to bundle a hand-installed library"
    pkg=${pkg%%,*}
    [ "$pkg" = libc6 ] && continue
    version=$(dpkg-query -W -f '${Version}' "$pkg")
    arch_pkg=${pkg%:*}
    if ! grep -qx "$arch_pkg=$version" "$stage/packages"; then
      echo "$arch_pkg=$version" >> "$stage/packages"
      deb=$(ls "$deb_cache/${arch_pkg}_"*.deb 2>/dev/null | grep -F "_$(echo "$version" | sed 's/:/%3a/')_" | head -n 1 || true)
      if [ -z "$deb" ]; then
        if (cd "$deb_cache" && apt-get download -q "$arch_pkg=$version" >/dev/null 2>&1); then
          deb=$(ls "$deb_cache/${arch_pkg}_"*.deb | grep -F "_$(echo "$version" | sed 's/:/%3a/')_" | head -n 1)
        elif [ -z "$(dpkg --verify "$pkg" 2>&1)" ]; then
          # The archive has moved on from the installed version (a newer
          # update this machine has not taken): the installed package's
          # own files, which dpkg has just checked against its checksums.
          say "  $arch_pkg=$version is no longer in the archive: its installed, verified files"
          mkdir -p "$stage/root/installed"
          dpkg -L "$pkg" | while read -r f; do
            case $f in
              */lib/*.so*) [ ! -e "$f" ] || cp -L "$f" "$stage/root/installed/${f##*/}" ;;
            esac
          done
        else
          die "apt-get download $arch_pkg=$version failed, and the installed files differ from the package's (run apt-get update first?)"
        fi
      fi
      [ -z "$deb" ] || dpkg -x "$deb" "$stage/root"
    fi
    # The soname's file as the package ships it.
    found=$(find "$stage/root" -name "$soname" \( -type f -o -type l \) | head -n 1)
    [ -n "$found" ] || die "$soname is not in $pkg $version's package"
    cp -L "$found" "$bundle/lib/$soname"
    new=1
  done < <(elf_files | while read -r f; do
             # Each file's own NEEDED entries, where ldd finds them: what a
             # device-provided library needs is the machine's business.
             needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
             LD_LIBRARY_PATH="$bundle/lib" ldd "$f" 2>/dev/null |
               awk -v needed="$needed" 'BEGIN { n = split(needed, list, "\n"); for (i = 1; i <= n; i++) want[list[i]] = 1 }
                                        $2 == "=>" && ($1 in want) { print $1, $3 }'
           done | sort -u)
  [ "$new" = 1 ] || break
done
sort -u "$stage/packages" > "$bundle/debian-packages.txt"

# ------------------------------------------------------------ manifest
glibc_needed=$(elf_files | xargs objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' |
               sed 's/GLIBC_//' | sort -Vu | tail -n 1)
commit=$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$srcdir" diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
cudart=$(ls "$bundle/lib" | grep '^libcudart\.so' | head -n 1)
{
  echo "# libmixprec GPU bundle: what the machine must provide"
  echo "commit: $commit"
  echo "built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cuda: $("$cuda_prefix/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') (bundled: $cudart)"
  echo "arch: sm_90 sm_90a compute_90"
  echo "provided: libcuda.so.1 (the NVIDIA driver, for CUDA $("$cuda_prefix/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\).*/\1/p') or newer)"
  echo "provided: libnccl.so.2 (nvidia-nccl pip package of the Python with torch, or NCCL_LIBDIR)"
  echo "provided: glibc >= $glibc_needed"
  echo "provided: bash, coreutils (timeout), grep, sed; nvidia-smi and a python3 with torch for the GPU steps"
} > "$bundle/MANIFEST"

size=$(du -sm "$bundle" | cut -f1)
say "bundle: $bundle, ${size} MiB, glibc >= $glibc_needed, $(wc -l < "$bundle/debian-packages.txt") Debian packages"
[ "$size" -le 60 ] || die "the bundle is ${size} MiB, over its 60 MiB budget"
