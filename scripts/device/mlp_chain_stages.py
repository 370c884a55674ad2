"""mlp_chain_probe.py's kernel one step at a time, for finding where a form hangs: one launch of
1 layer, of all 18, a repeat, runs that go on from the last one's buffers, then the CUDA-graph
timing, each step printed (flushed) as it ends, with the watchdog's record where one is on.

    PYTHONPATH=$PWD timeout 60 python3 scripts/device/mlp_chain_stages.py WATCHDOG RING \
        [--torch-ops-first] [--plain-launch] [--last-block-sum] [--prefetch N] [--tps N] \
        [--timeline TRACE.json]

WATCHDOG: 0 none, 1 the mbarrier waits, 2 the grid barrier, 3 both (mlp_chain_probe's bits);
RING: weight tiles in flight; --torch-ops-first: time the torch-ops baseline before, as the
probe does; --plain-launch: cuLaunchKernel, not a cooperative launch; --last-block-sum: phase
B's split-K sum by the tile's last block, not spread over its 8; --prefetch, --tps: the
probe's Form fields of those names; --timeline: last, one launch of the form with stamps, its
summary printed and its trace written (Chrome / Perfetto). Run each form in its own process
under `timeout`: a hung kernel is only ended by ending its process."""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.getcwd(), 'scripts', 'device'))
import mlp_chain_probe as probe  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('watchdog', type=int)
    parser.add_argument('ring', type=int)
    parser.add_argument('--torch-ops-first', action='store_true')
    parser.add_argument('--plain-launch', action='store_true')
    parser.add_argument('--last-block-sum', action='store_true')
    parser.add_argument('--prefetch', type=int, default=0)
    parser.add_argument('--tps', type=int, default=1)
    parser.add_argument('--timeline')
    args = parser.parse_args()
    watchdog, nbuf = args.watchdog, args.ring
    start = time.perf_counter()

    def say(step, **figures):
        print(f'[watchdog {watchdog} ring {nbuf}] {time.perf_counter() - start:6.1f} s  {step}',
              figures, flush=True)
    state = {}
    probe.setup(state)
    if args.torch_ops_first:
        say('torch ops first', **probe.torch_ops_section(state))
    form = probe.Form(ring=nbuf, spread=not args.last_block_sum, prefetch=args.prefetch,
                      tps=args.tps)
    chain = probe.Chain(state, form, watchdog, cooperative=not args.plain_launch)
    say('set up, compiled')
    want1 = probe.reference(state['x0'], state['layers'][:1]).float()
    got = chain.launch(1)
    torch.cuda.synchronize()
    say('1 layer', rel_error=probe.error(got, want1), stalls=chain.stalls())
    first = chain.launch().clone()
    torch.cuda.synchronize()
    say(f'{probe.LAYERS} layers', rel_error=probe.error(first, state['want']),
        stalls=chain.stalls())
    again = chain.launch()
    torch.cuda.synchronize()
    say('again', identical=bool(torch.equal(first, again)), stalls=chain.stalls())
    for _ in range(3):
        chain.launch(fresh=False)
    torch.cuda.synchronize()
    say('3 runs going on from the last', stalls=chain.stalls())
    from lamp_ros.kernels import tuning
    us = tuning.gpu_time_ms(lambda: chain.launch(fresh=False)) * 1e3 / probe.LAYERS
    say('CUDA graph timing', us_per_layer=round(us, 2), stalls=chain.stalls())
    if args.timeline:
        say('timeline', **probe.timeline_section(state, form, args.timeline, watchdog=watchdog,
                                                 cooperative=not args.plain_launch))


if __name__ == '__main__':
    main()
