"""Readable summary of a Graph for the terminal (rich tables)."""

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lamp_ros.graph.graph import Graph


def print_summary(graph: Graph, console: Console | None = None) -> None:
    console = console or Console(width=max(140, Console().width))
    hashes = graph.hashes()
    table = Table(title=f'graph {graph.name}: {len(graph.nodes)} stages, '
                        f'{len(graph.edges)} edges')
    for col in ('#', 'node', 'kind', 'inputs', 'outputs', 'state', 'ops', 'hash'):
        table.add_column(col, overflow='fold')
    for i, n in enumerate(graph.nodes):
        ins = '\n'.join(n.inputs)
        outs = '\n'.join(f'{v.split(".")[-1]}: {graph.values[v]}' for v in n.outputs)
        state = f'{len(n.state)} arrays, episode' if n.state else ''
        ops = str(len(n.subgraph.ops)) if n.subgraph else ''
        table.add_row(str(i), n.id, n.kind, escape(ins), escape(outs), state, ops,
                      hashes[n.id])
    console.print(table)
    for n in graph.nodes:
        if n.subgraph:
            top = sorted(n.subgraph.op_counts.items(), key=lambda kv: -kv[1])[:6]
            console.print(f'[bold]{n.id}[/]: {len(n.subgraph.ops)} ops, '
                          f'{len(n.weights)} weight tensors; top: '
                          + ', '.join(f'{k.removeprefix("aten.")} x{v}' for k, v in top))
    console.print(escape('inputs: ' + ', '.join(f'{v} {graph.values[v]}' for v in graph.inputs)))
    console.print(escape('outputs: ' + ', '.join(f'{v} {graph.values[v]}'
                                                 for v in graph.outputs)))
