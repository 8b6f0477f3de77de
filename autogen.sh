#!/bin/sh
# Regenerates the build system from configure.ac and the Makefile fragments.
set -e
cd "$(dirname "$0")"
autoreconf --force --install --verbose
