#!/bin/sh
# Stages a test-backend-ops whose test mode prints 10 MB on stdout, then throws
# the way a healthy build does (what(), SIGABRT-like exit).
case "$1" in --help) echo "usage: test-backend-ops [mode]"; exit 1;; esac
head -c 10485760 /dev/zero | tr '\0' 'x' | fold -w 1023
echo "terminate called after throwing an instance of 'std::runtime_error'"
echo "  what():  Unable to read test file"
exit 134
