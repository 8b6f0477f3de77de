#!/bin/sh
# Installs, from Debian 12's archive, everything needed to build libmixprec,
# run its whole test suite and its example. Run as root (or it uses sudo).
set -e
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential autoconf automake libtool autoconf-archive pkg-config \
  xz-utils git ca-certificates \
  libglib2.0-dev libjson-glib-dev \
  gobject-introspection libgirepository1.0-dev gir1.2-glib-2.0 \
  valac gjs python3 python3-gi python3-venv \
  libucx-dev \
  wamerican python3-numpy python3-matplotlib
