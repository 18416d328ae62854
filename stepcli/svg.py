"""Draw a graph as SVG without Graphviz: nodes in layers by longest path, edges as lines."""

from __future__ import annotations

from html import escape

from step_lang import Graph

__all__ = ["to_svg"]

BOX_W, BOX_H, GAP_X, GAP_Y = 150, 38, 24, 46


def to_svg(graph: Graph) -> str:
    """An SVG picture of ``graph`` (feedback edges dashed)."""
    order = graph.topo_order()
    layer: dict[str, int] = {}
    for node in order:
        preds = [s.node.name for s in node.inputs if node.kind != "Feedback"]
        layer[node.name] = 1 + max((layer[p] for p in preds if p in layer), default=-1)
    rows: dict[int, list[str]] = {}
    for name, k in layer.items():
        rows.setdefault(k, []).append(name)
    pos = {}
    width = max(len(r) for r in rows.values()) * (BOX_W + GAP_X) + GAP_X
    for k, names in rows.items():
        offset = (width - len(names) * (BOX_W + GAP_X)) / 2
        for i, name in enumerate(names):
            pos[name] = (offset + GAP_X / 2 + i * (BOX_W + GAP_X), GAP_Y / 2 + k * (BOX_H + GAP_Y))
    height = (max(rows) + 1) * (BOX_H + GAP_Y)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" font-family="monospace" font-size="10">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for s, node, _ in graph.edges():
        x1, y1 = pos[s.node.name]
        x2, y2 = pos[node.name]
        dash = ' stroke-dasharray="4 3"' if node.kind == "Feedback" else ""
        parts.append(
            f'<line x1="{x1 + BOX_W / 2:.0f}" y1="{y1 + BOX_H:.0f}" x2="{x2 + BOX_W / 2:.0f}" y2="{y2:.0f}" stroke="#555"{dash}>'
            f"<title>{escape(str(s.type))}</title></line>"
        )
    for node in order:
        x, y = pos[node.name]
        parts.append(
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="4" fill="#eef3fb" stroke="#345"/>'
        )
        parts.append(
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + 15:.0f}" text-anchor="middle">{escape(node.name[:22])}</text>'
        )
        parts.append(
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + 29:.0f}" text-anchor="middle" fill="#666">{escape(node.kind)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
