"""Regenerate the committed regression bag test/data/pi05_tiny_sim (about 300 KB).

    .venv/bin/lamp compile config/specs/pi05_tiny.yaml --out artifacts/pi05_tiny
    .venv/bin/python scripts/make_regression_bag.py --artifact artifacts/pi05_tiny

The bag holds 3 s of the simulated arm driven by the trained demo policy's artifact (see
lamp_ros/regress/generate.py); regenerate it when the demo policy or its spec changes on purpose.
"""

import argparse
import os
import shutil

from lamp_ros.regress.generate import generate_bag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--artifact', default='artifacts/pi05_tiny')
    parser.add_argument('--out', default='test/data/pi05_tiny_sim')
    parser.add_argument('--seconds', type=float, default=3.0)
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    args = parser.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    print(generate_bag(args.artifact, args.out, args.seconds, storage=args.storage))


if __name__ == '__main__':
    main()
