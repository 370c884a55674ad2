"""A regression bag made offline: 3 s of the simulated arm driven by an artifact.

    lamp compile config/specs/pi05_tiny.yaml --out artifacts/pi05_tiny
    python scripts/make_regression_bag.py --artifact artifacts/pi05_tiny --out bags/generated

The bag holds 3 s of the simulated arm driven by the artifact (lamp_ros/regress/generate.py).
`--records` adds what vla_node says about its own work, `--inference-ticks N` makes inference
asynchronous, N control periods long. The committed test bag test/data/pi05_tiny_sim is made
with `--out test/data/pi05_tiny_sim` (no records: it stands for a bag of another recorder);
regenerate it when the demo policy or its spec changes on purpose.
"""

import argparse
import os
import shutil

from lamp_ros.regress.generate import generate_bag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--artifact', default='artifacts/pi05_tiny')
    parser.add_argument('--out', default='bags/generated',
                        help='bag folder to write (replaced if it exists)')
    parser.add_argument('--seconds', type=float, default=3.0)
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    parser.add_argument('--records', action='store_true',
                        help='also the node\'s own records (session, latency, inferences, state)')
    parser.add_argument('--inference-ticks', type=int, default=0,
                        help='asynchronous inference, this many control periods long')
    args = parser.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    print(generate_bag(args.artifact, args.out, args.seconds, storage=args.storage,
                       records_too=args.records, inference_ticks=args.inference_ticks))


if __name__ == '__main__':
    main()
