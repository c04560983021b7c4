#!/bin/sh
# Stages a healthy test-backend-ops for D12: the throw reaches std::terminate.
case "$1" in --help) echo "usage: test-backend-ops [mode]"; exit 1;; esac
echo "terminate called after throwing an instance of 'std::runtime_error'" >&2
echo "  what():  Unable to read test file" >&2
kill -ABRT $$
