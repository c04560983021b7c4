#!/bin/sh
# Stages a test-backend-ops that hangs in test mode after starting a child that
# leaves its session (setsid) and hangs too. Both pids go to <build>/pids.
# `--help` answers at once, like the real program; `support` lists one supported
# FLASH_ATTN_EXT case (what a scan enumerates) and exits.
here=$(dirname "$0")/..
case "$1" in
  --help) echo "usage: test-backend-ops [mode] [-o op] [-b backend] [-p params]"; exit 1;;
  support) printf 'Testing 1 devices\n\nBackend 1/1: CUDA0\n  FLASH_ATTN_EXT(hsk=64,nb=1): \033[1;32mSUPPORTED\033[0m\n'
           printf '  Backend CUDA0: \033[1;32mOK\033[0m\n1/1 backends passed\n\033[1;32mOK\033[0m\n'; exit 0;;
esac
setsid sleep 1000 &
echo "$$ $!" > "$here/pids.tmp" && mv "$here/pids.tmp" "$here/pids"
echo "running the case"
exec sleep 1000
