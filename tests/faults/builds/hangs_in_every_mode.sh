#!/bin/sh
# Stages a test-backend-ops that answers --help, then hangs in every mode (test, support, the
# listings), writing its pid to <build>/pids each time.
case "$1" in --help) echo "usage: test-backend-ops [mode] [-o op] [-b backend] [-p params]"; exit 1;; esac
echo $$ >> "$(dirname "$0")/../pids"
exec sleep 1000
