"""Shrinking a failing program while its failure keeps the same kind, and saving it as a reproducer.

    small, res = shrink(prog, res, worker.run, budget=80)
    save(small, res, "/tmp/fuzz_out/t_0007_wrong.py")     # python THAT_FILE  (from the project root)

Passes, repeated until none makes progress or the budget of runs is spent: fewer calls (the failing one
first), fewer statements (a statement goes with everything that reads what it binds), fewer outputs, an
earlier value as the output, plainer inputs (contiguous, no odd values), smaller sizes.
"""
import os
import re
import time

from .program import VARIANTS
from .runner import describe


def signature(res):
    """What must stay the same while shrinking: the kind, and for errors the exception type."""
    status = res["status"]
    if status == "crash":
        return status, res.get("exc")
    if status == "fallback":
        first = res["fallbacks"][0] if res.get("fallbacks") else ""
        return status, (re.findall(r"\((\w+):", first) or [""])[0]
    return status, None


def shrink(prog, res, run, budget=80, seconds=600):
    """The smallest program found that fails like prog did, and its result."""
    want, start, runs = signature(res), time.monotonic(), [0]

    def fails(cand):
        if runs[0] >= budget or time.monotonic() - start > seconds:
            return None
        runs[0] += 1
        r = run(cand.source(), attribute=False)
        return r if signature(r) == want else None

    progress = True
    while progress and runs[0] < budget:
        progress = False
        for make in PASSES:
            for cand in make(prog, res):
                r = fails(_drop_unused(cand))
                if r is not None:
                    prog, res, progress = _drop_unused(cand), r, True
                    break
    res["shrink_runs"] = runs[0]
    return prog, res


# ------------------------------------------------------------------------------------------------ passes

def fewer_calls(prog, res):
    failing = res.get("call", len(prog.calls) - 1)
    calls = prog.calls[:failing + 1]
    if len(calls) < len(prog.calls):
        yield prog.copy(calls=calls)
    if len(calls) > 1:
        yield prog.copy(calls=calls[-1:])
    for i in range(len(calls) - 1):
        yield prog.copy(calls=calls[:i] + calls[i + 1:])


def fewer_stmts(prog, res):
    for i in reversed(range(len(prog.stmts))):
        gone = set(prog.stmts[i].defs)
        kept = []
        for j, s in enumerate(prog.stmts):
            if j == i or j > i and gone & set(s.uses):
                gone |= set(s.defs)
            else:
                kept.append(s)
        yield prog.copy(stmts=kept, returns=[r for r in prog.returns if r not in gone])


def other_returns(prog, res):
    """An earlier value returned instead (then what only fed the old outputs can go)."""
    for name in reversed([d for s in prog.stmts for d in s.defs]):
        if prog.returns != [name]:
            yield prog.copy(returns=[name])


def fewer_returns(prog, res):
    for name in prog.returns:
        yield prog.copy(returns=[r for r in prog.returns if r != name])


def plainer_inputs(prog, res):
    if prog.mode != "tensor":
        return
    for i, inp in enumerate(prog.inputs):
        if set(inp.layouts.values()) != {"c"}:
            yield _with_input(prog, i, layouts={v: "c" for v in VARIANTS})
        if inp.special:
            yield _with_input(prog, i, special=0)


def smaller_sizes(prog, res):
    if prog.mode != "tensor":
        return
    used = {v for v, _ in prog.calls}
    for variant in sorted(used):
        for sym, n in sorted(prog.sizes[variant].items()):
            for smaller in sorted({1, 2, n // 2, n - 1}):
                if 0 < smaller < n:
                    sizes = {v: dict(s) for v, s in prog.sizes.items()}
                    sizes[variant][sym] = smaller
                    if variant == "A":
                        sizes["L"][sym] = smaller
                    yield prog.copy(sizes=sizes)


PASSES = (fewer_calls, fewer_stmts, fewer_returns, other_returns, plainer_inputs, smaller_sizes)


def _with_input(prog, i, **changes):
    cand = prog.copy()
    for key, value in changes.items():
        setattr(cand.inputs[i], key, value)
    return cand


def _drop_unused(prog):
    """Arguments nothing mentions are dropped (tensor mode; each keeps its values: seeded by its name)."""
    if prog.mode != "tensor":
        return prog
    used = prog.used_names()
    return prog.copy(inputs=[i for i in prog.inputs if i.name in used])


# ------------------------------------------------------------------------------------------------ saving

def save(prog, res, path, original=None):
    """Writes a standalone reproducer; returns its path."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    header = [f"graphjit fuzz finding: {res['status']} ({prog.mode} mode, seed {prog.seed}"
              f"{', Triton interpreter' if prog.triton else ''}"
              f"{', shrunk in %d runs' % res['shrink_runs'] if 'shrink_runs' in res else ''})", ""]
    header += describe(res).splitlines() + [""]
    if original is not None:
        header.append(f"original program: {len(original.stmts)} statements, {len(original.inputs)} inputs")
    header += ["Rerun from the project root (exit 1 while it fails; backend: graphjit, eager, aot_eager;",
               f"default {'eager: capture only' if prog.mode == 'python' else 'graphjit'}):",
               f"    python {path} [backend]", ""]
    from .program import FOOTER
    text = "".join(f"# {line}".rstrip() + "\n" for line in header) + prog.source() + FOOTER
    with open(path, "w") as f:
        f.write(text)
    return path
