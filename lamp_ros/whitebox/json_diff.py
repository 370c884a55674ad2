"""Differences between two JSON-like values, as `lamp diff` reports them: a tree of [a, b]
pairs (`deep_diff`), its dotted leaf paths (`leaves`) and the pairs flattened for text
(`flat_pairs`)."""

MISSING = None  # stands for "absent on this side" in [a, b] pairs


def deep_diff(a, b) -> dict | list:
    """{key: [a, b]} for every differing leaf of two JSON-like dicts (nested dicts recurse);
    anything else that differs is one [a, b] pair."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = {}
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out[key] = [a.get(key, MISSING), b.get(key, MISSING)]
            elif a[key] != b[key]:
                out[key] = deep_diff(a[key], b[key])
        return out
    return [a, b]


def leaves(tree, depth: int = 3, prefix: str = '') -> list:
    """Dotted paths of a deep_diff's leaves, cut at `depth` keys ({'a': {'b': [x, y]}} ->
    ['a.b']): `groups.g03_cuda.tuning`, not each of its hundred timings."""
    if isinstance(tree, dict) and depth > 0:
        return list(dict.fromkeys(leaf for key, sub in tree.items()
                                  for leaf in leaves(sub, depth - 1, f'{prefix}{key}.')))
    return [prefix.rstrip('.')]


def flat_pairs(tree, prefix: str = '') -> list:
    """[(dotted path, [a, b])] of every leaf pair of a deep_diff, in its order."""
    if isinstance(tree, dict):
        return [pair for key, sub in tree.items()
                for pair in flat_pairs(sub, f'{prefix}{key}.')]
    return [(prefix.rstrip('.'), tree)]
