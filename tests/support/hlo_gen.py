"""Random HLO modules as data, printed as text under any naming and any valid order.

The property tests print the same graph in many ways (renamed, reordered, with metadata) and
mutate it in one structural detail at a time; XLA's parser reads every printed form.
`random_module_text` writes larger modules with everything a fingerprint treats specially
(called and fused computations, control predecessors, frontend attributes, large constants,
custom calls, layouts), for the hashers to be compared on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

BINARY = ("add", "multiply", "subtract", "maximum", "divide")
UNARY = ("exponential", "negate", "tanh", "abs")


@dataclass(frozen=True)
class Node:
    opcode: str  # "parameter", "constant", a unary or a binary opcode
    operands: tuple[int, ...] = ()
    value: float = 0.0  # constant value, or parameter number
    dtype: str = "f32"
    dims: tuple[int, ...] = (4,)
    layout: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]  # topologically ordered; the last node is the root


def random_graph(rng: random.Random, size: int) -> Graph:
    nodes = [Node("parameter", value=0), Node("parameter", value=1),
             Node("constant", value=float(rng.randint(1, 9)))]
    for _ in range(size):
        if rng.random() < 0.3:
            nodes.append(Node(rng.choice(UNARY), (rng.randrange(len(nodes)),)))
        else:
            nodes.append(Node(rng.choice(BINARY),
                              (rng.randrange(len(nodes)), rng.randrange(len(nodes)))))
    return Graph(tuple(nodes))


def _shape(node: Node) -> str:
    return f"{node.dtype}[{','.join(map(str, node.dims))}]{{{','.join(map(str, node.layout))}}}"


def to_text(graph: Graph, rng: random.Random | None = None, prefix: str = "v",
            metadata: bool = False, percent: bool = False) -> str:
    """Print `graph` as an HLO module; with `rng`, in a random valid order with random names."""
    n = len(graph.nodes)
    names = [f"{prefix}{i}" for i in range(n)]
    order = list(range(n - 1))
    if rng is not None:
        rng.shuffle(names)
        order = _random_topological_order(graph, rng)
    pct = "%" if percent else ""
    lines = ["HloModule m" + (prefix if rng else ""), "", "ENTRY main {"]
    for i in order + [n - 1]:
        node = graph.nodes[i]
        root = "ROOT " if i == n - 1 else ""
        if node.opcode == "parameter":
            body = f"parameter({int(node.value)})"
        elif node.opcode == "constant":
            body = f"constant({node.value})"
            lines.append(f"  {pct}{names[i]}s = {node.dtype}[] {body}")
            body = f"broadcast({pct}{names[i]}s), dimensions={{}}"
        else:
            body = f"{node.opcode}({', '.join(pct + names[o] for o in node.operands)})"
        meta = f', metadata={{op_name="op{i}" source_file="x.py" source_line={i}}}' if metadata else ""
        lines.append(f"  {root}{pct}{names[i]} = {_shape(node)} {body}{meta}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _random_topological_order(graph: Graph, rng: random.Random) -> list[int]:
    n = len(graph.nodes) - 1  # the root stays last
    users = {i: [] for i in range(n)}
    pending = {i: len(set(graph.nodes[i].operands)) for i in range(n)}
    for i in range(n):
        for operand in set(graph.nodes[i].operands):
            users[operand].append(i)
    ready = [i for i in range(n) if pending[i] == 0]
    order = []
    while ready:
        i = ready.pop(rng.randrange(len(ready)))
        order.append(i)
        for user in users[i]:
            pending[user] -= 1
            if pending[user] == 0:
                ready.append(user)
    return order


def presentations(graph: Graph, rng: random.Random) -> list[str]:
    """`graph`'s text as other dumps present the same program: its values renamed, its
    instructions reordered, with and without metadata, names in other styles."""
    return [to_text(graph, rng, prefix="renamed_", metadata=True), to_text(graph, rng, prefix="x.", percent=True)]


def mutations(graph: Graph, rng: random.Random) -> list[tuple[str, Graph, Graph]]:
    """(what, base, mutated): pairs of graphs that differ in exactly one structural detail."""
    nodes = list(graph.nodes)
    out = []
    computed = [i for i, node in enumerate(nodes) if node.opcode in BINARY + UNARY]
    i = rng.choice(computed)
    node = nodes[i]
    pool = BINARY if node.opcode in BINARY else UNARY
    out.append(("opcode", _with(nodes, i, replace(node, opcode=next(o for o in pool if o != node.opcode)))))
    out.append(("constant value", _with(nodes, 2, replace(nodes[2], value=nodes[2].value + 1))))
    out.append(("dtype", Graph(tuple(replace(m, dtype="f64") for m in nodes))))
    out.append(("shape", Graph(tuple(replace(m, dims=(5,)) for m in nodes))))
    binaries = [j for j, m in enumerate(nodes)
                if m.opcode in BINARY and _differs(nodes, *m.operands)]
    if binaries:
        j = rng.choice(binaries)
        a, b = nodes[j].operands
        out.append(("operand order", _with(nodes, j, replace(nodes[j], operands=(b, a)))))
    j = rng.choice(computed)
    old = nodes[j].operands[0]
    new = next((k for k in range(j) if k != old and _differs(nodes, k, old)), None)
    if new is not None:
        out.append(("topology", _with(nodes, j, replace(nodes[j], operands=(new,) + nodes[j].operands[1:]))))
    square = tuple(replace(m, dims=(2, 2), layout=(1, 0)) for m in nodes)
    relaid = tuple(replace(m, layout=(0, 1)) if k == 0 else m for k, m in enumerate(square))
    return [(what, graph, mutated) for what, mutated in out] + [
        ("layout", Graph(square), Graph(relaid))
    ]


def _differs(nodes: list[Node], a: int, b: int) -> bool:
    # Two identical subgraphs (at any depth) would make a rewire or a swap a no-op structurally.
    classes = _structure_classes(nodes)
    return classes[a] != classes[b]


def _structure_classes(nodes: list[Node]) -> list[int]:
    """Per node, a number shared by exactly the nodes whose whole subgraphs are the same
    (positions left out: what a fingerprint sees); the nodes are in topological order."""
    table: dict[tuple, int] = {}
    classes: list[int] = []
    for node in nodes:
        key = (node.opcode, node.value, node.dtype, node.dims, node.layout,
               tuple(classes[o] for o in node.operands))
        classes.append(table.setdefault(key, len(table)))
    return classes


def _with(nodes: list[Node], i: int, node: Node) -> Graph:
    copy = list(nodes)
    copy[i] = node
    return Graph(tuple(copy))


VECTOR = "f32[16]{0}"


def random_module_text(rng: random.Random, size: int) -> str:
    """An HLO module of about `size` entry instructions over f32[16] values: elementwise ops,
    reductions, fusions, calls, custom calls and relayouts, some with control predecessors,
    frontend attributes in any order, or metadata; a tuple of the last values as its root."""
    computations = [
        "add_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}",
        "max_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] maximum(a, b)\n}",
    ]
    for k in range(3):
        body = [f"  p0 = {VECTOR} parameter(0)", f"  p1 = {VECTOR} parameter(1)"]
        names = ["p0", "p1"]
        for j in range(rng.randint(1, 4)):
            a, b = rng.choice(names), rng.choice(names)
            body.append(f"  e{j} = {VECTOR} {rng.choice(BINARY)}({a}, {b})")
            names.append(f"e{j}")
        body[-1] = body[-1].replace("  e", "  ROOT e", 1)
        computations.append(f"fused_{k} {{\n" + "\n".join(body) + "\n}")
        computations.append(f"called_{k} {{\n  q = {VECTOR} parameter(0)\n"
                            f"  ROOT u = {VECTOR} {rng.choice(UNARY)}(q)\n}}")
    large = ",".join(str(rng.randint(0, 9)) for _ in range(16))
    lines = [f"  x{k} = {VECTOR} parameter({k})" for k in range(3)] + [
        "  zero = f32[] constant(0)",
        f"  large = {VECTOR} constant({{{large}}})",
    ]
    values = ["x0", "x1", "x2", "large"]
    while len(lines) < size:
        lines.extend(_random_step(rng, len(lines), values))
    root = ", ".join(values[-3:])
    lines.append(f"  ROOT out = ({', '.join([VECTOR] * 3)}) tuple({root})")
    entry = "ENTRY main {\n" + "\n".join(lines) + "\n}\n"
    return "HloModule big\n\n" + "\n\n".join(computations) + "\n\n" + entry


def _random_step(rng: random.Random, i: int, values: list[str]) -> list[str]:
    """One or two instructions computing a new f32[16] value `v<i>` from earlier ones."""
    a, b = rng.choice(values), rng.choice(values)
    name = f"v{i}"
    kind = rng.random()
    if kind < 0.4:
        lines = [f"  {name} = {VECTOR} {rng.choice(BINARY)}({a}, {b})"]
    elif kind < 0.55:
        lines = [f"  {name} = {VECTOR} {rng.choice(UNARY)}({a})"]
    elif kind < 0.65:
        reducer = rng.choice(("add_f32", "max_f32"))
        lines = [f"  {name}r = f32[] reduce({a}, zero), dimensions={{0}}, to_apply={reducer}",
                 f"  {name} = {VECTOR} broadcast({name}r), dimensions={{}}"]
    elif kind < 0.75:
        fused = f"fused_{rng.randrange(3)}"
        lines = [f"  {name} = {VECTOR} fusion({a}, {b}), kind=kLoop, calls={fused}"]
    elif kind < 0.82:
        lines = [f"  {name} = {VECTOR} call({a}), to_apply=called_{rng.randrange(3)}"]
    elif kind < 0.88:
        target = f"target_{rng.randrange(2)}"
        lines = [f'  {name} = {VECTOR} custom-call({a}), custom_call_target="{target}"']
    elif kind < 0.94:
        lines = [f"  {name}t = f32[4,4]{{0,1}} reshape({a})", f"  {name} = {VECTOR} reshape({name}t)"]
    else:
        lines = [f"  {name}s = f32[] constant({rng.randint(1, 9)})",
                 f"  {name} = {VECTOR} broadcast({name}s), dimensions={{}}"]
    extras = []
    if rng.random() < 0.1:
        extras.append(f"control-predecessors={{{rng.choice(values)}}}")
    if rng.random() < 0.1:
        entries = [f'{k}="{rng.randint(0, 3)}"' for k in rng.sample("abcd", rng.randint(1, 3))]
        extras.append("frontend_attributes={" + ",".join(entries) + "}")
    if rng.random() < 0.1:
        extras.append(f'metadata={{op_name="op{i}" source_file="gen.py" source_line={i}}}')
    lines[-1] += "".join(", " + extra for extra in extras)
    values.append(name)
    return lines
