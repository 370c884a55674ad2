"""bench/cublaslt.py's GemmSpec refuses forms the binding cannot run, by name. (The GEMMs
themselves need a GPU and cuBLASLt: scripts/device/cublaslt_probe.py runs them on the H200.)"""

import pytest

from bench import cublaslt


def test_fp8_scaling_modes():
    assert cublaslt.GemmSpec(968, 2048, 16384, fp8=True).fp8_scale == 'row'
    assert cublaslt.GemmSpec(968, 2048, 16384, fp8=True, fp8_scale='scalar').fp8_scale == 'scalar'
    with pytest.raises(ValueError, match="fp8_scale 'block'"):
        cublaslt.GemmSpec(968, 2048, 16384, fp8=True, fp8_scale='block')


def test_fp8_takes_no_epilogue_and_epilogues_are_named():
    with pytest.raises(ValueError, match='FP8 form'):
        cublaslt.GemmSpec(768, 1152, 1152, 'bias', fp8=True)
    with pytest.raises(ValueError, match="epilogue 'relu'"):
        cublaslt.GemmSpec(768, 1152, 1152, 'relu')
