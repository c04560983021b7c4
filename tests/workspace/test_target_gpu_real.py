"""The GPU fingerprint's driver-API UUID reader on real GPUs (the device machine)."""

from __future__ import annotations

import shutil

import pytest

from kvdiag.workspace.gpu import driver_api_uuid, fingerprint_gpu, format_uuid

pytestmark = pytest.mark.gpu


def test_the_driver_api_names_every_gpu_as_nvidia_smi_does(tmp_path):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no NVIDIA driver here")
    smi = fingerprint_gpu(log_dir=tmp_path, prefer=("nvidia-smi",))
    assert smi.devices, smi.notes
    # CUDA's ordinals need not follow nvidia-smi's order: compare the sets
    read = {format_uuid(driver_api_uuid(i)) for i in range(len(smi.devices))}
    assert read == {d.uuid for d in smi.devices}
    assert driver_api_uuid(len(smi.devices)) is None       # no such ordinal
