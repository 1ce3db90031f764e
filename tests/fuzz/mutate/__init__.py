"""Mutants of real models: structured edits of the decoded graph and byte-level edits of the file.

Structured mutators (`structured`) break one property a reader, engine, planner or rule might rely
on: operators (`operators`: operand indices, op arity, option tables, graph order), tensors and
their buffers (`tensors`: types, shapes, constant values, quantization parameters), and what the
model shows its callers (`interface`: subgraph inputs and outputs, names, signatures). Byte-level
mutators (`byte_level`) corrupt the flatbuffer itself, mostly outside the weight buffers where a
flip would only change a number. Everything is drawn from a `random.Random`, so a (seed, base
model) pair always gives the same mutant.
"""
