"""The device probes' CUDA C++ compiles for the H200 (sm_90a) here, without a GPU, through
NVRTC with the options torch uses there (bench/offline_cuda.py), in every form the probes time,
and without spilling registers: a probe that does not build must not cost device time."""

import pytest

from bench.offline_cuda import CompileError, compile_report, parse_ptxas
from load_script import load_script


def _forms():
    wgmma, hopper, chain, mlp, attention, ingest, attention_wgmma = (
        load_script('scripts', 'device', f'{n}.py') for n in (
            'wgmma_check', 'nvrtc_hopper_check', 'persistent_chain_probe', 'mlp_chain_probe',
            'attention_cluster_probe', 'ingest_probe', 'attention_wgmma_probe'))
    yield 'wgmma_tile', 'wgmma_tile', wgmma.tile_source()
    yield 'wgmma_tile trans_b', 'wgmma_tile', wgmma.tile_source(trans_b=True)
    for nbuf, overlap in sorted({(nbuf, overlap) for nbuf, overlap, _ in wgmma.STREAM_FORMS}):
        yield f'stream_gemm ring {nbuf} overlap {overlap}', 'stream_gemm', \
            wgmma.stream_source(nbuf, overlap)
    for nbuf in hopper.RINGS:
        yield f'bulk_stream ring {nbuf}', 'bulk_stream', hopper.bulk_source(nbuf)
    for form, (nt, stages, *rest) in chain.CONFIGS.items():
        if rest:
            krs, threads, per_sm, *work = rest
            yield f'chain {form}', 'chain', chain.split_k_source(
                nt, stages, max(krs.values()), threads, per_sm, *work)
        else:
            yield f'chain {form}', 'chain_full_k', chain.full_k_source(stages)
    for form in mlp.FORMS:
        yield f'mlp_chain {form.name}', 'mlp_chain', mlp.source(form)
    for form in mlp.TIMELINES:
        yield f'mlp_chain {form.name}, watchdog, stamps', 'mlp_chain', \
            mlp.source(form, mlp.WATCH_ALL, stamps=True)
    for form in attention.FORMS:
        yield f'mqa_cluster {form.name}', 'mqa_cluster', attention.source(form)
    for form in attention.timeline_forms():
        yield f'mqa_cluster {form.name}, stamps', 'mqa_cluster', attention.source(form, True)
    yield 'ingest', 'ingest', ingest.source()
    yield 'ingest_tensor', 'ingest_tensor', ingest.tensor_source()
    for form in attention_wgmma.FORMS:
        for stamps in (False, True):
            yield f'mqa_wgmma {form.name}{", stamps" * stamps}', 'mqa_wgmma', \
                attention_wgmma.source(form, stamps)


FORMS = list(_forms())
# Forms that spill, and why. This one was timed on the H200 before the offline check existed:
# 256 threads x 2 blocks per SM cap a thread at 128 registers, and it came out the slowest
# split-K form (81.4 us a layer, against 57.1 with 128 threads; persistent_chain_probe_h200.json).
SPILLING = {'chain nt64 kr256 s8 256t x2'}


@pytest.mark.parametrize('form,entry,source', FORMS, ids=[f[0] for f in FORMS])
def test_probe_compiles_for_sm90a_and_spills_only_where_known(form, entry, source):
    report = compile_report(source, entry)
    assert report.name == entry
    assert 0 < report.registers <= 255
    spills = report.spill_stores + report.spill_loads
    assert (spills > 0) == (form in SPILLING), report


def test_a_source_that_does_not_compile_is_refused_with_the_compilers_reason():
    source = 'extern "C" __global__ void broken(float* y) { y[0] = undeclared; }'
    with pytest.raises(CompileError, match='undeclared'):
        compile_report(source, 'broken')


def test_the_report_is_read_for_the_named_entry_only():
    log = ("ptxas info    : Compiling entry function 'a' for 'sm_90a'\n"
           "ptxas info    : Function properties for a\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 16 bytes smem\n"
           "ptxas info    : (C7517) wgmma.wait_group is injected in function 'b'\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_90a'\n"
           "ptxas info    : Function properties for b\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 90 registers, used 1 barriers, 0 bytes smem\n")
    a, b = parse_ptxas(log, 'a'), parse_ptxas(log, 'b')
    assert (a.registers, a.spill_stores, a.stack_frame, a.static_shared, a.notes) == \
        (40, 4, 8, 16, [])
    assert (b.registers, b.spill_loads, b.static_shared) == (90, 0, 0)
    assert b.notes == ["(C7517) wgmma.wait_group is injected in function 'b'"]
    with pytest.raises(CompileError, match='no such entry'):
        parse_ptxas(log, 'c')
