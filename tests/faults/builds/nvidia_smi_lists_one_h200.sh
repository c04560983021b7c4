#!/bin/sh
# Stages nvidia-smi on a host with one H200 (the row a real one prints for
# --query-gpu=index,name,uuid,compute_cap,memory.total,pci.bus_id,driver_version).
echo "0, NVIDIA H200, GPU-aaaaaaaa-0000-0000-0000-000000000000, 9.0, 143771, 00000000:19:00.0, 580.95.05"
