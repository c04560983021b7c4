#!/bin/sh
# Stages a test-backend-ops whose test mode prints $KVDIAG_TEST_BYTES bytes shaped as $KVDIAG_TEST_SHAPE
# asks: "spaceless" (one line without a blank), "1023" (lines of 1023 characters without a blank) or
# "ordinary" (test case lines, the baseline), then exits 0. Other modes list nothing.
case "$1" in --help) echo "usage: test-backend-ops [mode]"; exit 1;; test) ;; *) exit 0;; esac
case "$KVDIAG_TEST_SHAPE" in
  spaceless) head -c "$KVDIAG_TEST_BYTES" /dev/zero | tr '\0' 'x'; echo;;
  1023) head -c "$KVDIAG_TEST_BYTES" /dev/zero | tr '\0' 'x' | fold -w 1023; echo;;
  *) yes '  FLASH_ATTN_EXT(hsk=320,hsv=256,nh=4,nr23=[4,1],kv=512,nb=1,mask=1,type_KV=f16): OK' \
       | head -c "$KVDIAG_TEST_BYTES"; echo;;
esac
exit 0
