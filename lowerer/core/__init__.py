"""The core every layer stands on: errors, the report, opsets, progress, interrupts, remedies.

Owns: :mod:`.errors` (the exception types and their exit codes), :mod:`.report` (the report and its JSON
schema, ``report.schema.json``), :mod:`.opsets` (opset and since-version arithmetic), :mod:`.progress`,
:mod:`.interrupts` (signals turned into a clean stop), :mod:`.remedies` (the "what would work" wording of
refusals). Imports nothing of lowerer outside this package (``pyproject.toml``'s import contracts).
"""
