#!/usr/bin/env bash
# Installs the Debian packages of the slurm tests (idempotent: only what is missing): Slurm daemons and
# clients, munge, the PMIx library Slurm's mpi/pmix plugin dlopen()s (libpmix-dev: the unversioned
# libpmix.so), and Environment Modules for the modulefile test. Needs root (or sudo); without them
# it only reports what is missing, and the slurm tests skip with that reason.
# Lmod (for the Lua modulefile test): Debian's lmod package conflicts with environment-modules, so
# unless a system Lmod exists it is fetched with `apt-get download lmod` and unpacked (dpkg-deb -x)
# into $TESSERA_LMOD_ROOT (default /opt/lmod) next to environment-modules; its Lua dependencies are
# ordinary packages and are installed.
set -euo pipefail
lmod_root=${TESSERA_LMOD_ROOT:-/opt/lmod}
packages=(munge slurmctld slurmd slurm-client libpmix-dev environment-modules
  lua5.3 lua-posix lua-filesystem lua-term lua-json tcl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
need_lmod=1
{ [ -r /usr/share/lmod/lmod/libexec/lmod ] || [ -r "$lmod_root/usr/share/lmod/lmod/libexec/lmod" ]; } && need_lmod=0
[ ${#missing[@]} -gt 0 ] || [ $need_lmod = 1 ] || exit 0
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo_cmd="sudo"; else
    echo "install-slurm-deps.sh: not root: skipping apt-get install ${missing[*]} and Lmod (the slurm tests will skip)" >&2
    exit 0
  fi
fi
if dpkg-query -W -f='${Status}' lmod 2>/dev/null | grep -q "install ok installed"; then
  # Lmod conflicts with environment-modules in Debian: keep the site's Lmod (it reads both modulefiles)
  keep=()
  for p in "${missing[@]}"; do [ "$p" = environment-modules ] || keep+=("$p"); done
  missing=("${keep[@]}")
fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ] || [ $need_lmod = 1 ]; then
  $sudo_cmd apt-get -o DPkg::Lock::Timeout=300 update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ $need_lmod = 1 ]; then
  echo "unpacking Debian's lmod into $lmod_root (not installed: it conflicts with environment-modules)"
  tmp=$(mktemp -d)
  chmod 777 "$tmp" # apt's download user (_apt) writes there
  if (cd "$tmp" && $sudo_cmd apt-get -o DPkg::Lock::Timeout=300 download lmod >/dev/null); then
    $sudo_cmd mkdir -p "$lmod_root"
    $sudo_cmd dpkg-deb -x "$tmp"/lmod_*.deb "$lmod_root"
  else
    echo "install-slurm-deps.sh: apt-get download lmod failed: the Lmod modulefile test will skip" >&2
  fi
  $sudo_cmd rm -rf "$tmp"
fi
