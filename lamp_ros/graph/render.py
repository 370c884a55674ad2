"""A picture of the stage graph as SVG, without Graphviz: nodes in layers by longest path
from the inputs, coloured by kind, edges labelled with their type; state edges as loops."""

from html import escape

from lamp_ros.graph.graph import Graph, INPUT

COLOURS = {'host': '#d9ead3', 'preprocess': '#cfe2f3', 'model': '#f4cccc',
           'postprocess': '#fff2cc', 'stateful': '#ead1dc', 'input': '#eeeeee',
           'output': '#eeeeee'}
BOX_W, BOX_H, GAP_X, GAP_Y = 200, 46, 40, 70


def layers(graph: Graph) -> dict:
    """node id -> layer (0 for graph inputs), the longest path from any input."""
    producer = graph.producers()
    layer = {f'in:{v}': 0 for v in graph.inputs}
    for n in graph.nodes:
        srcs = [producer[v] for v in n.inputs]
        layer[n.id] = 1 + max((layer[f'in:{v}'] if p == INPUT else layer[p]
                               for v, p in zip(n.inputs, srcs)), default=0)
    return layer


def render_svg(graph: Graph) -> str:
    layer = layers(graph)
    out_layer = 1 + max(layer.values(), default=0)
    rows = {}
    for key, lvl in layer.items():
        rows.setdefault(lvl, []).append(key)
    rows.setdefault(out_layer, []).extend(f'out:{v}' for v in graph.outputs)
    pos = {}
    for lvl, keys in rows.items():
        for i, key in enumerate(keys):
            pos[key] = (20 + i * (BOX_W + GAP_X), 20 + lvl * (BOX_H + GAP_Y))
    width = 40 + max(len(k) for k in rows.values()) * (BOX_W + GAP_X)
    height = 40 + (out_layer + 1) * (BOX_H + GAP_Y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="monospace" font-size="11">',
             '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    producer = graph.producers()

    def anchor(key, bottom):
        x, y = pos[key]
        return x + BOX_W / 2, y + (BOX_H if bottom else 0)

    for e in graph.edges:
        if e.src == e.dst:
            x, y = pos[e.src]
            parts.append(f'<path d="M{x + BOX_W},{y + 10} c40,-20 40,46 0,26" fill="none" '
                         'stroke="#a64d79" marker-end="url(#a)"/>')
            continue
        src = f'in:{e.value}' if producer.get(e.value) == '@input' else e.src
        dst = f'out:{e.value}' if e.dst == '@output' else e.dst
        (x1, y1), (x2, y2) = anchor(src, True), anchor(dst, False)
        parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#666" '
                     'marker-end="url(#a)"/>')
        parts.append(f'<text x="{(x1 + x2) / 2 + 4}" y="{(y1 + y2) / 2}" fill="#555">'
                     f'{escape(str(e.type))}</text>')
    kinds = {n.id: n for n in graph.nodes}
    for key, (x, y) in pos.items():
        if key.startswith(('in:', 'out:')):
            kind, title, sub = key.split(':')[0] + 'put', key.split(':', 1)[1], ''
            kind = 'input' if kind == 'input' else 'output'
        else:
            node = kinds[key]
            kind, title = node.kind, node.id
            sub = f'{node.op} [{node.kind}]'
            if node.subgraph:
                sub += f' {len(node.subgraph.ops)} ops'
        parts.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" '
                     f'fill="{COLOURS[kind]}" stroke="#333"/>')
        parts.append(f'<text x="{x + 8}" y="{y + 18}" font-weight="bold">{escape(title)}</text>')
        parts.append(f'<text x="{x + 8}" y="{y + 34}">{escape(sub)}</text>')
    parts.append('</svg>')
    return '\n'.join(parts)
