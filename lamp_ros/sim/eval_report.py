"""What `lamp eval` writes: the report JSON, a PNG of every episode's task error over time
(green: success, red: failure) and, when the episodes kept frames, a frame strip of the first
success and the first failure (what the overhead camera saw), so a failure can be looked at.
"""

import json
import os

import numpy as np


def write_report(report: dict, path: str, title: str, runs=None) -> list:
    """Write the JSON at `path`, `<path>.png` beside it and, with `runs` holding frame strips,
    `<path>_frames.png`. Returns the pictures written."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from lamp_ros.provenance import provenance
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump({**report, 'provenance': provenance()}, f, indent=1)
    stem = path.rsplit('.', 1)[0]
    unit = report.get('error_unit', 'px')
    fig, ax = plt.subplots(figsize=(8, 4))
    for e in report['per_episode']:
        t = np.arange(1, len(e['errors']) + 1) / (len(e['errors']) / report['seconds'])
        ax.plot(t, e['errors'], lw=1, color='tab:green' if e['success'] else 'tab:red')
    if unit == 'px':
        from lamp_ros.sim.task import SUCCESS_PX
        ax.axhline(SUCCESS_PX, ls='--', color='k', lw=0.8)
    low, high = report['success_ci']
    ax.set(xlabel='time (s)', ylabel=('error (px, 224-wide base camera)' if unit == 'px' else
                                      'cube to bin centre (m)'),
           title=f'{title} on {report["world"]}: success {report["success_rate"]:.0%} '
                 f'[{low:.0%}, {high:.0%}] of {report["episodes"]}, mean error '
                 f'{report["mean_error"]:.3g} {unit}')
    fig.tight_layout()
    pictures = [stem + '.png']
    fig.savefig(pictures[0], dpi=100)
    plt.close(fig)
    strip = frame_strip(runs or [])
    if strip is not None:
        import cv2
        pictures.append(stem + '_frames.png')
        cv2.imwrite(pictures[-1], strip[:, :, ::-1])
    return pictures


def frame_strip(runs) -> np.ndarray | None:
    """One row of frames for the first successful episode and one for the first failed one
    (whichever exist), each labelled with its episode and outcome; None without frames."""
    import cv2
    rows = []
    for wanted in (True, False):
        episode = next((e for e in runs if e.success == wanted and e.strip), None)
        if episode is None:
            continue
        frames = []
        for t, frame in episode.strip:
            frame = np.ascontiguousarray(frame).copy()
            cv2.putText(frame, f'{t:.1f}s', (3, 12), cv2.FONT_HERSHEY_SIMPLEX, 0.35,
                        (255, 255, 255), 1, cv2.LINE_AA)
            frames.append(frame)
        row = np.hstack(frames)
        label = np.full((16, row.shape[1], 3), 255, np.uint8)
        cv2.putText(label, f'episode {episode.index}: {"success" if wanted else "failure"}',
                    (3, 12), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
        rows.append(np.vstack([label, row]))
    if not rows:
        return None
    width = max(r.shape[1] for r in rows)
    return np.vstack([np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)),
                             constant_values=255) for r in rows])
