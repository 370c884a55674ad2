"""Graph data: types, lint, printed form, JSON round trip and local content hashes."""

from dataclasses import replace

import pytest

from lamp_ros.graph.graph import Graph, Node
from lamp_ros.graph.types import TensorType

F32 = TensorType('float32', (2, 3))


def small_graph(scale=2.0) -> Graph:
    values = {
        'x': TensorType('float32', ('n', 3), role='input'),
        'a.y': TensorType('float32', ('n', 3)),
        'b.z': TensorType('float32', ('n', 3), role='output'),
        'b.state.mem': TensorType('float32', (3,), role='state', lifetime='episode'),
    }
    nodes = (
        Node('a', 'scale', 'host', inputs=('x',), outputs=('a.y',), attrs={'k': scale}),
        Node('b', 'ema', 'stateful', inputs=('a.y',), outputs=('b.z',),
             state=('b.state.mem',), attrs={'alpha': 0.5}),
    )
    return Graph(nodes=nodes, values=values, inputs=('x',), outputs=('b.z',), name='g').lint()


def test_tensor_type_checks_and_sizes():
    assert TensorType('bfloat16', (4, 8)).nbytes == 64
    assert TensorType('float32', (2,)).precision == 'float32'
    assert not TensorType('uint8', ('h', 'w', 3)).is_static
    with pytest.raises(ValueError, match='dtype'):
        TensorType('float8', (1,))
    with pytest.raises(ValueError, match='lifetime'):
        TensorType('float32', (1,), lifetime='forever')
    with pytest.raises(ValueError, match='shape'):
        TensorType('float32', (-1,))


def test_printed_form_is_pinned():
    assert str(small_graph()) == (
        'graph g(%x: float32[n,3] input):\n'
        '  %a : (y: float32[n,3]) = scale[host](%x) {k=2.0}\n'
        '  %b : (z: float32[n,3] output) = ema[stateful](%a.y) state=(b.state.mem) '
        '{alpha=0.5}\n'
        '  return (%b.z)')


def test_edges_are_derived_with_state_self_loops():
    edges = {(e.src, e.dst, e.value) for e in small_graph().edges}
    assert edges == {('@input', 'a', 'x'), ('a', 'b', 'a.y'), ('b', 'b', 'b.state.mem'),
                     ('b', '@output', 'b.z')}


def test_json_round_trip_is_lossless():
    g = small_graph()
    again = Graph.from_json(g.to_json())
    assert again == g
    assert again.to_json() == g.to_json()


def test_hash_is_local_to_the_changed_node():
    a, b = small_graph(2.0).hashes(), small_graph(3.0).hashes()
    assert a['a'] != b['a']
    assert a['b'] == b['b']
    assert small_graph(2.0).hashes() == a  # stable


def test_saved_hash_mismatch_is_refused():
    d = small_graph().to_dict()
    d['nodes'][0]['attrs']['k'] = 9.0  # edited without updating the hash
    with pytest.raises(ValueError, match="node 'a' does not match its saved hash"):
        Graph.from_dict(d)


def test_lint_names_problems_and_prints_the_graph():
    g = small_graph()
    swapped = replace(g, nodes=(g.nodes[1], g.nodes[0]))
    with pytest.raises(ValueError, match="b: input 'a.y' is not produced before") as err:
        swapped.lint()
    assert 'graph g(' in str(err.value)
    bad_meta = replace(g, nodes=(replace(g.nodes[0], meta={'color': 'red'}), g.nodes[1]))
    with pytest.raises(ValueError, match='undocumented meta keys'):
        bad_meta.lint()
    tick_state = dict(g.values)
    tick_state['b.state.mem'] = TensorType('float32', (3,), role='state')
    with pytest.raises(ValueError, match='lifetime episode'):
        replace(g, values=tick_state).lint()
