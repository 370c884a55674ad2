"""Whole inference on the CPU with and without `fusion.text_lengths`: pi05_tiny, three prompts.

    python3 bench/text_lengths_cpu.py [--runs 60] [--sessions 4] [--with A --without B]
                                      [--out bench/results/text_lengths_cpu.json]

Both artifacts come from config/specs/pi05_tiny.yaml, one as it is (prompt lengths 48 and 64,
its ONNX group run at the shortest that holds the prompt) and one with `text_lengths: []` (every
call runs all 96 tokens); without --with/--without both are compiled into a temporary folder
first (about 30 s). Each timed call is one tick that infers (`Runtime.run` after `reset`: host
stages, the ONNX group, post-processing; the runtime's profiler gives the ONNX group's own
time), the two artifacts interleaved call by call so that machine noise hits both alike; the
ratios are the figures that count. Also written: the actions'
largest difference between the two (the padding adds nothing, so float32 rounding at most), the
peak resident memory of a process running each (one ONNX Runtime session per length), and a
bar chart next to the JSON (.png).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.example import DEFAULT_PROMPT, example_observation
from lamp_ros.runtime import Runtime

SPEC = 'config/specs/pi05_tiny.yaml'
PROMPTS = {'one word': 'stop',
           'the demo task': DEFAULT_PROMPT,
           'a long task': 'pick up the red cube, then the blue cube, then the green one, and '
                          'stack them all in the bowl on the left side of the table, carefully '
                          'and slowly'}


def build_pair(folder: str) -> tuple:
    """(with lengths, without) compiled from SPEC."""
    from lamp_ros.compiler.build import compile_spec
    with open(SPEC, encoding='utf-8') as f:
        spec = yaml.safe_load(f)
    spec['fusion']['text_lengths'] = []
    one = os.path.join(folder, 'one_length.yaml')
    with open(one, 'w', encoding='utf-8') as f:
        yaml.safe_dump(spec, f)
    return (compile_spec(SPEC, os.path.join(folder, 'with')).root,
            compile_spec(one, os.path.join(folder, 'without')).root)


def onnx_runner(runtime):
    (runner,) = [r for g, r in runtime.inference_runners if g.backend == 'onnxruntime']
    return runner


def onnx_group(runtime) -> str:
    (name,) = [g.name for g, _ in runtime.inference_runners if g.backend == 'onnxruntime']
    return name


def infer(runtime, observation) -> tuple:
    """(seconds, the ONNX group's actions, the prompt's valid tokens) of one tick that infers."""
    runtime.reset()
    captured = {}
    start = time.perf_counter()
    runtime.run(runtime.feeds(observation, 0.0), capture=captured)
    seconds = time.perf_counter() - start
    return seconds, captured['denoise.actions'].copy(), int(captured['tokenize.token_mask'].sum())


def measure(paths: dict, runs: int, sessions: int) -> dict:
    """`paths`: {'with': artifact, 'without': artifact}. Each artifact is loaded `sessions`
    times, in the order A B B A A B ...: one loaded session can run a few percent faster or
    slower than another of the same files for as long as it lives (4.5% apart measured here,
    and the sessions loaded last tended to be the faster), so each side is the pool of its
    sessions, and every round runs all of them in a shuffled order."""
    pairs = [list(paths.items())[::1 - 2 * (i % 2)] for i in range(sessions)]
    runtimes = {(key, i): Runtime.load(path) for i, pair in enumerate(pairs)
                for key, path in pair}  # A B B A A B ...: the load order evens out too
    order = list(runtimes)
    shuffle = random.Random(0).shuffle
    stats = NormStats.load()
    rows = {}
    for label, prompt in PROMPTS.items():
        observation = example_observation(stats, seed=1, prompt=prompt)
        times = {k: [] for k in paths}
        actions = {}
        for i in range(runs + 5):  # 5 warm-up rounds
            shuffle(order)
            for key in order:
                runtime = runtimes[key]
                if i == 5:
                    runtime.profiler.reset()
                seconds, actions[key[0]], valid = infer(runtime, observation)
                if i >= 5:
                    times[key[0]].append(seconds * 1e3)
        median = {k: statistics.median(t) for k, t in times.items()}
        per_session = {k: [runtimes[k, i].profile()['groups'][onnx_group(runtimes[k, i])]
                           ['p50_ms'] for i in range(sessions)] for k in paths}
        group = {k: statistics.mean(v) for k, v in per_session.items()}
        runner = onnx_runner(runtimes['with', 0])
        rows[label] = {
            'prompt': prompt,
            'valid_tokens': valid,
            'length': runner.last_text_length,
            'full_length': runner.text.full,
            'median_ms': median,
            'p90_ms': {k: float(np.percentile(t, 90)) for k, t in times.items()},
            'ratio_without_over_with': median['without'] / median['with'],
            'onnx_group_p50_ms': group,
            'onnx_group_p50_ms_per_session': per_session,
            'onnx_group_ratio_without_over_with': group['without'] / group['with'],
            'max_abs_action_difference': float(np.abs(actions['with']
                                                      - actions['without']).max()),
        }
        print(f'{label:14s} runs at {rows[label]["length"]:3d} of {rows[label]["full_length"]} '
              f'tokens: {median["with"]:7.2f} ms against {median["without"]:7.2f} ms '
              f'({rows[label]["ratio_without_over_with"]:.2f}x; the ONNX group '
              f'{group["with"]:.2f} against {group["without"]:.2f}, '
              f'{rows[label]["onnx_group_ratio_without_over_with"]:.2f}x), actions differ by '
              f'{rows[label]["max_abs_action_difference"]:.2g}')
    return rows


PEAK_RSS = """
import sys
sys.path.insert(0, {root!r})
from bench.text_lengths_cpu import PROMPTS, infer
from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.example import example_observation
from lamp_ros.runtime import Runtime
runtime = Runtime.load({path!r})
for prompt in PROMPTS.values():
    infer(runtime, example_observation(NormStats.load(), seed=1, prompt=prompt))
print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')))
"""


def peak_rss_mb(path: str) -> float:
    """Peak resident memory of a fresh process that loads `path` and infers once per prompt
    (every session of the artifact used): what a robot's process would hold. VmHWM (Linux),
    not ru_maxrss, which a forked child inherits from its parent's size."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, '-c', PEAK_RSS.format(root=root, path=path)],
                          check=True, capture_output=True, text=True, cwd=root)
    return int(done.stdout.split()[-1]) / 1024  # KiB on Linux


def write_png(rows: dict, path: str) -> None:
    from lamp_ros.whitebox.plots import _pyplot
    plt = _pyplot()
    labels = [f'{k}\n({r["length"]} of {r["full_length"]} tokens)' for k, r in rows.items()]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for offset, key, name in ((-0.2, 'without', 'every token (no text_lengths)'),
                              (0.2, 'with', 'text_lengths [48, 64]')):
        bars = ax.bar(x + offset, [r['median_ms'][key] for r in rows.values()], 0.4,
                      label=name)
        ax.bar_label(bars, fmt='%.1f', fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylim(0, 1.35 * max(v for r in rows.values() for v in r['median_ms'].values()))
    ax.set_ylabel('median ms per inference (tick)')
    ax.set_title('pi05_tiny on the CPU: prompt lengths')
    ax.legend(loc='upper center', ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=60, help='rounds (each runs every session)')
    parser.add_argument('--sessions', type=int, default=4, help='loads of each artifact')
    parser.add_argument('--with', dest='with_path', help='artifact built with text_lengths')
    parser.add_argument('--without', dest='without_path', help='the same built without')
    parser.add_argument('--out', default='bench/results/text_lengths_cpu.json')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.with_path and args.without_path:
            paths = (args.with_path, args.without_path)
        else:
            print('compiling pi05_tiny with and without text_lengths ...')
            paths = build_pair(folder)
        rows = measure(dict(zip(('with', 'without'), paths)), args.runs, args.sessions)
        memory = {key: peak_rss_mb(path) for key, path in zip(('with', 'without'), paths)}
    print(f'peak resident memory of a process that runs it: {memory["with"]:.0f} MB with, '
          f'{memory["without"]:.0f} MB without')
    report = {'what': 'ms per tick that infers, pi05_tiny on the CPU, with and without '
                      'fusion.text_lengths, interleaved call by call in a shuffled order',
              'runs': args.runs, 'sessions': args.sessions, 'cpus': os.cpu_count(),
              'prompts': rows, 'peak_rss_mb': memory}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)
    write_png(rows, os.path.splitext(args.out)[0] + '.png')


if __name__ == '__main__':
    main()
