#!/bin/sh
# Stages a test-backend-ops whose --help never answers (silent, hung).
exec sleep 1000
