"""What a target time per inference leaves the expert, read from one inference's kernel trace.

The artifact's CUDA graphs run the vision, then the prefix with the expert's first Euler step
beside it on a second stream, then the other nine steps alone on one stream (the 'tail', which
also holds step 1's last layer: its attention needs the prefix's last K/V; bench/results/
README.md, 'One inference as a timeline'). Nothing can start the tail sooner: a step needs the
step before it, and step 1's last layer the prefix's last layer. So for a target
time T, with `before` the time until the tail's first kernel and `after` the time from its last
kernel to the end of the inference,

    budget per layer-step = (T - before - after) / layer-steps in the tail

to set against what a layer-step takes today (the tail's span over its layer-steps), the
expert's weight-read bound (one layer's weights at HBM speed: no design streams them faster)
and the best persistent-kernel probe's MLP half alone (`mlp_chain_probe.py`). A layer-step is
counted by its attention kernel (one a layer a step). The trace is a torch-profiler Chrome
trace of one inference (`bench/gpu_pi05.py --trace-out`, `lamp profile`); the figures come
from the files, so this runs on a machine without a GPU.

    python3 bench/expert_budget.py [--trace T.json.gz] [--target-ms 9] [--out FILE.json]

With --out it also draws the split as a picture beside the JSON (.png): today's critical path,
the target's, and the tail at the weight-read bound.
"""

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from lamp_ros.policies.config import get_preset
from lamp_ros.policies.param_count import expert_params
from lamp_ros.whitebox.ops import gpu_events, read_trace, time_by_name
from lamp_ros.whitebox.plots import pyplot

RESULTS = Path(__file__).resolve().parent / 'results'
TRACE = RESULTS / 'h200_record_1203' / 'lamp_trace.json.gz'
MLP_PROBE = RESULTS / 'h200_mlp_chain_counters' / 'mlp_chain_probe_epi_h200.json'
ATTENTION_KERNEL = '_mqa_kernel'   # the expert attention's kernel, one a layer-step
HBM_TB_S = 4.3                     # a device copy's rate on the H200 (KINDS.md), read + write


@dataclass(frozen=True)
class Budget:
    """The critical path of one inference split at the expert's tail, and the tail's budget."""

    target_ms: float
    span_ms: float                 # first GPU event's start to the last one's end
    before_ms: float               # until the tail's first kernel: vision, prefix, step 1
    tail_ms: float                 # the tail's span
    after_ms: float                # from the tail's last kernel to the end (output copies)
    tail_layer_steps: int
    us_per_layer_step: float       # today
    budget_us_per_layer_step: float
    speedup_needed: float          # today / budget
    weight_mb_per_layer_step: float
    weight_bound_us_per_layer_step: float
    floor_ms: float                # before + after + the tail at the weight-read bound


def weight_mb_per_layer_step(preset: str = 'pi05_full', bytes_per_weight: int = 2) -> float:
    """One expert layer's GEMM weights (q, k, v, o, gate, up, down), in MB."""
    expert = get_preset(preset).expert
    return expert_params(expert) / expert.depth * bytes_per_weight / 1e6


def _tail_stream(events: list, attention_kernel: str) -> tuple:
    """The stream that runs the most expert attentions, and how many it runs."""
    per_stream = {}
    for name, stream, _, _ in events:
        if name == attention_kernel:
            per_stream[stream] = per_stream.get(stream, 0) + 1
    if not per_stream:
        raise ValueError(f'the trace has no {attention_kernel!r} kernel: not an inference of '
                         'an artifact whose expert attention runs on that kernel')
    stream = max(per_stream, key=per_stream.get)
    return stream, per_stream[stream]


def expert_budget(trace: dict, target_ms: float, attention_kernel: str = ATTENTION_KERNEL,
                  weight_mb: float | None = None, hbm_tb_s: float = HBM_TB_S) -> Budget:
    """Split one inference's GPU events at the stream that runs the most expert attentions
    (the tail) and share what the target leaves among the tail's layer-steps."""
    events = gpu_events(trace)
    tail_stream, steps = _tail_stream(events, attention_kernel)
    tail = [e for e in events if e[1] == tail_stream]
    t0 = events[0][2]
    end = max(s + d for _, _, s, d in events)
    tail_start, tail_end = tail[0][2], max(s + d for _, _, s, d in tail)
    before, tail_us, after = tail_start - t0, tail_end - tail_start, end - tail_end
    budget_us = (target_ms * 1e3 - before - after) / steps
    weight_mb = weight_mb_per_layer_step() if weight_mb is None else weight_mb
    bound_us = weight_mb * 1e6 / (hbm_tb_s * 1e12) * 1e6
    return Budget(
        target_ms=target_ms, span_ms=(end - t0) / 1e3, before_ms=before / 1e3,
        tail_ms=tail_us / 1e3, after_ms=after / 1e3, tail_layer_steps=steps,
        us_per_layer_step=tail_us / steps, budget_us_per_layer_step=budget_us,
        speedup_needed=(tail_us / steps) / budget_us if budget_us > 0 else float('inf'),
        weight_mb_per_layer_step=weight_mb, weight_bound_us_per_layer_step=bound_us,
        floor_ms=(before + after + steps * bound_us) / 1e3)


def best_mlp_half_us(report: dict) -> float:
    """The fastest persistent MLP-half form of an mlp_chain_probe.py report, us a layer."""
    times = [v['us_per_layer'] for k, v in report.items()
             if k.startswith('mlp_chain') and isinstance(v, dict) and 'us_per_layer' in v]
    if not times:
        raise ValueError('no mlp_chain form with us_per_layer in the probe report')
    return min(times)


def tail_kernels_us(trace: dict, attention_kernel: str = ATTENTION_KERNEL, top: int = 8) -> dict:
    """The tail's kernel durations per layer-step by name, largest first. Under programmatic
    dependent launch a duration holds the kernel's wait for the one before it, so these sum
    to more than the tail's span."""
    events = gpu_events(trace)
    tail_stream, steps = _tail_stream(events, attention_kernel)
    totals = time_by_name([e for e in events if e[1] == tail_stream])
    return {name: round(us / steps, 2) for name, (us, _) in list(totals.items())[:top]}


def report_lines(budget: Budget, mlp_half_us: float | None) -> list:
    b = budget
    lines = [
        f'one inference: {b.span_ms:.2f} ms of GPU events; {b.before_ms:.2f} ms before the '
        f'expert tail, the tail {b.tail_ms:.2f} ms ({b.tail_layer_steps} layer-steps), '
        f'{b.after_ms:.3f} ms after it',
        f'a layer-step today: {b.us_per_layer_step:.1f} us',
        f'target {b.target_ms:g} ms leaves the tail {b.tail_layer_steps} x '
        f'{b.budget_us_per_layer_step:.1f} us: {b.speedup_needed:.2f}x faster than today',
        f'weight-read bound: {b.weight_mb_per_layer_step:.1f} MB a layer-step = '
        f'{b.weight_bound_us_per_layer_step:.2f} us; the tail at that bound: '
        f'{b.floor_ms:.2f} ms an inference',
    ]
    if mlp_half_us is not None:
        lines.append(f'best persistent MLP half (mlp_chain_probe.py), alone: {mlp_half_us:.2f} '
                     f'us, {mlp_half_us / b.budget_us_per_layer_step:.0%} of the whole '
                     f'layer-step budget')
    return lines


def budget_chart(budget: Budget, path: str) -> None:
    """Three critical paths as stacked bars: today's, the target's, and the tail at the
    weight-read bound, each split into before the tail, the tail and after it."""
    b = budget
    rows = [('today', b.tail_ms, f'{b.us_per_layer_step:.1f} us a layer-step'),
            (f'target {b.target_ms:g} ms', b.tail_layer_steps * b.budget_us_per_layer_step / 1e3,
             f'{b.budget_us_per_layer_step:.1f} us a layer-step'),
            ('tail at the weight-read bound', b.tail_layer_steps
             * b.weight_bound_us_per_layer_step / 1e3,
             f'{b.weight_bound_us_per_layer_step:.2f} us a layer-step')]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 2.6))
    for i, (name, tail_ms, label) in enumerate(rows):
        ax.barh(i, b.before_ms, color='tab:blue',
                label='vision, prefix, step 1' if not i else None)
        ax.barh(i, tail_ms, left=b.before_ms, color='tab:orange',
                label=f'expert tail ({b.tail_layer_steps} layer-steps)' if not i else None)
        ax.barh(i, b.after_ms, left=b.before_ms + tail_ms, color='tab:gray')
        total = b.before_ms + tail_ms + b.after_ms
        ax.text(total + 0.1, i, f'{total:.2f} ms; tail {label}', va='center', fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, (b.before_ms + b.tail_ms + b.after_ms) * 1.45)
    ax.set_xlabel('ms of one inference (GPU)')
    ax.set_title(f'what {b.target_ms:g} ms leaves the expert: '
                 f'{b.speedup_needed:.2f}x faster layer-steps', fontsize=9)
    ax.legend(fontsize=8, loc='lower right')
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--trace', default=str(TRACE))
    parser.add_argument('--target-ms', type=float, default=9.0)
    parser.add_argument('--mlp-probe', default=str(MLP_PROBE),
                        help="mlp_chain_probe.py's report ('' to leave it out)")
    parser.add_argument('--out', default='', help='also write the figures as JSON here')
    args = parser.parse_args()
    trace = read_trace(args.trace)
    budget = expert_budget(trace, args.target_ms)
    mlp_half = None
    if args.mlp_probe:
        mlp_half = best_mlp_half_us(json.loads(Path(args.mlp_probe).read_text(encoding='utf-8')))
    for line in report_lines(budget, mlp_half):
        print(line)
    kernels = tail_kernels_us(trace)
    print('the tail by kernel, us a layer-step (durations include dependent-launch waits):')
    for name, us in kernels.items():
        print(f'  {us:7.2f}  {name[:70]}')
    if args.out:
        Path(args.out).write_text(json.dumps(
            {**asdict(budget), 'best_mlp_half_probe_us': mlp_half, 'tail_kernels_us': kernels,
             'trace': Path(args.trace).name}, indent=1) + '\n', encoding='utf-8')
        budget_chart(budget, str(Path(args.out).with_suffix('.png')))


if __name__ == '__main__':
    main()
