"""The float model as calibration and planning see it: folded and canonicalised."""

from __future__ import annotations

from dataclasses import dataclass, field

from qtool.model import Model
from qtool.model.edit import clone_model, remove_unused
from qtool.prepare.canonical import RewrittenOp, canonicalize
from qtool.prepare.fold import FoldedOp, StoredForm, fold_constants
from qtool.prepare.inline import inline_constant_operands
from qtool.prepare.intermediates import add_intermediates


@dataclass
class FloatModel:
    """A float model ready for calibration, with constant operators folded away."""

    model: Model
    folded: list[FoldedOp]
    source_index: list[list[int]]  # per subgraph: input-model index of each operator
    rewritten: dict[tuple[int, int], RewrittenOp] = field(default_factory=dict)  # by source op
    # Per subgraph, how the source stored each folded float16 or sparse constant, by name.
    stored_forms: dict[int, dict[str, StoredForm]] = field(default_factory=dict)

    def input_types(self, subgraph_index: int) -> list[str]:
        """The type each operator of a subgraph had in the input model (before a rewrite)."""
        subgraph = self.model.subgraphs[subgraph_index]
        return [
            rewrite.op_type
            if (rewrite := self.rewritten.get((subgraph_index, source))) is not None
            else self.model.op_type(op)
            for op, source in zip(
                subgraph.operators, self.source_index[subgraph_index], strict=True
            )
        ]


def prepare_float_model(model: Model) -> FloatModel:
    """A copy of `model` with constants passed to control-flow subgraphs moved into them,
    constant operators folded, operators without an integer kernel rewritten into equivalents
    that have one, and the intermediate tensors integer kernels read (LSTM's) added, in every
    subgraph."""
    work = clone_model(model)
    inline_constant_operands(work)
    counts = [len(sg.operators) for sg in work.subgraphs]
    forms: dict[int, dict[str, StoredForm]] = {s: {} for s in range(len(work.subgraphs))}
    folded = [op for s in forms for op in fold_constants(work, s, forms[s])]
    remove_unused(work)
    gone = {(op.subgraph, op.index) for op in folded}
    source_index = [[i for i in range(n) if (s, i) not in gone] for s, n in enumerate(counts)]
    rewritten = {
        (r.subgraph, source_index[r.subgraph][r.index]): r
        for s in range(len(work.subgraphs))
        for r in canonicalize(work, s)
    }
    remove_unused(work)  # the custom operator codes rewritten away
    for s in range(len(work.subgraphs)):
        add_intermediates(work, s)
    return FloatModel(work, folded, source_index, rewritten, forms)
