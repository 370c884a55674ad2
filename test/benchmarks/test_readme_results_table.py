"""The run-of-record table in bench/README.md says what its results files hold.

Each row names its source in bench/results/ in a third column: `FILE: key.path, key.path` (a
JSON value per key path) or `FILE: "a log line with {} for the number"`, groups joined by `;`.
Every number in the row's figure and value cells, in order, is the next source value rounded
as the README shows it (12.49 is 12.485..12.495, 1.17e-2 is 0.01165..0.01175, 2,640 is 2640).
A number with no source value, a source value with no number, a key or a line that is not
there, or a figure that differs fails. The line that introduces the table (card, torch, date,
artifact) is checked against gpu_pi05.json too."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / 'bench' / 'README.md'
RESULTS = ROOT / 'bench' / 'results'
HEADER = '| figure (H200) | value | source in `bench/results/` |'
# a number as the README writes one: not inside a word (p99, pi05_full), thousands by commas
NUMBER = re.compile(r'(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:e([-+]?\d+))?')


def _section(text: str) -> str:
    """The README's "## Results" section."""
    start = text.index('## Results')
    end = text.find('\n## ', start + 1)
    return text[start:end if end >= 0 else len(text)]


def table_rows(text: str) -> list[tuple[str, str, str]]:
    """(figure, value, source) of each row under the table's header."""
    lines = _section(text).splitlines()
    start = lines.index(HEADER) + 2  # the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith('|'):
            break
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        assert len(cells) == 3, f'a row of three cells: {line}'
        rows.append(tuple(cells))
    return rows


def shown_numbers(cell: str) -> list[tuple[float, float, str]]:
    """(value, half of the last shown digit's unit, as written) of each number in a cell."""
    found = []
    for m in NUMBER.finditer(cell):
        whole, fraction, exponent = m.group(1), m.group(2) or '', m.group(3)
        value = float(f'{whole.replace(",", "")}.{fraction or 0}e{exponent or 0}')
        unit = 10.0 ** (int(exponent or 0) - len(fraction))
        found.append((value, unit / 2, m.group(0)))
    return found


def _json_value(data, path: str, file: str):
    node = data
    for key in path.split('.'):
        assert isinstance(node, dict) and key in node, f'{file} has no {path}'
        node = node[key]
    assert isinstance(node, (int, float)) and not isinstance(node, bool), \
        f'{file}: {path} is {node!r}, not a number'
    return float(node)


def _log_value(text: str, pattern: str, file: str) -> float:
    head, _, tail = pattern.partition('{}')
    line = re.compile(re.escape(head) + r'([-+]?\d+(?:\.\d+)?)' + re.escape(tail))
    values = [float(m.group(1)) for m in map(line.fullmatch, text.splitlines()) if m]
    assert len(values) == 1, f'{file}: {len(values)} lines match "{pattern}", one expected'
    return values[0]


def source_values(cell: str) -> list[tuple[float, str]]:
    """(value, where) of each reference in a source cell, in order."""
    found = []
    for group in cell.split(';'):
        file, _, refs = group.strip().partition(':')
        file, refs = file.strip(), refs.strip()
        path = RESULTS / file
        assert file and refs and path.is_file(), f'source "{group.strip()}": no such file'
        if refs.startswith('"'):
            pattern = refs.strip('"')
            found.append((_log_value(path.read_text(encoding='utf-8'), pattern, file),
                          f'{file}: "{pattern}"'))
        else:
            data = json.loads(path.read_text(encoding='utf-8'))
            found += [(_json_value(data, key.strip(), file), f'{file}: {key.strip()}')
                      for key in refs.split(',')]
    return found


def row_mismatches(figure: str, value: str, source: str) -> list[str]:
    """What in one row the source does not hold."""
    shown = shown_numbers(figure) + shown_numbers(value)
    held = source_values(source)
    if len(shown) != len(held):
        return [f'{figure}: {len(shown)} numbers ({", ".join(s[2] for s in shown)}) against '
                f'{len(held)} source values ({", ".join(h[1] for h in held)})']
    return [f'{figure}: README {text}, {where} holds {actual!r}'
            for (number, half_unit, text), (actual, where) in zip(shown, held)
            if abs(actual - number) > half_unit * (1 + 1e-9)]


@pytest.fixture(scope='module')
def rows():
    found = table_rows(README.read_text(encoding='utf-8'))
    assert len(found) >= 10
    return found


def test_every_figure_in_the_table_is_what_its_results_file_holds(rows):
    mismatches = [m for row in rows for m in row_mismatches(*row)]
    assert not mismatches, '\n'.join(mismatches)


def test_the_run_of_record_line_is_the_bench_results(rows):
    text = _section(README.read_text(encoding='utf-8'))
    m = re.search(r'The run of record \((.+?), torch (\S+), (\d{4}-\d\d-\d\d), artifact `(\w+)`\)',
                  text.replace('\n', ' '))
    assert m, 'the line that introduces the table: "The run of record (CARD, torch V, DATE, ' \
              'artifact `ID`)"'
    card, torch, date, artifact = m.groups()
    report = json.loads((RESULTS / 'gpu_pi05.json').read_text(encoding='utf-8'))
    assert (card, torch) == (report['device'], report['torch'])
    assert report['artifact_id'].startswith(artifact)
    assert report['provenance']['date'].startswith(date)


def test_a_figure_that_differs_or_has_no_source_fails():
    assert row_mismatches('lamp', '12.49 / 12.54 ms',
                          'gpu_pi05.json: median_ms.lamp, p99_ms.lamp') == []
    assert row_mismatches('lamp', '12.48 / 12.54 ms',
                          'gpu_pi05.json: median_ms.lamp, p99_ms.lamp')
    assert row_mismatches('lamp', '12.49 / 12.54 ms (1.5x)',
                          'gpu_pi05.json: median_ms.lamp, p99_ms.lamp')
    assert row_mismatches('parity', '1.18e-2', 'gpu_pi05.json: parity_max_rel_error')
    assert row_mismatches('build', '176 s wall',
                          'pi05_full_compile.log: "lamp compile pi05_full: {} s wall"')
    with pytest.raises(AssertionError, match='has no'):
        row_mismatches('lamp', '12.49 ms', 'gpu_pi05.json: median_ms.lamp_fast')
