"""pi05_tiny on the CPU: its artifact against builds with a compiler feature off, and the eager
PyTorch policy, side by side in one run, for three prompts.

    python3 bench/tiny_cpu.py [--runs 40] [--sessions 4] [--artifact NAME=PATH ...]
                              [--out bench/results/tiny_cpu.json]

The builds (config/specs/pi05_tiny_random.yaml with one edit each; all four are compiled into a
temporary folder first, about 20 s each, unless given with --artifact):
  pi05_tiny        the spec as it is: the exact graph passes on, prompt lengths [48, 64]
  no_text_lengths  `fusion.text_lengths: []`: the ONNX group runs all 96 tokens every call
  no_passes        no `passes:`: the prototype's modules exported as they are
  prototype        neither
Each timed call is one tick that infers (`Runtime.run` after `reset`: host stages, the ONNX
group, post-processing; the runtime's profiler gives the ONNX group's own time); the eager
policy's tick (`pipeline.tick`, torch) runs in the same rounds. One loaded session can run a few
percent faster or slower than another of the same files for as long as it lives (4.5% apart
measured here, the ones loaded last tending to be faster), so each build is loaded `--sessions`
times in a rotated order and pooled, and every round runs everything in a shuffled order: the
ratios are the figures that count. Also written: the actions' largest difference from
pi05_tiny's, the peak resident memory of a process running each build, and a bar chart next to
the JSON (.png).
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
from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.pi05.assets import norm_stats_path
from lamp_ros.policies.pi05.example import DEFAULT_PROMPT, example_observation
from lamp_ros.provenance import provenance
from lamp_ros.runtime import Runtime

SPEC = 'config/specs/pi05_tiny_random.yaml'
BASE = 'pi05_tiny'
EDITS = {
    BASE: lambda s: None,
    'no_text_lengths': lambda s: s['fusion'].update(text_lengths=[]),
    'no_passes': lambda s: s.pop('passes'),
    'prototype': lambda s: (s.pop('passes'), s['fusion'].update(text_lengths=[])),
}
EAGER = 'eager'
PROMPTS = {'one word': 'stop',
           'the demo task': DEFAULT_PROMPT,
           'a long task': 'pick up the red cube, then the blue cube, then the green one, and '
                          'stack them all in the bowl on the left side of the table, carefully '
                          'and slowly'}


def build(names, folder: str) -> dict:
    """{name: artifact path} compiled from SPEC with each name's edit, into `folder`. The edited
    specs are parsed where SPEC lies (spec.edited_spec), so their relative paths (the robot
    file) name SPEC's files."""
    from lamp_ros.compiler.build import compile_spec
    from lamp_ros.progress import progress_lines
    from lamp_ros.spec import edited_spec
    paths = {}
    for name in names:
        spec = edited_spec(SPEC, EDITS[name])
        with progress_lines(f'compiling {name}') as say:
            paths[name] = compile_spec(spec, os.path.join(folder, name), progress=say).root
    return paths


def onnx_runner(runtime) -> tuple:
    """(group name, runner) of the artifact's ONNX Runtime group."""
    ((group, runner),) = [(g, r) for g, r in runtime.inference_runners
                          if g.backend == 'onnxruntime']
    return group.name, runner


def infer(runtime, observation) -> tuple:
    """(seconds, the ONNX group's actions, the prompt's valid tokens, the tokens the ONNX group
    ran) of one tick that infers."""
    runtime.reset()
    captured = {}
    start = time.perf_counter()
    runtime.run(runtime.feeds(observation, 0.0), capture=captured)
    seconds = time.perf_counter() - start
    mask = captured['tokenize.token_mask']
    ran = onnx_runner(runtime)[1].last_text_length or mask.shape[1]  # None: every token
    return seconds, captured['denoise.actions'].copy(), int(mask.sum()), ran


def eager_tick(pipeline, observation) -> float:
    pipeline.reset()
    start = time.perf_counter()
    pipeline.tick(observation, 0.0)
    return time.perf_counter() - start


def measure(paths: dict, runs: int, sessions: int) -> dict:
    """Per prompt: every build's tick and ONNX group times, and the eager policy's tick."""
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline
    names = list(paths)
    runtimes = {}
    for i in range(sessions):  # rotated load order: each build loaded early and late alike
        for name in names[i % len(names):] + names[:i % len(names)]:
            runtimes[name, i] = Runtime.load(paths[name])
    pipeline = build_pipeline(load_spec(SPEC))
    order = [*runtimes, EAGER]
    shuffle = random.Random(0).shuffle
    stats = NormStats.load(norm_stats_path())
    rows = {}
    for label, prompt in PROMPTS.items():
        observation = example_observation(stats, seed=1, prompt=prompt)
        times = {k: [] for k in [*names, EAGER]}
        actions, lengths = {}, {}
        for i in range(runs + 5):  # 5 warm-up rounds
            shuffle(order)
            for key in order:
                if key == EAGER:
                    seconds = eager_tick(pipeline, observation)
                else:
                    if i == 5:
                        runtimes[key].profiler.reset()
                    seconds, actions[key[0]], valid, lengths[key[0]] = infer(runtimes[key],
                                                                             observation)
                if i >= 5:
                    times[key if key == EAGER else key[0]].append(seconds * 1e3)
        median = {k: statistics.median(t) for k, t in times.items()}
        group = {}
        for name in names:
            per_session = [runtimes[name, i].profile()['groups'][onnx_runner(
                runtimes[name, i])[0]]['p50_ms'] for i in range(sessions)]
            group[name] = statistics.mean(per_session)
        rows[label] = {
            'prompt': prompt, 'valid_tokens': valid, 'length': lengths,
            'median_ms': median,
            'p90_ms': {k: float(np.percentile(t, 90)) for k, t in times.items()},
            'onnx_group_p50_ms': group,
            'ratio_to_pi05_tiny': {k: v / median[BASE] for k, v in median.items()},
            'onnx_group_ratio_to_pi05_tiny': {k: v / group[BASE] for k, v in group.items()},
            'max_abs_action_difference_from_pi05_tiny': {
                k: float(np.abs(a - actions[BASE]).max()) for k, a in actions.items()},
        }
        print(f'{label} ({valid} tokens; pi05_tiny runs {lengths[BASE]}):')
        for key in times:
            extra = '' if key == EAGER else (
                f'  ONNX group {group[key]:6.2f} ms, actions differ by '
                f'{rows[label]["max_abs_action_difference_from_pi05_tiny"][key]:.2g}')
            print(f'  {key:16s} {median[key]:7.2f} ms '
                  f'({rows[label]["ratio_to_pi05_tiny"][key]:.2f}x pi05_tiny){extra}')
    return rows


PEAK_RSS = """
import sys
sys.path.insert(0, {root!r})
from bench.tiny_cpu import PROMPTS, infer
from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.pi05.assets import norm_stats_path
from lamp_ros.policies.pi05.example import example_observation
from lamp_ros.runtime import Runtime

runtime = Runtime.load({path!r})
for prompt in PROMPTS.values():
    infer(runtime, example_observation(NormStats.load(norm_stats_path()), seed=1, prompt=prompt))
print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')))
"""


def peak_rss_mb(path: str) -> float:
    """Peak resident memory of a fresh process that loads `path` and infers once per prompt
    (every session of the artifact used): what a robot's process would hold. VmHWM (Linux),
    not ru_maxrss, which a forked child inherits from its parent's size."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, '-c', PEAK_RSS.format(root=root, path=path)],
                          check=True, capture_output=True, text=True, cwd=root)
    return int(done.stdout.split()[-1]) / 1024  # KiB


def write_png(rows: dict, path: str) -> None:
    from lamp_ros.whitebox.plots import pyplot
    plt = pyplot()
    keys = list(next(iter(rows.values()))['median_ms'])
    labels = [f'{k}\n({r["valid_tokens"]} of 96 tokens)' for k, r in rows.items()]
    x = np.arange(len(rows))
    width = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, key in enumerate(keys):
        bars = ax.bar(x + (i - (len(keys) - 1) / 2) * width,
                      [r['median_ms'][key] for r in rows.values()], width, label=key)
        ax.bar_label(bars, fmt='%.1f', fontsize=7)
    ax.set_xticks(x, labels)
    ax.set_ylim(0, 1.3 * max(v for r in rows.values() for v in r['median_ms'].values()))
    ax.set_ylabel('median ms per tick that infers')
    ax.set_title('pi05_tiny on the CPU: the artifact, builds with a feature off, eager PyTorch')
    ax.legend(loc='upper center', ncol=len(keys), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=40, help='rounds (each runs everything)')
    parser.add_argument('--sessions', type=int, default=4, help='loads of each build')
    parser.add_argument('--artifact', action='append', default=[], metavar='NAME=PATH',
                        help=f'a build already made (names: {", ".join(EDITS)}); with any '
                             f'given, only those are measured, {BASE} among them')
    parser.add_argument('--out', default='bench/results/tiny_cpu.json')
    args = parser.parse_args()
    given = dict(a.split('=', 1) for a in args.artifact)
    unknown = sorted(set(given) - set(EDITS))
    if unknown or (given and BASE not in given):
        parser.error(f'--artifact: names among {", ".join(EDITS)}, {BASE} included '
                     f'(got {", ".join(given)})')
    with tempfile.TemporaryDirectory() as folder:
        paths = given or build(EDITS, folder)
        rows = measure(paths, args.runs, args.sessions)
        memory = {name: peak_rss_mb(path) for name, path in paths.items()}
    print('peak resident memory of a process that runs it: ' +
          ', '.join(f'{k} {v:.0f} MB' for k, v in memory.items()))
    report = {'what': 'ms per tick that infers, pi05_tiny on the CPU: builds with a compiler '
                      'feature off and the eager policy, interleaved in shuffled rounds',
              'runs': args.runs, 'sessions': args.sessions, 'cpus': os.cpu_count(),
              'prompts': rows, 'peak_rss_mb': memory, 'provenance': provenance('cpu')}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)
    write_png(rows, os.path.splitext(args.out)[0] + '.png')


if __name__ == '__main__':
    main()
