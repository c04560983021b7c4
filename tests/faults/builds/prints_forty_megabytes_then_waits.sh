#!/bin/sh
# Stages a test-backend-ops whose test mode prints 40 MB of passing case lines, then hangs
# (a Ctrl-C then comes while the step runs, with all that output to judge).
case "$1" in --help) echo "usage: test-backend-ops [mode]"; exit 1;; test) ;; *) exit 0;; esac
yes '  FLASH_ATTN_EXT(hsk=320,hsv=256,nh=4,nr23=[4,1],kv=512,nb=1,mask=1,type_KV=f16): OK' | head -c 40000000
echo $$ >> "$(dirname "$0")/../pids"
exec sleep 1000
