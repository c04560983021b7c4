#!/bin/sh
# Stages a test-backend-ops that hangs in test mode after starting a child that
# leaves its session (setsid) and hangs too. Both pids go to <build>/pids.
# `--help` answers at once, like the real program.
here=$(dirname "$0")/..
case "$1" in --help) echo "usage: test-backend-ops [mode] [-o op] [-b backend] [-p params]"; exit 1;; esac
setsid sleep 1000 &
echo "$$ $!" > "$here/pids.tmp" && mv "$here/pids.tmp" "$here/pids"
echo "running the case"
exec sleep 1000
