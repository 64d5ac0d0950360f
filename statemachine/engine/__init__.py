"""The machine core: the table as data, its binding to code, the runtime machine, the history and its timeline,
transition coverage and the diagrams. It imports no torch and nothing of the trainer above it, so the flow can be
read, drawn, checked and tested on its own."""
