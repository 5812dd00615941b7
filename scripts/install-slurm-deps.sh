#!/usr/bin/env bash
# Installs the Debian packages of the slurm tests (idempotent: only what is missing): Slurm daemons and
# clients, munge, the PMIx library Slurm's mpi/pmix plugin dlopen()s (libpmix-dev: the unversioned
# libpmix.so), and Environment Modules for the modulefile test. Needs root (or sudo); without them
# it only reports what is missing, and the slurm tests skip with that reason.
set -euo pipefail
packages=(munge slurmctld slurmd slurm-client libpmix-dev environment-modules)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo_cmd="sudo"; else
    echo "install-slurm-deps.sh: not root: skipping apt-get install ${missing[*]} (the slurm tests will skip)" >&2
    exit 0
  fi
fi
if dpkg-query -W -f='${Status}' lmod 2>/dev/null | grep -q "install ok installed"; then
  # Lmod conflicts with environment-modules in Debian: keep the site's Lmod (it reads the Tcl modulefile)
  keep=()
  for p in "${missing[@]}"; do [ "$p" = environment-modules ] || keep+=("$p"); done
  missing=("${keep[@]}")
  [ ${#missing[@]} -gt 0 ] || exit 0
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get -o DPkg::Lock::Timeout=300 update -qq
$sudo_cmd apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}"
