#!/bin/sh
# Stages a broken build for D12 whose test mode prints 10 MB on stdout, then dies
# of SIGILL (the signature: an exit status, not a line of the log).
case "$1" in --help) echo "usage: test-backend-ops [mode]"; exit 1;; esac
head -c 10485760 /dev/zero | tr '\0' 'x' | fold -w 1023
kill -ILL $$
